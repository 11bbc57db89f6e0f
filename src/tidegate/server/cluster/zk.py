"""The asyncio bridge to ZooKeeper: the only module that imports kazoo.

kazoo is threaded: a connection thread (which also runs state listeners) and a
callback thread (watches, completions). Neither may touch asyncio or broker objects,
nor block (a blocked callback stalls every other watch and the session). So:

- watch callbacks and the state listener only hand a small event to the event loop with
  `loop.call_soon_threadsafe` (a closed loop is ignored: the broker is shutting down);
- a watch event means "re-read X": ZooKeeper watches are one-shot and coalesce, and
  kazoo fires every watch with kind "none" when the connection drops (they are gone:
  re-read and re-arm after CONNECTED);
- operations use kazoo's `*_async` calls; the result's `rawlink` callback settles an
  asyncio future through `call_soon_threadsafe`. Only start/stop, which join kazoo's
  threads, run on a one-thread executor of our own (never the default executor, where
  coordinator loads and retention queue);
- session changes reach subscribers as `SessionEvent`s: SUSPENDED (connection lost,
  session maybe alive: pause writes), LOST (session expired: ephemerals and watches
  gone), CONNECTED (re-read everything), CLOSED (we closed it).

Errors come out typed (`server/cluster/errors.py`). `zookeeper.connect` may end with a
chroot, which is created if missing before use, as Kafka does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

try:
    from kazoo import exceptions as kz
    from kazoo.client import KazooClient, KazooState
    from kazoo.protocol.states import EventType
    from kazoo.retry import KazooRetry
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "cluster mode (zookeeper.connect) needs the ZooKeeper client kazoo: "
        "pip install 'tidegate[cluster]'"
    ) from exc

from tidegate.common.config import BrokerConfig
from tidegate.replication.zk_ops import Check, Create, Delete, SetData, ZkOp
from tidegate.server.cluster.errors import (
    BadVersionError,
    ConnectionLossError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    ZkClosedError,
    ZkConnectTimeoutError,
    ZkError,
)
from tidegate.server.cluster.zk_types import (
    EventSink,
    SessionEvent,
    SessionState,
    Stat,
    WatchEvent,
    split_connect,
)

__all__ = [
    "EventSink",
    "SessionEvent",
    "SessionState",
    "Stat",
    "Watch",
    "WatchEvent",
    "ZkClient",
    "split_connect",
]

log = logging.getLogger(__name__)
# kazoo logs every failed reconnect attempt; the bridge logs the state changes that
# matter, once each, so kazoo's own chatter is kept to errors.
_KAZOO_LOG = logging.getLogger(f"{__name__}.kazoo")
_KAZOO_LOG.setLevel(logging.ERROR)


_KINDS = {
    EventType.CREATED: "created",
    EventType.DELETED: "deleted",
    EventType.CHANGED: "changed",
    EventType.CHILD: "child",
    EventType.NONE: "none",
}


class Watch:
    """A one-shot watch that posts `WatchEvent(tag, path, kind)` to `sink`. Watches with
    the same sink and tag compare equal, so kazoo (which keeps a set per path) holds one
    of them however often a consumer re-arms it."""

    __slots__ = ("_zk", "sink", "tag")

    def __init__(self, zk: ZkClient, sink: EventSink, tag: Hashable) -> None:
        self._zk = zk
        self.sink = sink
        self.tag = tag

    def __call__(self, event: Any) -> None:  # kazoo's callback thread
        kind = _KINDS.get(event.type, "none")
        self._zk._post(self.sink, WatchEvent(self.tag, event.path, kind))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Watch) and other.sink is self.sink and other.tag == self.tag

    def __hash__(self) -> int:
        return hash((id(self.sink), self.tag))


def _translate(exc: BaseException, path: str | None) -> BaseException:
    table: tuple[tuple[type[BaseException], type[ZkError]], ...] = (
        (kz.NoNodeError, NoNodeError),
        (kz.NodeExistsError, NodeExistsError),
        (kz.BadVersionError, BadVersionError),
        (kz.NotEmptyError, NotEmptyError),
        (kz.ConnectionClosedError, ZkClosedError),
        (kz.SessionExpiredError, SessionExpiredError),
        (kz.ConnectionLoss, ConnectionLossError),
        (kz.OperationTimeoutError, ConnectionLossError),
        (kz.ConnectionDropped, ConnectionLossError),
    )
    for theirs, ours in table:
        if isinstance(exc, theirs):
            return ours(f"{ours.__name__} at {path}" if path else ours.__name__, path=path)
    if isinstance(exc, kz.KazooException):
        return ZkError(f"{type(exc).__name__} at {path}: {exc}", path=path)
    return exc


class ZkClient:
    """One ZooKeeper session, used from the event loop."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self.connect = connect
        self.hosts, self.chroot = split_connect(connect)
        if not self.hosts:
            raise ValueError(f"zookeeper.connect={connect!r} names no host")
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.state = SessionState.CLOSED
        self.session_id: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._subscribers: list[EventSink] = []
        self._closing = False
        # start/stop join kazoo's threads: run them here, never on the default executor
        self._lifecycle = concurrent.futures.ThreadPoolExecutor(1, "zk-lifecycle")

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ZkClient:
        """A client for zookeeper.connect with zookeeper.session.timeout.ms and
        zookeeper.connection.timeout.ms (which defaults to the session timeout)."""
        return cls(
            config.get("zookeeper.connect"),
            session_timeout_ms=config.get_int("zookeeper.session.timeout.ms", 18000) or 18000,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
        )

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect; log "waiting for ZooKeeper" once if it is slow to answer, and give up
        with `ZkConnectTimeoutError` after zookeeper.connection.timeout.ms."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._client = KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout_ms / 1000,
            # reconnect promptly (kazoo's default backs off up to a minute)
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            logger=_KAZOO_LOG,
        )
        self._client.add_listener(self._on_state)
        started = time.monotonic()
        live = await loop.run_in_executor(self._lifecycle, self._client.start_async)
        said = False
        while not live.is_set():
            waited = time.monotonic() - started
            if not said and waited >= 1.0:
                log.warning(
                    "waiting for ZooKeeper at %s (zookeeper.connect); giving up after %d ms "
                    "(zookeeper.connection.timeout.ms)",
                    self.connect,
                    self.connection_timeout_ms,
                )
                said = True
            if waited * 1000 >= self.connection_timeout_ms:
                self._closing = True
                await self._stop_client()
                self._lifecycle.shutdown(wait=False)
                raise ZkConnectTimeoutError(
                    f"Timed out waiting for connection to ZooKeeper at {self.hosts} while in "
                    f"state: CONNECTING (zookeeper.connection.timeout.ms="
                    f"{self.connection_timeout_ms}): is ZooKeeper running there?"
                )
            await asyncio.sleep(0.05)
        # the listener's CONNECTED reaches the loop just after kazoo's event: wait for it,
        # so `state` and `session_id` are right when start() returns
        await self.wait_connected(self.connection_timeout_ms / 1000)
        if self.chroot:
            # Kafka creates a missing chroot before using it; kazoo would only warn.
            await self._bridge(self._client.ensure_path_async(self.chroot), self.chroot)
            self._client.chroot = self.chroot
        log.info("connected to ZooKeeper at %s (session 0x%x)", self.connect, self._sid())

    async def close(self) -> None:
        """End the session (its ephemeral znodes go at once) and free the threads."""
        if self._client is None or self._closing:
            return
        self._closing = True
        await self._stop_client()
        self._set_state(SessionEvent(SessionState.CLOSED, None))
        self._lifecycle.shutdown(wait=False)

    async def _stop_client(self) -> None:
        client = self._client

        def stop() -> None:
            try:
                client.stop()
            finally:
                client.close()

        assert self._loop is not None
        await self._loop.run_in_executor(self._lifecycle, stop)

    def _sid(self) -> int:
        cid = self._client.client_id if self._client is not None else None
        return int(cid[0]) if cid else 0

    @property
    def connected(self) -> bool:
        return self.state is SessionState.CONNECTED

    # -- events -------------------------------------------------------------------------

    def subscribe(self, sink: EventSink) -> None:
        """Send every `SessionEvent` to `sink` from now on."""
        self._subscribers.append(sink)

    def unsubscribe(self, sink: EventSink) -> None:
        self._subscribers = [s for s in self._subscribers if s is not sink]

    def watch(self, sink: EventSink, tag: Hashable) -> Watch:
        return Watch(self, sink, tag)

    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        """From a kazoo thread: run `fn(*args)` on the loop, or drop it if the loop is gone."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # closed between the check and the call
            pass

    def _post(self, sink: EventSink, event: Any) -> None:
        self._call_soon(sink.put_nowait, event)

    def _on_state(self, state: Any) -> None:  # kazoo's connection thread: never block
        sid = None
        if state == KazooState.CONNECTED:
            cid = self._client.client_id
            sid = int(cid[0]) if cid else None
        self._call_soon(self._set_state, SessionEvent(SessionState(str(state)), sid))

    def _set_state(self, event: SessionEvent) -> None:  # on the loop
        if self._closing and event.state is not SessionState.CLOSED:
            return
        before, self.state = self.state, event.state
        if event.state is SessionState.CONNECTED:
            if before is not SessionState.CLOSED:
                log.warning("ZooKeeper connection back (session 0x%x)", event.session_id or 0)
            self.session_id = event.session_id
        elif event.state is SessionState.SUSPENDED:
            log.warning(
                "ZooKeeper connection lost (session 0x%x): pausing ZooKeeper writes until "
                "it comes back or the session expires (%d ms)",
                self.session_id or 0,
                self.session_timeout_ms,
            )
        elif event.state is SessionState.LOST:
            log.error(
                "ZooKeeper session 0x%x expired: its registrations and watches are gone",
                self.session_id or 0,
            )
            self.session_id = None
        for sink in list(self._subscribers):
            sink.put_nowait(event)

    # -- operations ---------------------------------------------------------------------

    def _bridge(self, result: Any, path: str | None) -> asyncio.Future[Any]:
        loop = self._loop
        if loop is None or self._client is None:
            raise ZkClosedError("ZooKeeper client not started", path=path)
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(value: Any, error: BaseException | None) -> None:  # on the loop
            if fut.done():  # the caller gave up (cancelled)
                return
            if error is not None:
                fut.set_exception(_translate(error, path))
            else:
                fut.set_result(value)

        def done(res: Any) -> None:  # kazoo's callback thread
            try:
                value, error = res.get_nowait(), None
            except Exception as e:
                value, error = None, e
            self._call_soon(settle, value, error)

        result.rawlink(done)
        return fut

    def _kazoo(self) -> Any:
        if self._client is None or self._closing:
            raise ZkClosedError("ZooKeeper client closed")
        return self._client

    async def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, Stat]:
        data, stat = await self._bridge(self._kazoo().get_async(path, watch=watch), path)
        return bytes(data or b""), Stat.of(stat)

    async def get_or_none(self, path: str, watch: Watch | None = None) -> tuple[bytes, Stat] | None:
        """Data and stat, or None if absent. A watch is set either way (on creation if
        absent), since ZooKeeper sets no watch on a failed read."""
        while True:
            try:
                return await self.get(path, watch)
            except NoNodeError:
                if await self.exists(path, watch) is None:
                    return None
                # created in between: read it

    async def exists(self, path: str, watch: Watch | None = None) -> Stat | None:
        stat = await self._bridge(self._kazoo().exists_async(path, watch=watch), path)
        return None if stat is None else Stat.of(stat)

    async def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        children = await self._bridge(self._kazoo().get_children_async(path, watch=watch), path)
        return sorted(children)

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create a znode; returns its path (with the sequence number if `sequence`)."""
        result = self._kazoo().create_async(
            path, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath
        )
        return str(await self._bridge(result, path))

    async def create_with_stat(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, makepath: bool = False
    ) -> tuple[str, Stat]:
        """Create a znode and return its stat too (ZooKeeper's create2), e.g. its czxid."""
        result = self._kazoo().create_async(
            path, data, ephemeral=ephemeral, makepath=makepath, include_data=True
        )
        created, stat = await self._bridge(result, path)
        return str(created), Stat.of(stat)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        """Write `data`, only if the znode is at `version` (-1: any)."""
        stat = await self._bridge(self._kazoo().set_async(path, data, version), path)
        return Stat.of(stat)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        if recursive:
            for child in await self.get_children(path):
                try:
                    await self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
                except NoNodeError:
                    pass
        await self._bridge(self._kazoo().delete_async(path, version), path)

    async def ensure_path(self, path: str) -> None:
        """Create `path` and its parents if missing (persistent, empty)."""
        await self._bridge(self._kazoo().ensure_path_async(path), path)

    async def transaction(self, ops: Sequence[ZkOp]) -> list[Stat | str | bool]:
        """Apply `ops` atomically. On failure raises the typed error of the operation
        that failed, with `op_index` set; nothing was applied."""
        client = self._kazoo()
        tx = client.transaction()
        for op in ops:
            if isinstance(op, Check):
                tx.check(op.path, op.version)
            elif isinstance(op, Create):
                tx.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
            elif isinstance(op, SetData):
                tx.set_data(op.path, op.data, op.version)
            elif isinstance(op, Delete):
                tx.delete(op.path, op.version)
        results = await self._bridge(tx.commit_async(), "multi")
        failure: BaseException | None = None
        for i, res in enumerate(results):
            if isinstance(res, Exception) and not isinstance(res, kz.RolledBackError):
                failure = _translate(res, ops[i].path)
                if isinstance(failure, ZkError):
                    failure.op_index = i
                break
        if failure is None and any(isinstance(r, Exception) for r in results):
            failure = ZkError("transaction rolled back", path=ops[0].path if ops else None)
        if failure is not None:
            raise failure
        out: list[Stat | str | bool] = []
        for res in results:
            if isinstance(res, str):
                out.append(client.unchroot(res))
            elif isinstance(res, tuple):
                out.append(Stat.of(res))
            else:
                out.append(bool(res))
        return out

    async def wait_connected(self, timeout: float | None = None) -> bool:
        """Wait until the session is CONNECTED (True) or `timeout` seconds pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.state is not SessionState.CONNECTED:
            if self._closing or (deadline is not None and time.monotonic() >= deadline):
                return False
            await asyncio.sleep(0.05)
        return True
