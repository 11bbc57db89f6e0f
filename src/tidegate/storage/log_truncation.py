"""Truncation, the half of `Log` that cuts its tail or restarts it elsewhere.

What a follower does to a divergent tail (`truncate_to`, Kafka's truncateTo) and to a
log that fell below its leader's log start (`truncate_fully_and_start_at`, Kafka's
truncateFullyAndStartAt). Both run in worker threads (they may replay the log and
fsync): segments and indexes are cut, `.txnindex` entries whose marker is cut go with
them, the producer state is rewound (newest snapshot at or below the new end, then
replay), the epoch cache is cut, and the HW, LSO, log start and recovery point are
clamped. `Log.on_truncated` then lets the owner checkpoint the lowered recovery point.

A mixin of `Log`, like `log_txn` and `log_replica`: it relies on the invariants stated
in `log`'s module docstring (HW <= log end, the LSO only grows except by truncation,
the recovery point never above the log end) and restores them before it returns. Locking:
everything runs under the log's lock (`Log._lock`, the segment list's), except the
`on_truncated` call, made after the lock is released; the HW and LSO are clamped first,
so readers without the lock never see them above data that is going. A truncation bumps
the segment list's generation, which voids a flush or a cleaner swap captured before it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from tidegate.storage.log_state import LogState
from tidegate.storage.recovery import LOG_START_OFFSET_FILE, replay_producer_state
from tidegate.storage.segment import LogSegment

if TYPE_CHECKING:

    from tidegate.storage.log import Log

__all__ = ["TruncatingLog"]

# the log's logger: its lines keep the name they had before the split
log = logging.getLogger("tidegate.storage.log")


class TruncatingLog(LogState):
    """A part of `Log` (storage/log_state.py declares what it shares)."""

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding `offset` and everything after it; returns the new
        log end offset (<= `offset`). Truncating below the first segment empties the log
        and restarts it at `offset` (Kafka's truncateFullyAndStartAt).

        What a follower does to a divergent tail (cluster mode): segments and indexes
        are cut, `.txnindex` entries whose marker is cut go, the producer state is
        rewound (newest snapshot at or below the new end, then replay), the epoch cache
        is cut at the new end, the HW and LSO are clamped (the LSO may move back) and the
        recovery point drops to the new end; then `on_truncated` lets the owner
        checkpoint it at once. Cutting below the HW (an unclean election) is logged as
        a warning. It may replay and fsync: call it from a worker thread. Readers
        without the lock see the HW and LSO clamped before any data goes."""
        segs = self._segs
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                # Nothing to cut from the data, but an epoch that starts at the end (a
                # leadership in which nothing was written) goes, as Kafka's truncateTo
                # does: a follower left with it would announce an epoch its leader
                # never had and be told to truncate here again, forever.
                self._epochs_cut(self._epochs.truncate_from_end(offset, flush=False))
                return self.log_end_offset
            self._begin_truncation(offset)
            if offset < segs.bases[0]:
                self._reset_at(offset)
            else:
                # A segment starting at `offset` goes too, rather than stay empty: the
                # batches appended next then land where the leader's did (its segment
                # boundaries are decided by the batches before them, which both share).
                while len(segs.segments) > 1 and segs.bases[-1] >= offset:
                    segs.drop(segs.active)
                segs.active.truncate_to(offset)
                self._rewind_producer_state()
                self._epochs_cut(self._epochs.truncate_from_end(self.log_end_offset, flush=False))
            leo = self._finish_truncation()
        if self.on_truncated is not None:
            self.on_truncated(cast("Log", self))  # always a Log: this is its mixin
        return leo

    def truncate_fully_and_start_at(self, offset: int) -> int:
        """Delete every segment and restart the log, empty, at `offset` (Kafka's
        truncateFullyAndStartAt): a follower whose log end is below its leader's log
        start (its fetch answered OFFSET_OUT_OF_RANGE) starts over there. The producer
        state and epoch cache are emptied; HW = LSO = log start = log end = `offset`.
        Worker thread, like `truncate_to`. Returns `offset`."""
        with self._lock:
            self._check_open()
            self._begin_truncation(offset)
            self._reset_at(offset)
            leo = self._finish_truncation()
        if self.on_truncated is not None:
            self.on_truncated(cast("Log", self))  # always a Log: this is its mixin
        return leo

    def _begin_truncation(self, offset: int) -> None:
        if offset < self._high_watermark:
            log.warning(
                "%s: truncating to %d, below the high watermark %d: records that were "
                "committed are removed (unclean leader election?)",
                self.topic_partition, offset, self._high_watermark,
            )
        self._segs.generation += 1
        # Clamped first: loop-side readers take these without the lock.
        self._high_watermark = min(self._high_watermark, offset)
        self._last_stable_offset = min(self._last_stable_offset, offset)
        self._producers.on_high_watermark_updated(self._high_watermark)

    def _reset_at(self, offset: int) -> None:
        segs = self._segs
        keep = next((seg for seg in segs.segments if seg.base_offset == offset), None)
        if keep is not None:  # its files have the new segment's names: empty it instead
            keep.truncate_to(offset)
        else:  # created first, so a failure leaves the log as it was
            keep = LogSegment(
                self.directory, offset, self._config, self._clock.now_ms(), create=True
            )
            segs.append(keep)
        for seg in list(segs.segments):
            if seg is not keep:
                segs.drop(seg)
        self._log_start_offset = offset
        self._recovery_point = min(self._recovery_point, offset)
        self._write_offset_file(LOG_START_OFFSET_FILE, offset)
        self._producers.truncate_fully_and_start_at(self.directory, offset)
        self._epochs_cut(self._epochs.clear_and_flush(flush=False))

    def _finish_truncation(self) -> int:
        leo = self.log_end_offset
        self._log_start_offset = min(self._log_start_offset, leo)
        self._recovery_point = min(self._recovery_point, leo)
        self._high_watermark = min(max(self._high_watermark, self._log_start_offset), leo)
        self._producers.on_high_watermark_updated(self._high_watermark)
        self._refresh_lso(allow_backwards=True)
        if self._first_dirty > leo:
            self.set_first_dirty_offset(leo)
        return leo

    def _rewind_producer_state(self) -> None:
        """After a tail truncation: newest snapshot at or below the new end, then replay."""
        leo, psm = self.log_end_offset, self._producers
        lso = min(self._log_start_offset, leo)
        start = psm.truncate_tail(self.directory, leo, log_start_offset=lso)
        replay_producer_state(psm, self._segs.segments, start, self._clock.now_ms())
