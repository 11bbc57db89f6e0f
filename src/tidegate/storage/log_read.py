"""Reads of a `Log`: whole batches for Fetch, and the two timestamp queries.

`read` returns whole batches as stored (nothing decoded), from the one holding the
offset asked for, from a single segment as in Kafka, up to a byte budget (with
`min_one_batch`, the first batch whole if larger: a consumer must always make
progress) and below a bound (`max_offset`: the high watermark or the last stable
offset, which the caller chooses). An offset in a gap left by compaction reads from
the next batch after it.
`offset_for_timestamp` and `max_timestamp_and_offset` answer ListOffsets (`queries`:
the time index, then one batch decoded each).

A mixin of `Log` (storage/log_state.py declares what it shares). Each call holds the
log's lock, as `log` describes: the bytes come from the page cache, so a read never
sees half an append, a truncation or a segment the cleaner swapped.
"""

from __future__ import annotations

from tidegate.common.errors import OffsetOutOfRangeError
from tidegate.storage import queries
from tidegate.storage.log_state import LogState

__all__ = ["ReadingLog"]


class ReadingLog(LogState):
    """A part of `Log` (storage/log_state.py declares what it shares)."""

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        """Whole batches from the one holding `offset`, up to `max_bytes` (the first one
        whole even if larger, when `min_one_batch`), excluding batches whose base offset
        is >= `max_offset`. Data comes from a single segment, as in Kafka."""
        with self._lock:
            self._check_open()
            leo = self.log_end_offset
            if offset < self._log_start_offset or offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range [{self._log_start_offset}, {leo}] "
                    f"for {self.topic_partition}"
                )
            if offset == leo or (max_offset is not None and offset >= max_offset):
                return b""
            for seg in self._segs.segments[self._segs.floor_index(offset) :]:
                found = seg.find_position(offset)
                if found is None:
                    continue  # offset in a gap left by compaction: next segment
                position, header = found
                if max_offset is not None and header.base_offset >= max_offset:
                    return b""
                return seg.read_batches(position, max_bytes, max_offset, min_one_batch)
            return b""

    # -- timestamps --------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp` at or
        after the log start offset, or None (ListOffsets by timestamp)."""
        with self._lock:
            self._check_open()
            return queries.offset_for_timestamp(
                self._segs.segments, timestamp, self._log_start_offset
            )

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the first record carrying it); (-1, -1) if none."""
        with self._lock:
            self._check_open()
            return queries.max_timestamp_and_offset(self._segs.segments)
