"""A broker joining the cluster: cluster id, data directory check, `/brokers/ids/<id>`.

Order at start (the broker calls these; Kafka's KafkaServer.startup does the same):
1. `ensure_persistent_paths` - Kafka's top-level znodes exist;
2. `get_or_create_cluster_id` - read /cluster/id, or create it (first broker ever);
3. `check_data_dir_cluster_id` - before the log directory is loaded: a data directory
   whose meta.properties names another cluster is refused (InconsistentClusterIdError);
4. `BrokerRegistrar.start` - the ephemeral /brokers/ids/<broker.id>. Its czxid is the
   broker epoch. Another live session holding the id is refused with Kafka's message
   (DuplicateBrokerIdError: log it once and exit non-zero). When the session expires
   the registrar re-registers on the new session: a new epoch, reported to `on_epoch`.

Unlike Kafka, a registration with exactly our endpoints (our own previous incarnation,
killed less than a session timeout ago) is waited out instead of refused, so a broker
restarted after kill -9 comes back without an operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from tidegate.common.config import BrokerConfig
from tidegate.common.listeners import parse_protocol_map
from tidegate.replication.znodes import (
    CLUSTER_ID,
    PERSISTENT_PATHS,
    BrokerEndpoint,
    BrokerInfo,
    MalformedZnodeError,
    broker_path,
)
from tidegate.replication.znodes_admin import decode_cluster_id, encode_cluster_id
from tidegate.server.cluster.errors import (
    ConnectionLossError,
    DuplicateBrokerIdError,
    NodeExistsError,
    ZkError,
)
from tidegate.server.cluster.zk import SessionEvent, SessionState, WatchEvent, ZkClient
from tidegate.storage.errors import InconsistentClusterIdError
from tidegate.storage.files import kafka_uuid, read_properties
from tidegate.storage.log_manager import META_PROPERTIES

__all__ = [
    "BrokerRegistrar",
    "broker_info_from_config",
    "check_data_dir_cluster_id",
    "ensure_persistent_paths",
    "get_or_create_cluster_id",
]

log = logging.getLogger(__name__)


async def ensure_persistent_paths(zk: ZkClient) -> None:
    for path in PERSISTENT_PATHS:
        await zk.ensure_path(path)


async def get_or_create_cluster_id(zk: ZkClient, proposed: str | None = None) -> str:
    """The cluster's id from /cluster/id; the first broker creates it (from `proposed`,
    e.g. a configured cluster.id, else a new base64 UUID, as Kafka generates)."""
    got = await zk.get_or_none(CLUSTER_ID)
    if got is None:
        new = proposed or kafka_uuid(uuid.uuid4())
        try:
            await zk.create(CLUSTER_ID, encode_cluster_id(new), makepath=True)
            log.info("created cluster id %s in ZooKeeper (%s)", new, CLUSTER_ID)
            return new
        except NodeExistsError:  # another broker won the race
            got = await zk.get(CLUSTER_ID)
    return decode_cluster_id(got[0])


def check_data_dir_cluster_id(log_dir: Path, cluster_id: str) -> None:
    """Refuse a data directory that belongs to another cluster (call before loading it).
    A directory without meta.properties is new and will be stamped with `cluster_id`."""
    props = read_properties(log_dir / META_PROPERTIES)
    stored = (props or {}).get("cluster.id", "")
    if stored and stored != cluster_id:
        raise InconsistentClusterIdError(
            f"The Cluster ID {cluster_id} doesn't match stored clusterId Some({stored}) in "
            f"meta.properties ({log_dir / META_PROPERTIES}). The broker is trying to join the "
            "wrong cluster. Configured zookeeper.connect may be wrong."
        )


def broker_info_from_config(config: BrokerConfig, timestamp_ms: int) -> BrokerInfo:
    """This broker's registration: its advertised listeners, their protocols, its rack."""
    protocols = parse_protocol_map(config.get("listener.security.protocol.map"))
    endpoints = tuple(
        BrokerEndpoint(lis.name, lis.host, lis.port, protocols.get(lis.name, lis.name))
        for lis in config.advertised_listeners()
    )
    rack = config.get("broker.rack").strip() or None
    return BrokerInfo(config.node_id, endpoints, rack, timestamp_ms=timestamp_ms)


