"""The sans-IO SASL server (protocol/sasl.py), SCRAM credentials, principal mapping rules
and the listener settings parser, without an event loop or a socket."""

from __future__ import annotations

import base64

import pytest
import scramp  # type: ignore[import-untyped]

from tidegate.common.errors import ErrorCode, InvalidConfigError
from tidegate.common.principal import map_subject, parse_mapping_rules, subject_dn
from tidegate.common.scram import ScramCredential
from tidegate.common.security_config import listener_security, parse_jaas, plain_users
from tidegate.protocol.sasl import IllegalSaslTransition, SaslServer, SaslState

CREDS = {
    (m, "bob"): ScramCredential.from_password(m, "bob-secret", 4096)
    for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
}


def server(mechs: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
           reauth_ms: int = 0) -> SaslServer:
    return SaslServer(mechs, {"alice": "alice-secret"},
                      lambda m, u: CREDS.get((m, u)), reauth_ms)


def test_plain_success_and_session() -> None:
    s = server()
    assert s.handshake("PLAIN") == ErrorCode.none
    assert not s.session_valid(0)
    r = s.authenticate(b"\0alice\0alice-secret", 1000)
    assert r.error == ErrorCode.none and s.principal == "User:alice"
    assert s.session_valid(10**12)


@pytest.mark.parametrize("token", [b"\0alice\0wrong", b"\0nobody\0x", b"garbage",
                                   b"\0alice", b"bob\0alice\0alice-secret", b"\xff\0\xfe\0x"])
def test_plain_failures(token: bytes) -> None:
    s = server()
    s.handshake("PLAIN")
    r = s.authenticate(token, 0)
    assert r.error == ErrorCode.sasl_authentication_failed
    assert s.state is SaslState.FAILED and s.principal is None


def test_unknown_mechanism_and_authenticate_before_handshake() -> None:
    s = server()
    assert s.handshake("GSSAPI") == ErrorCode.unsupported_sasl_mechanism
    assert s.state is SaslState.FAILED
    s = server()
    assert s.authenticate(b"\0alice\0alice-secret", 0).error == ErrorCode.illegal_sasl_state
    assert s.state is SaslState.FAILED


def test_transition_table_refuses_illegal_moves() -> None:
    s = server()
    with pytest.raises(IllegalSaslTransition):
        s.transition_to(SaslState.AUTHENTICATED)


def _scram_client(mech: str, user: str, pw: str) -> scramp.ScramClient:
    return scramp.ScramClient([mech], user, pw)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_success(mech: str) -> None:
    s = server()
    c = _scram_client(mech, "bob", "bob-secret")
    assert s.handshake(mech) == ErrorCode.none
    first = s.authenticate(c.get_client_first().encode(), 0)
    assert first.error == ErrorCode.none and s.state is SaslState.SCRAM_FINAL
    c.set_server_first(first.token.decode())
    final = s.authenticate(c.get_client_final().encode(), 0)
    assert final.error == ErrorCode.none, final.message
    c.set_server_final(final.token.decode())  # the client verifies the server too
    assert s.principal == "User:bob"


def test_scram_wrong_password_unknown_user_wrong_nonce() -> None:
    for user, pw, tamper in (("bob", "nope", False), ("eve", "x", False),
                             ("bob", "bob-secret", True)):
        s = server()
        c = _scram_client("SCRAM-SHA-256", user, pw)
        s.handshake("SCRAM-SHA-256")
        first = s.authenticate(c.get_client_first().encode(), 0)
        if user == "eve":
            assert first.error == ErrorCode.sasl_authentication_failed
            continue
        c.set_server_first(first.token.decode())
        final = c.get_client_final()
        if tamper:
            final = final.replace("r=", "r=X", 1)
        r = s.authenticate(final.encode(), 0)
        assert r.error == ErrorCode.sasl_authentication_failed
        assert s.state is SaslState.FAILED


def test_scram_garbage_first_message() -> None:
    s = server()
    s.handshake("SCRAM-SHA-512")
    assert s.authenticate(b"\x00\xff not scram", 0).error == ErrorCode.sasl_authentication_failed


