"""OAUTHBEARER without a network: the client message, signed and unsecured tokens, and the
SASL state table's challenge/acknowledge exchange and token-bounded session lifetime."""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tidegate.common.errors import ErrorCode, InvalidConfigError
from tidegate.common.oauth_config import OAuthSettings, oauth_settings
from tidegate.protocol.oauthbearer import (
    MalformedResponse,
    SignedValidator,
    TokenRejected,
    UnsecuredValidator,
    parse_client_response,
)
from tidegate.protocol.sasl import SaslServer, SaslState

NOW_S = 1_800_000_000
NOW_MS = NOW_S * 1000
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
SETTINGS = OAuthSettings(jwks_url="file:/x", expected_audience=("kafka",),
                         expected_issuer="https://idp", clock_skew_s=30)


def _keys(kid: str | None, alg: str) -> Any:
    if alg.startswith("RS") and kid in ("rsa1", None):
        return RSA_KEY.public_key()
    if alg.startswith("ES") and kid == "ec1":
        return EC_KEY.public_key()
    return None


def _claims(**over: Any) -> dict[str, Any]:
    base = {"sub": "alice", "aud": "kafka", "iss": "https://idp", "iat": NOW_S - 10,
            "exp": NOW_S + 600, "scope": "read write"}
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def signed(alg: str = "RS256", kid: str = "rsa1", **over: Any) -> str:
    key = RSA_KEY if alg.startswith("RS") else EC_KEY
    return jwt.encode(_claims(**over), key, algorithm=alg, headers={"kid": kid})


