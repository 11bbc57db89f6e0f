"""Group commit rounds (server/durability.py): the logs whose flush starts in one loop
iteration go to the flush threads together and come back to the loop in ONE call, yet
are still fsynced side by side (not one after another in one thread), and one log's
failed flush fails only that log's waiters."""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tidegate.server.durability import GroupCommit
from tidegate.server.flush_threads import FSYNC_THREADS


class FakeLog:
    """A flushable that runs `during_flush` inside its flush (in the flush thread)."""

    def __init__(self, during_flush: Callable[[], None] = lambda: None,
                 error: OSError | None = None) -> None:
        self.recovery_point = 0
        self.end = 0
        self.during_flush = during_flush
        self.error = error
        self.threads: set[str] = set()

    @property
    def log_end_offset(self) -> int:
        return self.end

    def flush(self) -> int:
        self.threads.add(threading.current_thread().name)
        self.during_flush()
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        self.recovery_point = self.end
        return self.recovery_point


def _wait_all(gc: GroupCommit, logs: list[FakeLog]) -> list[BaseException | None]:
    async def one(lg: FakeLog) -> BaseException | None:
        lg.end = 3
        try:
            await gc.wait_durable(lg, 3)
        except OSError as e:
            return e
        return None

    async def main() -> list[BaseException | None]:
        return await asyncio.gather(*(one(lg) for lg in logs))

    return asyncio.run(main())


def test_the_logs_of_a_round_are_fsynced_side_by_side() -> None:
    # every flush waits at the barrier for the others: one thread running them one
    # after another (the latency the round must not add) breaks it
    barrier = threading.Barrier(3, timeout=5)

    def meet() -> None:
        barrier.wait()

    logs = [FakeLog(meet) for _ in range(3)]
    assert _wait_all(GroupCommit(lambda _t, _rp: None), logs) == [None, None, None]
    assert len(set().union(*(lg.threads for lg in logs))) == 3
    assert all(lg.recovery_point == 3 for lg in logs)


def test_a_round_wakes_the_loop_once(monkeypatch: pytest.MonkeyPatch) -> None:
    handed_back: list[Any] = []
    real = asyncio.BaseEventLoop.call_soon_threadsafe

    def counting(self: asyncio.BaseEventLoop, fn: Any, *args: Any, **kw: Any) -> Any:
        handed_back.append(fn)
        return real(self, fn, *args, **kw)

    monkeypatch.setattr(asyncio.BaseEventLoop, "call_soon_threadsafe", counting)
    logs = [FakeLog() for _ in range(FSYNC_THREADS + 3)]  # more logs than threads
    assert _wait_all(GroupCommit(lambda _t, _rp: None), logs) == [None] * len(logs)
    assert len(handed_back) == 1, handed_back
    assert all(lg.recovery_point == 3 for lg in logs)


def test_a_failed_flush_fails_only_its_own_logs_waiters() -> None:
    reported: list[str] = []
    bad = FakeLog(error=OSError(errno.EIO, "lost write"))
    good = FakeLog()
    gc = GroupCommit(lambda _t, _rp: None, lambda e, _what: reported.append(str(e)))
    outcomes = _wait_all(gc, [bad, good])
    assert isinstance(outcomes[0], OSError) and outcomes[1] is None
    assert good.recovery_point == 3 and bad.recovery_point == 0
    assert reported == ["[Errno 5] lost write"]


class BuggyLog(FakeLog):
    """Its recovery point raises once, as a bug in a flushable would (read when its
    flush round starts)."""

    def __init__(self) -> None:
        super().__init__()
        self.raise_once = True

    @property
    def recovery_point(self) -> int:
        if self.raise_once and self.end > 0:
            self.raise_once = False
            raise ValueError("bug")
        return self._rp

    @recovery_point.setter
    def recovery_point(self, value: int) -> None:
        self._rp = value


def test_one_logs_bug_does_not_keep_the_others_of_its_loop_iteration_from_flushing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The logs marked in one loop iteration start their flushes in ONE loop callback
    (a Produce over 1,000 partitions marks 1,000); a bug raised for one of them is
    reported, and the others still flush and answer their waiters."""
    scheduled: list[Any] = []
    real = asyncio.BaseEventLoop.call_soon

    def counting(self: asyncio.BaseEventLoop, fn: Any, *args: Any, **kw: Any) -> Any:
        scheduled.append(getattr(fn, "__name__", fn))
        return real(self, fn, *args, **kw)

    async def main() -> list[int]:
        reported: list[object] = []
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx.get("exception")))
        gc = GroupCommit(lambda _t, _rp: None)
        logs = [FakeLog(), BuggyLog(), FakeLog()]
        for lg in logs:
            lg.end = 3
        monkeypatch.setattr(asyncio.BaseEventLoop, "call_soon", counting)
        for lg in logs:
            gc.mark_dirty(lg)
        monkeypatch.setattr(asyncio.BaseEventLoop, "call_soon", real)
        assert scheduled == ["_start_kicked"], scheduled  # one callback for the three
        await asyncio.wait_for(asyncio.gather(gc.wait_durable(logs[0], 3),
                                              gc.wait_durable(logs[2], 3)), 5)
        assert len(reported) == 1 and isinstance(reported[0], ValueError)
        # the buggy log is not left marked as flushing: a later wait still gets a flush
        await asyncio.wait_for(gc.wait_durable(logs[1], 3), 5)
        return [lg.recovery_point for lg in logs]

    assert asyncio.run(main()) == [3, 3, 3]


def test_on_fsync_counts_the_waiters_the_flush_released() -> None:
    told: list[int] = []

    async def main() -> None:
        gc = GroupCommit(lambda _t, _rp: None)
        gc.on_fsync = lambda _secs, released: told.append(released)
        lg = FakeLog()
        lg.end = 3
        await asyncio.wait_for(asyncio.gather(gc.wait_durable(lg, 2), gc.wait_durable(lg, 3)), 5)
        lg.end = 4  # one waiter: the path a Produce over many partitions takes per log
        await asyncio.wait_for(gc.wait_durable(lg, 4), 5)

    asyncio.run(main())
    assert told == [2, 1]
