"""Offset ranges: what one Spark task reads, how ranges are split, and how they are read.

A `RangePartition` is a Spark `InputPartition` holding everything its task needs (the
topic-partition, ``[start, end)`` and the consumer settings), so a task, a retried task
or the replay of a micro-batch reads exactly the same records without asking the
driver. `split_ranges` follows Spark's Kafka connector: one range per topic-partition,
split proportionally to size when ``minPartitions`` asks for more tasks, and into pieces
of at most ``maxRecordsPerPartition`` offsets. `pack_ranges` goes the other way
(Tidegate's ``maxPartitions``): it deals the ranges out to at most that many
`RangeGroup` tasks, largest first to the lightest task, so a task reads several
topic-partitions with one consumer and Spark pays its per-task cost (scheduling, a
Python worker round trip, a consumer connection) fewer times.

`read_range` (on an executor) reads ``[start, end)`` with a Tidegate consumer. Under
read_committed the range holds offsets that are never returned (COMMIT/ABORT markers,
aborted records), so a read ends when the consumer's *position* reaches `end`, not
when a record with offset ``end - 1`` arrives. Invariant: the rows are exactly the
records with ``start <= offset < end`` that the isolation level makes visible, in offset
order. `poll_range` reads them; `read_range` hands them to Spark as Arrow record batches
(`arrow.records_to_batch`, one per poll) or, with ``arrowBatches=false``, as rows. With
the C extension `records._columnar` (`client.consumer.columns.COLUMNAR`) the Arrow
batches come from `poll_range_columns` instead: the consumer decodes each fetch into
column buffers and `arrow.columns_to_batch` wraps them, no Python object per record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np
from pyspark.sql.datasource import InputPartition

from tidegate.client import Consumer, ConsumerRecord, TopicPartition
from tidegate.client.consumer.columns import COLUMNAR, ColumnSlice

_T = TypeVar("_T")

__all__ = ["DataLossError", "OffsetRange", "RangeGroup", "RangePartition", "pack_ranges",
           "poll_range", "poll_range_columns", "read_group", "read_range", "split_ranges"]


class DataLossError(RuntimeError):
    """Offsets to read are gone (retention, DeleteRecords) and failOnDataLoss is true."""


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


class RangePartition(InputPartition):
    """One task's work; picklable, self-contained."""

    def __init__(self, rng: OffsetRange, consumer_config: dict[str, object],
                 include_headers: bool, fail_on_data_loss: bool, poll_timeout_ms: int,
                 arrow: bool = True, columns: bool = True,
                 select: tuple[str, ...] | None = None) -> None:
        self.rng = rng
        self.consumer_config = consumer_config
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.poll_timeout_ms = poll_timeout_ms
        self.arrow = arrow  # yield Arrow record batches (else rows)
        self.columns = columns  # with arrow: decode into columns when COLUMNAR
        self.select = select  # the columns to produce, in order (None: all)

    def __repr__(self) -> str:
        r = self.rng
        return f"RangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


class RangeGroup(InputPartition):
    """Several ranges read one after the other by one task, with one consumer."""

    def __init__(self, parts: list[RangePartition]) -> None:
        self.parts = parts

    def __repr__(self) -> str:
        return f"RangeGroup({', '.join(repr(p) for p in self.parts)})"


