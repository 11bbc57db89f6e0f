"""`AsyncConsumer`'s assignment and position API (`ConsumerPositions`, its base class).

Which partitions the consumer reads (`assign`, `assignment`), where it reads them
(`seek`, `seek_to_beginning`, `seek_to_end`, `position`), `pause`/`resume`, and the
offset lookups that do not move anything (`offsets_for_times`, `beginning_offsets`,
`end_offsets`, `partitions_for_topic`, `highwater`).

A seek or a new assignment drops the data fetched for the partitions it moves (the
fetcher's buffers and the records `async for` has not returned yet), so the next
record returned is at the new position. Seeking to the beginning or end is lazy, as in
Kafka: the fetcher looks the offset up (ListOffsets) before the partition's next fetch.

The state these methods use is the consumer's, created by `AsyncConsumer.__init__`;
it is declared here for the type checker.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.fetcher import Fetcher
from tidegate.client.consumer.group import ConsumerCoordinator
from tidegate.client.consumer.state import EARLIEST, LATEST, Assignment
from tidegate.client.metadata import MetadataClient
from tidegate.client.offsets import list_offsets
from tidegate.client.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition

__all__ = ["ConsumerPositions", "PartitionLike", "as_tp"]

PartitionLike = TopicPartition | tuple[str, int]


def as_tp(p: PartitionLike) -> TopicPartition:
    """A `TopicPartition` from one or a (topic, partition) pair."""
    return p if isinstance(p, TopicPartition) else TopicPartition(p[0], int(p[1]))


class ConsumerPositions:
    """See the module docstring."""

    config: ConsumerConfig
    _metadata: MetadataClient
    _assignment: Assignment
    _fetcher: Fetcher | None
    _group: ConsumerCoordinator | None  # consumer groups: present when group.id is set
    _iter_buf: list[ConsumerRecord]  # what `async for` has yet to return
    _iter_pos: int

    def _started(self) -> Fetcher:
        """The running fetcher, started if it is not yet (`AsyncConsumer._started`)."""
        raise NotImplementedError

    def _raise_pending(self) -> None:
        if self._fetcher is not None and self._fetcher.errors:
            raise self._fetcher.errors.popleft()
        if self._assignment.errors:  # a stopped partition: again each poll until a seek
            error = self._assignment.pending_error()
            if error is not None:
                raise copy.copy(error)  # a fresh traceback each time

    # -- manual assignment -------------------------------------------------------------

    def assign(self, partitions: Iterable[PartitionLike]) -> None:
        """Read exactly these partitions (replacing any previous assignment)."""
        if self._group is not None and self._group.subscription.active:
            raise RuntimeError("assign() while subscribed: call unsubscribe() first; a "
                               "consumer either subscribes or assigns")
        self._set_assignment(as_tp(p) for p in partitions)

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        tps = list(partitions)
        self._assignment.assign(tps)
        self._metadata.tracked |= {tp.topic for tp in tps}
        if self._fetcher is not None:
            self._fetcher.retain(self._assignment.partitions)
            self._fetcher.wakeup()
        self._iter_buf = [r for r in self._iter_buf[self._iter_pos:]
                          if (r.topic, r.partition) in self._assignment.partitions]
        self._iter_pos = 0

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment.partitions)

    def _moved(self, tp: TopicPartition) -> None:
        if self._fetcher is not None:
            self._fetcher.discard(tp)
            self._fetcher.wakeup()
        if self._iter_pos < len(self._iter_buf):
            self._iter_buf = [r for r in self._iter_buf[self._iter_pos:]
                              if (r.topic, r.partition) != tp]
            self._iter_pos = 0

    def seek(self, partition: PartitionLike, offset: int) -> None:
        """The next record returned for `partition` will be at `offset`."""
        tp = as_tp(partition)
        self._assignment.seek(tp, offset)
        self._moved(tp)

    def seek_to_beginning(self, *partitions: PartitionLike) -> None:
        """Move to the log start offset (evaluated lazily, as in Kafka). No arguments:
        every assigned partition."""
        for tp in [as_tp(p) for p in partitions] or list(self._assignment.partitions):
            self._assignment.request_reset(tp, EARLIEST)
            self._moved(tp)

    def seek_to_end(self, *partitions: PartitionLike) -> None:
        """Move to the end (high watermark, or LSO with read_committed), lazily."""
        for tp in [as_tp(p) for p in partitions] or list(self._assignment.partitions):
            self._assignment.request_reset(tp, LATEST)
            self._moved(tp)

    async def position(self, partition: PartitionLike) -> int:
        """Offset of the next record to be returned for `partition`."""
        tp = as_tp(partition)
        st = self._assignment.state(tp)
        fetcher = self._started()
        held = self._assignment.held.get(tp)  # drained ahead, not yet handed out
        if held is not None:
            return held
        if st.position is None and self._group is not None:  # committed offset first
            await self._group.ensure_positions([tp])
        if st.position is None:
            await fetcher.reset_positions()
            self._raise_pending()
        if st.position is None:
            raise RuntimeError(f"no position for {tp.topic}-{tp.partition}")
        return st.position

    def highwater(self, partition: PartitionLike) -> int | None:
        """The high watermark from the last fetch of `partition`, if any."""
        hw = self._assignment.state(as_tp(partition)).high_watermark
        return hw if hw >= 0 else None

    def pause(self, *partitions: PartitionLike) -> None:
        """Stop returning and fetching records of these partitions until resumed."""
        for p in partitions:
            self._assignment.state(as_tp(p)).paused = True

    def resume(self, *partitions: PartitionLike) -> None:
        for p in partitions:
            self._assignment.state(as_tp(p)).paused = False
        if self._fetcher is not None:
            self._fetcher.wakeup()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._assignment.partitions.items() if st.paused}

    # -- offsets lookups ---------------------------------------------------------------

    async def _list(self, query: Mapping[TopicPartition, int],
                    timeout_ms: int | None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        self._started()
        return await list_offsets(
            self._metadata, query, isolation_level=self.config.isolation,
            timeout_ms=self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms,
            retry_backoff_ms=self.config.retry_backoff_ms)

    async def offsets_for_times(self, timestamps: Mapping[PartitionLike, int],
                                timeout_ms: int | None = None
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The earliest offset whose timestamp is >= the given one, per partition
        (None where no such record exists)."""
        return await self._list({as_tp(p): ts for p, ts in timestamps.items()}, timeout_ms)

    async def beginning_offsets(self, partitions: Iterable[PartitionLike],
                                timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        found = await self._list({as_tp(p): EARLIEST for p in partitions}, timeout_ms)
        return {tp: v.offset if v else 0 for tp, v in found.items()}

    async def end_offsets(self, partitions: Iterable[PartitionLike],
                          timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        found = await self._list({as_tp(p): LATEST for p in partitions}, timeout_ms)
        return {tp: v.offset if v else 0 for tp, v in found.items()}

    async def partitions_for_topic(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        """The topic's partition ids, waiting up to `timeout_ms` (default
        default.api.timeout.ms) for it to appear; UnknownTopicOrPartitionError after."""
        self._started()
        info = await self._metadata.topic(
            topic, self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms)
        return sorted(info.partitions)
