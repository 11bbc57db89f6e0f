"""SASL/OAUTHBEARER end to end (KIP-255, KIP-768), with confluent-kafka, kafka-python and
aiokafka.

One broker serves PLAINTEXT, SASL_SSL with OAUTHBEARER checked against a JWKS that a tiny
HTTP server in this module publishes (it is also the identity provider's token endpoint
for librdkafka's `sasl.oauthbearer.method=oidc`), and SASL_PLAINTEXT with Kafka's
unsecured development mode. Signed tokens (RS256 and ES256) get in; an expired token, a
token for another audience, an `alg: none` token on the signed listener and a token
signed by a key outside the JWKS are refused with Kafka's error.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from tests.integration.conftest import BrokerProcess, free_port
from tests.integration.security_util import Pki, make_pki

pytestmark = pytest.mark.interop

AUDIENCE = "tidegate"
ISSUER = "https://idp.test"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ROGUE_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def token(sub: str = "alice", *, aud: str = AUDIENCE, ttl: int = 600, alg: str = "RS256",
          kid: str | None = None, key: Any = None) -> str:
    now = int(time.time())
    claims = {"sub": sub, "aud": aud, "iss": ISSUER, "iat": now - 5, "exp": now + ttl,
              "scope": "kafka"}
    if alg == "none":
        def b64(d: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
        return f"{b64({'alg': 'none'})}.{b64(claims)}."
    key = key or (RSA_KEY if alg == "RS256" else EC_KEY)
    kid = kid or ("rsa-1" if alg == "RS256" else "ec-1")
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})


def _jwks() -> bytes:
    keys = []
    for kid, key, alg in (("rsa-1", RSA_KEY, "RS256"), ("ec-1", EC_KEY, "ES256")):
        algo = jwt.get_algorithm_by_name(alg)
        jwk = json.loads(algo.to_jwk(key.public_key()))  # type: ignore[attr-defined]
        keys.append({**jwk, "kid": kid, "use": "sig", "alg": alg})
    return json.dumps({"keys": keys}).encode()


class _Idp(BaseHTTPRequestHandler):
    """GET /jwks: the public keys; POST /token: a client-credentials grant (ES256)."""

    jwks_hits = 0

    def do_GET(self) -> None:
        type(self).jwks_hits += 1
        self._send(_jwks())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        user = base64.b64decode(self.headers["Authorization"].split()[1]).split(b":")[0]
        body = {"access_token": token(user.decode(), alg="ES256"), "token_type": "bearer",
                "expires_in": 600}
        self._send(json.dumps(body).encode())

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def idp() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Idp)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


class OAuthBroker:
    def __init__(self, data: Path, pki: Pki, idp: str) -> None:
        self.ports = {n: free_port() for n in ("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT")}
        self.broker = BrokerProcess(data, self.ports["PLAINTEXT"], {
            "ssl.keystore.location": pki.path("server.pem"),
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "OAUTHBEARER,SCRAM-SHA-512",
            "listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url":
                f"{idp}/jwks",
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": ISSUER,
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                "OAuthBearerUnsecuredValidatorCallbackHandler",
        })
        self.broker.overrides["listeners"] = ",".join(
            f"{n}://127.0.0.1:{p}" for n, p in self.ports.items())

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def ob(tmp_path_factory: pytest.TempPathFactory, pki: Pki, idp: str) -> Iterator[OAuthBroker]:
    b = OAuthBroker(tmp_path_factory.mktemp("oauth") / "data", pki, idp)
    b.broker.start()
    try:
        yield b
    finally:
        b.broker.stop()


def _cb_conf(pki: Pki, make: Any) -> dict[str, Any]:
    """librdkafka's oauth_cb: (token, expiry in seconds since the epoch, principal)."""
    def cb(_config: str) -> tuple[str, float, str]:
        tok = make()
        claims = jwt.decode(tok, options={"verify_signature": False, "verify_exp": False})
        # librdkafka will not hand over a token it knows has expired: tell it a later
        # expiry, so that the broker is the one that refuses it.
        return tok, max(float(claims["exp"]), time.time() + 60), str(claims["sub"])
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": pki.path("ca.crt"),
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": cb}


