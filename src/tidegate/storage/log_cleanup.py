"""What removes data from the head of a `Log`, and the cleaner's hooks into it.

Retention under cleanup.policy delete (`apply_retention`: retention.ms, retention.bytes;
`retention` decides which oldest segments may go), DeleteRecords
(`delete_records_before`) and a follower following its leader's log start (through
`_increment_log_start`, called by `log_replica`) move the log start up: it is persisted
(`log-start-offset`), the segments wholly below it are deleted, older producer snapshots
and epoch-cache entries are cut and the LSO refreshed; producers themselves stay (see
`producer_state`) until `remove_expired_producers` forgets the idle ones
(producer.id.expiration.ms). Under cleanup.policy compact the cleaner reads pinned
segments (`pinned`), swaps its cleaned segment in (`replace_segments`) and records where
it stopped (`first_dirty_offset`, the `cleaner-offset` file).

A mixin of `Log`, like `log_txn` and `log_replica`: it keeps the invariants stated in
`log`'s module docstring (log start in [first base offset, log end], nothing at or
above the high watermark deleted, `.txnindex` entries leave with their segment).
Locking: everything runs under the log's lock (`Log._lock`, the segment list's);
`pinned` keeps segments' descriptors open past a deletion without holding it, and a
swap is refused if the segment list's generation moved (a truncation) since the pin.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tidegate.common.errors import OffsetOutOfRangeError, PolicyViolationError
from tidegate.storage import retention
from tidegate.storage.log_state import LogState
from tidegate.storage.recovery import CLEANER_OFFSET_FILE, LOG_START_OFFSET_FILE
from tidegate.storage.segment import LogSegment

if TYPE_CHECKING:
    pass

__all__ = ["CleanupLog"]

# the log's logger: its lines keep the name they had before the split
log = logging.getLogger("tidegate.storage.log")


class CleanupLog(LogState):
    """A part of `Log` (storage/log_state.py declares what it shares)."""

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset to `offset` (persisted) and delete
        the segments wholly below it. Returns the new log start offset. Refused on a
        topic whose cleanup.policy lacks delete (compact only), before the range check,
        as Kafka's leader refuses it (POLICY_VIOLATION)."""
        with self._lock:
            self._check_open()
            if not self._config.delete:
                raise PolicyViolationError(
                    f"Records of partition {self.topic_partition} can not be deleted due "
                    "to the configured policy"
                )
            if offset < 0 or offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: the high watermark of "
                    f"{self.topic_partition} is {self.high_watermark}"
                )
            if offset > self._log_start_offset:
                self._increment_log_start(offset)
            return self._log_start_offset

    def _increment_log_start(self, offset: int) -> None:
        """Move the log start up to `offset` (<= log end; DeleteRecords, a follower
        following its leader): persisted, segments wholly below deleted, the epoch cache
        cut, the HW raised to it if below (only a follower's can be)."""
        self._log_start_offset = offset
        self._write_offset_file(LOG_START_OFFSET_FILE, offset)
        self._delete_oldest(retention.below_start_offset(self._segs.segments, offset))
        self._producers.truncate_head(self._log_start_offset, self.directory)
        if self._high_watermark < offset:
            self._high_watermark = offset
            self._producers.on_high_watermark_updated(offset)
        self._epochs_cut(self._epochs.truncate_from_start(offset, flush=False))
        self._refresh_lso()

    def apply_retention(self, now_ms: int) -> int:
        """Under cleanup.policy delete, delete the oldest segments by retention.ms (their
        largest timestamp) and retention.bytes, never the active one nor one holding
        offsets at or above the high watermark. Returns the number deleted."""
        cfg = self._config
        if not cfg.delete:
            return 0
        with self._lock:
            self._check_open()
            hw = self.high_watermark
            n = self._delete_oldest(retention.expired_by_time(self._segs.segments, cfg, now_ms, hw))
            n += self._delete_oldest(retention.expired_by_size(self._segs.segments, cfg, hw))
            if n:  # producers stay (see producer_state); older snapshots go
                self._producers.truncate_head(self._log_start_offset, self.directory)
                self._epochs_cut(
                    self._epochs.truncate_from_start(self._log_start_offset, flush=False)
                )
                self._refresh_lso()
            return n

    def _delete_oldest(self, count: int) -> int:
        for seg in self._segs.segments[:count]:
            log.info("%s: deleting segment %s", self.topic_partition, seg.log_path.name)
            self._segs.drop(seg)
        if count:
            self._log_start_offset = max(self._log_start_offset, self._segs.bases[0])
        return count

    # -- producer expiry ---------------------------------------------------------------

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for `expiration_ms` (producer.id.expiration.ms) without an
        open transaction; returns how many."""
        with self._lock:
            if self._closed:
                return 0
            self._producers.producer_id_expiration_ms = expiration_ms
            return self._producers.remove_expired(now_ms)

    # -- cleaner support ---------------------------------------------------------------

    @property
    def first_dirty_offset(self) -> int:
        """Where the cleaner resumes: offsets below it have been compacted."""
        return self._first_dirty

    def set_first_dirty_offset(self, offset: int) -> None:
        with self._lock:
            self._first_dirty = offset
            self._write_offset_file(CLEANER_OFFSET_FILE, offset)

    @contextmanager
    def pinned(self) -> Iterator[tuple[tuple[LogSegment, ...], int]]:
        """(segments, generation) snapshot whose descriptors stay open until exit, even
        if retention deletes the segments meanwhile. For the cleaner's reads."""
        self._check_open()
        with self._segs.pinned() as snapshot:
            yield snapshot

    def replace_segments(self, old: Sequence[LogSegment], new: LogSegment, generation: int) -> bool:
        """Swap the fsynced `.cleaned` segment `new` in for the contiguous closed segments
        `old` (crash-safe; see `SegmentList.swap_in`). False, with nothing changed, if the
        log was closed or truncated since `generation` or `old` is gone."""
        with self._lock:
            return not self._closed and self._segs.swap_in(old, new, generation)
