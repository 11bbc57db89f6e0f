"""The server side of a connection's SASL exchange, sans-IO: a table of states.

Kafka's order (KIP-43, KIP-152, KIP-368): SaslHandshake names a mechanism, then one or
more SaslAuthenticate requests carry its tokens; once the mechanism succeeds the
connection has a principal and may send any request. PLAIN takes one token
(`authzid NUL user NUL password`); SCRAM takes two (client-first, client-final), run by
the `scramp` library against stored credentials (common/scram.py). With
`connections.max.reauth.ms` > 0 the session lasts that long: the successful
SaslAuthenticate (v1+) says so in `session_lifetime_ms`, and the client re-authenticates
with a new handshake (same mechanism, same principal) before it runs out. An OAUTHBEARER
session also ends when its token expires: its lifetime is min(token `exp` - now,
`connections.max.reauth.ms`), as Kafka's SaslServerAuthenticator computes it.

States and what each does with a request:

- HANDSHAKE: expects SaslHandshake; an enabled mechanism moves to AUTHENTICATE, any
  other is UNSUPPORTED_SASL_MECHANISM and FAILED. SaslAuthenticate here is
  ILLEGAL_SASL_STATE and FAILED.
- AUTHENTICATE: expects the mechanism's first token; PLAIN ends in AUTHENTICATED or
  FAILED, SCRAM's client-first moves to SCRAM_FINAL (or FAILED).
- SCRAM_FINAL: expects client-final; AUTHENTICATED or FAILED. (Old librdkafka's
  doubled client nonce is accepted, as Kafka 3.8.1-3.9 did: `_accept_doubled_nonce`.)
- OAUTHBEARER (KIP-255, protocol/oauthbearer.py): AUTHENTICATE takes the client's one
  message; a valid token is AUTHENTICATED, a refused one moves to OAUTH_ERROR and is
  answered (error code NONE) with Kafka's JSON challenge `{"status":"invalid_token"}`.
- OAUTH_ERROR: the client acknowledges with `\x01` (RFC 7628); the answer is
  SASL_AUTHENTICATION_FAILED carrying that JSON, and FAILED. Anything else: FAILED too.
- AUTHENTICATED: every request allowed while the session lasts; SaslHandshake starts a
  re-authentication (AUTHENTICATE), SaslAuthenticate is ILLEGAL_SASL_STATE.
- FAILED: terminal; the connection is closed once the error is written.

The caller (server/security.py) owns the socket, the clock and the delay against
password guessing; this module only decides.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.common.errors import ErrorCode
from tidegate.common.scram import MECHANISMS, ScramCredential
from tidegate.protocol.oauthbearer import (
    MalformedResponse,
    TokenRejected,
    Validator,
    parse_client_response,
)

OAUTHBEARER = "OAUTHBEARER"


class SaslState(enum.Enum):
    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATE = "AUTHENTICATE"
    SCRAM_FINAL = "SCRAM_FINAL"
    OAUTH_ERROR = "OAUTH_ERROR"
    AUTHENTICATED = "AUTHENTICATED"
    FAILED = "FAILED"


_S = SaslState
TRANSITIONS: dict[SaslState, frozenset[SaslState]] = {
    _S.HANDSHAKE: frozenset({_S.AUTHENTICATE, _S.FAILED}),
    _S.AUTHENTICATE: frozenset({_S.SCRAM_FINAL, _S.OAUTH_ERROR, _S.AUTHENTICATED, _S.FAILED}),
    _S.OAUTH_ERROR: frozenset({_S.FAILED}),
    _S.SCRAM_FINAL: frozenset({_S.AUTHENTICATED, _S.FAILED}),
    _S.AUTHENTICATED: frozenset({_S.AUTHENTICATE, _S.FAILED}),
    _S.FAILED: frozenset(),
}


class IllegalSaslTransition(Exception):
    pass


@dataclass(frozen=True)
class AuthResult:
    error: ErrorCode
    message: str | None = None
    token: bytes = b""
    session_lifetime_ms: int = 0


ScramLookup = Callable[[str, str], ScramCredential | None]  # (mechanism, user)


class SaslServer:
    """One connection's SASL state (module docstring). Times are ms from the caller."""

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        plain_users: Mapping[str, str],
        scram_lookup: ScramLookup,
        reauth_ms: int = 0,
        oauth: Validator | None = None,
    ) -> None:
        self.mechanisms = mechanisms
        self.plain_users = plain_users
        self.scram_lookup = scram_lookup
        self.reauth_ms = reauth_ms
        self.oauth = oauth
        self._oauth_error = ""  # the JSON challenge sent; repeated in the final error
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.user: str | None = None  # set once authenticated; kept across re-auth
        self.expires_at_ms: int | None = None
        self.scope: tuple[str, ...] = ()  # an OAUTHBEARER token's scopes
        self.reason = ""  # why FAILED, for the one log line
        self._scram: Any = None  # a scramp ScramServer (the library is untyped)
        self._scram_user = ""  # the user named in SCRAM's client-first message

    def transition_to(self, new: SaslState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise IllegalSaslTransition(f"{self.state.value} -> {new.value}")
        self.state = new

    def _fail(self, code: ErrorCode, message: str) -> AuthResult:
        self.reason = message
        self.state = SaslState.FAILED  # reachable from every live state
        return AuthResult(code, message)

    @property
    def principal(self) -> str | None:
        return None if self.user is None else f"User:{self.user}"

    def session_valid(self, now_ms: int) -> bool:
        """May a non-SASL request run now? Only authenticated and not expired."""
        if self.user is None or self.state is SaslState.FAILED:
            return False
        return self.expires_at_ms is None or now_ms < self.expires_at_ms

    # -- SaslHandshake --------------------------------------------------------------
    def handshake(self, mechanism: str) -> ErrorCode:
        if self.state not in (SaslState.HANDSHAKE, SaslState.AUTHENTICATED):
            self._fail(ErrorCode.illegal_sasl_state,
                       f"unexpected SaslHandshake in state {self.state.value}")
            return ErrorCode.illegal_sasl_state
        if mechanism not in self.mechanisms:
            self._fail(ErrorCode.unsupported_sasl_mechanism,
                       f"unsupported SASL mechanism {mechanism!r}")
            return ErrorCode.unsupported_sasl_mechanism
        if self.user is not None and mechanism != self.mechanism:
            self._fail(ErrorCode.illegal_sasl_state,
                       "re-authentication must use the same SASL mechanism")
            return ErrorCode.illegal_sasl_state
        self.mechanism = mechanism
        self.transition_to(SaslState.AUTHENTICATE)
        return ErrorCode.none

    # -- SaslAuthenticate -----------------------------------------------------------
    def authenticate(self, token: bytes, now_ms: int) -> AuthResult:
        if self.state is SaslState.AUTHENTICATE and self.mechanism == "PLAIN":
            return self._plain(token, now_ms)
        if self.state is SaslState.AUTHENTICATE and self.mechanism in MECHANISMS:
            return self._scram_first(token)
        if self.state is SaslState.SCRAM_FINAL:
            return self._scram_final(token, now_ms)
        if self.state is SaslState.AUTHENTICATE and self.mechanism == OAUTHBEARER:
            return self._oauth(token, now_ms)
        if self.state is SaslState.OAUTH_ERROR:  # the reason was logged with the challenge
            reason = self.reason
            result = self._fail(ErrorCode.sasl_authentication_failed, self._oauth_error)
            self.reason = reason
            return result
        return self._fail(ErrorCode.illegal_sasl_state,
                          f"unexpected SaslAuthenticate in state {self.state.value}")

    def _plain(self, token: bytes, now_ms: int) -> AuthResult:
        parts = token.split(b"\0")
        if len(parts) != 3:
            return self._fail(ErrorCode.sasl_authentication_failed,
                              "Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return self._fail(ErrorCode.sasl_authentication_failed,
                              "Invalid SASL/PLAIN response: not UTF-8")
        if authzid and authzid != user:
            return self._fail(
                ErrorCode.sasl_authentication_failed,
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        expected = self.plain_users.get(user)
        # compare_digest against a dummy when the user is unknown: same work either way.
        ok = hmac.compare_digest((expected or "\0").encode(), password.encode())
        if expected is None or not ok:
            return self._fail(ErrorCode.sasl_authentication_failed,
                              "Authentication failed: Invalid username or password")
        return self._success(user, b"", now_ms)

    def _scram_first(self, token: bytes) -> AuthResult:
        import scramp  # type: ignore[import-untyped]  # here: costs every start otherwise

        assert self.mechanism is not None
        mechanism = self.mechanism

        def auth_fn(user: str) -> tuple[bytes, bytes, bytes, int]:
            self._scram_user = user
            cred = self.scram_lookup(mechanism, user)
            if cred is None:
                raise scramp.ScramException("unknown user")
            return cred.salt, cred.stored_key, cred.server_key, cred.iterations

        try:
            server = scramp.ScramMechanism(mechanism).make_server(auth_fn)
            server.set_client_first(token.decode("utf-8"))
            first = server.get_server_first()
        except (scramp.ScramException, UnicodeDecodeError, ValueError) as e:
            return self._fail(
                ErrorCode.sasl_authentication_failed,
                f"Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {mechanism} ({e})")
        self._scram = server
        self.transition_to(SaslState.SCRAM_FINAL)
        return AuthResult(ErrorCode.none, None, first.encode())

    def _scram_final(self, token: bytes, now_ms: int) -> AuthResult:
        import scramp

        server = self._scram
        self._scram = None
        try:
            _accept_doubled_nonce(server, token.decode("utf-8"))
            server.set_client_final(token.decode("utf-8"))
            final = server.get_server_final()
            user = self._scram_user
        except (scramp.ScramException, UnicodeDecodeError, ValueError) as e:
            return self._fail(
                ErrorCode.sasl_authentication_failed,
                f"Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism} ({e})")
        return self._success(user, str(final).encode(), now_ms)

    def _oauth(self, message: bytes, now_ms: int) -> AuthResult:
        if self.oauth is None:
            return self._fail(ErrorCode.sasl_authentication_failed,
                              "OAUTHBEARER has no token validator on this listener")
        try:
            token, authzid = parse_client_response(message)
            checked = self.oauth.validate(token, now_ms)
        except MalformedResponse as e:
            return self._fail(ErrorCode.sasl_authentication_failed, str(e))
        except TokenRejected as e:
            # Kafka answers a refused token with a challenge, not an error: the client
            # sends \x01 back and only then gets SASL_AUTHENTICATION_FAILED.
            self._oauth_error = e.json()
            self.reason = e.reason
            self.transition_to(SaslState.OAUTH_ERROR)
            return AuthResult(ErrorCode.none, None, self._oauth_error.encode())
        if authzid and authzid != checked.principal:
            return self._fail(
                ErrorCode.sasl_authentication_failed,
                f"Authentication failed: Client requested an authorization id ({authzid}) "
                f"that is different from the token's principal name ({checked.principal})")
        self.scope = checked.scope
        return self._success(checked.principal, b"", now_ms, checked.expires_ms)

    def _success(
        self, user: str, token: bytes, now_ms: int, credential_expires_ms: int | None = None
    ) -> AuthResult:
        if self.user is not None and user != self.user:
            return self._fail(ErrorCode.sasl_authentication_failed,
                              "Cannot change principals during re-authentication")
        self.user = user
        self.transition_to(SaslState.AUTHENTICATED)
        lifetime = self.reauth_ms
        if credential_expires_ms is not None:  # KIP-368: never beyond the token's expiry
            left = max(1, credential_expires_ms - now_ms)
            lifetime = min(left, lifetime) if lifetime > 0 else left
        self.expires_at_ms = now_ms + lifetime if lifetime > 0 else None
        return AuthResult(ErrorCode.none, None, token, lifetime)


def _accept_doubled_nonce(server: Any, client_final: str) -> None:
    """librdkafka before 2.6.1 (the kcat of many distributions) sends the client nonce
    twice in client-final (`r=<cnonce><cnonce><snonce>`, librdkafka#4895). Kafka 3.8.1
    to 3.9 accepted it (the nonce must end with the server's); so do we, by telling
    scramp to expect that exact form. The proof is still checked over what the client
    signed, and the server nonce is still required, so nothing weaker is accepted."""
    import scramp

    expected = str(server.nonce)
    c_nonce = expected[: len(expected) - len(str(server.s_nonce))]
    for attr in client_final.split(","):
        if attr.startswith("r="):
            if attr[2:] == c_nonce + expected:
                server.nonce = scramp.core.Nonce(attr[2:])
            return
