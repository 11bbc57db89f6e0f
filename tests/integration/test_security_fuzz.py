"""Bad TLS and SASL input: garbage, truncated and oversized handshakes, SASL frames out
of order, a SCRAM exchange with a wrong nonce. Each closes its own connection (after
Kafka's error where there is one) while a control producer on the PLAINTEXT listener
keeps producing without an error, and the broker logs no traceback."""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
import scramp  # type: ignore[import-untyped]
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography.hazmat.primitives.asymmetric import ec
from tests.integration.security_util import Pki, SecureBroker, make_pki, secure_broker

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecureBroker, Pki]]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    # OAUTHBEARER on the SASL_PLAINTEXT listener too, its JWKS a file: one EC key
    key = jwt.get_algorithm_by_name("ES256")
    jwk = json.loads(key.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key()))
    jwks = pki.dir / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1"}]}))
    s = secure_broker(tmp_path_factory.mktemp("fuzz") / "data", pki, {
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
    })
    s.broker.start()
    admin = AdminClient({"bootstrap.servers": s.bootstrap("PLAINTEXT")})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret")]
    )["bob"].result(10)
    try:
        yield s, pki
    finally:
        s.broker.stop()


def _request(api_key: int, version: int, body: bytes, corr: int = 1) -> bytes:
    header = struct.pack(">hhih", api_key, version, corr, 4) + b"fuzz"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def _read_frame(sock: socket.socket) -> bytes | None:
    """One response frame, or None once the broker closed the connection."""
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except (ConnectionError, TimeoutError):
        return None
    return data[4:]


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionError, TimeoutError):
        return True


