"""Group commit: make appended data durable with as few fsyncs as possible.

After an append, the produce path calls `wait_durable(log, offset)`. One flusher task
runs at a time: it takes every log that has waiters or unflushed data, fsyncs them in a
worker thread (never on the event loop), then wakes every waiter whose offset is now
covered by that log's recovery point. Requests that arrive while a flush runs are
served by the next one, so one fsync covers every request waiting at that moment.

When the flush policy is relaxed (`log.flush.interval.messages` > 1 or a
`flush.messages` topic override), the caller does not wait; the scheduler flushes by
count and by `flush.ms` in the background.

A failed fsync fails the waiters it would have released (their produce requests answer
KAFKA_STORAGE_ERROR) and is reported to `on_error` (the log directory's
`LogDirSpace.write_failed`, which logs a full disk once); without `on_error` it is
logged here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class Flushable(Protocol):
    @property
    def recovery_point(self) -> int: ...

    def flush(self) -> int: ...


class GroupCommit:
    def __init__(
        self,
        on_flushed: Callable[[Flushable, int], None],
        on_error: Callable[[BaseException, str], object] | None = None,
    ) -> None:
        self._dirty: dict[int, Flushable] = {}
        self._waiters: dict[int, list[tuple[int, asyncio.Future[None]]]] = {}
        self._running = False
        self._on_flushed = on_flushed
        self._task: asyncio.Task[None] | None = None
        self.fsync_rounds = 0
        self.failed: Exception | None = None
        self.on_error = on_error

    def mark_dirty(self, target: Flushable) -> None:
        self._dirty[id(target)] = target
        self._kick()

    async def wait_durable(self, target: Flushable, offset: int) -> None:
        """Return once `target` is fsynced up to (not including) `offset`."""
        if target.recovery_point >= offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(id(target), []).append((offset, fut))
        self._dirty[id(target)] = target
        self._kick()
        await fut

    def _kick(self) -> None:
        if not self._running:
            self._running = True
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._dirty:
                batch = list(self._dirty.values())
                self._dirty.clear()
                try:
                    await loop.run_in_executor(None, _flush_all, batch)
                    self.fsync_rounds += 1
                except Exception as e:  # disk errors: fail the waiters, keep serving
                    if self.on_error is not None:
                        self.on_error(e, "fsyncing appended data")
                    else:
                        log.error("fsync failed: %s", e)
                    self.failed = e
                    for target in batch:
                        for _, fut in self._waiters.pop(id(target), []):
                            if not fut.done():
                                fut.set_exception(e)
                    continue
                for target in batch:
                    self._on_flushed(target, target.recovery_point)
                    self._release(target)
        finally:
            self._running = False
            if self._dirty:
                self._kick()

    def _release(self, target: Flushable) -> None:
        waiters = self._waiters.get(id(target))
        if not waiters:
            return
        point = target.recovery_point
        keep = []
        for offset, fut in waiters:
            if offset <= point:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((offset, fut))
                self._dirty[id(target)] = target
        if keep:
            self._waiters[id(target)] = keep
        else:
            del self._waiters[id(target)]

    def forget(self, target: Flushable) -> None:
        """A log is being deleted: fail its waiters, drop it from the queue."""
        self._dirty.pop(id(target), None)
        for _, fut in self._waiters.pop(id(target), []):
            if not fut.done():
                fut.set_exception(RuntimeError("partition deleted"))


def _flush_all(batch: list[Flushable]) -> None:
    for target in batch:
        target.flush()
