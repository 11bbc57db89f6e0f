"""The replica manager: which partitions this broker hosts, and their high watermarks.

Every path to a partition's log for reading or writing on behalf of a client or a
coordinator goes through `leader(topic, partition, current_leader_epoch)`, which returns
the `Partition` (server/partition.py) if this broker leads it, else raises the error a
Kafka broker answers: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH.

It also owns the rule that moves each partition's high watermark, and the long-polling
fetches waiting for it to move:

- embedded broker: the in-sync replicas are this node alone, so the HW is the durable
  offset. With `log.flush.interval.messages=1` (the default) an append marks the log
  dirty for group commit (server/durability.py) and the HW moves when the fsync ends (a
  flush round's logs in one call, `_on_round_flushed`); under a relaxed flush policy it
  moves at once to the log end.
- cluster: the HW is the smallest log end among the in-sync replicas (Leadership).

Invariants: the HW of a partition never moves backwards while this broker leads it;
`wait_committed(p, offset)` returns only once the HW covers `offset`; a fetch waiting
in `wait_for_data` is woken by every HW move of a partition it waits on and by a
partition's removal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from tidegate.common.errors import (
    ErrorCode,
    KafkaError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)
from tidegate.server.durability import DurableWaiter, GroupCommit
from tidegate.server.flush_threads import Flushable
from tidegate.server.leadership import Leadership
from tidegate.server.partition import NO_EPOCH, NotLeaderOrFollowerError, Partition
from tidegate.storage.log import Log
from tidegate.storage.log_manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class ReplicaManager:
    def __init__(self, logs: LogManager, *, cluster: bool = False) -> None:
        self.logs = logs
        # cluster: a replica leads once the controller says so (`become_leader`); else all
        self.cluster = cluster
        # cluster: whether the cluster's metadata knows a partition (hosted here or not)
        self.exists: Callable[[str, int], bool] | None = None
        # cluster: told when a partition becomes leader, follower or goes (the fetchers)
        self.on_role_change: Callable[[Partition], None] | None = None
        # cluster: writes a leader's ISR change to ZooKeeper (server/cluster/isr.py)
        self.isr_writer: Callable[[Partition, tuple[int, ...]], None] | None = None
        self.group_commit = GroupCommit(self._on_flushed, on_round_flushed=self._on_round_flushed)
        self._partitions: dict[TopicPartition, Partition] = {}
        self._by_log: dict[int, Partition] = {}  # id(Log) -> its partition
        self._watchers: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    # -- finding partitions ----------------------------------------------------------

    def partition(self, topic: str, index: int) -> Partition | None:
        """The replica hosted here, leader or follower, or None."""
        tp = (topic, index)
        lg = self.logs.get_log(topic, index)
        part = self._partitions.get(tp)
        if lg is None:
            if part is not None:
                self._forget(part)
            return None
        if part is None or part.log is not lg:  # new, or the topic was re-created
            if part is not None:
                self._forget(part)
            part = Partition(topic, index, lg, self, is_leader=not self.cluster,
                             leader_epoch=-1 if self.cluster else 0, stamp_epoch=self.cluster)
            self._partitions[tp] = part
            self._by_log[id(lg)] = part
        return part

    def leader(
        self, topic: str, index: int, current_leader_epoch: int = NO_EPOCH
    ) -> Partition:
        """The partition if this broker leads it at `current_leader_epoch`; else raises."""
        part = self._partitions.get((topic, index))  # (`partition`, inline when known)
        if part is None or part.log is not self.logs.get_log(topic, index):
            part = self.partition(topic, index)
        if part is None:
            if self.logs.is_offline(topic, index):  # JBOD: its log dir failed
                raise KafkaStorageError(f"{topic}-{index} is in an offline log directory")
            if self.exists is not None and self.exists(topic, index):
                raise NotLeaderOrFollowerError(f"this broker holds no replica of {topic}-{index}")
            raise UnknownTopicOrPartitionError(f"this server does not host {topic}-{index}")
        if current_leader_epoch >= 0 or not part.is_leader:  # (once per Produce partition)
            part.check_leader(current_leader_epoch)
        return part

    def get_log(self, topic: str, index: int) -> Log | None:
        part = self.partition(topic, index)
        return None if part is None else part.log

    def partitions(self) -> Iterator[Partition]:
        for topic, index, _lg in self.logs.logs():
            part = self.partition(topic, index)
            if part is not None:
                yield part

    def load(self) -> None:
        """After the logs are loaded: the embedded HW starts at the log end (all of it
        was fsynced by recovery or a clean shutdown)."""
        if self.cluster:
            return  # HWs come from the checkpoint, then from the leaders (LogManager)
        for part in self.partitions():
            part.log.update_high_watermark(part.log.log_end_offset)

    # -- roles (cluster mode: server/cluster/node.py applies the controller's states) --

    def become_leader(
        self, topic: str, index: int, leader_epoch: int, *, replicas: Sequence[int] = (),
        isr: Sequence[int] = (), zk_version: int = 0, controller_epoch: int = 0,
    ) -> Partition | None:
        """Lead `topic`-`index` from `leader_epoch` on (the replica must exist here). The
        same epoch again with a newer state znode version is an ISR change."""
        part = self.partition(topic, index)
        if part is None:
            return None
        lead = part.leadership
        if self.cluster and leader_epoch < part.leader_epoch:
            return part  # a stale state read after a newer one: ignore it
        if part.is_leader and part.leader_epoch == leader_epoch:
            if lead is not None:
                lead.committed_isr(isr, zk_version)
            return part
        if (part.is_leader and lead is not None and self.logs.node_id in isr
                and leader_epoch > part.leader_epoch):
            # Still leader at a newer epoch (the ISR or the replicas changed): followers
            # keep their positions, acks=all waiters keep waiting (Kafka's makeLeader)
            part.leader_epoch = leader_epoch
            part.log.assign_leader_epoch(leader_epoch)
            lead.renew(leader_epoch=leader_epoch, replicas=replicas or (self.logs.node_id,),
                       isr=isr, zk_version=zk_version, controller_epoch=controller_epoch)
            log.info("%s-%d: still leader, now at epoch %d, ISR %s", topic, index,
                     leader_epoch, list(isr))
            self._notify(part.tp)
            if self.on_role_change is not None:
                self.on_role_change(part)
            return part
        was = "leader" if part.is_leader else "follower"
        if lead is not None:
            lead.resign()
        part.is_leader = True
        part.leader_epoch = leader_epoch
        part.leader_id = self.logs.node_id
        if self.cluster:
            lg = part.log
            lg.assign_leader_epoch(leader_epoch)
            part.leadership = Leadership(
                lg, self.logs.clock, leader_id=self.logs.node_id, leader_epoch=leader_epoch,
                replicas=replicas or (self.logs.node_id,), isr=isr or (self.logs.node_id,),
                zk_version=zk_version, controller_epoch=controller_epoch,
                durable_position=lg.syncs_every_write)
        log.info("%s-%d: now leader at epoch %d (was %s), ISR %s", topic, index, leader_epoch,
                 was, list(isr))
        self._notify(part.tp)  # fetches waiting as the old role must re-check
        if self.on_role_change is not None:
            self.on_role_change(part)
        return part

    def become_follower(self, topic: str, index: int, leader: int,
                        leader_epoch: int) -> Partition | None:
        part = self.partition(topic, index)
        if part is None:
            return None
        if leader_epoch < part.leader_epoch or (
                not part.is_leader and part.leader_epoch == leader_epoch
                and part.leader_id == leader):
            return part  # stale, or nothing new
        if part.is_leader:
            log.info("%s-%d: leader -> follower of %d at epoch %d", topic, index, leader,
                     leader_epoch)
        if part.leadership is not None:
            part.leadership.resign()
            part.leadership = None
        part.is_leader = False
        part.leader_epoch = leader_epoch
        part.leader_id = leader
        self._notify(part.tp)
        if self.on_role_change is not None:
            self.on_role_change(part)
        return part

    def stop_replica(self, topic: str, index: int) -> Path | None:
        """This broker no longer holds `topic`-`index`: drop it. Its directory is only
        renamed here; the caller removes it (`remove_deleted_dir`) off the event loop."""
        part = self._partitions.get((topic, index))
        if part is not None:
            part.is_leader = False
            if part.leadership is not None:
                part.leadership.resign()
                part.leadership = None
            if self.on_role_change is not None:
                self.on_role_change(part)
            self._forget(part)
        self._notify((topic, index))
        return self.logs.remove_replica(topic, index)

    def forget_topic(self, topic: str, partitions: int) -> None:
        """Before a topic's logs are deleted: stop flushing them, wake their fetches."""
        for index in range(partitions):
            part = self._partitions.get((topic, index))
            if part is not None:
                self._forget(part)
            self._notify((topic, index))

    def _forget(self, part: Partition) -> None:
        self.group_commit.forget(part.log)
        self._by_log.pop(id(part.log), None)
        if self._partitions.get(part.tp) is part:
            del self._partitions[part.tp]

    # -- the high watermark ---------------------------------------------------------

    def after_append(self, part: Partition, *, moved_hw: bool = False) -> None:
        """After an append: the HW now, or once fsynced; `moved_hw`: the append moved it."""
        lg = part.log
        self._by_log[id(lg)] = part
        if moved_hw:
            if self._watchers:  # as `_advance_hw` after a move
                self._notify(part.tp)
        elif lg.syncs_every_write:
            self.group_commit.mark_dirty(lg)
        else:
            self._advance_hw(lg, lg.log_end_offset)
        if part.leadership is not None:
            self._notify(part.tp)  # followers long-poll for appends, not HW moves

    async def wait_durable(self, lg: Log, offset: int) -> None:
        """Return once `lg` is durable up to `offset` and the high watermark covers it
        (in a cluster: committed over the ISR, as acks=all; see `wait_committed`)."""
        part = self._by_log.get(id(lg)) if self.cluster else None
        if part is not None and part.leadership is not None:
            code = await self.wait_committed(part, offset)
            if code != ErrorCode.none:
                raise KafkaError(f"{part.topic}-{part.index}: {code.name}", code=code)
            return
        if lg.syncs_every_write:
            await self.group_commit.wait_durable(lg, offset)
            # the flusher's move of the HW may not have run yet: not answered before it
            self._advance_hw(lg, lg.recovery_point)

    def durable_future(self, lg: Log, offset: int) -> asyncio.Future[None] | None:
        """`wait_durable` without a Task (one node, `syncs_every_write`: the caller
        checks both): None if durable already (the high watermark moved here)."""
        fut = self.group_commit.durable_future(lg, offset)
        if fut is None:
            self._advance_hw(lg, lg.recovery_point)  # as in `wait_durable`
        return fut

    def add_durable_waits(self, waiter: DurableWaiter, waits: Sequence[tuple[Log, int]]) -> None:
        """`durable_future` for a request's (log, offset) pairs, counted in `waiter` (a
        failed fsync of `waits[i]`'s log lands in `waiter.errors[i]`) unless durable."""
        add = self.group_commit.add_waiter
        for slot, (lg, offset) in enumerate(waits):
            if not add(waiter, slot, lg, offset):
                self._advance_hw(lg, lg.recovery_point)  # as in `durable_future`

    async def wait_committed(self, part: Partition, offset: int,
                             timeout: float | None = None) -> ErrorCode:
        """acks=all: durable here, then (cluster) the HW over the ISR past `offset`. The
        error to answer: NONE, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND;
        raises NOT_LEADER_OR_FOLLOWER if leadership moved meanwhile."""
        await self.wait_local_durable(part.log, offset)
        lead = part.leadership
        if lead is None:
            if self.cluster and not part.is_leader:
                raise NotLeaderOrFollowerError(f"leadership of {part.topic}-{part.index} moved")
            return ErrorCode.none
        return await lead.wait_high_watermark(offset, timeout)

    async def wait_local_durable(self, lg: Log, offset: int) -> None:
        """Durable in this broker's log (acks=1 in a cluster; a follower's fetched data)."""
        if lg.syncs_every_write:
            await self.group_commit.wait_durable(lg, offset)
            part = self._by_log.get(id(lg))
            if part is None or part.leadership is None:
                if not self.cluster:
                    self._advance_hw(lg, lg.recovery_point)
            else:
                part.leadership.on_leader_progress()

    def _on_flushed(self, target: Flushable, recovery_point: int) -> None:
        if isinstance(target, Log) and target.syncs_every_write:
            self._advance_hw(target, recovery_point)

    def _on_round_flushed(self, targets: Sequence[Flushable]) -> None:
        """`_on_flushed(target, target.recovery_point)` for a flush round's logs."""
        if self.cluster:
            for target in targets:
                self._on_flushed(target, target.recovery_point)
            return
        moved = Log.advance_to_recovery_points(targets)
        for part in (self._by_log.get(id(lg)) for lg in moved) if self._watchers else ():
            if part is not None:
                self._notify(part.tp)

    def _advance_hw(self, lg: Log, hw: int) -> None:
        if self.cluster:
            # a leader's HW is the ISR's (Leadership); a follower's comes from its leader
            part = self._by_log.get(id(lg))
            if (part is not None and part.leadership is not None
                    and part.leadership.on_leader_progress()):
                self._notify(part.tp)
        # clamps to the log end; also moves the LSO. No fetch long-polling: nothing to wake
        elif lg.update_high_watermark(hw) and self._watchers:
            part = self._by_log.get(id(lg))
            if part is not None:
                self._notify(part.tp)

    # -- ISR changes (cluster) --------------------------------------------------------

    def propose_isr_expansion(self, part: Partition, replica_id: int) -> None:
        lead = part.leadership
        if lead is None or self.isr_writer is None:
            return
        new = lead.expansion_for(replica_id)
        if new is not None:
            self._write_isr(part, new)

    def propose_isr_shrinks(self, lag_time_ms: int) -> None:
        """The periodic check (every replica.lag.time.max.ms / 2): drop followers that
        have not caught up for `lag_time_ms` from the ISR of every partition led here."""
        if self.isr_writer is None:
            return
        for part in list(self._partitions.values()):
            lead = part.leadership
            if lead is None:
                continue
            new = lead.shrink_proposal(lag_time_ms)
            if new is not None:
                log.info("%s-%d: shrinking the ISR from %s to %s (followers behind for "
                         "more than %d ms)", part.topic, part.index, list(lead.state.isr),
                         list(new), lag_time_ms)
                self._write_isr(part, new)

    def _write_isr(self, part: Partition, new: tuple[int, ...]) -> None:
        lead = part.leadership
        assert lead is not None and self.isr_writer is not None
        lead.state.begin_isr_change(new)
        lead.isr_write_running = True
        self.isr_writer(part, new)

    def isr_written(self, part: Partition, isr: tuple[int, ...], zk_version: int | None) -> None:
        """The ISR writer's answer: the new znode version, or None if the conditional
        write failed (the metadata watcher brings the new state)."""
        lead = part.leadership
        if lead is None:
            return
        lead.isr_write_running = False
        if zk_version is None:
            lead.state.abort_isr_change()
        else:
            lead.committed_isr(isr, zk_version)
            self._notify(part.tp)

    def notify(self, tp: TopicPartition) -> None:
        """Wake fetches waiting on `tp` (a follower's HW moved, a role changed)."""
        self._notify(tp)

    # -- fetch wake-ups --------------------------------------------------------------

    def _notify(self, tp: TopicPartition) -> None:
        for fut in self._watchers.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

    @property
    def waiting_fetches(self) -> int:
        """Fetches long-polling for data (the metrics' fetch purgatory size)."""
        return len({id(f) for futs in self._watchers.values() for f in futs})

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout: float) -> None:
        """Sleep until one of `tps` gets new committed data, or `timeout` seconds."""
        if timeout <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(tps)
        for tp in keys:
            self._watchers.setdefault(tp, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            for tp in keys:
                watchers = self._watchers.get(tp)
                if watchers is not None:
                    watchers.discard(fut)
                    if not watchers:
                        del self._watchers[tp]
