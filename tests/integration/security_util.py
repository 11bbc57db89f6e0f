"""Certificates made with `openssl`, and a broker with PLAINTEXT, SSL, SASL_PLAINTEXT and
SASL_SSL listeners side by side, for the security tests and bench/security.py.

`make_pki(dir)` writes a CA, a server certificate for 127.0.0.1/localhost, a client
certificate (CN=alice,OU=eng,O=Acme) signed by the CA, and a second, untrusted CA with
its own client certificate. Keys are unencrypted except `server-enc.key`
(password `keypass`).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.integration.conftest import BrokerProcess, free_port

PLAIN_USERS = {"alice": "alice-secret", "admin": "admin-secret"}


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _cert(d: Path, name: str, subject: str, ca: str, ext: str = "") -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
             f"{name}.csr", "-subj", subject, cwd=d)
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-sha256"]
    if ext:
        (d / f"{name}.ext").write_text(ext)
        args += ["-extfile", f"{name}.ext"]
    _openssl(*args, cwd=d)
    # Kafka's ssl.keystore.location for PEM: key and chain in one file.
    pem = (d / f"{name}.key").read_text() + (d / f"{name}.crt").read_text()
    (d / f"{name}.pem").write_text(pem)


@dataclass
class Pki:
    dir: Path

    def path(self, name: str) -> str:
        return str(self.dir / name)


def make_pki(d: Path) -> Pki:
    d.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "evil-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
                 "-out", f"{ca}.crt", "-days", "2", "-subj", f"/CN=Tidegate test {ca}", cwd=d)
    _cert(d, "server", "/CN=localhost", "ca",
          "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _cert(d, "client", "/O=Acme/OU=eng/CN=alice", "ca")
    _cert(d, "evil-client", "/CN=mallory", "evil-ca")
    _openssl("rsa", "-in", "server.key", "-aes256", "-passout", "pass:keypass", "-out",
             "server-enc.key", cwd=d)
    return Pki(d)


@dataclass
class SecureBroker:
    broker: BrokerProcess
    ports: dict[str, int]

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def secure_broker(data: Path, pki: Pki, extra: dict[str, str] | None = None) -> SecureBroker:
    """A broker with one listener of each protocol (not started)."""
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";")
    overrides = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki.path("server.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki.path("ca.crt"),
        "listener.name.ssl.ssl.client.auth": "requested",
        "listener.name.ssl.ssl.principal.mapping.rules":
            "RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
        **(extra or {}),
    }
    b = BrokerProcess(data, ports["PLAINTEXT"], overrides)
    # BrokerProcess sets listeners=PLAINTEXT://...; a later override wins.
    b.overrides["listeners"] = ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items())
    return SecureBroker(b, ports)
