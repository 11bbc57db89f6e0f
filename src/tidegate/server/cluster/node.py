"""A broker's membership of a ZooKeeper-coordinated cluster (`zookeeper.connect` set).

`ClusterNode` is what `BrokerApp` starts instead of nothing on the embedded broker:

1. `prepare()` — before the log directory is loaded: connect to ZooKeeper (waiting,
   with one log line, up to `zookeeper.connection.timeout.ms`), create Kafka's
   persistent paths, read or create `/cluster/id` and refuse a data directory stamped
   with another cluster's id.
2. `start()` — after the logs are loaded: register `/brokers/ids/<broker.id>`
   (a duplicate id is refused), take part in controller election, and follow the
   cluster's metadata (`MetadataWatcher`), applying each partition change to the
   replica manager: a replica assigned here is opened (created if new), made leader or
   follower at the state's leader epoch; a replica no longer assigned here is deleted.
   Topic config changes (/config/changes) reach the replicas held here through the
   `TopicConfigWatcher` (server/cluster/topic_configs.py).
3. `controlled_shutdown()` — before the listener closes: the controller moves this
   broker's leaderships away (server/cluster/shutdown.py).
4. `stop()` — resign as controller, deregister, close the session.

Leadership is applied only from state znodes (fenced by their leader epoch and znode
version); a broker never decides its own role.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.replication.znodes import NO_LEADER
from tidegate.server.cluster.controller import Controller
from tidegate.server.cluster.controller_ops import RebalanceSettings
from tidegate.server.cluster.errors import ZkError
from tidegate.server.cluster.fetcher import ReplicaFetcherManager
from tidegate.server.cluster.isr import IsrWriter
from tidegate.server.cluster.metadata import ClusterMetadata, MetadataWatcher, PartitionChange
from tidegate.server.cluster.registration import (
    BrokerRegistrar,
    broker_info_from_config,
    check_data_dir_cluster_id,
    ensure_persistent_paths,
    get_or_create_cluster_id,
)
from tidegate.server.cluster.shutdown import ControlledShutdown
from tidegate.server.cluster.topic_configs import TopicConfigWatcher, usable_topic_config
from tidegate.server.cluster.zk import ZkClient
from tidegate.server.partition import Partition
from tidegate.server.replica_manager import ReplicaManager
from tidegate.storage.log import remove_deleted_dir
from tidegate.storage.log_manager import LogManager

__all__ = ["ClusterNode", "ClusterStartError", "is_new_replica"]

log = logging.getLogger(__name__)


def is_new_replica(node_id: int, logs: LogManager, change: PartitionChange) -> bool:
    """Whether `change` gives broker `node_id` a replica it must open (create): assigned
    here, of a topic with an id, and no log here for the partition, or the log of an
    older topic of the same name (another id). The batch (`_open_new_replicas`) and the
    one-by-one path (`_apply_one`) both open exactly these."""
    if node_id not in change.assignment or change.topic_id is None:
        return False
    topic, index = change.tp
    return logs.get_log(topic, index) is None or logs.topics[topic].topic_id != change.topic_id


class ClusterStartError(KafkaError):
    """ZooKeeper unreachable, a duplicate broker.id, ...: the broker cannot start."""

    code = ErrorCode.broker_not_available


class ClusterNode:
    def __init__(self, config: BrokerConfig, on_fatal: Callable[[BaseException], None]) -> None:
        self.config = config
        self.node_id = config.node_id
        self.zk = ZkClient.from_config(config)
        self._on_fatal = on_fatal
        self.metadata: ClusterMetadata | None = None
        self.replicas: ReplicaManager | None = None
        self.registrar: BrokerRegistrar | None = None
        self.controller: Controller | None = None
        self.watcher: MetadataWatcher | None = None
        self.config_watcher: TopicConfigWatcher | None = None
        self.cluster_id = ""
        self.broker_epoch = -1
        self._lock = asyncio.Lock()  # one batch of partition changes at a time
        self.fetchers: ReplicaFetcherManager | None = None
        # internal topic -> its coordinator shell's `on_leadership` (set by BrokerApp)
        self.coordinator_shells: dict[str, Callable[[int, int | None], None]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def prepare(self) -> str:
        """Connect, then the cluster id (checked against the data directory)."""
        try:
            return await self._prepare()
        except ZkError as e:
            raise ClusterStartError(f"cannot join the cluster: {e}") from e

    async def _prepare(self) -> str:
        await self.zk.start()
        await ensure_persistent_paths(self.zk)
        proposed = self.config.get("cluster.id") or None
        self.cluster_id = await get_or_create_cluster_id(self.zk, proposed)
        check_data_dir_cluster_id(self.config.log_dir, self.cluster_id)
        return self.cluster_id

    def make_metadata(self) -> ClusterMetadata:
        listener = self.config.advertised_listeners()[0].name
        self.metadata = ClusterMetadata(self.node_id, listener, self.cluster_id)
        return self.metadata

    async def start(self, replicas: ReplicaManager) -> None:
        try:
            await self._start(replicas)
        except ZkError as e:
            raise ClusterStartError(f"cannot join the cluster: {e}") from e

    async def _start(self, replicas: ReplicaManager) -> None:
        assert self.metadata is not None, "make_metadata() first"
        self.replicas = replicas
        md = self.metadata
        replicas.exists = lambda t, p: (t in md.topics and p in md.topics[t].partitions)
        self.fetchers = ReplicaFetcherManager(self.config, replicas, md)
        replicas.on_role_change = self._on_role_change
        replicas.isr_writer = IsrWriter(self.zk, replicas)
        lag = self.config.get_int("replica.lag.time.max.ms", 30000) or 30000
        self._tasks.append(asyncio.create_task(self._shrink_isr_every(lag)))
        self.registrar = BrokerRegistrar(
            self.zk,
            lambda: broker_info_from_config(self.config, int(time.time() * 1000)),
            on_epoch=self._on_epoch,
            on_fatal=self._on_fatal,
        )
        self.broker_epoch = await self.registrar.start()
        log.info("registered broker %d in ZooKeeper (broker epoch %d)", self.node_id,
                 self.broker_epoch)
        self.controller = Controller(
            self.zk,
            self.node_id,
            unclean_leader_election=self.config.get_bool("unclean.leader.election.enable"),
            delete_topic_enable=self.config.get_bool("delete.topic.enable"),
            rebalance=RebalanceSettings.from_config(self.config),
        )
        await self.controller.start()
        self.watcher = MetadataWatcher(self.zk, self.metadata, self._apply)
        await self.watcher.start()
        await asyncio.wait_for(self.watcher.synced.wait(), 30)
        self.config_watcher = TopicConfigWatcher(self.zk, replicas.logs, self._lock)
        await self.config_watcher.start()

    def _on_role_change(self, part: Partition) -> None:
        """A replica became leader or follower, or went: the fetchers follow, and the
        coordinator shard of an internal topic's partition loads or unloads."""
        assert self.fetchers is not None
        self.fetchers.on_role_change(part)
        shells = self.coordinator_shells.get(part.topic)
        if shells is not None:
            here = self.replicas is not None and \
                self.replicas.partition(part.topic, part.index) is part
            shells(part.index, part.leader_epoch if part.is_leader and here else None)

    def _on_epoch(self, epoch: int) -> None:
        self.broker_epoch = epoch

    async def _shrink_isr_every(self, lag_ms: int) -> None:
        """Kafka's isr-expiration task: every replica.lag.time.max.ms / 2."""
        while True:
            await asyncio.sleep(lag_ms / 2000)
            if self.replicas is not None:
                self.replicas.propose_isr_shrinks(lag_ms)

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away (while the listener
        still serves); then stop following (see server/cluster/shutdown.py)."""
        fetchers, replicas, md = self.fetchers, self.replicas, self.metadata
        if fetchers is None or replicas is None or md is None or self.registrar is None:
            return  # never joined
        # Role changes still reach the fetchers and coordinators, but no partition is
        # fetched any more: fetching would put this broker back into the ISRs the
        # controller is taking it out of.
        applied = replicas.on_role_change

        def fetch_nothing_more(part: Partition) -> None:
            if applied is not None:
                applied(part)
            for fetcher in fetchers.fetchers.values():
                fetcher.remove(part)

        replicas.on_role_change = fetch_nothing_more
        await ControlledShutdown(self.config, md, self.zk, lambda: self.broker_epoch,
                                 fetchers.endpoint).run()
        await fetchers.stop()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.fetchers is not None:
            await self.fetchers.stop()
        if self.config_watcher is not None:
            await self.config_watcher.stop()
        if self.watcher is not None:
            await self.watcher.stop()
        if self.controller is not None:
            await self.controller.stop()
        if self.registrar is not None:
            await self.registrar.stop()
        await self.zk.close()

    # -- applying the controller's decisions --------------------------------------------

    async def _apply(self, changes: list[PartitionChange]) -> None:
        async with self._lock:
            try:
                await self._open_new_replicas(changes)
            except Exception as e:  # each is retried alone below, with its own error
                log.warning("opening %d new replicas at once failed (%s); one by one now",
                            len(changes), e)
            for change in changes:
                try:
                    await self._apply_one(change)
                except Exception:
                    log.exception("%s-%d: could not apply %s", *change.tp, change)

    def _remove_files(self, what: str, doomed: Path | None) -> None:
        """Remove a dropped replica's renamed directory in a worker thread: a large
        partition would stall the event loop for the length of the delete. Not waited
        for; a crash midway leaves a `-delete` directory the next start removes."""
        if doomed is None:
            return
        fut = asyncio.get_running_loop().run_in_executor(None, remove_deleted_dir, doomed)

        def done(f: asyncio.Future[None]) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.warning("%s: removing %s failed: %s", what, doomed, f.exception())

        fut.add_done_callback(done)

    async def _open_new_replicas(self, changes: list[PartitionChange]) -> None:
        """Open the replicas new here in one worker job per topic, side by side
        (`LogManager.ensure_replicas`), with one read of the topic's config: a new
        internal topic brings every broker 50 of them at once, and opened one after the
        other (each mostly fsyncs) they delayed the broker's leadership, and so its
        coordinators, by ~20 ms a partition. `_apply_one` then finds them open."""
        replicas, md = self.replicas, self.metadata
        assert replicas is not None and md is not None
        new: dict[str, list[PartitionChange]] = {}
        for change in changes:
            if is_new_replica(self.node_id, replicas.logs, change):
                new.setdefault(change.tp[0], []).append(change)
        reads = self.watcher.reads if self.watcher else None
        loop = asyncio.get_running_loop()
        for topic, todo in new.items():
            topic_id = todo[0].topic_id
            if len(todo) < 2 or topic not in md.topics or any(
                    c.topic_id != topic_id for c in todo):
                continue  # `_apply_one` opens it as ever
            assert topic_id is not None
            configs = {} if reads is None else usable_topic_config(
                topic, await reads.topic_config(topic), reads.say_once)
            partitions = len(md.topics[topic].partitions)
            indexes = [c.tp[1] for c in todo]
            await loop.run_in_executor(None, partial(
                replicas.logs.ensure_replicas, topic, topic_id, partitions, indexes, configs))

    async def _apply_one(self, change: PartitionChange) -> None:
        replicas = self.replicas
        assert replicas is not None and self.metadata is not None
        topic, index = change.tp
        if self.node_id not in change.assignment or change.topic_id is None:
            if replicas.logs.get_log(topic, index) is not None:
                log.info("%s-%d: no longer assigned here; deleting the replica", topic, index)
                self._remove_files(f"{topic}-{index}", replicas.stop_replica(topic, index))
            return
        if is_new_replica(self.node_id, replicas.logs, change):
            reads = self.watcher.reads if self.watcher else None
            configs = {} if reads is None else usable_topic_config(
                topic, await reads.topic_config(topic), reads.say_once)
            partitions = len(self.metadata.topics[topic].partitions)
            topic_id = change.topic_id
            # opening a log may run recovery: not on the event loop
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: replicas.logs.ensure_replica(
                    topic, topic_id, partitions, index, configs))
        state = change.state
        if state is None:
            return  # the controller has not written a state yet
        st = state.state
        if st.leader == self.node_id:
            replicas.become_leader(topic, index, st.leader_epoch, replicas=change.assignment,
                                   isr=st.isr, zk_version=state.zk_version,
                                   controller_epoch=st.controller_epoch)
        else:
            replicas.become_follower(topic, index, st.leader if st.leader != NO_LEADER else -1,
                                     st.leader_epoch)
