"""How a `Log` ends: clean close, deletion (rename now, remove later), and the small
offset files its other parts write.

`close` is the last flush: every segment's pending index entries are written and
fsynced, the unsynced roll snapshots too, the producer state is snapshotted at the log
end (so the next start replays nothing), the epoch checkpoint written, and the
`.clean_shutdown` marker fsynced with the directory, so the next start trusts the
files. `delete` = `close_for_delete` (closes, renames the directory to
`<dir>.<uuid>-delete`: quick, fit for the event loop) + `remove_deleted_dir` (makes the
rename durable and removes the files: a worker thread's job; a crash before the end
leaves the `-delete` directory, which the next start removes).

A mixin of `Log`, like `log_txn` and `log_replica`; the recovery-point invariant of
`log`'s module docstring holds at close (everything is synced, so it becomes the log
end). Locking: `close` takes the flush mutex, then the log's lock (`Log._lock`), so it
waits for a running flush; `close_for_delete` holds the log's lock while it retires the
segments, and renames outside it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from tidegate.storage.files import atomic_write, fsync_dir, fsync_if_exists
from tidegate.storage.log_state import LogState
from tidegate.storage.recovery import CLEAN_SHUTDOWN_FILE

__all__ = ["LifecycleLog", "remove_deleted_dir"]


class LifecycleLog(LogState):
    """A part of `Log` (storage/log_state.py declares what it shares)."""

    def close(self) -> None:
        """Flush, snapshot the producer state (unless the log is empty and has no
        producers), mark a clean shutdown, close the files. Idempotent."""
        with self._flush_mutex, self._lock:
            if self._closed:
                return
            self._segs.active.on_become_inactive()
            for seg in self._segs.segments:
                seg.write_pending()
                seg.sync()
            self._rolled_unsynced = []
            for path in self._unsynced_snapshots:
                fsync_if_exists(path)
            self._unsynced_snapshots = []
            if self._producers.producers or self.log_end_offset > self._log_start_offset:
                self._producers.take_snapshot(self.directory)  # at the end: no replay at open
            self._persist_epochs()  # a clean start trusts it for every segment
            fd = os.open(self.directory / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
            os.fsync(fd)
            os.close(fd)
            fsync_dir(self.directory)
            self._recovery_point = self.log_end_offset
            self._closed = True
            for seg in self._segs.segments:
                self._segs.retire(seg)

    def delete(self) -> None:
        """Close and remove the directory (renamed to `<dir>.<uuid>-delete` first, as
        Kafka does, so a crash midway leaves nothing that loads as a partition)."""
        remove_deleted_dir(self.close_for_delete())

    def close_for_delete(self) -> Path | None:
        """The quick half of `delete` (fit for the event loop): close the log and rename
        its directory to `<dir>.<uuid>-delete`, so the name is free at once for a new
        replica of the partition. Returns the renamed directory (None if there was none)
        for `remove_deleted_dir`, the slow half, to remove in a worker thread."""
        with self._lock:
            self._closed = True
            for seg in self._segs.segments:
                self._segs.retire(seg)
        if not self.directory.exists():
            return None
        doomed = self.directory.with_name(f"{self.directory.name}.{uuid.uuid4().hex}-delete")
        os.replace(self.directory, doomed)
        return doomed

    def _write_offset_file(self, name: str, value: int) -> None:
        atomic_write(self.directory / name, f"{value}\n".encode())


def remove_deleted_dir(doomed: Path | None) -> None:
    """The slow half of `Log.delete` (a worker thread's job): make the rename durable,
    then remove the files. A crash before the end leaves the `-delete` directory, which
    the next start removes (LogManager.load)."""
    if doomed is None:
        return
    fsync_dir(doomed.parent)
    shutil.rmtree(doomed, ignore_errors=True)