def _roundtrip(bootstrap: str, conf: dict[str, Any], n: int = 10) -> None:
    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": bootstrap, **conf})
    for i in range(n):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                  "auto.offset.reset": "earliest", **conf})
    c.assign([TopicPartition(topic, 0, 0)])  # fetch without a group join: seconds saved
    got = []
    try:
        while len(got) < n:
            m = c.poll(15)
            assert m is not None, f"only {len(got)} of {n} records"
            assert m.error() is None, m.error()
            got.append(m.value())
    finally:
        c.close()
    assert got == [f"v{i}".encode() for i in range(n)]




def test_confluent_oauth_cb_rs256(ob: OAuthBroker, pki: Pki) -> None:
    _roundtrip(ob.bootstrap("SASL_SSL"), _cb_conf(pki, lambda: token("alice")))
    assert any("authenticated as User:alice" in line and "OAUTHBEARER" in line
               for line in ob.broker.log_lines)


def test_confluent_oidc_against_the_token_endpoint(ob: OAuthBroker, pki: Pki, idp: str) -> None:
    conf = {"security.protocol": "SASL_SSL", "ssl.ca.location": pki.path("ca.crt"),
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": "svc-etl", "sasl.oauthbearer.client.secret": "s",
            "sasl.oauthbearer.token.endpoint.url": f"{idp}/token"}
    _roundtrip(ob.bootstrap("SASL_SSL"), conf)
    assert any("authenticated as User:svc-etl" in line for line in ob.broker.log_lines)


BAD_TOKENS = {
    "expired": (lambda: token(ttl=-120), "expired"),
    "wrong-audience": (lambda: token(aud="someone-else"), "audience"),
    "alg-none": (lambda: token(alg="none"), "'none'"),
    "rogue-key": (lambda: token(key=ROGUE_KEY), "signature"),
}


def test_bad_tokens_refused(ob: OAuthBroker, pki: Pki) -> None:
    """Each client sees Kafka's SASL_AUTHENTICATION_FAILED with the JSON status, and the
    broker logs why. One client at a time, dropped at its first refusal: the broker's
    growing delay per source address would make retries slower and slower."""
    for name, (make, why) in BAD_TOKENS.items():
        errors: list[str] = []
        a = AdminClient({"bootstrap.servers": ob.bootstrap("SASL_SSL"),
                         "error_cb": lambda e, got=errors: got.append(str(e)),
                         **_cb_conf(pki, make)})
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            a.poll(0.05)
        del a
        assert any("invalid_token" in e for e in errors), (name, errors)
        deadline = time.monotonic() + 5  # the log line reaches us through a pipe
        while not any("authentication failed" in line and why in line.lower()
                      for line in ob.broker.log_lines):
            assert time.monotonic() < deadline, (name, why)
            time.sleep(0.05)


def test_unsecured_mode_for_development(ob: OAuthBroker) -> None:
    # librdkafka's built-in unsecured JWT (no oauth_cb): principal from sasl.oauthbearer.config
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.config": "principal=dev scope=kafka lifeSeconds=600",
            "enable.sasl.oauthbearer.unsecure.jwt": True}
    _roundtrip(ob.bootstrap("SASL_PLAINTEXT"), conf, n=3)
    assert any("authenticated as User:dev" in line for line in ob.broker.log_lines)


def _kp_provider(make: Any) -> Any:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return str(make())
    return Provider()


def test_kafka_python_token_provider(ob: OAuthBroker, pki: Pki) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    conf = {"bootstrap_servers": ob.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
            "ssl_cafile": pki.path("ca.crt"), "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": _kp_provider(lambda: token("kp-user"))}
    topic = f"kp-oauth-{uuid.uuid4().hex[:8]}"
    p = KafkaProducer(**conf)
    for i in range(3):
        p.send(topic, f"k{i}".encode())
    p.flush(20)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 3:
            break
    c.close()
    assert got == [f"k{i}".encode() for i in range(3)]


