"""Values of the ZooKeeper bridge, importable without kazoo: session and watch events,
znode stats, the event sink protocol, and connect-string parsing."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["EventSink", "SessionEvent", "SessionState", "Stat", "WatchEvent", "split_connect"]


class EventSink(Protocol):
    """Where events land: an `asyncio.Queue` owned by the consumer."""

    def put_nowait(self, item: Any, /) -> None: ...


class SessionState(enum.Enum):
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"
    CLOSED = "CLOSED"


@dataclass(frozen=True)
class SessionEvent:
    state: SessionState
    session_id: int | None


@dataclass(frozen=True)
class WatchEvent:
    """A watch fired: re-read `path` (kind: created, deleted, changed, child or none,
    the last meaning "connection dropped, all watches are gone")."""

    tag: Hashable
    path: str | None
    kind: str


@dataclass(frozen=True)
class Stat:
    """The parts of a znode's stat the cluster code uses."""

    version: int
    czxid: int
    mzxid: int
    ctime_ms: int
    ephemeral_owner: int
    num_children: int
    cversion: int

    @classmethod
    def of(cls, raw: Any) -> Stat:
        return cls(
            int(raw.version),
            int(raw.czxid),
            int(raw.mzxid),
            int(raw.ctime),
            int(raw.ephemeralOwner),
            int(raw.numChildren),
            int(raw.cversion),
        )


def split_connect(connect: str) -> tuple[str, str]:
    """ "h1:2181,h2:2181/kafka" -> ("h1:2181,h2:2181", "/kafka"); chroot "" if none."""
    connect = connect.strip()
    slash = connect.find("/")
    if slash < 0:
        return connect, ""
    hosts, chroot = connect[:slash], connect[slash:].rstrip("/")
    return hosts, chroot
