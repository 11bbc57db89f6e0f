"""The flush threads of the group commit (server/durability.py): a fixed set of daemon
threads that run the logs of a flush round, and hand the round back to the event loop
in one call when its last part is done.

A round is the logs whose flush started in one loop iteration. Below the syncfs
threshold its logs are fsynced side by side, one part per thread (the kernel merges
concurrent syncs); from it on the whole round is one `flush_together` job
(storage/flush_together.py). Each log's outcome, its new recovery point or what its
flush raised, goes back with the round: the group commit then handles each log as if
it had been flushed alone.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Sequence
from queue import SimpleQueue
from typing import Protocol

from tidegate.storage.flush_together import SyncfsDirs, flush_together
from tidegate.storage.log import Log

__all__ = ["FSYNC_THREADS", "THREADS", "FlushThreads", "Flushable", "Round", "call_in"]

FSYNC_THREADS = 8


class Flushable(Protocol):
    @property
    def recovery_point(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def flush(self) -> int: ...


class Round:
    """The logs handed to the flush threads in one loop iteration, and what became of
    each: its new recovery point, or what its flush raised. The thread that ends the
    round's last part hands the whole round back to the loop in one call."""

    __slots__ = ("began", "done", "failed", "left", "lock", "logs", "loop", "results")

    def __init__(self, logs: list[Flushable], parts: int, loop: asyncio.AbstractEventLoop,
                 done: Callable[[Round], None]) -> None:
        self.logs = logs
        self.results: list[int | BaseException] = [0] * len(logs)
        # some result is an exception (set by the threads before the round is handed
        # back): the loop looks at each result only then
        self.failed = False
        self.left = parts
        self.lock = threading.Lock()
        self.loop = loop
        self.done = done
        self.began = time.perf_counter()

    def run(self, part: Sequence[int], dirs: SyncfsDirs | None) -> None:
        """In a flush thread: flush the logs at `part` (with one syncfs per log
        directory when `dirs` is given), then, if this was the last part, wake the loop."""
        try:
            if dirs is not None:
                logs = [self.logs[i] for i in part]
                outcomes = flush_together([lg for lg in logs if isinstance(lg, Log)], dirs)
                for i, outcome in zip(part, outcomes, strict=True):
                    self.results[i] = outcome
                    if isinstance(outcome, BaseException):
                        self.failed = True
            else:
                for i in part:
                    try:
                        self.results[i] = self.logs[i].flush()
                    except BaseException as e:  # the loop fails this log's waiters
                        self.results[i] = e
                        self.failed = True
        except BaseException as e:  # a bug in flush_together: fail the part's logs
            for i in part:
                self.results[i] = e
            self.failed = True
        with self.lock:
            self.left -= 1
            last = self.left == 0
        if last:
            call_in(self.loop, self.done, self)


class FlushThreads:
    """A fixed set of daemon threads that run the parts of flush rounds. A round costs
    the loop one `SimpleQueue.put` per part and one wake-up when it ends, where a
    ThreadPoolExecutor cost a `submit` (a Future, a work item, a lock) and a
    `call_soon_threadsafe` per log: about a tenth of the loop's time per one-record
    transaction. Daemon threads: at exit nobody waits for a flush still running (its
    waiters were never answered, so nothing unflushed was acknowledged)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._queue: SimpleQueue[tuple[Round, Sequence[int], SyncfsDirs | None]] = \
            SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()

    def run(self, rnd: Round, part: Sequence[int], dirs: SyncfsDirs | None = None) -> None:
        if self._started < self.size:
            self._start_one()
        self._queue.put((rnd, part, dirs))

    def _start_one(self) -> None:
        with self._lock:
            if self._started >= self.size:
                return
            self._started += 1
            threading.Thread(target=self._work, name=f"fsync-{self._started}",
                             daemon=True).start()

    def _work(self) -> None:
        get = self._queue.get
        while True:
            rnd, part, dirs = get()
            rnd.run(part, dirs)

    def after_fork(self) -> None:
        """In a forked child: none of the threads came along; start afresh."""
        self._queue = SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()


THREADS = FlushThreads(FSYNC_THREADS)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=THREADS.after_fork)


def call_in(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: object) -> None:
    """From the flush thread: run `fn` on the loop (unless it has been closed meanwhile:
    the broker is gone, and so are its waiters)."""
    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # closed between the check and the call
            pass
