"""Client security settings and the client's SASL mechanisms, without a network.

The SASL exchange runs the client's `SaslClient` against the broker's own sans-IO
`SaslServer` (protocol/sasl.py), so both sides of PLAIN and SCRAM are checked together.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tidegate.cli.command_config import client_settings, read_properties
from tidegate.client.config import AdminConfig, ConsumerConfig
from tidegate.client.errors import ConfigError
from tidegate.client.security import (
    AuthenticationError,
    ClientSecurity,
    SaslClient,
    SaslCredentials,
)
from tidegate.common.errors import ErrorCode
from tidegate.common.scram import ScramCredential
from tidegate.protocol.sasl import SaslServer, SaslState
from tidegate.spark.options import client_config, kafka_params

SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="bob" password="b\\"ob";')


def _security(**conf: object) -> ClientSecurity:
    return ClientSecurity.from_config(AdminConfig.from_dict(dict(conf)))


def test_plaintext_by_default() -> None:
    sec = _security()
    assert (sec.protocol, sec.tls, sec.sasl) == ("PLAINTEXT", None, None)


def test_sasl_settings_librdkafka_and_java_names() -> None:
    a = _security(**{"security.protocol": "sasl_plaintext", "sasl.mechanisms": "plain",
                     "sasl.username": "u", "sasl.password": "p"})
    assert a.sasl == SaslCredentials("PLAIN", "u", "p")
    b = _security(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                     "sasl.jaas.config": SCRAM_JAAS})
    assert b.sasl == SaslCredentials("SCRAM-SHA-256", "bob", 'b"ob')
    assert 'b"ob' not in repr(b.sasl)
    assert "secretpw" not in repr(AdminConfig.from_dict({"sasl.password": "secretpw"}))


@pytest.mark.parametrize(("conf", "message"), [
    ({"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"},
     "needs sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
     "needs sasl.username and sasl.password"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
     "no such readable file"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.jaas.config": "not jaas"}, "sasl.jaas.config must look like"),
])
def test_incomplete_settings_are_config_errors(conf: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _security(**conf)


def test_unsupported_values_refused() -> None:
    with pytest.raises(ConfigError, match="GSSAPI"):
        AdminConfig.from_dict({"sasl.mechanism": "GSSAPI"})
    with pytest.raises(ConfigError, match=r"security\.protocol"):
        AdminConfig.from_dict({"security.protocol": "TLS"})
    with pytest.raises(ConfigError, match=r"ssl\.truststore\.type"):
        AdminConfig.from_dict({"ssl.truststore.type": "JKS"})
    cfg = AdminConfig.from_dict({"ssl.endpoint.identification.algorithm": ""})
    assert cfg.ssl_endpoint_identification_algorithm == "none"


def test_tls_context_checks_host_unless_told_not_to() -> None:
    assert _security(**{"security.protocol": "SSL"}).tls.check_hostname  # type: ignore[union-attr]
    sec = _security(**{"security.protocol": "SSL",
                       "ssl.endpoint.identification.algorithm": "none"})
    assert sec.tls is not None and not sec.tls.check_hostname


def _server(mechanism: str) -> SaslServer:
    creds = {("SCRAM-SHA-512", "bob"): ScramCredential.from_password(
        "SCRAM-SHA-512", "pw", 4096)}
    server = SaslServer(("PLAIN", "SCRAM-SHA-512"), {"alice": "apw"},
                        lambda mech, user: creds.get((mech, user)), reauth_ms=0)
    assert server.handshake(mechanism) == ErrorCode.none
    return server


def _exchange(server: SaslServer, client: SaslClient) -> ErrorCode:
    token: bytes | None = client.first()
    while token is not None:
        result = server.authenticate(token, 0)
        if result.error != ErrorCode.none:
            return result.error
        token = None if client.done else client.step(result.token)
    return ErrorCode.none


@pytest.mark.parametrize(("mech", "user", "pw"), [("PLAIN", "alice", "apw"),
                                                  ("SCRAM-SHA-512", "bob", "pw")])
def test_sasl_client_against_broker_state_machine(mech: str, user: str, pw: str) -> None:
    server = _server(mech)
    assert _exchange(server, SaslClient(SaslCredentials(mech, user, pw))) == ErrorCode.none
    assert server.state is SaslState.AUTHENTICATED and server.principal == f"User:{user}"


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_wrong_password_refused(mech: str) -> None:
    user = "alice" if mech == "PLAIN" else "bob"
    server = _server(mech)
    assert _exchange(server, SaslClient(SaslCredentials(mech, user, "nope"))) == \
        ErrorCode.sasl_authentication_failed


def test_scram_client_rejects_a_server_that_does_not_know_the_password() -> None:
    server = _server("SCRAM-SHA-512")
    client = SaslClient(SaslCredentials("SCRAM-SHA-512", "bob", "pw"))
    first = server.authenticate(client.first(), 0)
    client.step(first.token)
    with pytest.raises(AuthenticationError, match="SCRAM-SHA-512"):
        client.step(b"v=" + b"AAAA" * 22)  # a server signature not derived from pw


def test_read_properties_and_command_settings(tmp_path: Path) -> None:
    f = tmp_path / "client.properties"
    f.write_text("# comment\n! also a comment\nsecurity.protocol=SASL_SSL\n"
                 "sasl.mechanism : SCRAM-SHA-512\nsasl.jaas.config=org.Foo required \\\n"
                 "  username=\"a\";\nlinger.ms=5\n")
    props = read_properties(str(f))
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["sasl.jaas.config"] == 'org.Foo required username="a";'
    args = argparse.Namespace(bootstrap_server="h:1", command_config=str(f))
    admin = client_settings(args, AdminConfig, {"client.id": "x"})
    assert "linger.ms" not in admin  # a producer key, left out for an admin client
    assert admin["bootstrap.servers"] == "h:1" and admin["client.id"] == "x"
    with pytest.raises(ConfigError, match="not key=value"):
        (tmp_path / "bad").write_text("justakey\n")
        read_properties(str(tmp_path / "bad"))


def test_spark_passes_security_options_through() -> None:
    params = kafka_params({"kafka.bootstrap.servers": "h:1",
                           "kafka.security.protocol": "SASL_SSL",
                           "kafka.sasl.mechanism": "SCRAM-SHA-512",
                           "kafka.sasl.jaas.config": SCRAM_JAAS,
                           "kafka.ssl.truststore.location": "/ca.pem"})
    cfg = ConsumerConfig.from_dict(client_config(params, "consumer"))
    assert cfg.security_protocol == "SASL_SSL" and cfg.sasl_jaas_config == SCRAM_JAAS
    assert cfg.ssl_truststore_location == "/ca.pem"
