"""Group commit (server/durability.py) when a flush fails: the waiters fail, the failure
is reported once per run of failures (a full disk each time, counted there), and the log
is flushed again by itself, so its high watermark moves once the disk lets it — without
waiting for the partition's next append."""

from __future__ import annotations

import asyncio
import errno
import threading

from tidegate.server.durability import GroupCommit


class FlakyLog:
    """A flushable whose flush fails `failures` times with `error`."""

    def __init__(self, failures: int, error: OSError) -> None:
        self.failures = failures
        self.error = error
        self.recovery_point = 0
        self.end = 0
        self.calls = 0

    @property
    def log_end_offset(self) -> int:
        return self.end

    def flush(self) -> int:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise self.error
        self.recovery_point = self.end
        return self.recovery_point


def _run(error: OSError) -> tuple[list[int], list[str], FlakyLog, list[BaseException]]:
    flushed: list[int] = []
    reported: list[str] = []
    lg = FlakyLog(4, error)
    failed: list[BaseException] = []

    async def main() -> None:
        gc = GroupCommit(lambda _t, rp: flushed.append(rp),
                         lambda e, what: reported.append(str(e)))
        lg.end = 5
        try:
            await gc.wait_durable(lg, 5)
        except OSError as e:
            failed.append(e)
        for _ in range(200):  # 0.05 + 0.1 + 0.2 + 0.4 s of retries
            if flushed:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    return flushed, reported, lg, failed


def test_a_failed_flush_is_retried_until_the_log_is_durable() -> None:
    flushed, reported, lg, failed = _run(OSError(errno.EIO, "I/O error"))
    assert failed and flushed == [5] and lg.calls == 5
    assert len(reported) == 1  # the first of the run; the retries stay quiet


def test_a_full_disk_is_reported_at_each_failure() -> None:
    flushed, reported, _lg, failed = _run(OSError(errno.ENOSPC, "No space left on device"))
    assert failed and flushed == [5]
    assert len(reported) == 4  # LogDirSpace counts them and logs the first


def test_a_waiter_covered_by_the_running_flush_queues_no_other() -> None:
    """A request that only reads (KIP-890 verification waits for the coordinator log's
    end) while a flush covering that end is under way is released by it: it used to
    queue a second fsync that found nothing new, which the next append then waited for.
    An append after the flush started still gets its own flush."""
    lg = FlakyLog(0, OSError())
    gate = threading.Event()
    real = lg.flush

    def slow_flush() -> int:
        gate.wait(5)
        return real()

    lg.flush = slow_flush  # type: ignore[method-assign]

    async def main() -> None:
        gc = GroupCommit(lambda _t, _rp: None)
        lg.end = 3
        first = asyncio.ensure_future(gc.wait_durable(lg, 3))
        await asyncio.sleep(0.05)  # the flush is under way, covering offset 3
        reader = asyncio.ensure_future(gc.wait_durable(lg, 3))
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, reader), 5)
        await asyncio.sleep(0.05)
        assert lg.calls == 1, "a second flush for a waiter the first one covered"
        lg.end = 4  # appended after: needs (and gets) a flush of its own
        await asyncio.wait_for(gc.wait_durable(lg, 4), 5)
        assert lg.calls == 2 and lg.recovery_point == 4

    asyncio.run(main())


def test_no_waiter_is_released_before_the_flush_covering_it_has_returned() -> None:
    """The guarantee every acknowledged write relies on: `wait_durable` returns only after
    a flush that covers its offset has returned in its thread — not when it was handed
    out — and an offset appended after a flush read the log end waits for the next one
    (a flush round is a chain of callbacks, not a Task: the order must not change)."""
    lg = FlakyLog(0, OSError())
    gates = [threading.Event(), threading.Event()]
    started = [threading.Event(), threading.Event()]
    real = lg.flush

    def gated_flush() -> int:
        end = lg.end  # what this flush covers: the end when it starts
        started[lg.calls].set()
        gates[lg.calls].wait(5)
        lg.calls += 1
        lg.recovery_point = max(lg.recovery_point, end)
        return lg.recovery_point

    lg.flush = gated_flush  # type: ignore[method-assign]
    assert real is not None

    async def main() -> None:
        gc = GroupCommit(lambda _t, _rp: None)
        lg.end = 3
        first = asyncio.ensure_future(gc.wait_durable(lg, 3))
        # the first flush is running and has read the end (covers 3): a sleep here let
        # a slow thread read 5 on a loaded machine
        assert await asyncio.to_thread(started[0].wait, 5)
        lg.end = 5
        later = asyncio.ensure_future(gc.wait_durable(lg, 5))
        await asyncio.sleep(0.05)
        assert not first.done() and not later.done(), "released before the fsync returned"
        gates[0].set()
        await asyncio.wait_for(first, 5)
        await asyncio.sleep(0.05)
        assert not later.done(), "released by a flush that started before its append"
        gates[1].set()
        await asyncio.wait_for(later, 5)
        assert lg.calls == 2 and lg.recovery_point == 5 and gc.fsync_rounds == 2

    asyncio.run(main())


def test_a_round_that_raises_does_not_stop_later_flushes() -> None:
    """A bug in a round's callback (here `on_flushed`) is reported by the loop, and the
    log is not left marked as flushing forever: later waiters still get their flush."""
    lg = FlakyLog(0, OSError())
    calls: list[int] = []

    def on_flushed(_t: object, rp: int) -> None:
        calls.append(rp)
        if len(calls) == 1:
            raise ValueError("bug")

    async def main() -> None:
        reported: list[object] = []
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, ctx: reported.append(ctx.get("exception")))
        gc = GroupCommit(on_flushed)
        lg.end = 2
        first = asyncio.ensure_future(gc.wait_durable(lg, 2))
        await asyncio.sleep(0.1)
        assert reported and isinstance(reported[0], ValueError)
        lg.end = 4
        await asyncio.wait_for(gc.wait_durable(lg, 4), 5)
        assert lg.recovery_point == 4 and first.done()

    asyncio.run(main())


def test_durable_future_registers_the_wait_without_awaiting() -> None:
    """A Produce over many partitions registers one future per partition, no Task: the
    wait exists as soon as the call returns (a failed fsync fails it), and a log already
    durable needs none."""
    lg = FlakyLog(1, OSError(errno.EIO, "Input/output error"))

    async def main() -> tuple[BaseException | None, BaseException | None, bool]:
        gc = GroupCommit(lambda _t, _rp: None)
        assert gc.durable_future(lg, 0) is None  # nothing to wait for
        lg.end = 3
        first = gc.durable_future(lg, 3)
        assert first is not None and gc.waiting == 1  # registered before any await
        failed = (await asyncio.gather(first, return_exceptions=True))[0]
        lg.end = 4
        second = gc.durable_future(lg, 4)
        assert second is not None
        ok = (await asyncio.gather(second, return_exceptions=True))[0]
        return failed, ok, lg.recovery_point >= 4

    failed, ok, durable = asyncio.run(main())
    assert isinstance(failed, OSError) and ok is None and durable
