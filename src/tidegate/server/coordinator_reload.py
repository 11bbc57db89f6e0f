"""When a failed coordinator partition is loaded again (for `CoordinatorShell`).

A partition whose write failed (or whose load failed) is reloaded from its log, one
reload at a time per partition. The first reload of a run of failures happens at once;
a partition that fails again before any of its writes has succeeded waits 1 s, doubling
to 60 s, so a condition that keeps failing it causes no reload storm. A partition that
failed for a full disk (ENOSPC / EDQUOT) also waits, but is reloaded as soon as space
returns (`LogDirSpace.freed_since`, looked at every 250 ms), whatever its backoff: work
parked on a full disk must not stay parked for a backoff grown while the disk was full.

Runs on the event loop; the load itself is the shell's (`load(partition)`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine

from tidegate.storage.disk_space import LogDirSpace

__all__ = ["RELOAD_BACKOFF_S", "SPACE_POLL_S", "Reloads"]

RELOAD_BACKOFF_S = (1.0, 60.0)  # a partition failing again: first and longest wait
SPACE_POLL_S = 0.25  # how often a reload parked on a full disk looks for freed space


class Reloads:
    def __init__(self, space: LogDirSpace,
                 load: Callable[[int], Coroutine[object, object, None]],
                 tasks: set[asyncio.Task[None]]) -> None:
        self.space = space
        self._load = load
        self._tasks = tasks  # the shell's: cancelled when it stops
        self.pending: set[int] = set()
        self._backoff: dict[int, float] = {}  # seconds, while a partition keeps failing

    def failing(self, partition: int) -> bool:
        """`partition` failed since its last successful write (its failure was logged)."""
        return partition in self._backoff

    def succeeded(self, partition: int) -> None:
        """A write to `partition` went through: its next failure reloads at once."""
        if self._backoff:
            self._backoff.pop(partition, None)

    def schedule(self, partition: int, *, wait_for_space: bool) -> None:
        """Reload `partition` later (module docstring); nothing if one is pending."""
        if partition in self.pending:
            return
        last = self._backoff.get(partition)
        lo, hi = RELOAD_BACKOFF_S
        first = lo if wait_for_space else 0.0
        delay = first if last is None else min(max(2 * last, lo), hi)
        self._backoff[partition] = delay
        mark = self.space.mark() if wait_for_space else None
        self.pending.add(partition)

        async def reload_later() -> None:
            try:
                await self._wait(delay, mark)
            finally:
                self.pending.discard(partition)
            await self._load(partition)

        task = asyncio.create_task(reload_later())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _wait(self, delay: float, space_mark: int | None) -> None:
        """Sleep `delay` seconds; with a `space_mark`, return as soon as the log directory
        has space again."""
        loop = asyncio.get_running_loop()
        end = loop.time() + delay
        while (left := end - loop.time()) > 0:
            if space_mark is None:
                await asyncio.sleep(left)
                return
            await asyncio.sleep(min(left, SPACE_POLL_S))
            if self.space.freed_since(space_mark):
                return
