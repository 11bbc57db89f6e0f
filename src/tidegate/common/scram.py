"""SCRAM credentials (RFC 5802 / 7677) as Kafka stores them: salted and hashed, never clear.

A credential is the salt, the iteration count and two keys derived from the salted
password: `stored_key = H(HMAC(salted, "Client Key"))` and `server_key = HMAC(salted,
"Server Key")`. That is enough to verify a client's proof and prove the server to the
client, and not enough to log in as the user. Kafka writes one per mechanism in
ZooKeeper's `/config/users/<user>` as `salt=<b64>,stored_key=<b64>,server_key=<b64>,
iterations=<n>`; `to_kafka()` / `from_kafka()` read and write exactly that form.

AlterUserScramCredentials carries the salt and the salted password (the client did the
hashing), so `from_salted()` builds a credential from those; `from_password()` is for
the CLI and tests.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

# Kafka's mechanism numbers (ScramMechanism.java) and hash functions.
MECHANISMS: dict[str, tuple[int, str]] = {
    "SCRAM-SHA-256": (1, "sha256"),
    "SCRAM-SHA-512": (2, "sha512"),
}
BY_TYPE = {num: name for name, (num, _) in MECHANISMS.items()}
MIN_ITERATIONS = 4096  # Kafka's minimum for both mechanisms
MAX_ITERATIONS = 16384  # Kafka's maximum in AlterUserScramCredentials


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        """Parse Kafka's form; ValueError if a field is missing or malformed."""
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(
                base64.b64decode(fields["salt"], validate=True),
                base64.b64decode(fields["stored_key"], validate=True),
                base64.b64decode(fields["server_key"], validate=True),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as e:
            raise ValueError(f"malformed SCRAM credential: {e}") from e

    @classmethod
    def from_salted(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        digest = MECHANISMS[mechanism][1]
        client_key = hmac.digest(salted_password, b"Client Key", digest)
        stored_key = hashlib.new(digest, client_key).digest()
        server_key = hmac.digest(salted_password, b"Server Key", digest)
        return cls(salt, stored_key, server_key, iterations)

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int = 8192, salt: bytes | None = None
    ) -> ScramCredential:
        salt = os.urandom(32) if salt is None else salt
        salted = salted_password(mechanism, password, salt, iterations)
        return cls.from_salted(mechanism, salt, salted, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): PBKDF2 with the mechanism's HMAC (SASLprep of ASCII is identity)."""
    digest = MECHANISMS[mechanism][1]
    return hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
