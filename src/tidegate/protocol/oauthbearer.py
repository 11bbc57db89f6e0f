"""SASL/OAUTHBEARER tokens, sans-IO: the client's message (RFC 7628) and JWT validation.

`parse_client_response()` reads the client's one message, `n,[a=<authzid>],` `\\x01`
`auth=Bearer <token>` `\\x01` ... `\\x01` (other `key=value` pairs are SASL extensions,
which Tidegate accepts and ignores, as Kafka does without an extensions validator).

`SignedValidator` checks a JWT as Kafka's `OAuthBearerValidatorCallbackHandler` does
(KIP-768): the signature (RS*/PS*/ES* through PyJWT and `cryptography`, never `none`, never
a symmetric key) by a key of the JWKS whose `kid` the header names, then `exp` and `iat`
(both required), `nbf`, the expected audience and issuer, a non-empty subject in
`sasl.oauthbearer.sub.claim.name`, and the scopes in `sasl.oauthbearer.scope.claim.name`,
with `sasl.oauthbearer.clock.skew.seconds` of leeway. The keys come from a callable (the
broker's JWKS cache, server/oauth_jwks.py), so this module does no I/O.

`UnsecuredValidator` is Kafka's development mode: `alg: none`, an empty signature, `exp`
and the principal claim required, `unsecuredValidatorRequiredScope` checked.

Both raise `TokenRejected` with the RFC 7628 status the client is told
(`invalid_token`, `insufficient_scope`) and a reason for the broker's log only.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.common.oauth_config import OAuthSettings

# Asymmetric algorithms only: a JWKS publishes public keys; HS* would need a shared secret.
SIGNED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                     "ES256", "ES384", "ES512")

_CLIENT_MESSAGE = re.compile(
    rb"^n,(?:a=(?P<authzid>[^,\x01]*))?,\x01(?P<pairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]*\x01)*)\x01$"
)


class TokenRejected(Exception):
    def __init__(self, reason: str, status: str = "invalid_token", scope: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.scope = scope

    def json(self) -> str:
        """The challenge Kafka's OAuthBearerSaslServer sends back (its exact layout)."""
        out = '{"status":"' + self.status + '"'
        if self.scope is not None:
            out += ', "scope":"' + self.scope + '"'
        return out + "}"


class MalformedResponse(ValueError):
    pass


@dataclass(frozen=True)
class OAuthToken:
    principal: str
    scope: tuple[str, ...]
    expires_ms: int
    issued_ms: int | None


