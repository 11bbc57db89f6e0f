"""What the consumer's fetcher holds, and what a Fetch answer does to it.

`FetchBuffer` is the data half of `fetcher.Fetcher` (which sends the fetches): the
fetched records waiting for `poll()` (`buffered`), the fetches taken ahead of the
position (`_ahead`), the errors `poll()` must raise (`errors`), and `_handle`, which
reads one Fetch answer into them.

Fetching ahead (see `fetcher`): a partition whose records from one fetch are still
waiting in `buffered` is fetched again from where that fetch ended, and the answer
waits in `_ahead` until `poll()` has read the first (`drained`). At most one fetch per
partition waits ahead.

A fetch is used only if its partition is still assigned (the same `PartitionState`),
was not sought or reset since it was sent (`PartitionState.epoch`) and its offset is
still where the partition's queue ends: a seek, a reset or a revocation while a fetch
is in flight discards its answer. Errors in an answer fetched ahead are not acted on:
the partition is fetched again once its position reaches that offset (`_no_ahead`), so
OFFSET_OUT_OF_RANGE, corrupt data and the like surface when the application gets there,
as without fetching ahead. OFFSET_OUT_OF_RANGE resets the position per
``auto.offset.reset`` (``none``: raised from `poll()`); corrupt data blocks the
partition until the application seeks past it. So do the errors of a partition whose
records were drained ahead of the application (the blocking consumer's staged polls,
`Assignment.held`) until it is handed them (`released`).

``isolation.level`` is passed to the broker; control batches are always dropped, and
with read_committed so are the batches of aborted transactions (`aborted`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.aborted import aborted_from_response
from tidegate.client.consumer.columns import PartitionColumns, parse_partition_columns
from tidegate.client.consumer.state import (
    EARLIEST,
    LATEST,
    Assignment,
    PartitionRecords,
    PartitionState,
    parse_partition_records,
)
from tidegate.client.metadata import REFRESH_ERRORS, ZERO_UUID, MetadataClient
from tidegate.client.types import TopicPartition
from tidegate.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    error_for_code,
)

__all__ = ["FetchBuffer", "Sent"]

log = logging.getLogger("tidegate.client.consumer")

# What a fetch asked for a partition: its fetch offset, and the partition's state and
# epoch then (see `_handle`).
Sent = tuple[int, PartitionState, int]


class FetchBuffer:
    """See the module docstring."""

    def __init__(
        self, config: ConsumerConfig, metadata: MetadataClient, assignment: Assignment
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.assignment = assignment
        # What poll() reads: the oldest fetched, unread records per partition.
        self.buffered: dict[TopicPartition, PartitionRecords | PartitionColumns] = {}
        # The partition's next fetch, taken while `buffered` was read (module docstring).
        self._ahead: dict[TopicPartition, PartitionRecords | PartitionColumns] = {}
        # Partitions whose fetch ahead failed: fetched again once their buffer drains.
        self._no_ahead: set[TopicPartition] = set()
        self.errors: deque[BaseException] = deque()
        # Fetched bytes whose records wait in the blocking consumer's staged polls
        # (`staging.StagedPolls`): `Fetcher` counts them against
        # ``queued.max.messages.kbytes`` as it counts `buffered`. `drained` adds up the
        # bytes of the fetches it retires in `drained_bytes`, for staging to take over.
        self.staged_bytes = 0
        self.drained_bytes = 0
        # None: decode records as objects (poll); else as columns (poll_columns), the
        # value saying whether to decode headers too (`columns.PartitionColumns`).
        self.columns: bool | None = None
        self.data_ready = asyncio.Event()
        # Called when an answer brought data for `buffered` (the blocking consumer
        # stages its next polls then: `staging.StagedPolls`).
        self.on_data: Callable[[], None] | None = None
        self._wake = asyncio.Event()

    def wakeup(self) -> None:
        self._wake.set()

    def discard(self, tp: TopicPartition) -> None:
        """Forget buffered data of `tp` (after a seek or unassignment)."""
        self.buffered.pop(tp, None)
        self._ahead.pop(tp, None)
        self._no_ahead.discard(tp)

    def retain(self, assigned: Mapping[TopicPartition, object]) -> None:
        """Forget the data of every partition not in `assigned`."""
        for tp in [*self.buffered, *self._ahead]:
            if tp not in assigned:
                self.discard(tp)

    def drained(self, tp: TopicPartition) -> None:
        """poll() has read all of `tp`'s buffered records (and moved its position past
        them): its next fetch, if it came ahead, takes their place."""
        done = self.buffered.pop(tp, None)
        if done is not None:
            self.drained_bytes += done.nbytes
        self._no_ahead.discard(tp)
        nxt = self._ahead.pop(tp, None)
        st = self.assignment.partitions.get(tp)
        if nxt is not None and st is not None and st.position == nxt.fetch_offset:
            self.buffered[tp] = nxt
            self.data_ready.set()  # a poll that took nothing from the last must not wait
        self.wakeup()

    def released(self, tps: Iterable[TopicPartition]) -> None:
        """The application was handed the held records of `tps` (`Assignment.held`):
        an error deferred behind them (`_no_ahead`) is acted on by fetching again."""
        for tp in tps:
            if tp not in self.buffered:
                self._no_ahead.discard(tp)
        self.wakeup()

    def _fetch_offset(self, tp: TopicPartition, st: PartitionState) -> int | None:
        """Where `tp`'s next fetch starts: the end of its queue, else its position."""
        queued = self._ahead.get(tp) or self.buffered.get(tp)
        return queued.next_offset if queued is not None else st.position

    def report(self, exc: BaseException) -> None:
        """Queue `exc` for `poll()` to raise."""
        self.errors.append(exc)
        self.data_ready.set()

    def _block(self, tp: TopicPartition, exc: BaseException) -> None:
        """Stop `tp` on `exc`: raised by this poll and every next one until a seek
        (`Assignment.block`)."""
        self.assignment.block(tp, exc)
        self.data_ready.set()

    def _handle(self, resp: Any, offsets: dict[TopicPartition, Sent]) -> None:
        """Read one Fetch answer (to the request whose offsets are `offsets`) into
        `buffered` / `_ahead` / `errors`, per the module docstring."""
        code = getattr(resp, "error_code", ErrorCode.none)
        if code != ErrorCode.none:
            raise error_for_code(code.value, f"fetch failed: {code.name.upper()}")
        names = self.metadata.cache.names_by_id
        got_data = False
        for t in resp.responses:
            topic = getattr(t, "topic", None) or names.get(getattr(t, "topic_id", ZERO_UUID))
            if topic is None:
                continue
            for p in t.partitions:
                tp = TopicPartition(topic, int(p.partition_index))
                sent = offsets.get(tp)
                st = self.assignment.partitions.get(tp)
                if sent is None or st is None:
                    continue
                fetch_offset, sent_st, epoch = sent
                if st is not sent_st or st.epoch != epoch or \
                        self._fetch_offset(tp, st) != fetch_offset:
                    continue  # unassigned, sought or reset meanwhile: the data is stale
                code = p.error_code
                ahead = tp in self.buffered  # fetched ahead of the position
                # ahead of what the application was handed (`Assignment.held`): its
                # errors too wait until the application gets there
                if (ahead or tp in self.assignment.held) and code != ErrorCode.none:
                    # Acted on once the position gets there (module docstring).
                    self._no_ahead.add(tp)
                    if code in REFRESH_ERRORS:
                        self.metadata.cache.request_update()
                    continue
                if code == ErrorCode.none:
                    st.high_watermark = int(p.high_watermark)
                    st.last_stable_offset = int(getattr(p, "last_stable_offset", -1))
                    st.log_start_offset = int(getattr(p, "log_start_offset", -1))
                    try:
                        aborted = (aborted_from_response(getattr(p, "aborted_transactions",
                                                                 None))
                                   if self.config.isolation else None)
                        records: PartitionRecords | PartitionColumns = (
                            parse_partition_records(tp, fetch_offset, p.records,
                                                    self.config.check_crcs, aborted)
                            if self.columns is None else
                            parse_partition_columns(tp, fetch_offset, p.records,
                                                    self.config.check_crcs, aborted,
                                                    self.columns))
                    except (CorruptRecordError, InvalidRecordError) as e:
                        if ahead or tp in self.assignment.held:
                            self._no_ahead.add(tp)
                            continue
                        # As Kafka's consumer: raise from poll until the app seeks past.
                        self._block(tp, type(e)(
                            f"{tp.topic}-{tp.partition} at offset {fetch_offset}: {e}; "
                            "seek() past the bad record to continue"))
                        continue
                    if records.next_offset > fetch_offset:
                        if ahead:
                            self._ahead[tp] = records
                        else:
                            self.buffered[tp] = records
                            got_data = True
                elif code == ErrorCode.offset_out_of_range:
                    self._out_of_range(tp, fetch_offset)
                elif code in REFRESH_ERRORS:
                    self.metadata.cache.request_update()
                elif not code.retriable:
                    self.report(
                        error_for_code(
                            code.value, f"fetching {tp.topic}-{tp.partition}: {code.name.upper()}"
                        )
                    )
        if got_data:
            self.data_ready.set()
            if self.on_data is not None:
                self.on_data()

    def _out_of_range(self, tp: TopicPartition, offset: int) -> None:
        """OFFSET_OUT_OF_RANGE at the position: reset per ``auto.offset.reset``."""
        strategy = self.config.auto_offset_reset
        if strategy == "none":
            self._block(tp, OffsetOutOfRangeError(
                f"fetch offset {offset} is out of range for {tp.topic}-{tp.partition} and "
                "auto.offset.reset=none; seek() to a valid offset"))
            return
        log.info(
            "offset %d out of range for %s-%d; resetting to %s",
            offset,
            tp.topic,
            tp.partition,
            strategy,
        )
        self.assignment.request_reset(tp, EARLIEST if strategy == "earliest" else LATEST)
