"""SCRAM users, durable in the data directory: `<log dir>/__scram_users.json`.

The file holds what Kafka keeps in ZooKeeper's `/config/users/<user>` znodes, in the
same form: per user, per mechanism, `salt=...,stored_key=...,server_key=...,
iterations=...` (common/scram.py). Never a password. Changes are written to a temporary
file, fsynced and renamed over the old one, so a crash leaves either the old or the new
set, never half of one; the write runs in a worker thread, off the event loop.

Lookups read memory only (SCRAM's first message needs the credential at once). In
cluster mode the broker uses `ZkScramStore` instead (server/cluster/scram_users.py):
the users live in ZooKeeper's `/config/users/<user>` as Kafka kept them, shared by every
broker. `ScramUsers` is what both offer the SASL code and the admin handlers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Protocol

from tidegate.common.scram import ScramCredential

log = logging.getLogger(__name__)

FILE_NAME = "__scram_users.json"


class ScramUsers(Protocol):
    """The users SCRAM checks against: this file store, or ZooKeeper's in a cluster."""

    users: dict[str, dict[str, ScramCredential]]

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None: ...

    async def apply(
        self,
        upserts: list[tuple[str, str, ScramCredential]],
        deletions: list[tuple[str, str]],
    ) -> None: ...


class ScramStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE_NAME
        self.users: dict[str, dict[str, ScramCredential]] = {}
        self._lock = asyncio.Lock()
        self._load()

    def _load(self) -> None:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            # Refuse to start on a damaged file rather than lose every user silently.
            raise OSError(f"cannot read SCRAM users from {self.path}: {e}") from e
        for user, mechs in raw.items():
            for mech, text in mechs.items():
                self.users.setdefault(user, {})[mech] = ScramCredential.from_kafka(text)

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    async def apply(
        self,
        upserts: list[tuple[str, str, ScramCredential]],
        deletions: list[tuple[str, str]],
    ) -> None:
        """Apply changes in memory and on disk (durable when this returns)."""
        async with self._lock:
            for user, mech in deletions:
                mechs = self.users.get(user)
                if mechs is not None:
                    mechs.pop(mech, None)
                    if not mechs:
                        del self.users[user]
            for user, mech, cred in upserts:
                self.users.setdefault(user, {})[mech] = cred
            snapshot = {
                u: {m: c.to_kafka() for m, c in ms.items()} for u, ms in self.users.items()
            }
            await asyncio.to_thread(self._write, snapshot)

    def _write(self, snapshot: dict[str, dict[str, str]]) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(snapshot, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
