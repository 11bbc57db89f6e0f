"""SCRAM users through the admin API: DescribeUserScramCredentials and
AlterUserScramCredentials (KIP-554), as `AsyncAdmin` exposes them.

The password never crosses the wire: as Kafka's admin clients do, the client picks a
random salt, computes the salted password (PBKDF2 with the mechanism's hash and the
iteration count) and sends those two; the broker derives and stores the keys. Results
are per user: None on success, else the broker's error as a `KafkaError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from tidegate.client.net import NetworkClient
from tidegate.common.errors import KafkaError, error_for_code
from tidegate.common.scram import BY_TYPE, MECHANISMS, salted_password

__all__ = ["ScramCredentialInfo", "ScramUpsertion", "alter_scram", "describe_scram"]

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
DEFAULT_ITERATIONS = 8192  # Kafka's kafka-configs.sh default for SCRAM-SHA-512 too


@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    iterations: int


@dataclass(frozen=True)
class ScramUpsertion:
    user: str
    mechanism: str
    password: str
    iterations: int = DEFAULT_ITERATIONS

    def __repr__(self) -> str:  # never print the password
        return f"ScramUpsertion({self.user!r}, {self.mechanism}, {self.iterations})"


def _mechanism_type(name: str) -> int:
    try:
        return MECHANISMS[name.upper()][0]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {name!r}: use one of "
                         f"{', '.join(MECHANISMS)}") from None


def _error(code: ErrorCode, message: str | None, what: str) -> KafkaError | None:
    if code == ErrorCode.none:
        return None
    return error_for_code(code.value, f"{what}: {message}" if message else what)


async def describe_scram(net: NetworkClient, users: Iterable[str] | None = None
                         ) -> dict[str, list[ScramCredentialInfo] | KafkaError]:
    """Each user's mechanisms and iterations (every user with None); a user without
    credentials maps to the broker's RESOURCE_NOT_FOUND error."""
    names = None if users is None else [{"name": u} for u in users]
    resp = await net.request(None, DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": names})
    top = _error(resp.error_code, resp.error_message, "cannot describe SCRAM users")
    if top is not None:
        raise top
    out: dict[str, list[ScramCredentialInfo] | KafkaError] = {}
    for r in resp.results:
        err = _error(r.error_code, r.error_message, f"user {r.user!r}")
        out[r.user] = err if err is not None else [
            ScramCredentialInfo(BY_TYPE.get(int(c.mechanism), f"UNKNOWN({c.mechanism})"),
                                int(c.iterations)) for c in r.credential_infos]
    return out


async def alter_scram(net: NetworkClient, upsertions: Iterable[ScramUpsertion] = (),
                      deletions: Iterable[tuple[str, str]] = ()
                      ) -> dict[str, KafkaError | None]:
    """Add or replace credentials, delete (user, mechanism) pairs; per user the result."""
    ups = []
    for u in upsertions:
        mech = u.mechanism.upper()
        salt = os.urandom(32)
        ups.append({"name": u.user, "mechanism": _mechanism_type(mech),
                    "iterations": u.iterations, "salt": salt,
                    "salted_password": salted_password(mech, u.password, salt, u.iterations)})
    dels = [{"name": user, "mechanism": _mechanism_type(mech)} for user, mech in deletions]
    resp = await net.request(None, ALTER_USER_SCRAM_CREDENTIALS,
                             {"upsertions": ups, "deletions": dels})
    return {r.user: _error(r.error_code, r.error_message, f"user {r.user!r}")
            for r in resp.results}