def pack_ranges(parts: list[RangePartition], max_partitions: int | None
                ) -> list[RangePartition] | list[RangeGroup]:
    """`parts` unchanged when they are at most `max_partitions` (or it is None), else
    `max_partitions` groups: largest range first, each to the group with the fewest
    offsets so far (ties: the lower index), ranges in (topic, partition, start) order
    within a group. A pure function of its input, so a replayed micro-batch gets the
    same groups."""
    if max_partitions is None or len(parts) <= max_partitions:
        return parts
    loads = [0] * max_partitions
    bins: list[list[RangePartition]] = [[] for _ in range(max_partitions)]
    by_size = sorted(parts, key=lambda p: (-p.rng.size, p.rng.topic, p.rng.partition,
                                           p.rng.start))
    for part in by_size:
        i = loads.index(min(loads))
        bins[i].append(part)
        loads[i] += part.rng.size
    return [RangeGroup(sorted(b, key=lambda p: (p.rng.topic, p.rng.partition, p.rng.start)))
            for b in bins if b]


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_per_partition: int | None) -> list[OffsetRange]:
    """Ranges in (topic, partition, start) order, split per the options; empty dropped."""
    todo = sorted((r for r in ranges if r.size > 0), key=lambda r: (r.topic, r.partition))
    total = sum(r.size for r in todo)
    out: list[OffsetRange] = []
    for r in todo:
        parts = 1
        if min_partitions is not None and min_partitions > len(todo) and total > 0:
            parts = max(1, round(r.size / total * min_partitions))
        if max_per_partition is not None:
            parts = max(parts, -(-r.size // max_per_partition))
        parts = min(parts, r.size)
        for i in range(parts):
            lo = r.start + r.size * i // parts
            hi = r.start + r.size * (i + 1) // parts
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


# the row path's tuple, in the read schema's order (`source.read_schema`)
ROW_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
               "headers")


def _timestamp(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def read_range(part: RangePartition, consumer: Consumer | None = None) -> Iterator[Any]:
    """What a task yields: Arrow record batches (`arrow.records_to_batch`), or rows
    ``(key, value, topic, partition, offset, timestamp, timestampType[, headers])`` when
    the read asked for ``arrowBatches=false``. Both carry the same records, in the
    columns of ``part.select`` when the read was given a subset schema."""
    if part.arrow and part.columns and COLUMNAR:
        from tidegate.spark.arrow import columns_to_batch

        r = part.rng
        for chunk in poll_range_columns(part, consumer):
            yield columns_to_batch(r.topic, r.partition, chunk, part.include_headers,
                                   part.select)
        return
    if part.arrow:
        from tidegate.spark.arrow import records_to_batch

        r = part.rng
        for records in poll_range(part, consumer):
            yield records_to_batch(r.topic, r.partition, records, part.include_headers,
                                   part.select)
        return
    headers = part.include_headers
    pick = None if part.select is None else [ROW_COLUMNS.index(c) for c in part.select]
    for records in poll_range(part, consumer):
        for rec in records:
            row: tuple[Any, ...] = (rec.key, rec.value, rec.topic, rec.partition,
                                    rec.offset, _timestamp(rec.timestamp),
                                    rec.timestamp_type)
            if headers:
                row = (*row, list(rec.headers))
            yield row if pick is None else tuple(row[i] for i in pick)


def read_group(group: RangeGroup) -> Iterator[Any]:
    """What a `RangeGroup`'s task yields: each range's `read_range` output in turn, all
    read with one consumer (the ranges share the read's consumer settings)."""
    if not group.parts:
        return
    with Consumer(group.parts[0].consumer_config) as consumer:
        for part in group.parts:
            yield from read_range(part, consumer)


def poll_range(part: RangePartition, consumer: Consumer | None = None
               ) -> Iterator[list[ConsumerRecord]]:
    """The records of ``[start, end)`` as the consumer's polls return them (non-empty
    lists, in offset order, cut at `end`). With `consumer` (a `RangeGroup`'s, shared by
    its ranges) it is reassigned to this range's partition and left open."""
    if part.rng.size == 0:
        return
    if consumer is not None:
        yield from _poll_with(consumer, part)
        return
    with Consumer(part.consumer_config) as own:
        yield from _poll_with(own, part)


def poll_range_columns(part: RangePartition, consumer: Consumer | None = None
                       ) -> Iterator[ColumnSlice]:
    """`poll_range` as column slices (`Consumer.poll_columns`; needs `COLUMNAR`): the
    same records, cut at `end` the same way."""
    if part.rng.size == 0:
        return
    if consumer is not None:
        consumer.use_columns(part.include_headers)
        yield from _poll_columns_with(consumer, part)
        return
    with Consumer(part.consumer_config) as own:
        own.use_columns(part.include_headers)
        yield from _poll_columns_with(own, part)


def _poll_columns_with(consumer: Consumer, part: RangePartition) -> Iterator[ColumnSlice]:
    r = part.rng
    tp = TopicPartition(r.topic, r.partition)
    for chunks in _polls(consumer, part, tp, lambda t: consumer.poll_columns(t).get(tp)):
        for chunk in chunks:
            if chunk.offset_at(chunk.stop - 1) < r.end:
                yield chunk
                continue
            # offsets ascend: cut at the first one past end
            offsets = np.frombuffer(chunk.columns.offsets, dtype="<i8")
            stop = chunk.start + int(np.searchsorted(offsets[chunk.start:chunk.stop], r.end))
            if stop > chunk.start:
                yield ColumnSlice(chunk.columns, chunk.start, stop)
            return


def _polls(consumer: Consumer, part: RangePartition, tp: TopicPartition,
           poll: Callable[[int], _T | None]) -> Iterator[_T]:
    """Seek to the range's start and poll (`poll(timeout_ms)`) until the position
    reaches its end; what each poll returned, when it returned something."""
    r = part.rng
    start = r.start
    earliest = consumer.beginning_offsets([tp])[tp]
    if start < earliest:
        if part.fail_on_data_loss:
            raise DataLossError(
                f"{r.topic}-{r.partition}: offsets {start}..{earliest - 1} are gone "
                "(retention or deleted records); set failOnDataLoss=false to skip them")
        start = earliest
        if start >= r.end:
            return
    consumer.assign([tp])
    consumer.seek(tp, start)
    deadline = time.monotonic() + part.poll_timeout_ms / 1000
    while consumer.position(tp) < r.end:
        got = poll(min(500, part.poll_timeout_ms))
        if not got:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{r.topic}-{r.partition}: no progress reading [{start}, {r.end}) "
                    f"for kafkaConsumer.pollTimeoutMs={part.poll_timeout_ms} (at "
                    f"{consumer.position(tp)}; an open transaction holds the LSO?)")
            continue
        deadline = time.monotonic() + part.poll_timeout_ms / 1000
        yield got


def _poll_with(consumer: Consumer, part: RangePartition) -> Iterator[list[ConsumerRecord]]:
    r = part.rng
    tp = TopicPartition(r.topic, r.partition)
    for records in _polls(consumer, part, tp, lambda t: consumer.poll(timeout_ms=t)):
        if records[-1].offset >= r.end:  # offsets ascend: cut at the first past end
            records = [rec for rec in records if rec.offset < r.end]
            if records:
                yield records
            return
        yield records