def parse_client_response(data: bytes) -> tuple[str, str]:
    """(token, authzid) of the client's OAUTHBEARER message; MalformedResponse if bad."""
    m = _CLIENT_MESSAGE.match(data)
    if m is None:
        raise MalformedResponse("Invalid OAUTHBEARER client first message")
    pairs = {}
    for item in m.group("pairs").split(b"\x01")[:-1]:
        key, _, value = item.partition(b"=")
        pairs[key.decode("ascii")] = value.decode("ascii")
    auth = pairs.get("auth", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise MalformedResponse("Invalid OAUTHBEARER client first message: no bearer token")
    return token.strip(), (m.group("authzid") or b"").decode("utf-8", "replace")


def _scopes(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        return tuple(s for s in raw.split() if s)
    if isinstance(raw, list) and all(isinstance(s, str) for s in raw):
        return tuple(raw)
    raise TokenRejected("the scope claim is neither a string nor a list of strings")


def _subject(claims: Mapping[str, Any], name: str) -> str:
    sub = claims.get(name)
    if not isinstance(sub, str) or not sub.strip():
        raise TokenRejected(f"the {name!r} claim (the principal) is missing or empty")
    return sub.strip()


KeyLookup = Callable[[str | None, str], Any]  # (kid, alg) -> a key for PyJWT, or None


class SignedValidator:
    """KIP-768 validation of a signed JWT (module docstring)."""

    def __init__(self, settings: OAuthSettings, keys: KeyLookup) -> None:
        self.s = settings
        self.keys = keys

    def validate(self, token: str, now_ms: int) -> OAuthToken:
        import jwt  # here, not at the top: PyJWT and cryptography cost every start

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise TokenRejected(f"malformed JWT: {e}") from None
        alg = header.get("alg")
        if alg not in SIGNED_ALGORITHMS:
            raise TokenRejected(f"JWT algorithm {alg!r} is not accepted on a signed listener")
        kid = header.get("kid")
        key = self.keys(kid if isinstance(kid, str) else None, alg)
        if key is None:
            raise TokenRejected(f"no key in the JWKS matches kid={kid!r} alg={alg}")
        s = self.s
        try:
            claims = jwt.decode(
                token, key, algorithms=[alg],
                audience=list(s.expected_audience) or None,
                issuer=s.expected_issuer or None,
                leeway=s.clock_skew_s,
                # times are checked below against the broker's clock (passed in), not
                # PyJWT's own
                options={"require": ["exp", "iat"],
                         "verify_aud": bool(s.expected_audience),
                         "verify_exp": False, "verify_iat": False, "verify_nbf": False},
            )
        except jwt.PyJWTError as e:
            raise TokenRejected(f"JWT refused: {e}") from None
        skew = s.clock_skew_s * 1000
        exp, iat, nbf = (_number(claims, n) for n in ("exp", "iat", "nbf"))
        if exp is None or iat is None:
            raise TokenRejected("the 'exp' and 'iat' claims are required")
        exp_ms, iat_ms = int(exp * 1000), int(iat * 1000)
        if now_ms >= exp_ms + skew:
            raise TokenRejected("the token has expired")
        if iat_ms > now_ms + skew:
            raise TokenRejected("the token was issued in the future")
        if nbf is not None and int(nbf * 1000) > now_ms + skew:
            raise TokenRejected("the token is not valid yet (nbf)")
        return OAuthToken(_subject(claims, s.sub_claim), _scopes(claims.get(s.scope_claim)),
                          exp_ms, iat_ms)


def _b64json(part: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError) as e:
        raise TokenRejected(f"malformed unsecured JWS: {e}") from None
    if not isinstance(value, dict):
        raise TokenRejected("malformed unsecured JWS: not a JSON object")
    return value


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenRejected(f"the {name!r} claim is not a number")
    return float(value)


class UnsecuredValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler (development only)."""

    def __init__(self, settings: OAuthSettings) -> None:
        self.s = settings

    def validate(self, token: str, now_ms: int) -> OAuthToken:
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenRejected("an unsecured JWS has three dot-separated parts")
        if parts[2]:
            raise TokenRejected("an unsecured JWS must have an empty signature")
        header, claims = _b64json(parts[0]), _b64json(parts[1])
        if header.get("alg") != "none":
            raise TokenRejected("an unsecured JWS must say alg: none")
        skew = self.s.clock_skew_s * 1000
        exp = _number(claims, "exp")
        if exp is None:
            raise TokenRejected("the 'exp' claim is required")
        exp_ms = int(exp * 1000)
        if now_ms >= exp_ms + skew:
            raise TokenRejected("the token has expired")
        iat = _number(claims, "iat")
        iat_ms = None if iat is None else int(iat * 1000)
        if iat_ms is not None and (iat_ms > now_ms + skew or iat_ms > exp_ms):
            raise TokenRejected("the 'iat' claim is in the future or after 'exp'")
        scope = _scopes(claims.get(self.s.scope_claim))
        missing = [s for s in self.s.required_scope if s not in scope]
        if missing:
            raise TokenRejected(f"the token lacks the required scope {missing}",
                                "insufficient_scope", "[" + ", ".join(self.s.required_scope) + "]")
        return OAuthToken(_subject(claims, self.s.sub_claim), scope, exp_ms, iat_ms)


Validator = SignedValidator | UnsecuredValidator
