"""Typed failures of the ZooKeeper layer (no kazoo import here, so code that only needs
to catch them does not pull the client in).

`zk.py` turns every kazoo exception into one of these. A failed `multi` raises the
error of the operation that failed, with `op_index` saying which one: the controller
reads "BadVersionError at index 0" (its /controller_epoch check) as "deposed".
"""

from __future__ import annotations

__all__ = [
    "BadVersionError",
    "ConnectionLossError",
    "ControllerMovedError",
    "DuplicateBrokerIdError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "SessionExpiredError",
    "ZkClosedError",
    "ZkConnectTimeoutError",
    "ZkError",
]


class ZkError(Exception):
    """A ZooKeeper operation failed. `path` is the znode concerned (if any), `op_index`
    the failing operation of a transaction (None outside transactions)."""

    def __init__(self, message: str = "", *, path: str | None = None) -> None:
        super().__init__(message or f"{type(self).__name__} at {path}")
        self.path = path
        self.op_index: int | None = None


class NoNodeError(ZkError):
    """The znode (or, for a create, its parent) does not exist."""


class NodeExistsError(ZkError):
    """A create found the znode already there."""


class BadVersionError(ZkError):
    """A conditional write or check found another version: someone wrote in between."""


class NotEmptyError(ZkError):
    """A delete of a znode that still has children."""


class ConnectionLossError(ZkError):
    """Disconnected (the session may survive): the operation may or may not have been
    applied. Re-read before deciding again."""


class SessionExpiredError(ZkError):
    """The session is gone, and with it every ephemeral znode and watch it owned."""


class ZkClosedError(ZkError):
    """The client was closed."""


class ZkConnectTimeoutError(ZkError):
    """ZooKeeper did not answer within zookeeper.connection.timeout.ms at start."""


class ControllerMovedError(ZkError):
    """A controller's write was refused because /controller_epoch moved on: another
    broker is controller now (Kafka's ControllerMovedException)."""


class DuplicateBrokerIdError(ZkError):
    """/brokers/ids/<id> is held by another live session: two brokers share a broker.id."""
