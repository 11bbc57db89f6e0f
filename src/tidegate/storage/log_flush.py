"""How a `Log` becomes durable: `flush`, and the same in steps (`begin_flush`,
`sync_flush_files`, `write_flush_epochs`, then `end_flush` or `abort_flush`) so that
storage/flush_together.py can make many logs durable with one syncfs(2) between the
first step and the last.

A flush captures, under the log's lock, the log end (its target) and the files to sync
(the segments from the recovery point on, rolled segments' indexes, unsynced producer
snapshots, the directory if it changed, the leader-epoch checkpoint): a `FlushTicket`.
It syncs them outside the lock, then raises `recovery_point` to the target, unless a
truncation changed the segment list's generation meanwhile. The active segment's
indexes are left out, as Kafka does (`log`'s module docstring: the recovery-point
invariant, and why the checkpointed value never passes the active segment's base).

A mixin of `Log`, like `log_txn` and `log_replica`. Locking: `begin_flush` takes the
log's flush mutex (flushes are serialised) and holds it until `end_flush` or
`abort_flush`; the log's lock (`Log._lock`) is held only while capturing and while
raising the recovery point, never during an fsync; the segment list is pinned between
the two, so a segment removed meanwhile is closed only when the flush ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tidegate.storage.files import fsync_dir, fsync_if_exists
from tidegate.storage.leader_epochs import EpochEntry
from tidegate.storage.log_state import LogState
from tidegate.storage.segment import LogSegment

__all__ = ["FlushTicket", "FlushingLog"]


@dataclass(slots=True)
class FlushTicket:
    """What one flush makes durable (`Log.begin_flush`): the log end it reaches, the
    segment list's generation then (a truncation since voids it), and the files."""

    target: int
    generation: int
    active: LogSegment
    rolled: list[LogSegment]
    todo: Sequence[LogSegment]
    sync_dir: bool
    snapshots: list[Path]
    epochs: tuple[tuple[EpochEntry, ...], int] | None


class FlushingLog(LogState):
    """A part of `Log` (storage/log_state.py declares what it shares)."""

    def flush(self) -> int:
        """fdatasync everything appended so far; returns the new recovery point.

        Safe to call from a worker thread while another thread appends (module doc).
        """
        ticket = self.begin_flush()
        if ticket is None:
            return self._recovery_point
        try:
            self.sync_flush_files(ticket)
            self.write_flush_epochs(ticket)
        except OSError:
            if self.abort_flush(ticket):  # deleted under us: nothing left to make durable
                return self._recovery_point
            raise
        return self.end_flush(ticket)

    # `flush` in three steps, so that storage/flush_together.py can make many logs
    # durable with one syncfs(2) between the first and the last: `begin_flush` captures
    # what to sync (holding the flush mutex until `end_flush` or `abort_flush`),
    # `sync_flush_files` is the per-file way to sync it, then the epoch checkpoint is
    # written, and `end_flush` raises the recovery point to what was captured.

    def begin_flush(self) -> FlushTicket | None:
        """Capture the target and the files to sync; None if the log is closed. OSError
        if entries a full disk left queued still cannot be written (nothing held then)."""
        segs = self._segs
        self._flush_mutex.acquire()
        try:
            with self._lock:
                if self._closed:
                    self._flush_mutex.release()
                    return None
                active = segs.segments[-1]
                target = active.next_offset  # the log end
                generation = segs.generation
                todo: Sequence[LogSegment]
                if self._rolled_unsynced:
                    rolled = list(self._rolled_unsynced)  # a roll during the flush appends
                    start = min([self._recovery_point, *(seg.base_offset for seg in rolled)])
                    todo = segs.segments[segs.floor_index(start) :]
                else:
                    # no roll since the last flush: one segment to sync, as a rule (a
                    # 1,000-log flush round runs this per log; the slice and bisect were
                    # a tenth of its Python)
                    rolled = []
                    todo = ((active,) if self._recovery_point >= active.base_offset
                            else segs.segments[segs.floor_index(self._recovery_point) :])
                for seg in todo:  # entries a full disk left queued; raises until written
                    seg.write_pending()
                sync_dir, segs.dir_dirty = segs.dir_dirty, False
                snapshots, self._unsynced_snapshots = self._unsynced_snapshots, []
                epochs = self._epochs_to_write()  # covers every batch below `target`
                segs.pin()
        except BaseException:
            self._flush_mutex.release()
            raise
        return FlushTicket(target, generation, active, rolled, todo, sync_dir, snapshots,
                           epochs)

    def sync_flush_files(self, ticket: FlushTicket) -> None:
        """fsync each file the ticket lists (the active segment's indexes: module doc)."""
        for seg in ticket.todo:
            seg.sync(indexes=seg is not ticket.active)
        for path in ticket.snapshots:
            fsync_if_exists(path)
        if ticket.sync_dir:
            fsync_dir(self.directory)

    def write_flush_epochs(self, ticket: FlushTicket) -> None:
        """The leader epoch checkpoint the ticket captured, if any (its own fsync)."""
        if ticket.epochs is not None:
            self._write_epochs(*ticket.epochs)

    def abort_flush(self, ticket: FlushTicket) -> bool:
        """A sync failed: requeue the directory and snapshots for the next flush, keep
        the recovery point. True if the log was closed meanwhile."""
        segs = self._segs
        try:
            with self._lock:
                segs.dir_dirty = segs.dir_dirty or ticket.sync_dir
                self._unsynced_snapshots[:0] = ticket.snapshots
                return self._closed
        finally:
            segs.unpin()
            self._flush_mutex.release()

    def end_flush(self, ticket: FlushTicket) -> int:
        """Everything captured is durable: raise the recovery point to its target."""
        segs = self._segs
        try:
            segs.unpin()
            with self._lock:
                if ticket.generation == segs.generation and ticket.target > self._recovery_point:
                    self._recovery_point = ticket.target
                # synced above (if still in the log); those rolled since stay listed
                rolled = ticket.rolled
                if rolled:
                    self._rolled_unsynced = [s for s in self._rolled_unsynced
                                             if s not in rolled]
                self.last_flush_ms = self._clock.now_ms()
                return self._recovery_point
        finally:
            self._flush_mutex.release()
