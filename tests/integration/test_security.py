"""TLS and SASL end to end, with confluent-kafka (librdkafka), kafka-python and kcat.

One broker serves PLAINTEXT, SSL (client certificate requested), SASL_PLAINTEXT (PLAIN,
SCRAM-SHA-256) and SASL_SSL (SCRAM-SHA-512, SCRAM-SHA-256) at once. SCRAM users are
made through AlterUserScramCredentials by confluent-kafka's admin API, and survive a
restart. Each secure path produces and consumes; wrong passwords, unknown users,
untrusted certificates and unknown mechanisms are refused; Metadata answers each
client with the endpoints of the listener it came in on.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from tests.integration.security_util import Pki, SecureBroker, make_pki, secure_broker

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureBroker]:
    s = secure_broker(tmp_path_factory.mktemp("secure") / "data", pki)
    s.broker.start()
    admin = AdminClient({"bootstrap.servers": s.bootstrap("PLAINTEXT")})
    ups = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 8192), pw.encode())
           for user, pw in (("bob", "bob-secret"), ("carol", "carol-secret"))
           for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for fut in admin.alter_user_scram_credentials(ups).values():
        fut.result(timeout=10)
    try:
        yield s
    finally:
        s.broker.stop()


def _ssl(pki: Pki, cert: str | None = "client", ca: str = "ca.crt") -> dict[str, Any]:
    conf: dict[str, Any] = {"ssl.ca.location": pki.path(ca)}
    if cert:
        conf |= {"ssl.certificate.location": pki.path(f"{cert}.crt"),
                 "ssl.key.location": pki.path(f"{cert}.key")}
    return conf


def _sasl(mech: str, user: str, pw: str) -> dict[str, Any]:
    return {"sasl.mechanism": mech, "sasl.username": user, "sasl.password": pw}


def _roundtrip(bootstrap: str, conf: dict[str, Any], n: int = 20) -> None:
    """Produce n records and read them back with a consumer group: metadata, produce,
    the group coordinator and fetch all over the same secured listener."""
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": bootstrap, **conf})
    for i in range(n):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                  "auto.offset.reset": "earliest", **conf})
    c.subscribe([topic])
    got = []
    try:
        while len(got) < n:
            m = c.poll(15)
            assert m is not None, f"only {len(got)} of {n} records"
            assert m.error() is None, m.error()
            got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert got == [f"v{i}".encode() for i in range(n)]


def _refused(bootstrap: str, conf: dict[str, Any]) -> str:
    """A client that must not get in: the error librdkafka reports."""
    errors: list[str] = []
    a = AdminClient({"bootstrap.servers": bootstrap, "error_cb": lambda e: errors.append(str(e)),
                     **conf})
    with pytest.raises(KafkaException):
        a.list_topics(timeout=5)
    a.poll(0.5)  # serves error_cb
    return " ".join(errors)


def test_ssl_with_client_certificate(sb: SecureBroker, pki: Pki) -> None:
    # the mapping rule makes alice@eng of CN=alice,OU=eng,O=Acme: the rules themselves are
    # tested in tests/unit/protocol/test_sasl.py (test_principal_mapping_rules); the
    # broker does not log a connection's principal (a certificate-principal ACL test is
    # still to write)
    _roundtrip(sb.bootstrap("SSL"), {"security.protocol": "SSL", **_ssl(pki)})


def test_ssl_without_client_certificate(sb: SecureBroker, pki: Pki) -> None:
    _roundtrip(sb.bootstrap("SSL"), {"security.protocol": "SSL", **_ssl(pki, None)}, 5)


def test_untrusted_client_certificate_refused(sb: SecureBroker, pki: Pki) -> None:
    _refused(sb.bootstrap("SSL"), {"security.protocol": "SSL",
                                   **_ssl(pki, "evil-client")})


def test_untrusted_server_refused_by_client(sb: SecureBroker, pki: Pki) -> None:
    _refused(sb.bootstrap("SSL"), {"security.protocol": "SSL", **_ssl(pki, None, "evil-ca.crt")})


def test_sasl_plaintext_plain(sb: SecureBroker) -> None:
    _roundtrip(sb.bootstrap("SASL_PLAINTEXT"), {"security.protocol": "SASL_PLAINTEXT",
                                                **_sasl("PLAIN", "alice", "alice-secret")})


def test_sasl_plaintext_plain_wrong_password(sb: SecureBroker) -> None:
    err = _refused(sb.bootstrap("SASL_PLAINTEXT"), {"security.protocol": "SASL_PLAINTEXT",
                                                   **_sasl("PLAIN", "alice", "nope")})
    assert "Authentication failed" in err or "authentication" in err.lower(), err


@pytest.mark.parametrize("mech", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_sasl_ssl_scram(sb: SecureBroker, pki: Pki, mech: str) -> None:
    _roundtrip(sb.bootstrap("SASL_SSL"), {"security.protocol": "SASL_SSL", **_ssl(pki, None),
                                          **_sasl(mech, "bob", "bob-secret")})


def test_sasl_ssl_scram_wrong_password_and_unknown_user(sb: SecureBroker, pki: Pki) -> None:
    base = {"security.protocol": "SASL_SSL", **_ssl(pki, None)}
    err = _refused(sb.bootstrap("SASL_SSL"), base | _sasl("SCRAM-SHA-512", "bob", "wrong"))
    assert "uthentication" in err, err
    _refused(sb.bootstrap("SASL_SSL"), base | _sasl("SCRAM-SHA-512", "nobody", "x"))


def test_mechanism_not_enabled_refused(sb: SecureBroker, pki: Pki) -> None:
    err = _refused(sb.bootstrap("SASL_SSL"), {"security.protocol": "SASL_SSL",
                                             **_ssl(pki, None),
                                             **_sasl("PLAIN", "alice", "alice-secret")})
    assert "PLAIN" in err or "mechanism" in err.lower(), err


def test_plaintext_client_on_sasl_listener_refused(sb: SecureBroker) -> None:
    _refused(sb.bootstrap("SASL_PLAINTEXT"), {})


def test_metadata_endpoints_of_the_listener_used(sb: SecureBroker, pki: Pki) -> None:
    confs = {
        "PLAINTEXT": {},
        "SSL": {"security.protocol": "SSL", **_ssl(pki, None)},
        "SASL_PLAINTEXT": {"security.protocol": "SASL_PLAINTEXT",
                           **_sasl("PLAIN", "alice", "alice-secret")},
        "SASL_SSL": {"security.protocol": "SASL_SSL", **_ssl(pki, None),
                     **_sasl("SCRAM-SHA-256", "carol", "carol-secret")},
    }
    for name, conf in confs.items():
        md = AdminClient({"bootstrap.servers": sb.bootstrap(name), **conf}).list_topics(timeout=10)
        assert [b.port for b in md.brokers.values()] == [sb.ports[name]], name


def test_scram_users_describe_delete_and_survive_restart(sb: SecureBroker, pki: Pki) -> None:
    admin = AdminClient({"bootstrap.servers": sb.bootstrap("PLAINTEXT")})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-pw")]
    )["dave"].result(10)
    desc = admin.describe_user_scram_credentials(["dave"])
    infos = desc["dave"].result(10).scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 4096)]
    stored = (sb.broker.data_dir / "__scram_users.json").read_text()
    assert "dave-pw" not in stored and "stored_key=" in stored
    sb.broker.stop()
    sb.broker.start()
    conf = {"security.protocol": "SASL_SSL", **_ssl(pki, None),
            **_sasl("SCRAM-SHA-512", "dave", "dave-pw")}
    _roundtrip(sb.bootstrap("SASL_SSL"), conf, 3)
    admin = AdminClient({"bootstrap.servers": sb.bootstrap("PLAINTEXT")})
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(
        "dave", ScramMechanism.SCRAM_SHA_512)])["dave"].result(10)
    _refused(sb.bootstrap("SASL_SSL"), conf)
    with pytest.raises(KafkaException):
        admin.describe_user_scram_credentials(["dave"])["dave"].result(10)


def test_kafka_python_sasl_ssl_scram(sb: SecureBroker, pki: Pki) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    conf = {"bootstrap_servers": sb.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
            "ssl_cafile": pki.path("ca.crt"), "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "carol", "sasl_plain_password": "carol-secret"}
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    p = KafkaProducer(**conf)
    for i in range(5):
        p.send(topic, f"k{i}".encode())
    p.flush(20)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf)
    got = [m.value for m in c]
    c.close()
    assert got == [f"k{i}".encode() for i in range(5)]


def test_kafka_python_ssl_client_cert(sb: SecureBroker, pki: Pki) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=sb.bootstrap("SSL"), security_protocol="SSL",
                      ssl_cafile=pki.path("ca.crt"), ssl_certfile=pki.path("client.crt"),
                      ssl_keyfile=pki.path("client.key"))
    p.send("kp-ssl", b"x").get(timeout=20)
    p.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_sasl_ssl_and_ssl(sb: SecureBroker, pki: Pki) -> None:
    topic = f"kc-{uuid.uuid4().hex[:8]}"
    sasl = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={pki.path('ca.crt')}",
            "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=bob",
            "-X", "sasl.password=bob-secret"]
    subprocess.run(["kcat", "-b", sb.bootstrap("SASL_SSL"), *sasl, "-P", "-t", topic],
                   input=b"one\ntwo\n", check=True, timeout=30)
    ssl_args = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.path('ca.crt')}",
                "-X", f"ssl.certificate.location={pki.path('client.crt')}",
                "-X", f"ssl.key.location={pki.path('client.key')}"]
    out = subprocess.run(["kcat", "-b", sb.bootstrap("SSL"), *ssl_args, "-C", "-t", topic,
                          "-o", "beginning", "-c", "2", "-e"],
                         capture_output=True, check=True, timeout=30)
    assert out.stdout.split() == [b"one", b"two"]
    bad = subprocess.run(["kcat", "-b", sb.bootstrap("SASL_SSL"), *sasl[:-1],
                          "sasl.password=wrong", "-L", "-m", "5"],
                         capture_output=True, timeout=30)
    assert bad.returncode != 0


def test_aiokafka_sasl_ssl_scram_and_ssl_client_cert(sb: SecureBroker, pki: Pki) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = f"aio-{uuid.uuid4().hex[:8]}"
    scram = {"bootstrap_servers": sb.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
             "ssl_context": create_ssl_context(cafile=pki.path("ca.crt")),
             "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "carol",
             "sasl_plain_password": "carol-secret"}
    cert = {"bootstrap_servers": sb.bootstrap("SSL"), "security_protocol": "SSL",
            "ssl_context": create_ssl_context(cafile=pki.path("ca.crt"),
                                              certfile=pki.path("client.crt"),
                                              keyfile=pki.path("client.key"))}

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(**scram)
        await p.start()
        try:
            for i in range(3):
                await p.send_and_wait(topic, f"a{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **cert)
        await c.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(20):
                async for m in c:
                    got.append(m.value or b"")
                    if len(got) == 3:
                        break
        finally:
            await c.stop()
        return got

    assert asyncio.run(run()) == [b"a0", b"a1", b"a2"]

    async def wrong() -> None:
        p = AIOKafkaProducer(**{**scram, "sasl_plain_password": "nope"})
        try:
            await p.start()
        finally:
            await p.stop()

    from aiokafka.errors import KafkaConnectionError

    with pytest.raises(KafkaConnectionError):  # aiokafka: "Unable to bootstrap"
        asyncio.run(wrong())
    import time

    deadline = time.monotonic() + 5  # the broker's log reaches us through a pipe
    while not any("authentication failed" in line and "invalid-proof" in line
                  for line in sb.broker.log_lines):
        assert time.monotonic() < deadline, "no log line for the wrong password"
        time.sleep(0.05)


def test_kafkajs_sasl_ssl_scram_and_ssl_client_cert(sb: SecureBroker, pki: Pki) -> None:
    import json
    import os
    from pathlib import Path

    here = Path(__file__).parent / "kafkajs"
    node = shutil.which("node")
    if node is None or not (here / "node_modules" / "kafkajs").is_dir():
        pytest.fail("KafkaJS is not installed: run `make deps-node` (needs node and npm)")
    topic = f"kjs-sec-{uuid.uuid4().hex[:8]}"
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": sb.bootstrap("PLAINTEXT")})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)

    def run(args: list[str], security: dict[str, Any], stdin: str = "") -> list[Any]:
        env = {**os.environ, "KAFKAJS_SECURITY": json.dumps(security)}
        proc = subprocess.run([node, str(here / "driver.js"), *args], input=stdin, text=True,
                              capture_output=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]

    scram = {"ca": pki.path("ca.crt"), "sasl": {
        "mechanism": "scram-sha-512", "username": "carol", "password": "carol-secret"}}
    recs = "".join(json.dumps({"k": None, "v": "eA==", "h": []}) + "\n" for _ in range(5))
    assert run(["produce", sb.bootstrap("SASL_SSL"), topic, "none", "0"], scram,
               recs)[-1] == {"done": 5}
    cert = {"ca": pki.path("ca.crt"), "cert": pki.path("client.crt"),
            "key": pki.path("client.key")}
    assert run(["consume", sb.bootstrap("SSL"), topic, topic, "5", "30"],
               cert)[-1] == {"done": 5}
