"""Make many logs durable with one syncfs(2) per log directory instead of an fsync each.

With a thousand partitions each acknowledged write is its own fsync: measured on the
CI machine's ext4, 1,000 files with 1 KiB appended each took 105-190 ms to fdatasync one
by one, 56-84 ms on 8 threads, and 5-8 ms with ONE syncfs. `flush_together` runs in a
worker thread (server/durability.py hands it a round of dirty logs): it captures what
each log must make durable (`Log.begin_flush`: the log end, the segments, snapshots and
directory to sync), calls syncfs once per log directory, then raises each log's
recovery point to what it captured (`Log.end_flush`), exactly as `Log.flush` does.

Why this is as durable as the fsyncs: syncfs writes back every dirty inode and data page
of the file system, waits for them, and commits the journal with a cache flush before
it returns — a superset of fdatasync on each captured file, of the directory fsync, and
of the snapshot fsyncs (everything captured was written before the call).

Errors: syncfs reports writeback errors since Linux 5.8 (`files.syncfs_reporting_errors`,
None before: then this is never used). The call goes through a descriptor of the log
directory opened when the broker started (`SyncfsDirs`), so its error cursor predates
every write it covers: a descriptor opened at the call would not report a write lost to
background writeback before it. On any syncfs error every log of the round falls back to
`Log.flush` (fsync of each file: each file's own descriptor still reports its error, and
the segments' dirty flags were left set), so the logs that lost writes fail and the
others succeed, as without this module.

Rounds share syncfs calls (`SyncfsDirs.sync`). Several rounds are often in flight at
once (logs kicked in different loop iterations; one per flush thread), and they used to
queue on the directory one syncfs after another, the last waiting for all the others'
(py-spy at 1,000 partitions: the flush threads spent most of their time on that lock).
A syncfs writes back everything dirty when it STARTS, so a round that arrives while one
is running waits for the next one to start and end: every round that arrived during a
call shares that next one, and a round waits at most for the running call and one more,
never for a queue. Its logs' recovery points still only reach what the round captured
before asking, and the call that covers it started after that. A failed call fails the
rounds that waited for it AND those that arrived while it ran (its error is reported
once through the shared descriptor, and their data may have been in the writeback that
failed): all of them fall back to per-file fsyncs.

After a failed call the directory's syncfs is not trusted again: its logs are fsynced
file by file from then on (logged once). A syncfs writes back every dirty page of the
file system, so a failed one may have lost the pages of a log that was in no round at
the time; that log's next syncfs would report nothing (the error went to the shared
descriptor once), but its own descriptor's fsync still reports the lost write.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tidegate.storage.files import syncfs_reporting_errors
from tidegate.storage.log import FlushTicket, Log

log = logging.getLogger(__name__)


class SyncfsDirs:
    """A long-lived descriptor per log directory to call syncfs on (module doc)."""

    def __init__(self, dirs: Iterable[Path | str],
                 syncfs: Callable[[int], None] | None = None) -> None:
        self.syncfs = syncfs if syncfs is not None else syncfs_reporting_errors()
        self._fds: dict[str, int] = {}  # log dir (as given and resolved) -> descriptor
        # a partition directory (str) -> its log dir, or None: dirname per log per round
        # was a tenth of a 1,000-log round's Python (a renamed directory is a new key)
        self._parents: dict[str, str | None] = {}
        self._lock = threading.Lock()
        self._turn = threading.Condition(self._lock)
        # descriptor -> [syncfs calls started, ended, running?]; one call at a time per
        # descriptor, shared by every round that arrived before it started (module doc)
        self._calls: dict[int, list[int]] = {}
        self._failed: dict[tuple[int, int], OSError] = {}  # (fd, call number) -> error
        self._forgotten = 0  # calls up to this number may have failed (pruned from there)
        self._retired: list[int] = []  # descriptors of directories given up (module doc)
        if self.syncfs is None:
            return
        for d in dirs:
            path = Path(d)
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            except OSError as e:  # its logs keep the per-file fsyncs
                log.warning("log directory %s: no syncfs for group commit (%s)", path, e)
                continue
            # a log's directory is <log dir>/<topic>-<n>, as given or resolved
            self._fds[str(path)] = self._fds[str(path.resolve())] = fd

    @property
    def available(self) -> bool:
        return self.syncfs is not None and bool(self._fds)

    def log_dir(self, lg: Log) -> str | None:
        """The log directory of `lg` if it has a descriptor here (strings, not Paths:
        pathlib's parent and hash were a third of a 1,000-log round's CPU)."""
        path = str(lg.directory)
        try:
            return self._parents[path]
        except KeyError:
            pass
        log_dir = os.path.dirname(path)
        found = log_dir if log_dir in self._fds else None
        if len(self._parents) > 100_000:  # partitions deleted and created for ever
            self._parents.clear()
        self._parents[path] = found
        return found

    def sync(self, log_dir: str) -> None:
        """Return once a syncfs of `log_dir`'s file system that started after this call
        was made has ended (shared with the other rounds waiting: module doc)."""
        with self._turn:
            fd = self._fds.get(log_dir)
            syncfs = self.syncfs
            if fd is None or syncfs is None:
                raise OSError(f"no syncfs descriptor for {log_dir}")
            calls = self._calls.setdefault(fd, [0, 0, 0])
            need = calls[0] + 1  # the first call to START from now on covers this round
            while calls[1] < need:
                if not calls[2]:
                    if self._fds.get(log_dir) != fd:  # closed while waiting
                        raise OSError(f"no syncfs descriptor for {log_dir}")
                    break  # none running: start it (it is call `need`)
                self._turn.wait()
            else:  # a call that started after this one arrived has ended
                failed = self._failed.get((fd, need))
                if failed is None and need <= self._forgotten:
                    failed = OSError(f"syncfs of {log_dir} failed")  # pruned: assume it
                if failed is not None:
                    raise failed
                return
            calls[0] = number = need
            calls[2] = 1
        error: OSError | None = None
        try:
            syncfs(fd)
        except BaseException as e:  # whatever it was, the call covered nobody
            error = e if isinstance(e, OSError) else OSError(f"syncfs: {e!r}")
            raise
        finally:
            with self._turn:
                calls[1], calls[2] = number, 0
                if error is not None:
                    # the rounds that arrived during this call fail too (module doc): the
                    # next call number is theirs, spent as failed (no call is running)
                    calls[0] = calls[1] = number + 1
                    self._failed[(fd, number)] = self._failed[(fd, number + 1)] = error
                    self._give_up(fd, log_dir, error)
                    if len(self._failed) > 64:  # a failing disk, for ever
                        for key in sorted(self._failed)[:-8]:
                            self._forgotten = max(self._forgotten, key[1])
                            del self._failed[key]
                self._turn.notify_all()

    def _give_up(self, fd: int, log_dir: str, error: OSError) -> None:
        """After a failed call (under the lock): the directory's logs are fsynced file
        by file from now on (module doc); its descriptor is closed by `close`."""
        names = [name for name, d in self._fds.items() if d == fd]
        if not names:
            return
        for name in names:
            del self._fds[name]
        self._retired.append(fd)
        self._parents = {}  # its logs' next rounds find no descriptor
        log.error("syncfs of %s failed (%s): its logs are fsynced file by file from now on",
                  log_dir, error)

    def close(self) -> None:
        with self._turn:
            while any(calls[2] for calls in self._calls.values()):
                self._turn.wait()  # never free a descriptor under a running call
            fds, self._fds = self._fds, {}
            retired, self._retired = self._retired, []
            self._parents = {}  # no log has a descriptor here any more
            self._turn.notify_all()
        for fd in set(fds.values()) | set(retired):
            os.close(fd)


def flush_together(logs: Sequence[Log], dirs: SyncfsDirs) -> list[int | OSError]:
    """Flush every log in `logs` (in a worker thread); per log, its new recovery point
    or the OSError that failed its flush. Logs outside `dirs` are flushed one by one."""
    results: list[int | OSError] = [0] * len(logs)
    begun: list[tuple[int, Log, FlushTicket]] = []
    log_dirs: set[str] = set()
    for i, lg in enumerate(logs):
        log_dir = dirs.log_dir(lg)
        if log_dir is None:
            results[i] = _flush_one(lg)
            continue
        log_dirs.add(log_dir)
        try:
            ticket = lg.begin_flush()
        except OSError as e:
            results[i] = e
            continue
        if ticket is None:  # closed
            results[i] = lg.recovery_point
        else:
            begun.append((i, lg, ticket))
    failed: OSError | None = None
    for log_dir in log_dirs:
        try:
            dirs.sync(log_dir)
        except OSError as e:
            failed = e
            break
    if failed is not None:
        log.warning("syncfs failed (%s): fsyncing the %d logs of the round one by one",
                    failed, len(begun))
        for _, lg, ticket in begun:
            lg.abort_flush(ticket)
        for i, lg, _ in begun:
            results[i] = _flush_one(lg)
        return results
    for i, lg, ticket in begun:
        try:
            lg.write_flush_epochs(ticket)
        except OSError as e:
            results[i] = lg.recovery_point if lg.abort_flush(ticket) else e
            continue
        results[i] = lg.end_flush(ticket)
    return results


def _flush_one(lg: Log) -> int | OSError:
    try:
        return lg.flush()
    except OSError as e:
        return e