class BrokerRegistrar:
    """Keeps /brokers/ids/<id> registered for this broker's lifetime."""

    def __init__(
        self,
        zk: ZkClient,
        info: Callable[[], BrokerInfo],
        *,
        on_epoch: Callable[[int], None] | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.zk = zk
        self._info = info
        self._on_epoch = on_epoch
        self._on_fatal = on_fatal
        self.broker_epoch = -1
        self._events: asyncio.Queue[object] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    @property
    def broker_id(self) -> int:
        return self._info().broker_id

    async def start(self) -> int:
        """Register (raising DuplicateBrokerIdError if the id is taken) and keep the
        registration alive across session expiry. Returns the broker epoch."""
        epoch = await self.register()
        self.zk.subscribe(self._events)
        self._task = asyncio.create_task(self._run(), name="broker-registration")
        return epoch

    async def stop(self) -> None:
        self.zk.unsubscribe(self._events)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def register(self) -> int:
        info = self._info()
        path = broker_path(info.broker_id)
        data = info.encode()
        deadline = time.monotonic() + self.zk.session_timeout_ms / 1000 + 2.0
        waiting_said = False
        while True:
            try:
                _, stat = await self.zk.create_with_stat(path, data, ephemeral=True)
                return self._registered(stat.czxid, info)
            except ConnectionLossError:
                # the create may have gone through: the NodeExists branch will tell
                await self.zk.wait_connected()
                continue
            except NodeExistsError:
                pass
            got = await self.zk.get_or_none(path)
            if got is None:
                continue
            raw, stat = got
            session = self.zk.session_id or 0
            if stat.ephemeral_owner == session:  # ours, from before a connection loss
                return self._registered(stat.czxid, info)
            try:
                theirs = BrokerInfo.decode(info.broker_id, raw)
                ours_again = set(theirs.endpoints) == set(info.endpoints)
            except MalformedZnodeError:
                ours_again = False
            if not ours_again or time.monotonic() >= deadline:
                raise DuplicateBrokerIdError(
                    f"Error while creating ephemeral at {path}, node already exists and owner "
                    f"'{stat.ephemeral_owner}' does not match current session '{session}': "
                    f"another broker is running with broker.id={info.broker_id}",
                    path=path,
                )
            if not waiting_said:
                log.warning(
                    "%s is still held by session 0x%x with our endpoints (this broker before "
                    "a crash?): waiting up to %d ms for that session to expire",
                    path,
                    stat.ephemeral_owner,
                    self.zk.session_timeout_ms,
                )
                waiting_said = True
            await self._wait_for(path, timeout=max(0.0, deadline - time.monotonic()))

    def _registered(self, czxid: int, info: BrokerInfo) -> int:
        self.broker_epoch = czxid
        log.info(
            "registered broker %d at %s (broker epoch %d): %s",
            info.broker_id,
            broker_path(info.broker_id),
            czxid,
            ", ".join(e.connection_string() for e in info.endpoints),
        )
        return czxid

    async def _wait_for(self, path: str, timeout: float) -> None:
        """Wait until `path` changes (its watch fires on our private queue) or `timeout`."""
        queue: asyncio.Queue[object] = asyncio.Queue()
        try:
            if await self.zk.exists(path, self.zk.watch(queue, ("stale", path))) is None:
                return
            await asyncio.wait_for(queue.get(), timeout=timeout)
        except (TimeoutError, ZkError):
            return

    async def _run(self) -> None:
        """Re-register after the session expired (new session, new epoch), or if our
        znode disappeared under a live session."""
        lost = False
        path = broker_path(self.broker_id)
        await self._arm(path)
        while True:
            event = await self._events.get()
            if isinstance(event, SessionEvent):
                if event.state is SessionState.CLOSED:
                    return
                if event.state is SessionState.LOST:
                    lost, self.broker_epoch = True, -1
                    continue
                if event.state is not SessionState.CONNECTED:
                    continue
                if not lost:  # same session after a connection loss: still registered
                    await self._arm(path)
                    continue
            elif isinstance(event, WatchEvent):
                if event.kind == "none":  # connection dropped: CONNECTED re-arms
                    continue
                if event.kind != "deleted":
                    await self._arm(path)
                    continue
                log.warning("%s was deleted under a live session: registering again", path)
            else:
                continue
            try:
                epoch = await self.register()
            except DuplicateBrokerIdError as e:
                log.error("%s", e)
                if self._on_fatal is not None:
                    self._on_fatal(e)
                return
            except ZkError as e:
                log.warning("registering %s again failed (%s); retrying when connected", path, e)
                continue
            lost = False
            await self._arm(path)
            if self._on_epoch is not None:
                self._on_epoch(epoch)

    async def _arm(self, path: str) -> None:
        with contextlib.suppress(ZkError):
            await self.zk.exists(path, self.zk.watch(self._events, ("registration", path)))
