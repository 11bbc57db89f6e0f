"""One waiter per request (server/durability.py `DurableWaiter`): a Produce over many
partitions registers every partition's wait in ONE object with one future. The future
ends only once every counted partition is durable (or failed), a failed flush fails
exactly the partitions of the failing log, and the next round of a log that got more
data during a round is handed to the flush threads by the round's own callback."""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from pathlib import Path

import pytest

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode
from tidegate.protocol.messages import build, request_class
from tidegate.records.builder import build_batch
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.durability import DurableWaiter, GroupCommit
from tidegate.server.handlers import produce


class StepLog:
    """A flushable whose flush waits for `gate` (if set) and fails once with `error`."""

    def __init__(self, error: OSError | None = None,
                 gate: threading.Event | None = None) -> None:
        self.recovery_point = 0
        self.end = 0
        self.error = error
        self.gate = gate
        self.flushes = 0

    @property
    def log_end_offset(self) -> int:
        return self.end

    def flush(self) -> int:
        self.flushes += 1
        if self.gate is not None:
            self.gate.wait(5)
        target = self.end  # read before failing: like Log.flush, nothing is raised past it
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        self.recovery_point = target
        return target


def test_one_waiter_ends_when_every_partition_is_durable_and_fails_only_the_bad_log() -> None:
    eio = OSError(errno.EIO, "Input/output error")
    logs = [StepLog(), StepLog(eio), StepLog()]

    async def main() -> tuple[dict[int, BaseException], int, bool]:
        gc = GroupCommit(lambda _t, _rp: None, lambda _e, _what: None)
        waiter = DurableWaiter()
        for slot, lg in enumerate(logs):
            lg.end = 3
            assert gc.add_waiter(waiter, slot, lg, 3)
        # registered before any await: counted, and seen by the metrics' purgatory size
        assert waiter.left == 3 and gc.waiting == 3
        already = StepLog()
        assert not gc.add_waiter(waiter, 9, already, 0)  # durable already: not counted
        await asyncio.wait_for(waiter.future, 5)
        return waiter.errors, waiter.left, gc.waiting == 0

    errors, left, none_waiting = asyncio.run(main())
    assert list(errors) == [1] and errors[1] is eio  # exactly the failing log's slot
    assert left == 0 and none_waiting
    assert [lg.recovery_point for lg in logs] == [3, 0, 3]


def test_the_waiter_waits_for_its_slowest_partition() -> None:
    """A partition whose data came after a running flush needs the round after it: the
    future must not end with the first round."""
    gate = threading.Event()
    slow = StepLog(gate=gate)
    quick = StepLog()

    async def main() -> tuple[bool, bool, int]:
        gc = GroupCommit(lambda _t, _rp: None)
        slow.end = 1
        first = gc.durable_future(slow, 1)  # a flush of `slow` is running, held at the gate
        assert first is not None
        for _ in range(100):
            if slow.flushes:
                break
            await asyncio.sleep(0.01)
        waiter = DurableWaiter()
        quick.end = 2
        slow.end = 2  # appended while the flush runs: not covered by it
        assert gc.add_waiter(waiter, 0, quick, 2)
        assert gc.add_waiter(waiter, 1, slow, 2)
        await asyncio.sleep(0.1)
        early = waiter.future.done()  # `quick` is durable, `slow` is not
        gate.set()
        await asyncio.wait_for(waiter.future, 5)
        return early, first.done(), waiter.left

    early, first_done, left = asyncio.run(main())
    assert not early and first_done and left == 0
    assert slow.recovery_point == 2 and quick.recovery_point == 2


def test_a_cancelled_request_does_not_break_the_round() -> None:
    lg = StepLog()

    async def main() -> int:
        gc = GroupCommit(lambda _t, _rp: None)
        waiter = DurableWaiter()
        lg.end = 1
        assert gc.add_waiter(waiter, 0, lg, 1)
        waiter.future.cancel()  # the connection went away
        lg.end = 2
        await asyncio.wait_for(gc.wait_durable(lg, 2), 5)
        return lg.recovery_point

    assert asyncio.run(main()) == 2


def test_forget_fails_the_deleted_partition_of_a_waiter() -> None:
    kept, deleted = StepLog(), StepLog()

    async def main() -> dict[int, BaseException]:
        gc = GroupCommit(lambda _t, _rp: None)
        waiter = DurableWaiter()
        kept.end = deleted.end = 1
        gc.add_waiter(waiter, 0, kept, 1)
        gc.add_waiter(waiter, 1, deleted, 1)
        gc.forget(deleted)
        await asyncio.wait_for(waiter.future, 5)
        return waiter.errors

    errors = asyncio.run(main())
    assert list(errors) == [1]
    with pytest.raises(RuntimeError, match="deleted"):
        raise errors[1]


def test_a_produce_fails_exactly_the_partitions_whose_fsync_failed(tmp_path: Path) -> None:
    """The Produce handler's one waiter: the partition whose log's fsync fails answers
    KAFKA_STORAGE_ERROR, the others of the same request answer NONE with their offsets."""
    async def main() -> list[tuple[int, int, int]]:
        b = Broker(BrokerConfig({"log.dirs": str(tmp_path)}))
        b.load()
        b.create_topic("t", 3, {})
        bad = b.get_log("t", 1)
        assert bad is not None
        real = bad.flush
        failures = [OSError(errno.EIO, "Input/output error")]

        def flaky() -> int:
            if failures:
                raise failures.pop()
            return real()

        bad.flush = flaky  # type: ignore[method-assign]
        batch = build_batch([(int(time.time() * 1000), b"k", b"v")])
        req = build(request_class(0, 9), {
            "transactional_id": None, "acks": -1, "timeout": 30000,
            "topic_data": [{"name": "t", "partition_data": [
                {"index": i, "records": batch} for i in range(3)]}]})
        try:
            resp = await asyncio.wait_for(
                produce.handle(b, RequestContext(0, 9, 2, "c", "peer"), req), 10)
        finally:
            b.close()
        return [(int(p.index), int(p.error_code), int(p.base_offset))
                for p in resp.responses[0].partition_responses]

    assert asyncio.run(main()) == [(0, ErrorCode.none, 0),
                                   (1, ErrorCode.kafka_storage_error, -1),
                                   (2, ErrorCode.none, 0)]
