"""CompleteCommit's fsync waits a moment to share the producer's next add's.

The transaction finisher appends CompleteCommit with `defer_flush_s`
(server/txn_finisher.py `COMPLETE_FLUSH_DELAY_S`): the group commit hears of the record
only after that delay, so the next AddPartitionsToTxn — a client round trip later —
is fsynced with it (one fsync where there were two). These tests check both sides: the
record is fsynced within the delay when nothing follows it (fails if the deferred wait
never starts), and the next add and CompleteCommit share one fsync (fails if the group
commit is told of CompleteCommit at once).

An in-process broker, no kills: light.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from tests.unit.server.test_txn_durability_order import (
    _ADD_CTX,
    _add,
    _add_and_produce,
    _commit,
    _produce,
    _produce_error,
    _started,
    _stop,
)

from tidegate.common.errors import ErrorCode
from tidegate.server import txn_finisher
from tidegate.server.context import RequestContext
from tidegate.server.handlers import produce
from tidegate.server.handlers.transactions import handle_add_partitions
from tidegate.storage.log import Log


def _count_fsyncs(lg: Log) -> list[int]:
    """The recovery points of `lg`'s flushes that made something durable."""
    moved: list[int] = []
    real = lg.flush

    def counted() -> int:
        before = lg.recovery_point
        point = real()
        if point > before:
            moved.append(point)
        return point

    lg.flush = counted  # type: ignore[method-assign]
    return moved


async def _completed(state: Log, end: int) -> None:
    """Until CompleteCommit (the record at `end - 1`) is appended."""
    deadline = time.monotonic() + 10
    while state.log_end_offset < end:
        assert time.monotonic() < deadline, "CompleteCommit was never appended"
        await asyncio.sleep(0.001)


def test_complete_commit_is_fsynced_within_the_delay(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(txn_finisher, "COMPLETE_FLUSH_DELAY_S", 0.05)

    async def main() -> None:
        b, state, _data, pid, epoch = await _started(tmp_path)
        try:
            await _add_and_produce(b, pid, epoch)
            prepare = state.log_end_offset
            await _commit(b, pid, epoch)
            await _completed(state, prepare + 2)
            deadline = time.monotonic() + 5
            while state.recovery_point < prepare + 2:
                assert time.monotonic() < deadline, \
                    "CompleteCommit not fsynced with nothing after it"
                await asyncio.sleep(0.01)
            assert b.txn_coordinator.shell._deferred == {}
        finally:
            await _stop(b)

    asyncio.run(main())


def test_the_next_add_shares_complete_commits_fsync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # long enough that a loaded machine still sends the add within it
    monkeypatch.setattr(txn_finisher, "COMPLETE_FLUSH_DELAY_S", 2.0)

    async def main() -> None:
        b, state, data, pid, epoch = await _started(tmp_path)
        try:
            await _add_and_produce(b, pid, epoch)
            prepare = state.log_end_offset
            fsyncs = _count_fsyncs(state)
            await _commit(b, pid, epoch)
            await _completed(state, prepare + 2)
            await asyncio.sleep(0.02)  # the client's round trip: a flush told at once ends
            resp = await asyncio.wait_for(
                handle_add_partitions(b, _ADD_CTX, _add(pid, epoch)), 5)
            [topic] = resp.results_by_topic_v3_and_below
            assert topic.results_by_partition[0].partition_error_code == ErrorCode.none
            assert state.log_end_offset == prepare + 3  # PrepareCommit, Complete, add
            # the data waits for both records (KIP-890 verification), as without the delay
            assert _produce_error(await asyncio.wait_for(produce.handle(
                b, RequestContext(0, 9, 4, "c", "peer"), _produce(9, pid, epoch, 1)),
                10)) == ErrorCode.none
            assert data.log_end_offset == 3
            assert state.recovery_point == prepare + 3
            # PrepareCommit's, then one for CompleteCommit and the add
            assert fsyncs == [prepare + 1, prepare + 3], \
                f"CompleteCommit and the next add took fsyncs {fsyncs}"
        finally:
            await _stop(b)

    asyncio.run(main())
