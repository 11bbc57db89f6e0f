"""The end of a flush round (server/durability.py `on_round_flushed`): when every flush
of a round succeeded, the high watermarks of all its logs move in ONE call, before any of
their waiters is answered; a round with a failed flush, or whose one call raised, ends
each log on its own (`on_flushed`), and every waiter still gets its answer."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Sequence

import pytest

from tidegate.server.durability import GroupCommit
from tidegate.server.flush_threads import Flushable

from .test_durability_rounds import FakeLog


class Recorder:
    """`on_flushed` and `on_round_flushed` that note what they were told, and whether
    the first wait of a log they were told of had been answered by then (it must not
    have been)."""

    def __init__(self, round_error: BaseException | None = None) -> None:
        self.rounds: list[list[int]] = []
        self.single: list[tuple[int, int]] = []
        self.answered_before: list[bool] = []
        self.futures: list[asyncio.Future[None]] = []
        self.round_error = round_error
        self.ids: dict[int, int] = {}

    def on_flushed(self, target: Flushable, recovery_point: int) -> None:
        self.single.append((self.ids[id(target)], recovery_point))
        self.answered_before.append(self.futures[self.ids[id(target)]].done())

    def on_round(self, targets: Sequence[Flushable]) -> None:
        self.rounds.append([self.ids[id(t)] for t in targets])
        self.answered_before.append(any(self.futures[self.ids[id(t)]].done() for t in targets))
        if self.round_error is not None:
            raise self.round_error


def _run(rec: Recorder, logs: list[FakeLog]) -> list[BaseException | None]:
    for i, lg in enumerate(logs):
        rec.ids[id(lg)] = i

    async def main() -> list[BaseException | None]:
        gc = GroupCommit(rec.on_flushed, on_round_flushed=rec.on_round)
        for lg in logs:
            lg.end = 3
        futs = [gc.durable_future(lg, 3) for lg in logs]
        rec.futures = [f for f in futs if f is not None]
        assert len(rec.futures) == len(logs)
        done = await asyncio.wait_for(
            asyncio.gather(*rec.futures, return_exceptions=True), 5)
        assert gc.waiting == 0
        # later waits still get their flush: no log was left marked as flushing
        for lg in logs:
            lg.end = 5
        await asyncio.wait_for(asyncio.gather(*(gc.wait_durable(lg, 5) for lg in logs)), 5)
        return [d if isinstance(d, BaseException) else None for d in done]

    return asyncio.run(main())


def test_a_round_that_flushed_moves_every_log_in_one_call_before_any_answer() -> None:
    rec = Recorder()
    logs = [FakeLog() for _ in range(4)]
    assert _run(rec, logs) == [None] * 4
    assert sorted(rec.rounds[0]) == [0, 1, 2, 3]  # one call for the whole first round
    assert rec.single == []  # no log's high watermark moved on its own
    assert rec.answered_before[0] is False


def test_a_round_with_a_failed_flush_ends_each_log_on_its_own() -> None:
    rec = Recorder()
    bad = FakeLog(error=OSError(errno.EIO, "Input/output error"))
    logs = [FakeLog(), bad, FakeLog()]
    outcomes = _run(rec, logs)
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], OSError)
    # the first round had a failure: its good logs moved one at a time, at their
    # recovery points, before their waiters were answered
    assert sorted(rec.single[:2]) == [(0, 3), (2, 3)]
    assert rec.answered_before[:2] == [False, False]
    # (the later waits' round, all flushed, is one call again)
    assert rec.rounds and sorted(rec.rounds[-1]) == [0, 1, 2]


def test_a_round_whose_call_raises_falls_back_to_each_log(
        caplog: pytest.LogCaptureFixture) -> None:
    rec = Recorder(round_error=ValueError("bug"))
    logs = [FakeLog() for _ in range(3)]
    with caplog.at_level(logging.ERROR, logger="tidegate.server.durability"):
        assert _run(rec, logs) == [None] * 3
    assert sorted(rec.single[:3]) == [(0, 3), (1, 3), (2, 3)]
    assert "flush round" in caplog.text
