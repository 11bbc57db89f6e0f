"""Loading and reloading the partitions of a `CoordinatorShell`.

- `start()` creates the internal topic if missing (compacted) and replays every
  partition in a worker thread, one by one, publishing each shard back on the event
  loop; the broker starts listening after that. In cluster mode shards instead load and
  unload with the leadership of the topic's partitions (`on_leadership`), and the topic
  is created on the first FindCoordinator (`ensure_topic`).
- a write that failed (`_reload`) marks the partition failed and reloads it from its
  log, once, paced by `Reloads` (server/coordinator_reload.py); parked requests on it get
  NOT_COORDINATOR meanwhile. A load that fails is retried the same way.
- what a load replayed is reported to `on_durable` once the log is fsynced to its end.

Threading: a mixin of the shell (on `ShellFinishing`, whose state it shares). Runs on
the event loop; only the replay itself (`CoordinatorRuntime.load`) runs in a worker
thread, and its shard is published back on the loop — and only if the partition is
still led under the epoch the load began with.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TypeVar

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.runtime import NotCoordinatorError, PartitionState, Shard
from tidegate.server.coordinator_finish import ShellFinishing
from tidegate.server.coordinator_timer import DeadlineTimer
from tidegate.storage.disk_space import disk_full_error
from tidegate.storage.log import Log

__all__ = ["ShellLoading"]

# the shell's logger: its lines keep the name they had before the split
log = logging.getLogger("tidegate.server.coordinator")

S = TypeVar("S", bound=Shard)


class ShellLoading(ShellFinishing[S]):
    topic_configs: dict[str, str]
    started: bool
    _tasks: list[asyncio.Task[None]]
    _timer: DeadlineTimer[S]
    _load_errors: set[int]  # partitions whose load failure was logged
    _said_cannot_create: bool

    async def start(self) -> None:
        if self.broker.replicas.cluster:
            # Cluster: shards load and unload with the leadership of the topic's
            # partitions (`on_leadership`); the topic is created in ZooKeeper on the
            # first FindCoordinator (`ensure_topic`), as Kafka does.
            self.started = True
            self._tasks.append(self._timer.start())
            return
        meta = self.broker.logs.topics.get(self.topic)
        if meta is None:
            self.broker.create_topic(self.topic, self.runtime.num_partitions, self.topic_configs)
        else:
            self.runtime.num_partitions = meta.partitions  # fixed once created, as in Kafka
        for p in range(self.runtime.num_partitions):
            lg = self.broker.get_log(self.topic, p)
            assert lg is not None
            self.runtime.begin_load(p, lg)
        # The first load completes before the broker listens (an embedded node would
        # otherwise answer COORDINATOR_LOAD_IN_PROGRESS, which some tools do not retry);
        # it runs in a worker thread, partition by partition.
        await self._load(list(range(self.runtime.num_partitions)))
        self.started = True
        self._tasks.append(self._timer.start())

    # -- cluster mode: shards follow the leadership of the topic's partitions -----------

    def on_leadership(self, partition: int, leader_epoch: int | None) -> None:
        """This broker now leads `partition` at `leader_epoch` (load its shard, writes
        stamped with that epoch), or no longer does (None: unload it; its requests get
        NOT_COORDINATOR and clients find the new coordinator)."""
        if leader_epoch is None:
            if self.runtime.state(partition) is not None:
                log.info("%s-%d: no longer leader; unloading its coordinator shard",
                         self.topic, partition)
            self.runtime.leader_epochs.pop(partition, None)
            self.runtime.unload(partition)
            self._durable.pop(partition, None)
            self._fail_parked(partition, NotCoordinatorError(
                f"{self.topic}-{partition} moved to another broker"))
            return
        if self.runtime.leader_epochs.get(partition) == leader_epoch:
            return
        if (partition in self.runtime.leader_epochs
                and self.runtime.state(partition) is PartitionState.ACTIVE):
            # still leader, at a newer epoch (never unloaded in between): the shard is
            # current; only its writes' stamp changes
            self.runtime.leader_epochs[partition] = leader_epoch
            return
        self.runtime.leader_epochs[partition] = leader_epoch
        log.info("%s-%d: leader at epoch %d; loading its coordinator shard", self.topic,
                 partition, leader_epoch)
        self._spawn_load([partition])

    async def ensure_topic(self, factor: int, factor_key: str) -> bool:
        """Cluster mode: create the internal topic through the broker's topic admin if it
        is missing, with `factor` replicas (Kafka creates it on the first FindCoordinator);
        keep the runtime's partition count equal to the topic's. False while it does not
        exist yet (being created; or fewer live brokers than `factor`: logged once, naming
        `factor_key`)."""
        view = self.broker.metadata.topic(self.topic)
        if view is not None:
            self.runtime.num_partitions = len(view.partitions)  # fixed once created
            return True
        try:
            await self.broker.topic_admin.create_topic(
                self.topic, self.runtime.num_partitions, factor, None, self.topic_configs,
                validate_only=False)
            log.info("created %s (%d partitions, replication factor %d)", self.topic,
                     self.runtime.num_partitions, factor)
        except KafkaError as e:
            if e.code != ErrorCode.topic_already_exists and not self._said_cannot_create:
                self._said_cannot_create = True  # being created: shown in a moment
                log.warning("cannot create %s yet: %s (set %s to at most the number of "
                            "brokers, or start more brokers)", self.topic, e, factor_key)
        return False

    def _still_leading(self, partition: int, epoch: int | None) -> bool:
        """Cluster: the load began under `epoch` and the partition is still led under it
        (a load that outlived its leadership must not publish)."""
        if not self.broker.replicas.cluster:
            return True
        return epoch is not None and self.runtime.leader_epochs.get(partition) == epoch

    # -- loads ----------------------------------------------------------------------------

    def _spawn_load(self, partitions: Iterable[int]) -> None:
        task = asyncio.create_task(self._load(list(partitions)))
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)

    async def _load(self, partitions: list[int], *, reload: bool = False) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        total = 0
        # reloads while the disk is full may repeat: the directory's one line says it
        quiet = reload and self.broker.logs.space.full
        for p in partitions:
            lg = self.broker.get_log(self.topic, p)
            if lg is None:
                continue
            epoch = self.runtime.leader_epochs.get(p)
            if self.broker.replicas.cluster and epoch is None:
                continue  # not led here (any more): e.g. a reload scheduled before a move
            self.runtime.begin_load(p, lg)
            t0 = time.monotonic()
            try:
                shard, stats = await loop.run_in_executor(None, self.runtime.load, p, lg)
            except Exception as e:
                self.runtime.fail(p)
                full = disk_full_error(e) is not None
                if full:
                    self.broker.logs.space.write_failed(e, f"loading {self.topic}-{p}")
                elif p not in self._load_errors:
                    self._load_errors.add(p)
                    log.exception("cannot load %s-%d; retrying", self.topic, p)
                self._reloads.schedule(p, wait_for_space=full)
                continue
            self._load_errors.discard(p)
            if not self._still_leading(p, epoch):
                # leadership moved while loading: the new leader loads it. If it left
                # this broker, the partition must not stay LOADING here: clients retry
                # COORDINATOR_LOAD_IN_PROGRESS on the same broker, NOT_COORDINATOR sends
                # them to the new one.
                if p not in self.runtime.leader_epochs:
                    self.runtime.unload(p)
                continue
            self.runtime.publish(p, lg, shard)
            self._durable.pop(p, None)
            self._after_load(p, lg, stats.end_offset)
            total += stats.records
            if reload:
                log.log(logging.DEBUG if quiet else logging.INFO,
                        "reloaded %s-%d: %d records in %.2f s", self.topic, p,
                        stats.records, time.monotonic() - t0)
            elif stats.records:
                log.info("loaded %s-%d: %d records in %.2f s", self.topic, p, stats.records,
                         time.monotonic() - t0)
        if not reload:
            log.info("%s: %d partitions loaded (%d records) in %.2f s", self.topic,
                     len(partitions), total, time.monotonic() - started)

    def _after_load(self, partition: int, lg: Log, end_offset: int) -> None:
        """Loaded timers may be due earlier than the timer task's wake-up; and what was
        loaded is reported to `on_durable` once durable (retried while the flush fails,
        e.g. on a full disk, as long as this load is the partition's)."""
        self._timer.maybe_wake(partition)
        if self.on_durable is None:
            return
        shard = self.runtime.shard(partition)

        async def report() -> None:
            delay = 0.05
            while True:
                try:
                    await self._make_durable(lg, end_offset)
                    break
                except Exception as e:
                    if not self._is_loaded(partition, shard):
                        return
                    if disk_full_error(e) is not None:
                        self.broker.logs.space.write_failed(
                            e, f"flushing {self.topic}-{partition}")
                    elif delay == 0.05:
                        log.warning("%s-%d: loaded records not durable yet: %s", self.topic,
                                    partition, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            if self._is_loaded(partition, shard):
                self._report_durable(partition, end_offset)

        self._background(report())

    def _is_loaded(self, partition: int, shard: S) -> bool:
        """`shard` is still the partition's active shard (no reload since)."""
        if self.runtime.state(partition) is not PartitionState.ACTIVE:
            return False
        try:
            return self.runtime.shard(partition) is shard
        except KafkaError:
            return False

    def _reload(self, partition: int, why: BaseException, *, fail: bool = False) -> None:
        """A write to `partition` failed (`why`). A full disk is reported to the log
        directory (logged once there). If the runtime marked the partition failed, or
        `fail` (records were appended but could not be made durable), it is reloaded
        from its log, once: failures while a reload is pending add nothing (see
        `Reloads` for when); requests meanwhile get COORDINATOR_NOT_AVAILABLE.
        Otherwise (nothing was written, nothing changed) it keeps serving."""
        full = disk_full_error(why) is not None
        if full:
            self.broker.logs.space.write_failed(why, f"writing to {self.topic}-{partition}")
        if fail:
            self.runtime.fail(partition)
        if self.runtime.state(partition) is not PartitionState.FAILED:
            return
        self._fail_parked(partition, NotCoordinatorError(f"{self.topic}-{partition} reloads"))
        if partition in self._reloads.pending:
            return
        if not full and not self._reloads.failing(partition):
            log.error("%s-%d failed (%s); reloading it from its log", self.topic, partition,
                      why)
        self._reloads.schedule(partition, wait_for_space=full)

    async def _reload_now(self, partition: int) -> None:
        await self._load([partition], reload=True)
