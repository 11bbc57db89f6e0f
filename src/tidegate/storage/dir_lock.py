"""`LogDirLock`: one broker per log directory, as Kafka's `<log.dirs>/.lock`.

`LogDirLock.acquire(directory)` takes an exclusive, non-blocking `flock` on
`<directory>/.lock` and writes the holder's pid into it; a second broker (another
process, or another `LogDirLock` in the same process) gets `LogDirLockedError` with
Kafka's wording and, when it can be known, the holder's pid.

Invariants: the lock is taken before any other file of the directory is read or
written (only the directory itself may be created first); it is an OS lock on an open
file description, so the kernel drops it when the holder dies — kill -9 never leaves
a stale lock, and a leftover `.lock` file means nothing by itself. The file is never
deleted (deleting it would let a newcomer lock a fresh inode while the old holder
still holds the old one); `release()` empties it and unlocks.

`LogDirLocks.acquire(directories)` locks every directory of `log.dirs` (JBOD) in order,
releasing those it took if one is held elsewhere.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from tidegate.storage.errors import LogDirectoryError

__all__ = ["LOCK_FILE", "LogDirLock", "LogDirLockedError", "LogDirLocks"]

LOCK_FILE = ".lock"


class LogDirLockedError(LogDirectoryError):
    """Another broker holds the log directory."""

    def __init__(self, directory: Path, holder: int | None) -> None:
        who = (
            f" It is held by process {holder}."
            if holder is not None
            else " The holding process is not known."
        )
        super().__init__(
            f"Failed to acquire lock on file {LOCK_FILE} in {directory}. A Kafka instance "
            f"in another process or thread is using this directory.{who} Stop that "
            f"broker, or point log.dirs at another directory."
        )
        self.directory = directory
        self.holder = holder


class LogDirLock:
    """An acquired lock; `release()` (or process exit) gives it up."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path | str) -> LogDirLock:
        """Lock `directory` (created if missing) or raise `LogDirLockedError`."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_pid(fd) if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise LogDirLockedError(d.resolve(), holder) from None
            raise
        try:
            # Best effort: the pid only improves the message a second broker prints
            # (a full disk may refuse even these few bytes; the lock holds regardless).
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        return cls(d, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> LogDirLock:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


class LogDirLocks:
    """The locks of every directory of `log.dirs` (JBOD), taken in order; if one is
    held elsewhere, those already taken are released before the error is raised."""

    def __init__(self, locks: list[LogDirLock]) -> None:
        self.locks = locks

    @classmethod
    def acquire(cls, directories: list[Path]) -> LogDirLocks:
        seen: set[str] = set()
        for d in directories:  # else the second lock would report this very broker
            if os.path.abspath(d) in seen:
                raise LogDirectoryError(f"log.dirs names {d} twice")
            seen.add(os.path.abspath(d))
        taken: list[LogDirLock] = []
        try:
            for d in directories:
                taken.append(LogDirLock.acquire(d))
        except BaseException:
            for lock in taken:
                lock.release()
            raise
        return cls(taken)

    @property
    def held(self) -> bool:
        return all(lock.held for lock in self.locks)

    def release(self) -> None:
        for lock in self.locks:
            lock.release()


def _read_pid(fd: int) -> int | None:
    """The pid the holder wrote, if any (it writes it right after locking, so a
    newcomer racing that write may find the file empty)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else _pid_from_proc_locks(fd)


def _pid_from_proc_locks(fd: int) -> int | None:
    """Linux: the owner of an flock on this inode, from /proc/locks."""
    try:
        st = os.fstat(fd)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if (len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want
                and parts[4].isdigit() and int(parts[4]) != os.getpid()):
            return int(parts[4])
    return None
