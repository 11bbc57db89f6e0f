"""`AsyncConsumer`: read assigned partitions with Kafka's consumer semantics.

Manual assignment only for now: `assign()` the partitions, optionally `seek()` them,
then `poll()` (or ``async for record in consumer``). A partition without a position
starts where ``auto.offset.reset`` says (earliest / latest; ``none`` raises
`NoOffsetForPartitionError` from `poll`). The *position* is the offset of the next
record `poll` will return; it advances as records are returned. Fetching runs in the
background (`fetcher.Fetcher`), so the next fetch is under way while the application
processes the last batch. Assignment, seeks, positions, pause/resume and offset
lookups are `positions.ConsumerPositions` (the base class); this module has the
lifecycle, the group API and reading.

`poll()` returns `ConsumerRecord`s (with topic, partition, offset, timestamp,
timestamp type, key, value, headers), at most ``max.poll.records`` per call, taking
partitions in turn so none starves. `poll_batches()` is the allocation-free variant:
it returns the decoded `records.Record` lists per partition.

With ``group.id`` set, `subscribe()` (topics and/or patterns, optional rebalance
listener) lets the group share the partitions out, and `commit()`,
`commit_async()` and `committed()` store positions in the group; the membership work
lives in `group.ConsumerCoordinator` and advances inside `poll()`, as in Kafka. A
consumer either subscribes or assigns, never both at once.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TypeVar

from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.columns import COLUMNAR, ColumnSlice, PartitionColumns
from tidegate.client.consumer.fetcher import FETCH, Fetcher
from tidegate.client.consumer.group import (  # consumer groups
    CommitCallback,
    ConsumerCoordinator,
    ConsumerGroupMetadata,
)
from tidegate.client.consumer.group_offsets import InvalidGroupIdError, OffsetAndMetadata
from tidegate.client.consumer.positions import PartitionLike, as_tp
from tidegate.client.consumer.staging_host import StagingHost
from tidegate.client.consumer.state import Assignment, PartitionRecords
from tidegate.client.errors import ClientClosedError
from tidegate.client.metadata import MetadataClient
from tidegate.client.net import NetworkClient
from tidegate.client.offsets import LIST_OFFSETS
from tidegate.client.types import ConsumerRecord, TopicPartition
from tidegate.protocol.messages import load_codecs
from tidegate.records.record import Record

__all__ = ["AsyncConsumer", "PartitionLike", "PollResult", "TopicsLike"]

log = logging.getLogger("tidegate.client.consumer")

TopicsLike = Iterable[str | re.Pattern[str]] | str | re.Pattern[str]

_Out = TypeVar("_Out", list[ConsumerRecord], dict[TopicPartition, list[Record]],
               dict[TopicPartition, list[ColumnSlice]])
_Item = TypeVar("_Item", Record, ColumnSlice)
PartitionData = PartitionRecords | PartitionColumns  # what the fetcher buffers
PollResult = (list[ConsumerRecord] | dict[TopicPartition, list[Record]]
              | dict[TopicPartition, list[ColumnSlice]])  # what a poll of any kind returns


class AsyncConsumer(StagingHost):
    """See the module docstring. Use as ``async with AsyncConsumer({...}) as c:``.
    Assignment, seeks, positions and offset lookups are in a base class
    (`positions.ConsumerPositions`), the blocking consumer's staging interface in
    another (`staging_host.StagingHost`)."""

    def __init__(self, config: ConsumerConfig | Mapping[str, object] | None = None,
                 **overrides: object) -> None:
        if isinstance(config, ConsumerConfig):
            self.config = config
        else:
            self.config = ConsumerConfig.from_dict(config, **overrides)
        cfg = self.config
        self._net = NetworkClient(cfg)
        self._metadata = MetadataClient(self._net, max_age_ms=cfg.metadata_max_age_ms,
                                        allow_auto_create=cfg.allow_auto_create_topics,
                                        retry_backoff_ms=cfg.retry_backoff_ms)
        self._assignment = Assignment()
        self._fetcher: Fetcher | None = None
        self._closed = False
        self._rotation = 0
        self._iter_buf: list[ConsumerRecord] = []
        self._columns: bool | None = None  # see use_columns
        self._iter_pos = 0
        # -- consumer groups: present when group.id is set --
        self._group = ConsumerCoordinator(
            cfg, self._net, self._metadata, self._assignment,
            apply_assignment=self._set_assignment, wake_fetcher=self._wake_fetcher,
        ) if cfg.group_id else None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster (optional: poll starts the consumer)."""
        self._started()
        await self._metadata.refresh()
        # the codecs of what polling sends, loaded here rather than in the first poll
        conn = await self._net.any_connection()
        for api_key in (FETCH, LIST_OFFSETS):
            if api_key in conn.versions:
                load_codecs(api_key, conn.versions[api_key])

    def _started(self) -> Fetcher:
        if self._closed:
            raise ClientClosedError("the consumer is closed")
        if self._fetcher is None:
            self._fetcher = Fetcher(self.config, self._metadata, self._assignment)
            self._fetcher.columns = self._columns
            self._fetcher.start()
        return self._fetcher

    async def close(self) -> None:
        """Leave the group (committing first with ``enable.auto.commit``, and calling
        the rebalance listener), then close connections."""
        if self._closed:
            return
        if self._group is not None:  # consumer groups
            try:
                await self._group.close()
            except Exception:  # closing must not fail
                log.exception("leaving the consumer group failed")
        self._closed = True
        if self._fetcher is not None:
            await self._fetcher.close()
        await self._net.close()

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # -- consumer groups ---------------------------------------------------------------

    def _need_group(self, what: str) -> ConsumerCoordinator:
        if self._group is None:
            raise InvalidGroupIdError(what)
        return self._group

    def subscribe(self, topics: TopicsLike, listener: object | None = None) -> None:
        """Join the consumer group (``group.id``) for these topics: names, compiled
        `re.Pattern`s (matching whole topic names) or strings starting with ``^``
        (regexes, as in librdkafka). `listener` gets the rebalance callbacks (see
        `listener.RebalanceListener`). The join itself happens in `poll()`."""
        group = self._need_group("subscribe()")
        if self._assignment.partitions and not group.subscription.active:
            raise RuntimeError("subscribe() after assign(): call assign([]) first; a "
                               "consumer either subscribes or assigns")
        group.subscribe(topics, listener)

    async def unsubscribe(self) -> None:
        """Give up the group's partitions (revoking them through the listener) and
        leave the group."""
        if self._group is not None and self._group.subscription.active:
            await self._group.unsubscribe()
        self._set_assignment([])

    def subscription(self) -> set[str]:
        """The topics subscribed to (patterns resolved against the cluster)."""
        return set(self._group.subscription.topics) if self._group else set()

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
                     | None = None, timeout_ms: int | None = None) -> None:
        """Commit `offsets` (default: the position of every assigned partition, i.e.
        everything `poll` returned) to the group, waiting for the answer."""
        await self._need_group("commit()").commit(offsets, timeout_ms)

    def commit_async(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
                     | None = None, callback: CommitCallback | None = None
                     ) -> asyncio.Task[None]:
        """Send a commit without waiting; `callback(offsets, error)` when done."""
        return self._need_group("commit_async()").commit_async(offsets, callback)

    async def committed(self, partitions: Iterable[PartitionLike],
                        timeout_ms: int | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets for `partitions` (None: nothing committed)."""
        return await self._need_group("committed()").committed(
            [as_tp(p) for p in partitions], timeout_ms)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Group id, generation and member id (for transactional offset commits)."""
        return self._need_group("group_metadata()").group_metadata()

    def _wake_fetcher(self) -> None:
        if self._fetcher is not None:
            self._fetcher.wakeup()

    # -- reading -----------------------------------------------------------------------

    def _ready_partitions(self, fetcher: Fetcher) -> list[TopicPartition]:
        tps = [tp for tp in fetcher.buffered
               if not self._assignment.partitions[tp].paused]
        if len(tps) > 1:
            self._rotation = (self._rotation + 1) % len(tps)
            tps = tps[self._rotation:] + tps[:self._rotation]
        return tps

    def _drain(self, fetcher: Fetcher, max_records: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        buffered = fetcher.buffered
        for tp in self._ready_partitions(fetcher):
            # A partition's next fetch may be waiting behind the records just read
            # (fetcher.drained moves it up): keep reading it while there is room.
            while len(out) < max_records and (pr := buffered.get(tp)) is not None:
                position = pr.take(max_records - len(out), out)
                if position is not None:
                    self._assignment.partitions[tp].position = position
                if not pr.exhausted:
                    break
                fetcher.drained(tp)
        return out

    async def _wait(self, fetcher: Fetcher, deadline: float) -> bool:
        """Wait for fetched data (or group work) until `deadline`; False if it passed."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if self._group is not None:  # consumer groups: a rebalance step may be due
            waits = [asyncio.ensure_future(e.wait())
                     for e in (fetcher.data_ready, self._group.wakeup)]
            done, pending = await asyncio.wait(waits, timeout=remaining,
                                               return_when=asyncio.FIRST_COMPLETED)
            for w in pending:
                w.cancel()
            return bool(done)
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
        # cancellation that races the wake-up (background fetches set data_ready
        # often), and the cancelled poll would return as if nothing happened: a
        # Ctrl-C on `tidegate consume` was lost that way (client/tasks.py)
        try:
            async with asyncio.timeout(remaining):
                await fetcher.data_ready.wait()
        except TimeoutError:
            return False
        return True

    async def _group_poll(self, deadline: float) -> None:
        if self._group is not None:
            await self._group.poll(deadline)

    async def poll_with(self, timeout_ms: int, drain: Callable[[Fetcher], _Out]) -> _Out:
        """The loop of `poll`, `poll_batches` and `poll_columns`: group work, then
        `drain` (what is buffered; empty if nothing), waiting for data until
        `timeout_ms` has passed. Public for the blocking consumer's staged polls
        (`staging.StagedPolls`), which drain with `drainer` or hand over a staged
        poll."""
        fetcher = self._started()
        deadline = time.monotonic() + timeout_ms / 1000
        if self._group is not None:
            self._group.poll_started()
        try:
            while True:
                await self._group_poll(deadline)
                fetcher.data_ready.clear()  # before draining, so no arrival is missed
                self._raise_pending()
                out = drain(fetcher)
                if out or not await self._wait(fetcher, deadline):
                    return out
        finally:
            if self._group is not None:
                self._group.poll_finished()

    def _drain_parts(self, fetcher: Fetcher, limit: int,
                     take: Callable[[PartitionData, int], tuple[list[_Item], int | None, int]]
                     ) -> dict[TopicPartition, list[_Item]]:
        """`_drain` grouped by partition: `take(buffered, room)` gives a partition's
        next items, its new position and how many records they hold."""
        out: dict[TopicPartition, list[_Item]] = {}
        taken = 0
        for tp in self._ready_partitions(fetcher):
            while taken < limit and (pr := fetcher.buffered.get(tp)) is not None:
                items, position, n = take(pr, limit - taken)
                if position is not None:
                    self._assignment.partitions[tp].position = position
                if items:
                    if tp in out:
                        out[tp] += items
                    else:
                        out[tp] = items
                    taken += n
                if not pr.exhausted:
                    break
                fetcher.drained(tp)
        return out

    def drainer(self, kind: str, limit: int) -> Callable[[Fetcher], PollResult]:
        """What `poll` ("poll"), `poll_batches` ("batches") or `poll_columns`
        ("columns") drains, at most `limit` records; TypeError if the consumer's mode
        (`use_columns`) does not allow that kind of poll."""
        if kind == "columns":
            if self._columns is None:
                raise TypeError("call use_columns() before poll_columns()")
            return lambda f: self._drain_parts(f, limit, _take_columns)
        self._no_columns("poll" if kind == "poll" else "poll_batches")
        if kind == "poll":
            return lambda f: self._drain(f, limit)
        return lambda f: self._drain_parts(f, limit, _take_records)

    async def poll(self, timeout_ms: int = 1000,
                   max_records: int | None = None) -> list[ConsumerRecord]:
        """Records fetched from the assigned partitions, waiting up to `timeout_ms` for
        some to arrive; an empty list if none did."""
        self._no_columns("poll")
        limit = max_records or self.config.max_poll_records
        return await self.poll_with(timeout_ms, lambda f: self._drain(f, limit))

    async def poll_batches(self, timeout_ms: int = 1000, max_records: int | None = None
                           ) -> dict[TopicPartition, list[Record]]:
        """Like `poll`, grouped by partition, returning the decoded records as they are
        (no per-record wrapper; `Record.timestamp` and `.offset` are absolute)."""
        self._no_columns("poll_batches")
        limit = max_records or self.config.max_poll_records
        return await self.poll_with(
            timeout_ms, lambda f: self._drain_parts(f, limit, _take_records))

    def _no_columns(self, what: str) -> None:
        if self._columns is not None:
            raise TypeError(f"this consumer reads columns (use_columns): {what} cannot "
                            "be used, call poll_columns")

    def use_columns(self, include_headers: bool = False) -> None:
        """Decode fetched records into column buffers from now on, for `poll_columns`
        (`columns.RecordColumns`; `poll` and `poll_batches` then raise TypeError).
        Records already fetched are dropped and fetched again. Needs the C extension
        `tidegate.records._columnar` (`columns.COLUMNAR`): RuntimeError without it."""
        if not COLUMNAR:
            raise RuntimeError("use_columns needs the C extension tidegate.records._columnar")
        self._columns = include_headers
        if self._fetcher is not None:
            self._fetcher.columns = include_headers
            for tp in [*self._fetcher.buffered]:
                self._fetcher.discard(tp)

    async def poll_columns(self, timeout_ms: int = 1000, max_records: int | None = None
                           ) -> dict[TopicPartition, list[ColumnSlice]]:
        """Like `poll_batches`, each partition's records as column slices (after
        `use_columns`); positions move as with `poll`."""
        if self._columns is None:
            raise TypeError("call use_columns() before poll_columns()")
        limit = max_records or self.config.max_poll_records
        return await self.poll_with(
            timeout_ms, lambda f: self._drain_parts(f, limit, _take_columns))

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        while self._iter_pos >= len(self._iter_buf):
            if self._closed:
                raise StopAsyncIteration
            self._iter_buf = await self.poll(timeout_ms=1000)
            self._iter_pos = 0
        record = self._iter_buf[self._iter_pos]
        self._iter_pos += 1
        return record


def _take_records(pr: PartitionData, room: int) -> tuple[list[Record], int | None, int]:
    records, position = pr.take_raw(room)
    return records, position, len(records)


def _take_columns(pr: PartitionData, room: int) -> tuple[list[ColumnSlice], int | None, int]:
    assert isinstance(pr, PartitionColumns)
    chunk, position = pr.take_columns(room)
    if chunk is None:
        return [], position, 0
    return [chunk], position, chunk.stop - chunk.start
