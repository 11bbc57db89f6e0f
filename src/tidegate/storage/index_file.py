"""The file half of a sparse segment index: fixed-size big-endian entries, appended.

Subclasses (`OffsetIndex`, `TimeIndex`) keep their entries in memory as arrays for
binary search; this base owns the file: it appends encoded entries, truncates, syncs,
closes and deletes; its descriptor comes from the process's bounded LRU (`file_cache`),
so it may be closed between uses and reopened. Files are not preallocated: the file
length is always a whole number of entries written so far, so a file is trustworthy iff
its entries pass the subclass's sanity check (and the segment's check against the log).
Anything else is rebuilt.

Thread-safety: every method except `sync` runs on the thread that owns the log (under
the log's lock). `sync` may run concurrently from a flusher thread: it only fsyncs the
file descriptor, pinned while it does (an eviction cannot close it meanwhile), and the
index is never closed while a flush may use it (the log defers `close` until no flush
is in progress).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Sequence
from operator import le, lt
from pathlib import Path

from tidegate.storage.errors import CorruptIndexError
from tidegate.storage.file_cache import FILES

__all__ = ["IndexFile", "increasing"]


def increasing(values: Sequence[int], *, strict: bool = True) -> bool:
    """Whether `values` (strictly) increase: at C speed, as a start checks every index
    entry of every segment (a 1 GiB segment has 262,144); the per-entry loops that name
    the bad entry run only when this says no."""
    return all(map(lt if strict else le, values, values[1:]))


class IndexFile:
    entry_size = 0  # set by subclasses
    # Each entry's offset relative to the base (subclasses keep one array per column):
    # `is_full` reads it directly, as the segment asks at every append (`should_roll`).
    _rel: array[int]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        # through the process's LRU of descriptors (file_cache): pinned per operation
        self._file = FILES.open(path, os.O_RDWR | os.O_CREAT)
        self._pending = bytearray()  # encoded entries not yet written
        self._written = 0  # entries in the file
        self._dirty = False  # written since the last sync
        self._closed = False

    # -- subclass hooks ----------------------------------------------------------------

    def _load_entries(self, data: bytes) -> None:
        raise NotImplementedError

    def _truncate_entries(self, count: int) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    # -- file handling -----------------------------------------------------------------

    def load(self) -> None:
        """Read the file into memory. CorruptIndexError if it is not whole entries."""
        with self._file as fd:
            size = os.fstat(fd).st_size
            if size % self.entry_size:
                raise CorruptIndexError(
                    f"{self.path}: size {size} is not a multiple of {self.entry_size}"
                )
            data = os.pread(fd, size, 0) if size else b""
        if len(data) != size:
            raise CorruptIndexError(f"{self.path}: short read")
        self._load_entries(data)
        self._written = size // self.entry_size

    @property
    def is_full(self) -> bool:
        return len(self._rel) >= self.max_entries

    def _queue(self, encoded: bytes) -> None:
        self._pending += encoded

    @property
    def pending_bytes(self) -> int:
        """Encoded entries queued, not yet written (the owner decides when to write)."""
        return len(self._pending)

    def write_pending(self) -> None:
        """Write queued entries to the file (one write per append of the segment)."""
        if not self._pending:
            return
        data = bytes(self._pending)
        pos = self._written * self.entry_size
        view = memoryview(data)
        with self._file as fd:
            while view:  # a failure (disk full) keeps the entries queued for the next write
                n = os.pwrite(fd, view, pos)
                view = view[n:]
                pos += n
        self._pending.clear()
        self._written += len(data) // self.entry_size
        self._dirty = True

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries, in memory and on disk. A full disk does
        not fail it: queued entries it cannot write first stay queued (those past
        `count` are dropped)."""
        try:
            self.write_pending()
        except OSError:
            pass  # handled below: the file has `_written` entries
        if count >= len(self):
            return
        self._truncate_entries(count)
        if count <= self._written:
            self._pending.clear()
            with self._file as fd:
                os.ftruncate(fd, count * self.entry_size)  # shrinking needs no space
            self._written = count
            self._dirty = True
        else:
            del self._pending[(count - self._written) * self.entry_size :]

    def reset(self) -> None:
        self.truncate_entries(0)

    def sync(self) -> None:
        """fdatasync if anything was written since the last sync (flusher thread)."""
        if self._dirty and not self._closed:
            self._dirty = False
            with self._file as fd:
                os.fdatasync(fd)

    def rename(self, path: Path) -> None:
        with self._file:  # open across the rename: a flusher never reopens a stale path
            os.replace(self.path, path)
            self.path = self._file.path = path

    def close(self) -> None:
        if not self._closed:
            self.write_pending()
            self._closed = True
            self._file.close()

    def discard_pending(self) -> None:
        """Forget queued entries: the file is about to be unlinked (its close must not
        write, nor fail on a full disk, for entries nobody will read)."""
        self._pending.clear()

    def hold_open(self) -> None:
        """Keep the descriptor until `close`: the file is about to be unlinked."""
        if not self._closed:
            self._file.hold()

    def delete(self) -> None:
        self.discard_pending()
        self.hold_open()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
