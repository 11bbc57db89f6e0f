"""Group commit: make appended data durable with as few fsyncs as possible.

After an append, the produce path calls `wait_durable(log, offset)`. Each log has at
most one flush running at a time, in a worker thread (never on the event loop); when it
ends, every waiter whose offset is now below that log's recovery point is woken, and if
more data or waiters arrived meanwhile the log is flushed again. So one fsync covers
every request waiting on that log when it starts, and logs never queue behind each other
(side by side, up to `FSYNC_THREADS` at once; the kernel merges concurrent syncs: 8
files took 0.6 ms together against 1.3-1.8 ms in turn on the CI machine's disk). No
fsync is queued that would find nothing new: a waiter whose offset the running flush
covers (appended before that flush was handed to its thread) waits for that flush only,
and a queued flush is dropped if the one before it, reading the log end later than it
was asked for, already reached the end (one fsync in three under the one-record
transaction bench, and the next append waited behind it).

The logs whose flush starts in one loop iteration form a round, handed to a fixed set of
flush threads together and back to the loop in ONE call when the last is done
(server/flush_threads.py; a ThreadPoolExecutor `submit` and a `call_soon_threadsafe`
per log were a tenth of the loop's time per one-record transaction). Below
`syncfs_threshold` logs each log of a round is fsynced in a thread of its own; from it
on (`log.flush.syncfs.threshold`, `use_syncfs`; a Produce over 1,000 partitions) the
round is made durable in one thread with one syncfs(2) per log directory
(storage/flush_together.py: why that is as durable; a failed syncfs falls back to
per-file fsyncs). When every flush of a round succeeded, the high watermarks of all its
logs move in ONE call (`on_round_flushed`, the replica manager's) before any of their
waiters is answered, where a chain of about ten calls per log did it; a round with a
failed flush is ended one log at a time, and a failed flush fails only its own log's
waiters. The coordinators' background waits register with `durable_future`, a future
per log, not a Task; a Produce registers ONE `DurableWaiter` for all its partitions
(`add_waiter`; server/durable_waiter.py). The next round goes to the threads as soon as
the last one was handled, in the same loop callback, not behind its answers' callbacks.

When the flush policy is relaxed (`log.flush.interval.messages` > 1 or a
`flush.messages` topic override), the caller does not wait; the scheduler flushes by
count and by `flush.ms` in the background.

A failed fsync fails the waiters it would have released (their produce requests answer
KAFKA_STORAGE_ERROR) and is reported to `on_error` (the log directory's
`LogDirSpace.write_failed`, which logs a full disk once; else logged here). The log is
flushed again later (0.05 s doubling to 2 s, until it works): without a flush nothing
would move its high watermark once the writers gave up (on a full disk, data and
markers would stay invisible after space returns until the next append). Only the
first failure of a run is reported, unless it is a full disk (counted there).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tidegate.server.durable_waiter import DurableWaiter, Wait, answer
from tidegate.server.flush_threads import THREADS, Flushable, Round
from tidegate.storage.disk_space import disk_full_error
from tidegate.storage.flush_together import SyncfsDirs
from tidegate.storage.log import Log

log = logging.getLogger(__name__)

RETRY_S = (0.05, 2.0)  # a failed flush is tried again after this, doubling

__all__ = ["RETRY_S", "DurableWaiter", "GroupCommit"]


class GroupCommit:
    def __init__(
        self,
        on_flushed: Callable[[Flushable, int], None],
        on_error: Callable[[BaseException, str], object] | None = None,
        on_round_flushed: Callable[[Sequence[Flushable]], None] | None = None,
    ) -> None:
        self._dirty: dict[int, Flushable] = {}  # needs a flush after the running one
        self._running: set[int] = set()  # a flush of this log is under way
        # key -> the log end when the running flush was handed to its thread: that flush
        # covers at least this far (appends happen on the loop, the flush reads the end
        # in its thread later), so a waiter below it needs no flush after it
        self._covering: dict[int, int] = {}
        self._waiters: dict[int, list[Wait]] = {}
        self._on_flushed = on_flushed
        # `on_flushed(target, target.recovery_point)` for a whole round's logs in one call
        self._on_round_flushed = on_round_flushed
        self.fsync_rounds = 0
        self.failed: Exception | None = None
        self.on_error = on_error
        # several log.dirs: told of a failed flush first; True = the log's directory went
        # offline (LogManager.log_write_failed), so the log is not flushed again
        self.on_log_error: Callable[[Flushable, BaseException], bool] | None = None
        self._retry_delay: dict[int, float] = {}  # key -> next delay, while flushes fail
        # metrics (server/metrics/): told (seconds the fsync took, waiters it released)
        self.on_fsync: Callable[[float, int], None] | None = None
        self._retrying: dict[int, asyncio.Task[None]] = {}
        # one syncfs per log directory instead of an fsync per log, for rounds of at
        # least `syncfs_threshold` logs (`use_syncfs`; log.flush.syncfs.threshold)
        self._syncfs: SyncfsDirs | None = None
        self.syncfs_threshold = 0
        self.syncfs_rounds = 0
        self._batch: list[Flushable] = []  # logs to flush, queued in this loop iteration
        self._kicked: list[Flushable] = []  # logs whose flush round starts next iteration

    def use_syncfs(self, log_dirs: Iterable[Path | str], threshold: int) -> bool:
        """Flush rounds of `threshold` logs or more with syncfs (0: never). False if
        this system's syncfs cannot report a lost write (files.syncfs_reporting_errors)."""
        self.close()
        if threshold <= 0:
            return False
        dirs = SyncfsDirs(log_dirs)
        if not dirs.available:
            dirs.close()
            return False
        self._syncfs, self.syncfs_threshold = dirs, threshold
        return True

    def close(self) -> None:
        """The broker stops: free the syncfs descriptors (later rounds fsync per file)."""
        dirs, self._syncfs = self._syncfs, None
        if dirs is not None:
            dirs.close()

    @property
    def waiting(self) -> int:
        """Requests waiting for an fsync (the metrics' produce purgatory size)."""
        return sum(len(w) for w in self._waiters.values())

    def mark_dirty(self, target: Flushable) -> None:
        self._dirty[key := id(target)] = target
        if key not in self._running:  # (`_kick`'s test, inline: once per append)
            self._kick(target)

    async def wait_durable(self, target: Flushable, offset: int) -> None:
        """Return once `target` is fsynced up to (not including) `offset`."""
        fut = self.durable_future(target, offset)
        if fut is not None:
            await fut

    def durable_future(self, target: Flushable, offset: int) -> asyncio.Future[None] | None:
        """`wait_durable` without a coroutine: the wait is registered now (a failed
        fsync fails it at once); the future ends when `target` is fsynced up to
        `offset`. None if it already is. A Produce over 1,000 partitions awaits these
        futures together instead of running a Task per partition."""
        if target.recovery_point >= offset:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._register(target, offset, (offset, fut, -1))
        return fut

    def add_waiter(self, waiter: DurableWaiter, slot: int, target: Flushable,
                   offset: int) -> bool:
        """Count `target` up to `offset` in `waiter` (the request's one wait; `slot`
        names the partition in `waiter.errors` if its flush fails). False if it is
        durable already (not counted)."""
        if target.recovery_point >= offset:
            return False
        waiter.left += 1
        self._register(target, offset, (offset, waiter, slot))
        return True

    def _register(self, target: Flushable, offset: int, wait: Wait) -> None:
        key = id(target)
        self._waiters.setdefault(key, []).append(wait)
        if offset > self._covering.get(key, -1):
            # not covered by a flush under way (a request that only reads, e.g. KIP-890
            # verification, used to queue an fsync that found nothing new to write, and
            # the next append waited for it)
            self._dirty[key] = target
        if key not in self._running:  # (`_kick`'s test, inline)
            self._kick(target)

    def _kick(self, target: Flushable) -> None:
        key = id(target)
        if key not in self._running:
            self._running.add(key)
            # a flush round is a chain of callbacks, not a Task (a Task and
            # `run_in_executor` per round were 4 % of the loop's time per one-record
            # transaction). It starts in the next loop iteration, so appends made in this
            # one join it; the logs kicked in one iteration start in ONE callback (not a
            # loop dispatch per partition of a Produce over 1,000 partitions)
            self._kicked.append(target)
            if len(self._kicked) == 1:
                asyncio.get_running_loop().call_soon(self._start_kicked)

    def _start_kicked(self) -> None:
        kicked, self._kicked = self._kicked, []
        raised: BaseException | None = None
        for target in kicked:
            try:
                self._step(target)
            except BaseException as bug:  # the others still start (`_step` cleaned up)
                raised = raised or bug
        if raised is not None:
            raise raised

    def _step(self, target: Flushable) -> None:
        """Start the next flush of `target`, or end its round when none is needed."""
        try:
            self._next_flush(target)
        except BaseException:
            self._abandon(target)
            raise

    def _abandon(self, target: Flushable) -> None:
        """A callback of the round raised (a bug: the loop reports it): end the round,
        and start another if something still needs a flush, as a Task's `finally` did."""
        self._running.discard(id(target))
        self._covering.pop(id(target), None)
        if id(target) in self._dirty:
            self._kick(target)

    def _next_flush(self, target: Flushable) -> None:
        key = id(target)
        while self._dirty.pop(key, None) is not None:
            point = target.recovery_point
            end = target.log_end_offset  # (on the loop: no append between the reads)
            if point >= end and all(w[0] <= point for w in self._waiters.get(key, ())):
                # the flush that just ended read the log end after this was asked
                # for, and covered it: another would find nothing new to write
                self._on_flushed(target, point)
                self._release(target)
                continue
            self._covering[key] = end
            # flushed with the other logs that need one in this loop iteration: handed
            # to the flush threads together, and back to the loop in one call
            self._batch.append(target)
            if len(self._batch) == 1:
                asyncio.get_running_loop().call_soon(self._submit_batch)
            return
        self._running.discard(key)
        self._covering.pop(key, None)

    def _submit_batch(self) -> None:
        """The logs `_next_flush` queued in one loop iteration: from the syncfs threshold
        on, all with one syncfs per log directory in one thread (storage/
        flush_together.py); below it each log in a thread of its own, side by side (up to
        `FSYNC_THREADS`; the kernel merges concurrent fsyncs, where one thread would run
        them one after another)."""
        batch, self._batch = self._batch, []
        if not batch:  # submitted already, at the end of the round before
            return
        syncfs = self._syncfs
        if (syncfs is not None and len(batch) >= self.syncfs_threshold
                and all(isinstance(t, Log) for t in batch)):
            rnd = Round(batch, 1, asyncio.get_running_loop(), self._round_flushed)
            self.syncfs_rounds += 1
            THREADS.run(rnd, range(len(batch)), syncfs)
            return
        parts = min(len(batch), THREADS.size)
        rnd = Round(batch, parts, asyncio.get_running_loop(), self._round_flushed)
        for p in range(parts):
            THREADS.run(rnd, range(p, len(batch), parts))

    def _round_flushed(self, rnd: Round) -> None:
        """On the loop, once every log of the round is flushed (or failed): each as if
        flushed alone. The logs that need another flush go to the threads at the end of
        this call, not in a later loop iteration behind the answers it scheduled."""
        raised: BaseException | None = None
        took = time.perf_counter() - rnd.began
        # all flushed (the usual round): the high watermarks move in ONE call for all its
        # logs, before any waiter is answered; else (or if that call raised, a bug) each
        # log's flush ends on its own, `_on_flushed` included
        on_round = None if rnd.failed else self._on_round_flushed
        moved = on_round is not None
        if on_round is not None:
            try:
                on_round(rnd.logs)
            except BaseException:
                log.exception("moving a flush round's high watermarks")
                moved = False
        for target, outcome in zip(rnd.logs, rnd.results, strict=True):
            try:
                self._flush_done(target, took, None if moved  # (then none failed)
                                 else outcome if isinstance(outcome, BaseException) else None,
                                 moved)
            except BaseException as bug:  # the others' waiters still get their answer
                raised = raised or bug
        if self._batch:
            self._submit_batch()
        if raised is not None:
            raise raised

    def _flush_done(self, target: Flushable, took: float, e: BaseException | None,
                    moved: bool = False) -> None:
        """`target`'s flush ended (`moved`: its high watermark moved already)."""
        key = id(target)
        try:
            if e is not None:
                self._failed(target, e)
            else:
                self.fsync_rounds += 1
                if self._retry_delay:
                    self._retry_delay.pop(key, None)
                if not moved:
                    self._on_flushed(target, target.recovery_point)
                released = self._release(target)
                if self.on_fsync is not None:  # the waiters this fsync released
                    self.on_fsync(took, released)
        except BaseException:
            self._abandon(target)
            raise
        if key in self._dirty:
            self._step(target)
        else:  # nothing appended or waited for since: the round ends here (`_next_flush`)
            self._running.discard(key)
            self._covering.pop(key, None)

    def _failed(self, target: Flushable, e: BaseException) -> None:
        """Disk errors: fail the waiters, keep serving, flush again later."""
        key = id(target)
        offline = self.on_log_error is not None and self.on_log_error(target, e)
        if offline:
            pass  # logged with the directory's failure
        elif key not in self._retry_delay or disk_full_error(e) is not None:
            if self.on_error is not None:
                self.on_error(e, "fsyncing appended data")
            else:
                log.error("fsync failed: %s", e)
        self.failed = e if isinstance(e, Exception) else RuntimeError(str(e))
        for _, fut, slot in self._waiters.pop(key, []):
            answer(fut, slot, e)
        if not offline:
            self._retry_later(target)

    def _release(self, target: Flushable) -> int:
        """Answer the waiters the recovery point now covers; how many it covered."""
        key = id(target)
        waiters = self._waiters.get(key)
        if not waiters:
            return 0
        point = target.recovery_point
        if len(waiters) == 1:  # the common case at many partitions: one request each
            offset, fut, slot = waiters[0]
            if offset > point:
                self._dirty[key] = target
                return 0
            del self._waiters[key]
            if isinstance(fut, DurableWaiter):  # (`answer`, inline: a Produce's wait)
                fut.done(slot, None)
            else:
                answer(fut, slot, None)
            return 1
        keep = []
        released = 0
        for wait in waiters:
            if wait[0] <= point:
                released += 1
                answer(wait[1], wait[2], None)
            else:
                keep.append(wait)
                self._dirty[key] = target
        if keep:
            self._waiters[key] = keep
        else:
            del self._waiters[key]
        return released

    def _retry_later(self, target: Flushable) -> None:
        """Flush `target` again after a backoff (module docstring)."""
        key = id(target)
        if key in self._retrying:
            return
        lo, hi = RETRY_S
        delay = self._retry_delay.get(key, lo)
        self._retry_delay[key] = min(delay * 2, hi)

        async def later() -> None:
            try:
                await asyncio.sleep(delay)
            finally:
                self._retrying.pop(key, None)
            self.mark_dirty(target)

        self._retrying[key] = asyncio.get_running_loop().create_task(later())

    def forget(self, target: Flushable) -> None:
        """A log is being deleted: fail its waiters, drop it from the queue."""
        retry = self._retrying.pop(id(target), None)
        if retry is not None:
            retry.cancel()
        self._retry_delay.pop(id(target), None)
        self._dirty.pop(id(target), None)
        for _, fut, slot in self._waiters.pop(id(target), []):
            answer(fut, slot, RuntimeError("partition deleted"))
