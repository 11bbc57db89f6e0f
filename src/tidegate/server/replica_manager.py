"""The replica manager: which partitions this broker hosts, and their high watermarks.

Every path to a partition's log for reading or writing on behalf of a client or a
coordinator goes through `leader(topic, partition, current_leader_epoch)`, which returns
the `Partition` (server/partition.py) if this broker leads it, else raises the error a
Kafka broker answers: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH.

It also owns the rule that moves each partition's high watermark, and the long-polling
fetches waiting for it to move:

- embedded broker (today's rule): the in-sync replicas are this node alone, so the
  high watermark is the durable offset. With `log.flush.interval.messages=1` (the
  default) an append marks the log dirty for group commit (server/durability.py) and
  the HW moves when the fsync ends; under a relaxed flush policy it moves at once to
  the log end.
- cluster (later): the HW is the smallest log end among the in-sync replicas
  (tidegate.replication), moved by follower fetches.

Invariants: the HW of a partition never moves backwards while this broker leads it;
`wait_committed(p, offset)` returns only once the HW covers `offset`; a fetch waiting
in `wait_for_data` is woken by every HW move of a partition it waits on and by a
partition's removal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator

from tidegate.common.errors import UnknownTopicOrPartitionError
from tidegate.server.durability import Flushable, GroupCommit
from tidegate.server.partition import NO_EPOCH, Partition
from tidegate.storage.log import Log
from tidegate.storage.log_manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class ReplicaManager:
    def __init__(self, logs: LogManager) -> None:
        self.logs = logs
        self.group_commit = GroupCommit(self._on_flushed)
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
            part = Partition(topic, index, lg, self)
            self._partitions[tp] = part
            self._by_log[id(lg)] = part
        return part

    def leader(
        self, topic: str, index: int, current_leader_epoch: int = NO_EPOCH
    ) -> Partition:
        """The partition if this broker leads it at `current_leader_epoch`; else raises."""
        part = self.partition(topic, index)
        if part is None:
            raise UnknownTopicOrPartitionError(
                f"this server does not host {topic}-{index}")
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
        for part in self.partitions():
            part.log.update_high_watermark(part.log.log_end_offset)

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

    @staticmethod
    def syncs_every_write(lg: Log) -> bool:
        return lg.config.flush_messages <= 1

    def after_append(self, part: Partition) -> None:
        """Called after each append: advance the HW now, or once the data is fsynced."""
        lg = part.log
        self._by_log[id(lg)] = part
        if self.syncs_every_write(lg):
            self.group_commit.mark_dirty(lg)
        else:
            self._advance_hw(lg, lg.log_end_offset)

    async def wait_durable(self, lg: Log, offset: int) -> None:
        """Return once `lg` is durable up to `offset` and the high watermark covers it."""
        if self.syncs_every_write(lg):
            await self.group_commit.wait_durable(lg, offset)
            # The flush raises the recovery point in its worker thread; the flusher moves
            # the high watermark on the loop a moment later. A waiter that found the
            # recovery point already past it must not be answered before that move.
            self._advance_hw(lg, lg.recovery_point)

    async def wait_committed(self, part: Partition, offset: int) -> None:
        await self.wait_durable(part.log, offset)

    def _on_flushed(self, target: Flushable, recovery_point: int) -> None:
        if isinstance(target, Log) and self.syncs_every_write(target):
            self._advance_hw(target, recovery_point)

    def _advance_hw(self, lg: Log, hw: int) -> None:
        if lg.update_high_watermark(hw):  # clamps to the log end; also moves the LSO
            part = self._by_log.get(id(lg))
            if part is not None:
                self._notify(part.tp)

    # -- fetch wake-ups --------------------------------------------------------------

    def _notify(self, tp: TopicPartition) -> None:
        for fut in self._watchers.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

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
