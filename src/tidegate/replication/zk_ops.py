"""ZooKeeper operations as plain values, so sans-IO code (the controller's decisions, ISR
changes) can say *what* to write and *under which condition* without a client.

`server/cluster/zk.py` runs a list of them as one ZooKeeper `multi` (all or nothing).
Conditions are ZooKeeper versions: `Check(path, version)` fails the whole transaction if
the znode changed since it was read; `SetData`/`Delete` carry the expected version of
their own znode (-1 = any). The controller prefixes every transaction with a `Check` of
/controller_epoch, which is how a paused, deposed controller is fenced.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANY_VERSION", "Check", "Create", "Delete", "SetData", "ZkOp"]

# ZooKeeper's "match any version" (Kafka's ZkVersion.MatchAnyVersion).
ANY_VERSION = -1


@dataclass(frozen=True)
class Check:
    path: str
    version: int


@dataclass(frozen=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class SetData:
    path: str
    data: bytes
    version: int = ANY_VERSION


@dataclass(frozen=True)
class Delete:
    path: str
    version: int = ANY_VERSION


ZkOp = Check | Create | SetData | Delete