def test_reauthentication_lifetime_and_principal_change() -> None:
    s = server(reauth_ms=1000)
    s.handshake("PLAIN")
    r = s.authenticate(b"\0alice\0alice-secret", 5000)
    assert r.session_lifetime_ms == 1000
    assert s.session_valid(5999) and not s.session_valid(6000)
    # re-authenticate: same mechanism, same user, a new lifetime
    assert s.handshake("PLAIN") == ErrorCode.none
    assert s.authenticate(b"\0alice\0alice-secret", 6500).error == ErrorCode.none
    assert s.session_valid(7000)
    s2 = SaslServer(("PLAIN",), {"alice": "a", "bob": "b"}, lambda m, u: None, 1000)
    s2.handshake("PLAIN")
    s2.authenticate(b"\0alice\0a", 0)
    s2.handshake("PLAIN")
    assert s2.authenticate(b"\0bob\0b", 10).error == ErrorCode.sasl_authentication_failed


def test_scram_credential_kafka_form_roundtrip() -> None:
    c = CREDS[("SCRAM-SHA-512", "bob")]
    text = c.to_kafka()
    assert text.startswith("salt=") and "iterations=4096" in text
    assert ScramCredential.from_kafka(text) == c
    assert base64.b64encode(b"bob-secret").decode() not in text
    with pytest.raises(ValueError):
        ScramCredential.from_kafka("salt=!!,iterations=x")


def test_jaas_parsing() -> None:
    e = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                   'username="admin" password="a\\"b" user_admin="admin-secret" '
                   'user_alice=alice-secret;')
    assert e.flag == "required" and e.options["password"] == 'a"b'
    assert plain_users(e) == {"admin": "admin-secret", "alice": "alice-secret"}
    for bad in ("", "Module", 'M required user_a="x"', 'M required user_a="x"; junk'):
        with pytest.raises(InvalidConfigError):
            parse_jaas(bad)


def test_principal_mapping_rules() -> None:
    dn = subject_dn([(("countryName", "US"),), (("organizationName", "Acme"),),
                     (("organizationalUnitName", "Eng"),), (("commonName", "Alice"),)])
    assert dn == "CN=Alice,OU=Eng,O=Acme,C=US"
    rules = parse_mapping_rules("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L, "
                                "RULE:^CN=([^,]*).*$/$1/U,DEFAULT")
    assert map_subject(rules, dn) == "alice@eng"
    assert map_subject(rules, "CN=bob,O=X") == "BOB"
    assert map_subject(rules, "O=only") == "O=only"
    assert map_subject(parse_mapping_rules("DEFAULT"), dn) == dn
    with pytest.raises(ValueError):
        map_subject(parse_mapping_rules("RULE:^CN=x$/y/"), dn)
    for bad in ("RULE:^CN=(.*$/x", "NOPE", "RULE:(/x/"):
        with pytest.raises(InvalidConfigError):
            parse_mapping_rules(bad)


def test_listener_security_checks() -> None:
    with pytest.raises(InvalidConfigError, match="key store"):
        listener_security({}, "SSL", "SSL")
    with pytest.raises(InvalidConfigError, match="JKS"):
        listener_security({"ssl.keystore.type": "JKS", "ssl.keystore.location": "x"},
                          "SSL", "SSL")
    with pytest.raises(InvalidConfigError, match="GSSAPI"):
        listener_security({}, "SASL_PLAINTEXT", "SASL_PLAINTEXT")
    with pytest.raises(InvalidConfigError, match="no users"):
        listener_security({"sasl.enabled.mechanisms": "PLAIN"}, "SASL_PLAINTEXT",
                          "SASL_PLAINTEXT")
    sec = listener_security({
        "sasl.enabled.mechanisms": "GSSAPI",
        "listener.name.ext.sasl.enabled.mechanisms": "scram-sha-512,PLAIN",
        "listener.name.ext.plain.sasl.jaas.config": 'M required user_a="b";',
        "listener.name.ext.ssl.keystore.location": "/k.pem",
        "listener.name.ext.connections.max.reauth.ms": "60000",
    }, "EXT", "SASL_SSL")
    assert sec.mechanisms == ("SCRAM-SHA-512", "PLAIN") and sec.plain_users == {"a": "b"}
    assert sec.ssl["ssl.keystore.location"] == "/k.pem" and sec.reauth_ms == 60000
    assert "TLS" in sec.describe() and "SCRAM-SHA-512" in sec.describe()
