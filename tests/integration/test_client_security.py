"""Tidegate's own client and CLI on secured listeners, against one real broker.

The broker (security_util.py) serves PLAINTEXT, SSL (client certificate requested),
SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256) and SASL_SSL (SCRAM-SHA-512, SCRAM-SHA-256).
Tidegate's producer, consumer and admin round-trip records over SSL with a client
certificate, SASL_SSL SCRAM-SHA-512 and SASL_PLAINTEXT PLAIN; a wrong password and an
untrusted broker certificate fail with errors that say so; `tidegate users` adds a
SCRAM user that confluent-kafka then logs in with, and removes it again; `tidegate
topics list --command-config` works over SASL_SSL.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from tests.integration.security_util import Pki, SecureBroker, make_pki, secure_broker

from tidegate.client import Admin, AdminConfig, Consumer, Producer
from tidegate.client.net import NetworkClient
from tidegate.client.scram_admin import ScramUpsertion
from tidegate.client.security import AuthenticationError, SslHandshakeError

pytestmark = pytest.mark.interop
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureBroker]:
    # SASL_PLAINTEXT sessions last 2 s (KIP-368), for the re-authentication test.
    s = secure_broker(tmp_path_factory.mktemp("secure") / "data", pki,
                      {"listener.name.sasl_plaintext.connections.max.reauth.ms": "2000"})
    s.broker.start()
    # The first SCRAM user, made with Tidegate's own admin client on the open listener.
    with Admin({"bootstrap.servers": s.bootstrap("PLAINTEXT")}) as admin:
        result = admin.alter_user_scram_credentials(
            [ScramUpsertion("bob", "SCRAM-SHA-512", "bob-secret")])
        assert result == {"bob": None}
    try:
        yield s
    finally:
        s.broker.stop()


def _ssl(pki: Pki, ca: str = "ca.crt", cert: bool = True) -> dict[str, Any]:
    conf: dict[str, Any] = {"security.protocol": "SSL", "ssl.ca.location": pki.path(ca)}
    if cert:
        conf |= {"ssl.certificate.location": pki.path("client.crt"),
                 "ssl.key.location": pki.path("client.key")}
    return conf


def _scram(pki: Pki, user: str = "bob", pw: str = "bob-secret") -> dict[str, Any]:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": pki.path("ca.crt"),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": pw}


def _roundtrip(bootstrap: str, conf: dict[str, Any], n: int = 10) -> None:
    """Create a topic, produce n records, read them back with a group: admin, metadata,
    produce, the group coordinator and fetch all over the secured listener."""
    topic = f"csec-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bootstrap, **conf}) as admin:
        admin.create_topic(topic, 1)
    with Producer({"bootstrap.servers": bootstrap, **conf}) as p:
        for i in range(n):
            p.send(topic, f"v{i}".encode())
        p.flush()
    with Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                   "auto.offset.reset": "earliest", **conf}) as c:
        c.subscribe([topic])
        got: list[bytes] = []
        for _ in range(30):
            got += [r.value for r in c.poll(500) if r.value is not None]
            if len(got) >= n:
                break
        c.commit()
    assert got == [f"v{i}".encode() for i in range(n)]


def test_ssl_with_client_certificate(sb: SecureBroker, pki: Pki) -> None:
    _roundtrip(sb.bootstrap("SSL"), _ssl(pki))


def test_ssl_java_style_keystore_names(sb: SecureBroker, pki: Pki) -> None:
    # ssl.truststore.location + ssl.keystore.location (key and chain in one PEM file)
    conf = {"security.protocol": "SSL", "ssl.truststore.location": pki.path("ca.crt"),
            "ssl.keystore.location": pki.path("client.pem")}
    with Admin({"bootstrap.servers": sb.bootstrap("SSL"), **conf}) as admin:
        assert isinstance(admin.list_topics(), dict)


def test_sasl_ssl_scram_sha_512(sb: SecureBroker, pki: Pki) -> None:
    _roundtrip(sb.bootstrap("SASL_SSL"), _scram(pki))


def test_sasl_plaintext_plain_with_jaas_config(sb: SecureBroker) -> None:
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="alice" password="alice-secret";')
    _roundtrip(sb.bootstrap("SASL_PLAINTEXT"),
               {"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": jaas})


def test_connection_retired_before_the_sasl_session_ends(sb: SecureBroker) -> None:
    """The broker gives 2 s sessions: a request after 1.7 s (85%) goes over a fresh,
    freshly authenticated connection, and the old one is closed, so no request is ever
    sent on a session the broker has ended."""
    conf = AdminConfig.from_dict({
        "bootstrap.servers": sb.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "alice", "sasl.password": "alice-secret"})

    async def run() -> None:
        net = NetworkClient(conf)
        try:
            first = await net.any_connection()
            assert first.retire_at is not None
            await net.request(None, 18, {}, timeout_ms=5000)  # ApiVersions
            await asyncio.sleep(1.9)
            second = await net.any_connection()
            assert second is not first
            resp = await second.request(3, {"topics": [], "allow_auto_topic_creation": False})
            assert resp.brokers  # Metadata answered: the new session is valid
            for _ in range(40):
                if first.closed:
                    break
                await asyncio.sleep(0.05)
            assert first.closed
        finally:
            await net.close()
    asyncio.run(run())


def test_wrong_password_names_sasl_and_mechanism(sb: SecureBroker, pki: Pki) -> None:
    with pytest.raises(AuthenticationError) as info, \
            Admin({"bootstrap.servers": sb.bootstrap("SASL_SSL"),
                   **_scram(pki, pw="wrong")}) as admin:
        admin.list_topics()
    text = str(info.value)
    assert "SASL authentication failed" in text and "SCRAM-SHA-512" in text, text


def test_untrusted_broker_certificate_named(sb: SecureBroker, pki: Pki) -> None:
    with pytest.raises(SslHandshakeError) as info, \
            Admin({"bootstrap.servers": sb.bootstrap("SSL"),
                   **_ssl(pki, ca="evil-ca.crt")}) as admin:
        admin.list_topics()
    assert "certificate verify failed" in str(info.value), str(info.value)


# -- CLI -----------------------------------------------------------------------------------


def tidegate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "tidegate.cli.main", *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)


def _properties(tmp_path: Path, conf: dict[str, Any]) -> str:
    path = tmp_path / "client.properties"
    path.write_text("# secured broker\n" + "".join(f"{k}={v}\n" for k, v in conf.items()))
    return str(path)


def _confluent_login(bootstrap: str, conf: dict[str, Any], timeout: float = 10) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    admin.list_topics(timeout=timeout)


def test_users_round_trip_then_confluent_logs_in(sb: SecureBroker, pki: Pki,
                                                 tmp_path: Path) -> None:
    props = _properties(tmp_path, _scram(pki))  # bob administers over SASL_SSL
    boot = ("--bootstrap-server", sb.bootstrap("SASL_SSL"), "--command-config", props)
    pw = tmp_path / "pw"
    pw.write_text("erin-secret\n")
    r = tidegate("users", "add", "erin", "--mechanism", "SCRAM-SHA-512",
                 "--password-file", str(pw), *boot)
    assert r.returncode == 0, r.stderr
    assert "erin" in r.stdout and "SCRAM-SHA-512" in r.stdout
    r = tidegate("users", "list", *boot)
    assert r.returncode == 0, r.stderr
    assert any(line.startswith("erin") and "SCRAM-SHA-512 (8192 iterations)" in line
               for line in r.stdout.splitlines()), r.stdout
    erin = _scram(pki, "erin", "erin-secret") | {"ssl.endpoint.identification.algorithm":
                                                 "none"}
    _confluent_login(sb.bootstrap("SASL_SSL"), erin)
    r = tidegate("users", "remove", "erin", *boot)
    assert r.returncode == 0, r.stderr
    assert "Removed SCRAM-SHA-512" in r.stdout
    with pytest.raises(KafkaException):
        _confluent_login(sb.bootstrap("SASL_SSL"), erin, timeout=3)


def test_topics_list_with_command_config(sb: SecureBroker, pki: Pki, tmp_path: Path) -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": sb.bootstrap("PLAINTEXT")}) as admin:
        admin.create_topic(topic, 1)
    props = _properties(tmp_path, _scram(pki))
    r = tidegate("topics", "list", "--bootstrap-server", sb.bootstrap("SASL_SSL"),
                 "--command-config", props)
    assert r.returncode == 0, r.stderr
    assert topic in r.stdout.split()
    # groups talks to brokers over its own connections: they must be secured too.
    r = tidegate("groups", "list", "--bootstrap-server", sb.bootstrap("SASL_SSL"),
                 "--command-config", props)
    assert r.returncode == 0, r.stderr
    # Without it the SASL_SSL listener is unreachable: a clear failure, not a hang.
    bad = _properties(tmp_path, _scram(pki, pw="nope"))
    r = tidegate("topics", "list", "--bootstrap-server", sb.bootstrap("SASL_SSL"),
                 "--command-config", bad)
    assert r.returncode == 1
    assert "SASL authentication failed with mechanism SCRAM-SHA-512" in r.stderr, r.stderr
