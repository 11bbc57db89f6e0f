"""Rolling a `Log`'s active segment: the next append goes to a new one.

When: Kafka's rule (`LogSegment.should_roll`): the batch would not fit segment.bytes,
the segment is older than segment.ms, an index is full, or the batch's offsets would
overflow its relative offsets (an empty segment is then rebased, not rolled). Both
appends use it: the producer's (`log_append`) and the follower's (`log_replica`).

What a roll does: create the new segment's files, snapshot the producer state at its
base offset (as Kafka does; unsynced, since the roll may run on the event loop: the
next `flush` fsyncs the newest two snapshots, the only ones kept), queue the old
segment's last time index entry and write its queued index entries, and hand it to the
next flush, which fsyncs its indexes (`_rolled_unsynced`: until then it holds the
checkpointed recovery point back, see `Log.recovery_point_to_checkpoint`).

A roll that fails (a full disk) leaves the log as it was: above all no stray empty
`<log end>.log`, which the next start would take for the active segment, cutting
whatever was appended to this one since. A mixin of `Log`, under the log's lock.
"""

from __future__ import annotations

from tidegate.storage.files import INDEX_EXT, LOG_EXT, TIMEINDEX_EXT, TXNINDEX_EXT, segment_path
from tidegate.storage.log_state import LogState
from tidegate.storage.segment import LogSegment

__all__ = ["RollingLog"]


class RollingLog(LogState):
    """A part of `Log` (storage/log_state.py declares what it shares)."""

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now: int) -> LogSegment:
        """The segment to append to, rolling first when due. The steps that can fail (a
        full disk) come first and are undone on failure, so a failed roll leaves the log
        as it was: above all no stray empty `<log end>.log`, which the next start would
        take for the active segment, cutting whatever was appended to this one since."""
        active = self._segs.active
        if not active.should_roll(size, max_ts, last_offset, now):
            return active
        leo = active.next_offset
        new = self._create_segment(leo, now, keep=active)
        try:
            # Snapshot at the new segment's base, as Kafka does; fsynced by the next
            # flush (only the newest two exist, so only they need it).
            path = self._producers.take_snapshot(self.directory, sync=False)
        except BaseException:
            if new.base_offset != active.base_offset:
                new.close()
                new.delete_files()
            raise
        if active.size == 0:  # empty, yet relative offsets would overflow: rebase it
            self._segs.drop(active)
        else:
            active.on_become_inactive()  # its last time index entry may stay queued
            self._rolled_unsynced.append(active)  # indexes fsynced by the next flush
        self._segs.append(new)
        self._unsynced_snapshots = [*self._unsynced_snapshots[-1:], path]
        return new

    def _create_segment(self, base: int, now: int, *, keep: LogSegment) -> LogSegment:
        """A new empty segment at `base`; if creating it fails, the files it made are
        removed (unless they are `keep`'s)."""
        try:
            return LogSegment(self.directory, base, self._config, now, create=True)
        except BaseException:
            if base != keep.base_offset:
                for ext in (LOG_EXT, INDEX_EXT, TIMEINDEX_EXT, TXNINDEX_EXT):
                    segment_path(self.directory, base, ext).unlink(missing_ok=True)
            raise
