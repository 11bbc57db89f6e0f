"""The transactional half of `Log`: high watermark, last stable offset, markers,
aborted-transaction queries, KIP-890 guards and the producer admin view.

A mixin so `log.py` keeps the append/read/retention machinery and this file the rules
read_committed consumers and the transaction coordinator rely on; the invariants (HW,
LSO, txn index) are stated in `log`'s module docstring. Everything here runs under the
log's lock, like the rest of `Log`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tidegate.storage.log_state import LogState
from tidegate.storage.markers import build_marker
from tidegate.storage.producer_state import ProducerInfo
from tidegate.storage.txn_index import AbortedTxn, collect_aborted

if TYPE_CHECKING:
    from tidegate.storage.log_append import AppendInfo

__all__ = ["TransactionalLog"]


class TransactionalLog(LogState):
    """A part of `Log` (storage/log_state.py declares what it shares)."""

    @property
    def high_watermark(self) -> int:
        """Offsets below it are durable (or replicated): visible to read_uncommitted
        consumers. Moved by `update_high_watermark`; only truncation lowers it."""
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """read_committed consumers read below it: min(first offset of the oldest
        transaction still open or whose marker the high watermark has not passed, high
        watermark), at least the log start offset; it never moves backwards except
        through truncation."""
        return self._last_stable_offset

    def update_high_watermark(self, offset: int) -> bool:
        """Move the high watermark forward to `offset` (clamped to the log end); True if
        it moved. Transactions whose marker it passes become stable (the LSO moves)."""
        with self._lock:
            return self._advance_hw_locked(offset)

    def _advance_hw_locked(self, offset: int) -> bool:
        """`update_high_watermark` under the lock (also `append(advance_hw=True)`)."""
        offset = min(offset, self._segs.segments[-1].next_offset)  # (the active segment's)
        if offset <= self._high_watermark:
            return False
        self._high_watermark = offset
        if self._producers.on_high_watermark_updated(offset):
            self._refresh_lso()
        else:  # no transaction here: `_refresh_lso` with no unstable offset, inline
            self._last_stable_offset = max(offset, self._log_start_offset,
                                           self._last_stable_offset)
        return True

    @staticmethod
    def advance_to_recovery_points(targets: Iterable[object]) -> list[TransactionalLog]:
        """After a flush round on one node: each fsync-per-write log among `targets`
        moves its high watermark to its recovery point (`update_high_watermark(
        recovery_point)` for each, in one call, not a chain of calls per log). Returns
        the logs whose high watermark moved."""
        moved = []
        for lg in targets:
            if isinstance(lg, TransactionalLog) and lg.syncs_every_write:
                with lg._lock:
                    if lg._advance_hw_locked(lg._recovery_point):
                        moved.append(lg)
        return moved

    def set_high_watermark_as_follower(self, leader_high_watermark: int) -> bool:
        """A follower's HW after a fetch: the leader's, capped by this log's end (it may
        not have fetched that far yet). True if it moved.

        It stays or rises, never falls: Kafka's follower takes a lower value too (a new
        leader's HW may lag its predecessor's), but an offset once below the HW was in
        every in-sync replica, so a new leader from the ISR has it and it is committed
        for good; only truncation (an unclean election) lowers the HW. Keeping it keeps
        the LSO, which follows the HW here exactly as on the leader, from moving back.
        Transactions whose marker the new HW passes become stable."""
        return self.update_high_watermark(leader_high_watermark)

    def _refresh_lso(self, *, allow_backwards: bool = False) -> None:
        first = self._producers.first_unstable_offset()
        hw = self._high_watermark
        lso = max(hw if first is None else min(first, hw), self._log_start_offset)
        self._last_stable_offset = lso if allow_backwards else max(self._last_stable_offset, lso)

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int | None = None,
        *,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Write a COMMIT or ABORT marker (WriteTxnMarkers). It ends the producer's open
        transaction here, if any (an abort goes to the txn index); without one it is
        still written and completes nothing (a retried or empty transaction's marker).
        INVALID_PRODUCER_EPOCH for an older producer epoch, TRANSACTION_COORDINATOR_FENCED
        for an older coordinator epoch. `leader_epoch` is stamped as in `Log.append`."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        data = build_marker(producer_id, producer_epoch, coordinator_epoch, commit, now)
        return self.append_control(
            data, now_ms=now, coordinator_epoch=coordinator_epoch, leader_epoch=leader_epoch
        )

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound_offset), from the
        txn indexes of the segments from the one holding `start_offset` on, ordered by
        first offset (what a read_committed Fetch reports with the batches it returns)."""
        with self._lock:
            self._check_open()
            segs = self._segs
            indexes = [s.txn_index for s in segs.segments[segs.floor_index(start_offset) :]]
            found = collect_aborted(indexes, start_offset, upper_bound_offset)
        return [AbortedTxn(e.producer_id, e.first_offset) for e in found]

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction here (hanging-transaction
        tools compare them with the coordinators' state)."""
        with self._lock:
            return self._producers.ongoing_transactions()

    def describe_producers(self) -> list[ProducerInfo]:
        """DescribeProducers: the producers this partition remembers, by producer id."""
        with self._lock:
            return self._producers.describe()

    def needs_verification(self, producer_id: int, producer_epoch: int | None = None) -> bool:
        """True if a transactional batch of `producer_id` (at `producer_epoch`) would
        start a transaction here, so Produce must verify the partition with the
        coordinator (KIP-890)."""
        with self._lock:
            return self._producers.needs_verification(producer_id, producer_epoch)

    def begin_verification(self, producer_id: int, producer_epoch: int) -> object:
        """A guard to take before asking the coordinator and to pass to `append` as
        `verification_guard`; a marker or newer epoch of the producer written meanwhile
        makes it stale (see `storage.verification`)."""
        with self._lock:
            now = self._clock.now_ms()
            return self._producers.begin_verification(producer_id, producer_epoch, now)
