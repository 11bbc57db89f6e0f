"""Sans-IO consumer state: assigned partitions, positions, and fetched-but-unread records.

`Assignment` tracks, per assigned partition, the *position* (offset of the next record
to hand to the application), whether it is paused, and whether its position must be
reset (with ``auto.offset.reset``, or an explicit seek to the beginning/end).

`PartitionRecords` holds the decoded batches of one fetched partition and hands
records out in order. Invariants:
- records before the fetch offset (a batch fetched from its start) and control
  batches are never handed out, nor (read_committed) batches of aborted transactions
  (`aborted.AbortedFilter`);
- after the last record is handed out, the position becomes the offset after the last
  complete batch of the fetch (which skips trailing control batches, dropped aborted
  batches and compaction gaps), so a fetch always makes progress and the position
  reaches the end (the LSO with read_committed) — lag zero;
- data is used only if the partition's position still equals the fetch offset when it
  is read (a seek in between discards it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tidegate.client.consumer.aborted import AbortedTransaction
from tidegate.client.consumer.batch_walk import walk_batches
from tidegate.client.types import ConsumerRecord, TopicPartition
from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records.record import Record, decode_record_objects

__all__ = [
    "EARLIEST",
    "LATEST",
    "Assignment",
    "PartitionRecords",
    "PartitionState",
    "parse_partition_records",
]

_NO_CONSUMER_RECORDS: list[ConsumerRecord] = []  # never appended to

EARLIEST = -2  # ListOffsets timestamp meaning "log start offset"
LATEST = -1  # ListOffsets timestamp meaning "high watermark" (or LSO, read_committed)


@dataclass(slots=True)
class PartitionState:
    position: int | None = None
    paused: bool = False
    reset_to: int | None = None  # EARLIEST / LATEST when a reset is pending
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    # auto.offset.reset=none found no valid position: wait for seek() instead of
    # failing every fetch again.
    blocked: bool = False
    # Bumped by every seek and reset: a fetch sent before it is stale when it returns,
    # whatever offsets it carries (the fetcher compares epochs, see fetch_buffer.py).
    epoch: int = 0


@dataclass
class Assignment:
    """Manually assigned partitions and their positions.

    `held`: partitions whose records were drained ahead of the application's poll
    (the blocking consumer's staged poll, `staging.StagedPolls`) and not yet handed
    to it, with the position each had before; their `position` is already past those
    records, `consumed(tp)` is what commits and `position()` use.

    `errors`: partitions stopped by an error the application must act on (a corrupt
    batch at its position, no valid offset under ``auto.offset.reset=none``): poll()
    raises it again each time, as Kafka's consumer does, until a seek or reset of the
    partition (or its leaving the assignment) clears it (`block`).

    `held` and `errors` are always rebound, never changed in place (another thread
    reads them)."""

    partitions: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    held: dict[TopicPartition, int] = field(default_factory=dict)
    errors: dict[TopicPartition, BaseException] = field(default_factory=dict)

    def consumed(self, tp: TopicPartition, st: PartitionState) -> int | None:
        """The position of the next record the application has not been handed."""
        return self.held.get(tp, st.position)

    def _unhold(self, tp: TopicPartition) -> None:
        if tp in self.held:
            self.held = {k: v for k, v in self.held.items() if k != tp}
        if tp in self.errors:
            self.errors = {k: v for k, v in self.errors.items() if k != tp}

    def block(self, tp: TopicPartition, error: BaseException) -> None:
        """Stop fetching `tp` until a seek or reset; poll() raises `error` meanwhile."""
        self.state(tp).blocked = True
        self.errors = {**self.errors, tp: error}

    def pending_error(self) -> BaseException | None:
        """The error of a stopped partition that is not paused (paused partitions are
        not read, so their errors wait), else None."""
        for tp, error in self.errors.items():
            st = self.partitions.get(tp)
            if st is not None and not st.paused:
                return error
        return None

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        """Replace the assignment, keeping the state of partitions that stay."""
        old = self.partitions
        self.partitions = {tp: old.get(tp) or PartitionState() for tp in tps}
        if self.held:
            self.held = {tp: p for tp, p in self.held.items()
                         if self.partitions.get(tp) is old.get(tp)}
        if self.errors:
            self.errors = {tp: e for tp, e in self.errors.items()
                           if self.partitions.get(tp) is old.get(tp)}

    def state(self, tp: TopicPartition) -> PartitionState:
        st = self.partitions.get(tp)
        if st is None:
            raise ValueError(
                f"partition {tp.topic}-{tp.partition} is not assigned to "
                "this consumer; call assign() first"
            )
        return st

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"cannot seek {tp.topic}-{tp.partition} to negative offset {offset}")
        st = self.state(tp)
        self._unhold(tp)
        st.position = offset
        st.reset_to = None
        st.blocked = False
        st.epoch += 1

    def request_reset(self, tp: TopicPartition, where: int) -> None:
        st = self.state(tp)
        self._unhold(tp)
        st.position = None
        st.reset_to = where
        st.blocked = False
        st.epoch += 1

    def needs_reset(self) -> list[TopicPartition]:
        return [tp for tp, st in self.partitions.items() if st.position is None and not st.blocked]

    def fetchable(self) -> list[TopicPartition]:
        return [
            tp
            for tp, st in self.partitions.items()
            if st.position is not None and not st.paused and not st.blocked
        ]


class PartitionRecords:
    """The records of one partition from one fetch; see the module docstring.

    Records are decoded straight into `ConsumerRecord`s (`records.record.
    decode_record_objects`: with the C extension, no tuple and no `__init__` call per
    record), so `take` only copies references; `take_raw` (`poll_batches`) makes a
    `Record` of each."""

    __slots__ = ("_batch", "_batches", "_index", "fetch_offset", "nbytes", "next_offset",
                 "tp")

    def __init__(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        batches: list[list[ConsumerRecord]],
        next_offset: int,
        nbytes: int = 0,
    ) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        self._batches = batches  # the records of each data batch, in order
        self.next_offset = next_offset
        self.nbytes = nbytes  # fetched bytes (queued.max.messages.kbytes counts these)
        self._batch = 0
        self._index = 0

    @property
    def exhausted(self) -> bool:
        return self._batch >= len(self._batches)

    def _next_slice(self, room: int) -> list[ConsumerRecord]:
        """Up to `room` records of the current batch, moving past them."""
        records = self._batches[self._batch]
        start = self._index
        stop = start + room
        if stop >= len(records):
            self._batch += 1
            self._index = 0
            return records[start:] if start else records
        self._index = stop
        return records[start:stop]

    def take(self, max_records: int, out: list[ConsumerRecord]) -> int | None:
        """Append up to `max_records` records to `out`; return the new position (None if
        nothing was taken)."""
        position: int | None = None
        left = max_records
        n_batches = len(self._batches)
        while left > 0 and self._batch < n_batches:
            records = self._next_slice(left)
            out += records
            if records:
                left -= len(records)
                position = records[-1].offset + 1
        if self.exhausted:
            position = self.next_offset
        return position

    def take_raw(self, max_records: int) -> tuple[list[Record], int | None]:
        """Like `take`, but as `Record`s (no topic, partition or timestamp type)."""
        out: list[Record] = []
        position: int | None = None
        left = max_records
        n_batches = len(self._batches)
        while left > 0 and self._batch < n_batches:
            records = self._next_slice(left)
            out += [Record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]
            if records:
                left -= len(records)
                position = records[-1].offset + 1
        if self.exhausted:
            position = self.next_offset
        return out, position


def parse_partition_records(
    tp: TopicPartition,
    fetch_offset: int,
    data: bytes | None,
    check_crcs: bool = True,
    aborted: Iterable[AbortedTransaction] | None = None,
) -> PartitionRecords:
    """Decode fetched bytes into `PartitionRecords`, dropping control batches and
    records before `fetch_offset`. A partial batch at the end (the broker cuts at the
    fetch size) is ignored. Raises CorruptRecordError / InvalidRecordError for bad data
    at the start; bad data after records past `fetch_offset` ends the records there
    (`next_offset` is the bad batch's offset, whose fetch then raises), as Kafka's
    consumer hands out the records before a corrupt one.

    `aborted` (read_committed: the fetch's aborted transactions, possibly empty) turns
    on `AbortedFilter`: batches of aborted transactions are dropped too. None
    (read_uncommitted) keeps them. The batch walk is `batch_walk.walk_batches`, shared
    with `columns.parse_partition_columns`.
    """
    topic, partition = tp
    batches: list[list[ConsumerRecord]] = []
    next_offset = fetch_offset
    for header, section, keep, before_fetch in walk_batches(
            tp, fetch_offset, data, check_crcs, aborted):
        # Data records are decoded as what `take` hands out, and decoded (checked)
        # even when the batch is then dropped, as before.
        try:
            records = (_NO_CONSUMER_RECORDS if header.is_control else
                       decode_record_objects(header, section, ConsumerRecord, topic,
                                             partition))
        except (CorruptRecordError, InvalidRecordError):
            if next_offset > fetch_offset:
                break  # as the walk stops at a corrupt batch (`batch_walk`)
            raise
        if before_fetch:
            continue
        next_offset = header.next_offset
        if not keep or not records:
            continue
        if records[0].offset < fetch_offset:
            records = [r for r in records if r.offset >= fetch_offset]
        batches.append(records)
    return PartitionRecords(tp, fetch_offset, batches, next_offset,
                            len(data) if data else 0)
