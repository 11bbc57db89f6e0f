"""The deadline timer of a `CoordinatorShell`: runs the shards' due deadlines (session,
join, sync and transaction timers) at their due time.

One task per shell sleeps until the earliest `next_deadline()` of the active shards (at
most `MAX_TIMER_SLEEP_MS`); an operation or a load that leaves an earlier deadline wakes
it (`maybe_wake`). Time itself comes from the runtime's clock. What a due deadline
produces (an append, replies to parked requests) goes back to the shell through
`on_outcome`; a partition that cannot run its deadlines goes back through
`on_unavailable` (the shell reloads it).

Threading: everything here runs on the event loop; `tick` is synchronous and must not
block (durability waits continue in the shell's background work).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tidegate.common.errors import KafkaError
from tidegate.coordinator.runtime import (
    CoordinatorNotAvailableError,
    CoordinatorRuntime,
    Outcome,
    Shard,
)

__all__ = ["MAX_TIMER_SLEEP_MS", "DeadlineTimer"]

# the shell's logger: its lines keep the name they had before the split
log = logging.getLogger("tidegate.server.coordinator")

S = TypeVar("S", bound=Shard)

MAX_TIMER_SLEEP_MS = 1000
_MAX_POLLS_PER_TICK = 1000


class DeadlineTimer(Generic[S]):
    def __init__(self, runtime: CoordinatorRuntime[S],
                 on_outcome: Callable[[int, Outcome[Any]], None],
                 on_unavailable: Callable[[int, CoordinatorNotAvailableError], None]) -> None:
        self.runtime = runtime
        self._on_outcome = on_outcome
        self._on_unavailable = on_unavailable
        self._wake: asyncio.Event | None = None  # made in start(), on the running loop
        self._due: int | None = None  # when the timer task wakes up (clock ms)

    def start(self) -> asyncio.Task[None]:
        """The timer task (the caller cancels it to stop)."""
        self._wake = asyncio.Event()
        return asyncio.create_task(self._forever(self._wake))

    def _next_deadline(self) -> int | None:
        deadlines = [d for _, s in self.runtime.active_shards()
                     if (d := s.next_deadline()) is not None]
        return min(deadlines, default=None)

    def maybe_wake(self, partition: int) -> None:
        """Wake the timer task if `partition` now has a deadline before its wake-up."""
        try:
            deadline = self.runtime.shard(partition).next_deadline()
        except KafkaError:
            return
        if self._wake is not None and deadline is not None and (
                self._due is None or deadline < self._due):
            self._wake.set()

    async def _forever(self, wake: asyncio.Event) -> None:
        clock = self.runtime.clock
        while True:
            wake.clear()
            least = 0
            try:
                self.tick()
            except Exception:
                log.exception("%s: timers failed", self.runtime.topic)
                least = 10  # no busy loop on a deadline that keeps failing
            now = clock.now_ms()
            deadline = self._next_deadline()
            delay = MAX_TIMER_SLEEP_MS if deadline is None else \
                min(max(deadline - now, least), MAX_TIMER_SLEEP_MS)
            self._due = now + delay
            if delay == 0:
                await asyncio.sleep(0)  # more is due at once: let others run between
                continue
            # asyncio.wait, not wait_for: on Python 3.11 wait_for can swallow the cancel
            # that stops this task, which then kept the broker's shutdown waiting
            sleeper = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({sleeper}, timeout=delay / 1000)
            finally:
                sleeper.cancel()

    def tick(self) -> None:
        """Run every due deadline; durability waits continue in background tasks."""
        for p, _shard in self.runtime.active_shards():
            for _ in range(_MAX_POLLS_PER_TICK):
                try:
                    outcome = self.runtime.poll(p)
                except CoordinatorNotAvailableError as e:
                    self._on_unavailable(p, e)
                    break
                if outcome is None:
                    break
                if outcome.appended or outcome.result.replies:
                    self._on_outcome(p, outcome)
