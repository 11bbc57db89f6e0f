"""A bound on the segment files a process holds open: an LRU of file descriptors.

Kafka keeps every segment's `.log`, `.index` and `.timeindex` open for as long as the
segment lives, so its open files grow with partitions x segments and operators raise
`ulimit -n` to match. Tidegate bounds them instead: segments and indexes open their
files through `FILES`, a process-wide `FileCache` holding at most
`log.max.open.files` descriptors (Tidegate-specific; 0 = half the process's soft
RLIMIT_NOFILE, leaving the rest to sockets). The least recently used one is closed when
another must open, and reopened (one open(2), a few microseconds) at its next use.

Use: `with cached as fd:` around each operation (pread, pwrite, ftruncate, fdatasync)
pins the descriptor for its duration; eviction never closes a pinned one, so another
thread's eviction can never close a number in use (which the kernel could hand to a
different file at once). When every open descriptor is pinned the cache runs over its
bound for a moment rather than fail. `hold()` pins one for good: a segment whose files
are unlinked (retention, the cleaner) keeps them readable and syncable until `close`,
as a plain descriptor did.

Durability: closing a written file loses nothing. fdatasync through a later descriptor
flushes every dirty page of the file (Linux syncs the inode, not the descriptor), and a
write-back error no descriptor has reported yet is reported to a newly opened one too.
Callers keep their own "written since the last sync" flags, never per descriptor.

A first open may create or truncate (`flags`); reopening uses O_RDWR without O_CREAT /
O_TRUNC, so a file deleted behind the cache's back is never recreated empty.

Thread-safety: one lock guards the LRU and every reopen; a first open (`open`), the
close of the descriptors it evicts, and the I/O itself run outside it.
"""

from __future__ import annotations

import errno
import os
import resource
import threading
from collections import OrderedDict
from pathlib import Path

__all__ = ["FILES", "CachedFile", "FileCache", "default_max_open_files"]

MIN_OPEN_FILES = 16  # a segment needs three: leave room for a few at any bound


def default_max_open_files() -> int:
    """Half the soft open-files limit (the rest is for sockets and everything else)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 20
    return max(MIN_OPEN_FILES, soft // 2)


class CachedFile:
    """One file opened through a `FileCache`; `with f as fd:` to use its descriptor."""

    __slots__ = ("_cache", "_fd", "_flags", "_held", "_opened", "_pins", "closed", "path")

    def __init__(self, cache: FileCache, path: Path, flags: int) -> None:
        self._cache = cache
        self.path = path  # the owner updates it when it renames the file
        self._flags = flags
        self._fd: int | None = None
        self._pins = 0
        self._held = False
        self._opened = False
        self.closed = False

    @property
    def is_open(self) -> bool:
        """Whether a descriptor is open now (for tests and the bench)."""
        return self._fd is not None

    # Pinning is done here, under the cache's lock, without a call into the cache while
    # the descriptor is open: every segment write and read goes through these.
    def __enter__(self) -> int:
        cache = self._cache
        with cache._lock:
            fd = self._fd
            if fd is None or self.closed:
                fd = cache._open_locked(self)  # (re)open, or EBADF if closed
            else:
                cache._open.move_to_end(self)
            self._pins += 1
            return fd

    def __exit__(self, *_exc: object) -> None:
        cache = self._cache
        with cache._lock:
            self._pins -= 1
            if self.closed and not self._pins:
                cache._drop(self)

    def hold(self) -> None:
        """Keep the descriptor open until `close` (the file is about to be unlinked)."""
        self._cache._hold(self)

    def close(self) -> None:
        self._cache._close(self)


class FileCache:
    def __init__(self, max_open: int = 0) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[CachedFile, None] = OrderedDict()  # LRU first
        self.max_open = max_open or default_max_open_files()
        self.reopens = 0  # opens of a file evicted before (for the bench and tests)

    def set_max_open(self, max_open: int) -> None:
        """`log.max.open.files`; 0 = the default. Applies from the next open."""
        with self._lock:
            self.max_open = max(MIN_OPEN_FILES, max_open or default_max_open_files())
            self._evict()

    @property
    def open_count(self) -> int:
        return len(self._open)

    def open(self, path: Path, flags: int) -> CachedFile:
        """Open `path` now (creating/truncating per `flags`: errors surface here)."""
        f = CachedFile(self, path, flags)
        # The open(2) (and the victims' close(2)) outside the lock: `f` is not shared
        # yet, and a start opens 40,000 files on several threads at once, which one
        # lock held across each syscall made wait in line (a fifth of a start at
        # 10,000 partitions).
        fd = os.open(path, flags, 0o644)
        f._opened = True
        f._flags &= ~(os.O_CREAT | os.O_TRUNC | os.O_EXCL)
        with self._lock:
            f._fd = fd
            self._open[f] = None
            doomed = self._evict(keep=f, close=False)
        for victim_fd in doomed:
            os.close(victim_fd)
        return f

    # -- under the lock --------------------------------------------------------------

    def _open_locked(self, f: CachedFile) -> int:
        if f.closed:
            raise OSError(errno.EBADF, f"{f.path}: file closed")
        fd = f._fd
        if fd is not None:
            self._open.move_to_end(f)
            return fd
        fd = os.open(f.path, f._flags, 0o644)
        if f._opened:
            self.reopens += 1
        f._opened = True
        f._flags &= ~(os.O_CREAT | os.O_TRUNC | os.O_EXCL)
        f._fd = fd
        self._open[f] = None
        self._evict(keep=f)
        return fd

    def _evict(self, keep: CachedFile | None = None, *, close: bool = True) -> list[int]:
        """Drop the least recently used unpinned descriptors over the bound; with
        `close=False` their numbers are returned for the caller to close once it has
        released the lock (safe: unpinned, and no longer reachable through the cache)."""
        excess = len(self._open) - self.max_open
        if excess <= 0:
            return []
        victims = []
        for victim in self._open:  # oldest first; pinned ones are few and brief
            if not (victim._pins or victim._held or victim is keep):
                victims.append(victim)
                if len(victims) == excess:
                    break
        doomed = []
        for victim in victims:
            fd = self._drop(victim, close=close)
            if fd is not None:
                doomed.append(fd)
        return doomed

    def _hold(self, f: CachedFile) -> None:
        with self._lock:
            self._open_locked(f)
            f._held = True

    def _close(self, f: CachedFile) -> None:
        with self._lock:
            f.closed = True
            if not f._pins:  # else the last unpin closes it
                self._drop(f)

    def _drop(self, f: CachedFile, *, close: bool = True) -> int | None:
        fd, f._fd = f._fd, None
        self._open.pop(f, None)
        if fd is not None and close:
            os.close(fd)
            return None
        return fd


# The process's cache: RLIMIT_NOFILE is per process, so is the bound. The broker sets
# it from log.max.open.files (server/broker.py).
FILES = FileCache()