def test_aiokafka_token_provider(ob: OAuthBroker, pki: Pki) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.helpers import create_ssl_context

    class Provider(AbstractTokenProvider):
        async def token(self) -> str:
            return token("aio-user", alg="ES256")

    async def run() -> list[bytes]:
        conf: dict[str, Any] = {
            "bootstrap_servers": ob.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=pki.path("ca.crt")),
            "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Provider()}
        topic = f"aio-oauth-{uuid.uuid4().hex[:8]}"
        p = AIOKafkaProducer(**conf)
        await p.start()
        try:
            for i in range(3):
                await p.send_and_wait(topic, f"a{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
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
    assert any("authenticated as User:aio-user" in line for line in ob.broker.log_lines)


def test_session_lifetime_is_bounded_by_the_token(ob: OAuthBroker) -> None:
    """KIP-368: SaslAuthenticate's session_lifetime_ms is the token's remaining life (no
    connections.max.reauth.ms here), so clients re-authenticate before it expires."""
    from tests.integration.rawclient import RawClient

    raw = RawClient(ob.bootstrap("SASL_PLAINTEXT"))  # the unsecured listener: no TLS
    try:
        assert int(raw.call(17, 1, {"mechanism": "OAUTHBEARER"}).error_code) == 0
        msg = f"n,,\x01auth=Bearer {token('bob', alg='none', ttl=90)}\x01\x01".encode()
        resp = raw.call(36, 2, {"auth_bytes": msg})
        assert int(resp.error_code) == 0
        lifetime_s = resp.session_lifetime.total_seconds()  # kio gives a timedelta
        assert 80 <= lifetime_s <= 90, lifetime_s
        meta = raw.call(3, 4, {"topics": [], "allow_auto_topic_creation": False})
        assert len(meta.brokers) == 1  # authenticated: other requests are served
    finally:
        raw.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_unsecured_token(ob: OAuthBroker) -> None:
    """kcat's librdkafka with its own unsecured JWT, on the development listener. Debian's
    kcat (librdkafka 2.0.2) is built without OIDC (`-X sasl.oauthbearer.method=oidc`:
    "not supported in this build", no libcurl) and has no way to hand librdkafka a token
    made elsewhere, so a signed-token listener is out of kcat's reach there."""
    out = subprocess.run(
        ["kcat", "-b", ob.bootstrap("SASL_PLAINTEXT"), "-X", "security.protocol=SASL_PLAINTEXT",
         "-X", "sasl.mechanism=OAUTHBEARER", "-X", "enable.sasl.oauthbearer.unsecure.jwt=true",
         "-X", "sasl.oauthbearer.config=principal=kcat-dev", "-L", "-m", "10"],
        capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "1 brokers" in out.stdout


def test_kafkajs_signed_tokens(ob: OAuthBroker, pki: Pki) -> None:
    """KafkaJS over SASL_SSL, its oauthBearerProvider answering a JWT signed by the
    test's JWKS keys (RS256 to produce, ES256 to consume through a group)."""
    import os

    here = Path(__file__).parent / "kafkajs"
    node = shutil.which("node")
    if node is None or not (here / "node_modules" / "kafkajs").is_dir():
        pytest.skip("KafkaJS is not installed: run `make deps-node` (needs node and npm)")
    topic = f"kjs-oauth-{uuid.uuid4().hex[:8]}"
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": ob.bootstrap("PLAINTEXT")})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)

    def run(args: list[str], tok: str, stdin: str = "") -> list[Any]:
        sec = {"ca": pki.path("ca.crt"), "sasl": {"mechanism": "oauthbearer", "token": tok}}
        env = {**os.environ, "KAFKAJS_SECURITY": json.dumps(sec)}
        proc = subprocess.run([node, str(here / "driver.js"), *args], input=stdin, text=True,
                              capture_output=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]

    recs = "".join(json.dumps({"k": None, "v": "eA==", "h": []}) + "\n" for _ in range(4))
    bootstrap = ob.bootstrap("SASL_SSL")
    assert run(["produce", bootstrap, topic, "none", "0"], token("kjs-writer"),
               recs)[-1] == {"done": 4}
    assert run(["consume", bootstrap, topic, topic, "4", "30"],
               token("kjs-reader", alg="ES256"))[-1] == {"done": 4}
    for who in ("kjs-writer", "kjs-reader"):
        assert any(f"authenticated as User:{who}" in line and "OAUTHBEARER" in line
                   for line in ob.broker.log_lines), who
