"""The shape every ZooKeeper watcher of a broker shares, and Kafka's `/config/changes`
protocol on top of it.

`WatchLoop`: one task per watcher reads ZooKeeper events from its queue in batches
(watches coalesce: one re-read answers every event queued meanwhile) and hands each batch
to `handle`. A ZooKeeper that is unavailable is waited out (the CONNECTED event that
follows asks for a full re-read); a closed client ends the task; any other failure is
logged and answered by a full re-read a second later, so a watcher never dies silently.

`ConfigChangeWatcher`: the brokers' side of Kafka's `ZkConfigManager`. A write to an
entity config znode (`/config/topics/<t>`, `/config/users/<u>`, `/config/clients/<c>`,
...) comes with a sequential notification `/config/changes/config_change_<seq>` naming
the entity (`topics/<t>`). The watcher keeps a watch on `/config/changes`' children and
gives the entity paths of the notifications newer than the last it handled to
`apply_changes`; at start and after a (re)connection, when notifications may have been
missed, it calls `reload_all` instead. Optionally (one watcher per broker does it)
notifications older than `expiration_ms` are purged, as Kafka's brokers do.

`alter_entity_config`: the writers' side. The entity's new config and its notification
go in one ZooKeeper multi conditional on the config znode's version, so two brokers
altering one entity at once cannot lose a change: the loser re-reads and re-applies.
(Kafka writes the two unconditionally, one after the other.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.replication.zk_ops import Create, SetData, ZkOp
from tidegate.replication.znodes import CONFIG_CHANGE_PREFIX, CONFIG_CHANGES, MalformedZnodeError
from tidegate.replication.znodes_admin import (
    config_change_sequence,
    decode_config_change,
    decode_entity_config,
    encode_config_change,
    encode_entity_config,
)
from tidegate.server.cluster.errors import (
    BadVersionError,
    ConnectionLossError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    ZkClosedError,
)
from tidegate.server.cluster.zk import SessionEvent, SessionState, WatchEvent, ZkClient

__all__ = [
    "CHANGE_EXPIRATION_MS",
    "RESYNC",
    "ConfigChangeWatcher",
    "WatchLoop",
    "alter_entity_config",
    "classify",
]

log = logging.getLogger(__name__)

# Kafka's ZkConfigManager.changeExpirationMs: notifications older than this are purged.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
# Conditional writes lost to concurrent alters before giving up (each loss means another
# broker's alter of the same entity succeeded: progress is made).
ATTEMPTS = 20
RESYNC = object()  # queued to ask a watcher for a full re-read


def classify(batch: Iterable[object]) -> tuple[bool, bool]:
    """(resync, changed): whether a batch asks for a full re-read (RESYNC, or a session
    (re)connected: watches were lost) and whether a watch fired."""
    resync = changed = False
    for e in batch:
        if e is RESYNC or (isinstance(e, SessionEvent) and e.state is SessionState.CONNECTED):
            resync = True
        elif isinstance(e, WatchEvent) and e.kind != "none":
            changed = True
    return resync, changed


class WatchLoop(ABC):
    """One task reacting to ZooKeeper events in batches (module docstring)."""

    #: what the watcher keeps current, for its log lines ("client quotas")
    what = "ZooKeeper state"
    task_name = "zk-watcher"

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk
        self._events: asyncio.Queue[object] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._said: set[Hashable] = set()
        self.synced = asyncio.Event()  # set after the first successful batch

    async def start(self) -> None:
        self.zk.subscribe(self._events)
        self._events.put_nowait(RESYNC)
        self._task = asyncio.create_task(self._run(), name=self.task_name)

    async def stop(self) -> None:
        self.zk.unsubscribe(self._events)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def say_once(self, key: Hashable, msg: str) -> None:
        """Log a warning about bad data once per `key` (it stays bad until rewritten)."""
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", msg)

    @abstractmethod
    async def handle(self, batch: list[object]) -> None:
        """React to a batch of queued events (RESYNC, SessionEvent, WatchEvent, ...)."""

    async def _run(self) -> None:
        while True:
            batch = [await self._events.get()]
            while not self._events.empty():
                batch.append(self._events.get_nowait())
            try:
                await self.handle(batch)
                self.synced.set()
            except (ConnectionLossError, SessionExpiredError):
                log.info("%s: ZooKeeper unavailable; re-reading when it is back", self.what)
            except ZkClosedError:
                return
            except Exception:
                log.exception("%s: update failed; re-reading everything soon", self.what)
                asyncio.get_running_loop().call_later(1.0, self._events.put_nowait, RESYNC)


class ConfigChangeWatcher(WatchLoop):
    """Follows `/config/changes` (module docstring). Subclasses say what a full re-read
    and a batch of changed entities mean to them."""

    def __init__(self, zk: ZkClient, *, expiration_ms: int | None = None,
                 wall_clock_ms: Callable[[], int] | None = None) -> None:
        super().__init__(zk)
        self.last_seen = -1  # the newest notification handled
        self.expiration_ms = expiration_ms  # None: another watcher purges
        # compared with the notifications' ctime, ZooKeeper's wall clock
        self.wall_clock_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self._ctimes: dict[str, int] = {}

    @abstractmethod
    async def reload_all(self) -> None:
        """Re-read every entity this watcher keeps (notifications may have been missed)."""

    @abstractmethod
    async def apply_changes(self, entity_paths: Sequence[str]) -> None:
        """Re-read the entities these notifications name (in order; may repeat; may name
        entities of other kinds, which are ignored)."""

    async def handle(self, batch: list[object]) -> None:
        resync, changed = classify(batch)
        if resync or changed:
            await self.changes_pass(resync)

    async def changes_pass(self, resync: bool) -> None:
        children = await self.zk.get_children(
            CONFIG_CHANGES, self.zk.watch(self._events, "config-changes"))
        seqs = sorted((s, c) for c in children if (s := config_change_sequence(c)) is not None)
        newest = seqs[-1][0] if seqs else self.last_seen
        if resync:
            await self.reload_all()
        else:
            paths = []
            for seq, child in seqs:
                if seq > self.last_seen and (path := await self._entity(child)) is not None:
                    paths.append(path)
            if paths:
                await self.apply_changes(paths)
        self.last_seen = max(self.last_seen, newest)
        if self.expiration_ms is not None:
            self._ctimes = {c: t for c, t in self._ctimes.items() if c in children}
            await self._purge([c for s, c in seqs if s <= self.last_seen])

    async def _entity(self, child: str) -> str | None:
        """The entity path a notification names (None: purged meanwhile, or malformed)."""
        path = f"{CONFIG_CHANGES}/{child}"
        try:
            data, stat = await self.zk.get(path)
        except NoNodeError:
            return None  # purged meanwhile by another broker
        self._ctimes[child] = stat.ctime_ms
        try:
            return decode_config_change(data)
        except MalformedZnodeError as e:
            self.say_once(("notification", child), f"{path}: {e}; ignoring it")
            return None

    async def _purge(self, handled: Iterable[str]) -> None:
        """Delete notifications older than `expiration_ms` (every broker may: a broker
        away longer re-reads everything when it reconnects)."""
        assert self.expiration_ms is not None
        now = self.wall_clock_ms()
        for child in handled:
            ctime = self._ctimes.get(child)
            path = f"{CONFIG_CHANGES}/{child}"
            if ctime is None:
                stat = await self.zk.exists(path)
                if stat is None:
                    continue
                ctime = self._ctimes[child] = stat.ctime_ms
            if now - ctime < self.expiration_ms:
                continue
            with contextlib.suppress(NoNodeError):
                await self.zk.delete(path)
            self._ctimes.pop(child, None)


async def alter_entity_config(
    zk: ZkClient,
    rel: str,
    change: Callable[[dict[str, str]], dict[str, str]],
    *,
    what: str,
    guard: Callable[[], Awaitable[list[ZkOp]]] | None = None,
    validate_only: bool = False,
) -> dict[str, str]:
    """Write `/config/<rel>` as `change(current)` with its notification, conditionally
    (module docstring); returns the new config. `change` may raise a KafkaError to refuse.
    `guard` runs before each attempt and returns extra conditions for the multi (it may
    raise, e.g. the topic is gone). Missing parents of the znode are created. Nothing is
    written with `validate_only`. `what` names the entity in log lines and errors."""
    path = f"/config/{rel}"
    for _ in range(ATTEMPTS):
        conditions = await guard() if guard is not None else []
        got = await zk.get_or_none(path)
        current: dict[str, str] = {}
        if got is not None:
            with contextlib.suppress(MalformedZnodeError):  # overwritten by a good one
                current = decode_entity_config(got[0], path)
        new = change(dict(current))
        if validate_only:
            return new
        data = encode_entity_config(new)
        writes: list[ZkOp] = list(conditions)
        if got is None:
            writes += [Create(p) for p in await _missing_parents(zk, rel)]
            writes.append(Create(path, data))
        else:
            writes.append(SetData(path, data, got[1].version))
        writes.append(Create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                             encode_config_change(rel), sequence=True))
        try:
            await zk.transaction(writes)
        except (BadVersionError, NodeExistsError, NoNodeError) as e:
            if e.path == CONFIG_CHANGES or (e.path or "").startswith(f"{CONFIG_CHANGES}/"):
                raise  # /config/changes itself is missing: not a race
            log.info("%s changed concurrently; re-reading", what)
            continue  # another alter won the race: re-apply ours on top of it
        return new
    raise KafkaError(f"{what} kept changing concurrently; retry",
                     code=ErrorCode.request_timed_out)


async def _missing_parents(zk: ZkClient, rel: str) -> list[str]:
    """The znodes between /config and /config/<rel> that do not exist yet, top down."""
    seg = rel.split("/")
    out = []
    for i in range(1, len(seg)):  # /config/users, /config/users/<u>, .../clients
        parent = "/config/" + "/".join(seg[:i])
        if await zk.exists(parent) is None:
            out.append(parent)
    return out