def _conn(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    return s


def _sasl_authenticate_error(frame: bytes) -> int:
    # response header v0 (correlation id), then SaslAuthenticate v1: error_code first
    return int(struct.unpack(">h", frame[4:6])[0])


def test_fuzz_beside_a_control_client(sb: tuple[SecureBroker, Pki]) -> None:
    s, _pki = sb
    stop = threading.Event()
    failures: list[str] = []
    sent = [0]

    def control() -> None:
        p = Producer({"bootstrap.servers": s.bootstrap("PLAINTEXT"), "acks": "all",
                      "error_cb": lambda e: failures.append(str(e))})
        while not stop.is_set():
            p.produce("fuzz-control", b"x", on_delivery=lambda err, _m: (
                failures.append(str(err)) if err else None))
            sent[0] += 1
            p.poll(0.01)
        assert p.flush(30) == 0

    t = threading.Thread(target=control)
    t.start()
    try:
        _tls_garbage(s)
        _sasl_out_of_order(s)
        _scram_wrong_nonce(s)
        _oauthbearer_garbage(s)
    finally:
        stop.set()
        t.join(60)
    assert failures == [], failures
    assert sent[0] > 10
    log = "\n".join(s.broker.log_lines)
    assert "Traceback" not in log, log[-3000:]


def _tls_garbage(s: SecureBroker) -> None:
    # a TLS record cut short and then nothing: only the broker's 10 s handshake timeout
    # (server/listener.py) closes it; the client waits longer, so a broker that never
    # closed would fail here. Once (SSL): on SASL_SSL the same record is followed by EOF.
    short_record = b"\x16\x03\x01\x00\x10" + b"\x01" * 5
    with _conn(s.ports["SSL"]) as c:
        c.settimeout(20)
        c.sendall(short_record)
        assert c.recv(1) == b""
    for port in (s.ports["SSL"], s.ports["SASL_SSL"]):
        for payload in (os.urandom(300), short_record,
                        b"\x16\x03\x03\xff\xff" + os.urandom(2000), b""):
            with _conn(port) as c:
                c.sendall(payload)
                if payload == short_record:
                    c.shutdown(socket.SHUT_WR)  # stalled above; here EOF closes it
                if payload:
                    assert _closed(c)
        # a real client hello cut short
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = ctx.wrap_bio(inc, out)
        with pytest.raises(ssl.SSLWantReadError):
            obj.do_handshake()
        hello = out.read()
        with _conn(port) as c:
            c.sendall(hello[: len(hello) // 2])
            c.shutdown(socket.SHUT_WR)
            assert _closed(c)


def _sasl_out_of_order(s: SecureBroker) -> None:
    port = s.ports["SASL_PLAINTEXT"]
    # Metadata before authenticating: closed without an answer
    with _conn(port) as c:
        c.sendall(_request(3, 0, struct.pack(">i", 0)))
        assert _read_frame(c) is None
    # SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE, then closed
    with _conn(port) as c:
        c.sendall(_request(36, 1, _bytes(b"\0alice\0alice-secret")))
        frame = _read_frame(c)
        assert frame is not None and _sasl_authenticate_error(frame) == 34
        assert _closed(c)
    # an unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones
    with _conn(port) as c:
        c.sendall(_request(17, 1, _string("GSSAPI")))
        frame = _read_frame(c)
        assert frame is not None and struct.unpack(">h", frame[4:6])[0] == 33
        assert b"SCRAM-SHA-256" in frame
        assert _closed(c)
    # an oversized frame, a truncated one, garbage
    for junk in (struct.pack(">i", 2**31 - 1) + b"x" * 100, struct.pack(">i", 50) + b"ab",
                 os.urandom(64)):
        with _conn(port) as c:
            c.sendall(junk)
            c.shutdown(socket.SHUT_WR)
            assert _read_frame(c) is None or _closed(c)
    # a garbage SASL/PLAIN token after a good handshake
    with _conn(port) as c:
        c.sendall(_request(17, 1, _string("PLAIN")))
        assert _read_frame(c) is not None
        c.sendall(_request(36, 1, _bytes(os.urandom(70000)), corr=2))
        frame = _read_frame(c)
        assert frame is not None and _sasl_authenticate_error(frame) == 58
        assert _closed(c)


def _scram_wrong_nonce(s: SecureBroker) -> None:
    with _conn(s.ports["SASL_PLAINTEXT"]) as c:
        c.sendall(_request(17, 1, _string("SCRAM-SHA-256")))
        assert _read_frame(c) is not None
        client = scramp.ScramClient(["SCRAM-SHA-256"], "bob", "bob-secret")
        c.sendall(_request(36, 1, _bytes(client.get_client_first().encode()), corr=2))
        frame = _read_frame(c)
        assert frame is not None and _sasl_authenticate_error(frame) == 0
        # response: error_code, error_message (nullable string), auth_bytes
        (msg_len,) = struct.unpack(">h", frame[6:8])
        pos = 8 + max(msg_len, 0)
        (n,) = struct.unpack(">i", frame[pos:pos + 4])
        client.set_server_first(frame[pos + 4:pos + 4 + n].decode())
        final = client.get_client_final().replace("r=", "r=zz", 1)
        c.sendall(_request(36, 1, _bytes(final.encode()), corr=3))
        frame = _read_frame(c)
        assert frame is not None and _sasl_authenticate_error(frame) == 58
        assert _closed(c)


def _oauthbearer_garbage(s: SecureBroker) -> None:
    port = s.ports["SASL_PLAINTEXT"]
    # not an RFC 7628 message at all: SASL_AUTHENTICATION_FAILED, closed
    with _conn(port) as c:
        c.sendall(_request(17, 1, _string("OAUTHBEARER")))
        assert _read_frame(c) is not None
        c.sendall(_request(36, 1, _bytes(os.urandom(300)), corr=2))
        frame = _read_frame(c)
        assert frame is not None and _sasl_authenticate_error(frame) == 58
        assert _closed(c)
    # a well-formed message whose token is alg:none on a signed listener: Kafka's JSON
    # challenge (error NONE), then the client's \x01 gets SASL_AUTHENTICATION_FAILED
    none_jwt = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJtYWxsb3J5IiwiZXhwIjo5OTk5OTk5OTk5fQ."
    with _conn(port) as c:
        c.sendall(_request(17, 1, _string("OAUTHBEARER")))
        assert _read_frame(c) is not None
        c.sendall(_request(36, 1, _bytes(f"n,,\x01auth=Bearer {none_jwt}\x01\x01".encode()),
                           corr=2))
        frame = _read_frame(c)
        assert frame is not None and _sasl_authenticate_error(frame) == 0
        assert b'{"status":"invalid_token"}' in frame
        c.sendall(_request(36, 1, _bytes(b"\x01"), corr=3))
        frame = _read_frame(c)
        assert frame is not None and _sasl_authenticate_error(frame) == 58
        assert b"invalid_token" in frame
        assert _closed(c)


def test_cert_reload_without_restart(sb: tuple[SecureBroker, Pki], tmp_path: Path) -> None:
    """Replacing the key store file: the next connection gets the new certificate."""
    s, pki = sb
    ctx = ssl.create_default_context(cafile=pki.path("ca.crt"))

    def served_serial() -> int:
        with ctx.wrap_socket(_conn(s.ports["SSL"]), server_hostname="127.0.0.1") as t:
            der = t.getpeercert(binary_form=True)
            assert der is not None
            return hash(der)

    before = served_serial()
    pem = Path(pki.path("server.pem"))
    original = pem.read_text()
    # a second certificate for the same key: re-sign the CSR (new serial)
    import subprocess

    subprocess.run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey",
                    "ca.key", "-CAcreateserial", "-out", "server2.crt", "-days", "2",
                    "-extfile", "server.ext"], cwd=pki.dir, check=True, capture_output=True)
    try:
        pem.write_text((pki.dir / "server.key").read_text()
                       + (pki.dir / "server2.crt").read_text())
        assert served_serial() != before
    finally:
        pem.write_text(original)