def unsecured(**over: Any) -> str:
    def b64(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    return f"{b64({'alg': 'none'})}.{b64(_claims(**over))}."


def message(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def test_client_message_parsed() -> None:
    assert parse_client_response(message("abc.def.", "bob")) == ("abc.def.", "bob")
    extra = b"n,,\x01auth=Bearer t.u.v\x01traceId=42\x01\x01"
    assert parse_client_response(extra) == ("t.u.v", "")
    for bad in (b"", b"\x01", b"garbage", b"n,,\x01auth=Basic x\x01\x01",
                b"n,,\x01auth=Bearer t\x01", b"y,,\x01auth=Bearer t\x01\x01"):
        with pytest.raises(MalformedResponse):
            parse_client_response(bad)


@pytest.mark.parametrize("alg,kid", [("RS256", "rsa1"), ("ES256", "ec1")])
def test_signed_token_accepted(alg: str, kid: str) -> None:
    tok = SignedValidator(SETTINGS, _keys).validate(signed(alg, kid), NOW_MS)
    assert tok.principal == "alice" and tok.scope == ("read", "write")
    assert tok.expires_ms == (NOW_S + 600) * 1000


@pytest.mark.parametrize("token,why", [
    (lambda: signed(exp=NOW_S - 60), "expired"),
    (lambda: signed(aud="other"), "audience"),
    (lambda: signed(iss="https://evil"), "issuer"),
    (lambda: signed(sub=""), "principal"),
    (lambda: signed(iat=None), "iat"),
    (lambda: signed(iat=NOW_S + 120), "future"),
    (lambda: signed(nbf=NOW_S + 120), "nbf"),
    (lambda: signed(kid="unknown"), "no key"),
    (lambda: unsecured(), "algorithm 'none'"),
    (lambda: signed()[:-4] + "AAAA", "Signature"),
    (lambda: "not-a-jwt", "malformed"),
])
def test_signed_token_refused(token: Any, why: str) -> None:
    with pytest.raises(TokenRejected) as e:
        SignedValidator(SETTINGS, _keys).validate(token(), NOW_MS)
    assert why.lower() in e.value.reason.lower()
    assert e.value.json() == '{"status":"invalid_token"}'


def test_expiry_within_clock_skew_is_accepted() -> None:
    tok = SignedValidator(SETTINGS, _keys).validate(signed(exp=NOW_S - 10), NOW_MS)
    assert tok.principal == "alice"


def test_hs256_token_refused_even_with_matching_kid() -> None:
    tok = jwt.encode(_claims(), "secret" * 8, algorithm="HS256", headers={"kid": "rsa1"})
    with pytest.raises(TokenRejected, match="HS256"):
        SignedValidator(SETTINGS, _keys).validate(tok, NOW_MS)


def test_unsecured_mode() -> None:
    v = UnsecuredValidator(OAuthSettings(required_scope=("write",)))
    assert v.validate(unsecured(), NOW_MS).principal == "alice"
    with pytest.raises(TokenRejected) as e:
        v.validate(unsecured(scope="read"), NOW_MS)
    assert e.value.json() == '{"status":"insufficient_scope", "scope":"[write]"}'
    with pytest.raises(TokenRejected, match="expired"):
        v.validate(unsecured(exp=NOW_S - 60), NOW_MS)
    with pytest.raises(TokenRejected, match="empty signature"):
        v.validate(unsecured() + "sig", NOW_MS)


def test_config_requires_jwks_or_explicit_unsecured() -> None:
    with pytest.raises(InvalidConfigError, match=r"jwks\.endpoint\.url"):
        oauth_settings({}, "SASL_SSL", {})
    un = oauth_settings({
        "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
            "OAuthBearerUnsecuredValidatorCallbackHandler"}, "SASL_SSL",
        {"unsecuredValidatorRequiredScope": "a b"})
    assert not un.signed and un.required_scope == ("a", "b")
    s = oauth_settings({"sasl.oauthbearer.jwks.endpoint.url": "https://idp/jwks",
                        "listener.name.sasl_ssl.sasl.oauthbearer.expected.audience": "k1, k2"},
                       "SASL_SSL", {})
    assert s.signed and s.expected_audience == ("k1", "k2")


def _server(reauth_ms: int = 0) -> SaslServer:
    s = SaslServer(("OAUTHBEARER",), {}, lambda m, u: None, reauth_ms,
                   SignedValidator(SETTINGS, _keys))
    assert s.handshake("OAUTHBEARER") == ErrorCode.none
    return s


def test_sasl_session_lifetime_is_bounded_by_the_token() -> None:
    s = _server(reauth_ms=3_600_000)
    r = s.authenticate(message(signed(exp=NOW_S + 60)), NOW_MS)
    assert r.error == ErrorCode.none and s.principal == "User:alice"
    assert r.session_lifetime_ms == 60_000 and s.expires_at_ms == NOW_MS + 60_000
    s2 = _server(reauth_ms=10_000)
    assert s2.authenticate(message(signed()), NOW_MS).session_lifetime_ms == 10_000
    s3 = _server(reauth_ms=0)  # no max.reauth: the token's expiry alone
    assert s3.authenticate(message(signed()), NOW_MS).session_lifetime_ms == 600_000


def test_sasl_refused_token_is_a_challenge_then_a_failure() -> None:
    s = _server()
    r = s.authenticate(message(signed(aud="other")), NOW_MS)
    assert r.error == ErrorCode.none and r.token == b'{"status":"invalid_token"}'
    assert s.state is SaslState.OAUTH_ERROR and "audience" in s.reason.lower()
    r = s.authenticate(b"\x01", NOW_MS)
    assert r.error == ErrorCode.sasl_authentication_failed
    assert r.message == '{"status":"invalid_token"}' and s.state is SaslState.FAILED


def test_sasl_garbage_and_authzid_mismatch_fail() -> None:
    s = _server()
    assert s.authenticate(b"\xff\x00garbage", NOW_MS).error == \
        ErrorCode.sasl_authentication_failed
    s = _server()
    r = s.authenticate(message(signed(), authzid="mallory"), NOW_MS)
    assert r.error == ErrorCode.sasl_authentication_failed and "mallory" in (r.message or "")


def test_reauth_keeps_the_principal() -> None:
    s = _server(reauth_ms=1000)
    assert s.authenticate(message(signed()), NOW_MS).error == ErrorCode.none
    assert s.handshake("OAUTHBEARER") == ErrorCode.none
    r = s.authenticate(message(signed(sub="bob")), NOW_MS + 500)
    assert r.error == ErrorCode.sasl_authentication_failed
