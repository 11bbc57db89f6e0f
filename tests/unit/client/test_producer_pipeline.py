"""The producer's batching, pipelining and completion, against the in-memory broker.

Sticky unkeyed records fill whole batches and move to another partition when a batch
cannot take the next record (its batch is then sent at once, linger or not); the
sender keeps up to max.in.flight requests outstanding per broker; records in flight
fail (rather than hang) when close() gives up; a cancelled future does not keep the
rest of its batch from completing. And the blocking producer's callers append
directly, waiting for buffer.memory in their own thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from tidegate.client import AsyncProducer, Producer
from tidegate.client.errors import ClientClosedError, KafkaTimeoutError
from tidegate.client.futures import DeliveryFuture, FutureGroup
from tidegate.client.loop_thread import LoopThread
from tidegate.records.record import iter_batches

from .fake_broker import FakeBroker

T = TypeVar("T")


def run(fn: Callable[[FakeBroker], Awaitable[T]], **topics: int) -> T:
    async def main() -> T:
        broker = await FakeBroker(topics=dict(topics) or {"t": 3}).start()
        try:
            return await asyncio.wait_for(fn(broker), 20)
        finally:
            await broker.stop()
    return asyncio.run(main())


def batch_sizes(broker: FakeBroker, topic: str, partitions: int) -> dict[int, list[int]]:
    """Records per batch, per partition, in log order."""
    out: dict[int, list[int]] = {}
    for p in range(partitions):
        out[p] = [len(records) for raw in broker.log[(topic, p)].batches
                  for _, records in iter_batches(raw)]
    return out


def test_unkeyed_records_fill_batches_and_full_ones_go_without_linger() -> None:
    async def body(broker: FakeBroker) -> None:
        # Records of ~110 bytes in batches of at most 1000: 8 fit; the 9th starts a
        # batch on another partition and the full one is sent at once, although
        # linger.ms is long.
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, batch_size=1000,
                                 linger_ms=30_000, enable_idempotence=False) as p:
            futs = [await p.send("t", b"x" * 100) for _ in range(8 * 6 + 1)]
            done, _ = await asyncio.wait(futs[:48], timeout=5)
            assert len(done) == 48  # six full batches, acknowledged without a flush
            assert not futs[48].done()  # the last one lingers
            parts = [f.result().partition for f in futs[:48]]
            # Each batch is one partition, and the next batch is on another.
            for i in range(0, 48, 8):
                assert len(set(parts[i:i + 8])) == 1
                if i:
                    assert parts[i] != parts[i - 1]
            await p.flush()
        sizes = batch_sizes(broker, "t", 3)
        assert sorted(n for per in sizes.values() for n in per) == [1] + [8] * 6
    run(body)


def test_requests_are_pipelined_up_to_max_in_flight() -> None:
    async def body(broker: FakeBroker) -> None:
        broker.delay_s[0] = 0.3  # every Produce answer takes a while
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, batch_size=500,
                                 linger_ms=0, enable_idempotence=False,
                                 max_in_flight_requests_per_connection=5) as p:
            futs = [await p.send("t", b"x" * 200, partition=0) for _ in range(20)]
            await asyncio.sleep(0.1)
            sender = p._sender
            assert sender is not None and sender.in_flight == 5  # not one at a time
            started = time.monotonic()
            offsets = [(await f).offset for f in futs]
            # 10 batches of 2 at 5 in flight: two or three rounds of 0.3 s, not ten.
            assert time.monotonic() - started < 2.0
        assert offsets == list(range(20))  # one partition: in order
    run(body)


def test_close_that_gives_up_fails_records_in_flight() -> None:
    async def body(broker: FakeBroker) -> None:
        broker.delay_s[0] = 10  # never answers in time
        p = AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=0,
                          enable_idempotence=False)
        fut = await p.send("t", b"x")
        await asyncio.sleep(0.1)  # in flight now
        await p.close(timeout_ms=100)
        with pytest.raises(ClientClosedError):
            await asyncio.wait_for(fut, 1)
    run(body)


def test_a_cancelled_future_does_not_keep_its_batch_from_completing() -> None:
    async def body(broker: FakeBroker) -> None:
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=50,
                                 enable_idempotence=False) as p:
            futs = [await p.send("t", b"%d" % i, partition=1) for i in range(3)]
            futs[1].cancel()
            await p.flush()
            assert futs[1].cancelled()
            assert [futs[0].result().offset, futs[2].result().offset] == [0, 2]
    run(body)


def test_delivery_futures_complete_as_a_group() -> None:
    group = FutureGroup()
    futures = [group.future() for _ in range(4)]
    other = FutureGroup().future()  # of another group: finished on its own
    seen: list[object] = []
    futures[2].add_done_callback(lambda f: seen.append(f.result()))
    futures[3].cancel()
    waiter = threading.Thread(target=lambda: seen.append(futures[1].result(5)))
    waiter.start()
    time.sleep(0.05)
    DeliveryFuture.set_results([*futures, other], ["a", "b", "c", "d", "e"])
    waiter.join(5)
    assert [f.result() for f in futures[:3]] == ["a", "b", "c"]
    assert futures[3].cancelled() and other.result() == "e"
    assert sorted(map(str, seen)) == ["b", "c"]
    assert list(concurrent.futures.as_completed(futures[:3], timeout=1))
    assert group.waiting == 0


@pytest.fixture
def broker() -> FakeBroker:
    return FakeBroker(topics={"t": 2})


def test_blocking_send_waits_for_memory_in_its_thread(broker: FakeBroker) -> None:
    host = LoopThread("fake-broker")
    host.run(broker.start())
    try:
        broker.delay_s[0] = 0.02
        with Producer(bootstrap_servers=broker.bootstrap, buffer_memory=8000,
                      batch_size=1000, linger_ms=1, enable_idempotence=False) as p:
            first = p.send("t", b"0" * 500, key=b"k")  # the pump fetches metadata
            first.result(5)
            futures = [p.send("t", b"%03d" % i + b"x" * 500, key=b"k") for i in range(200)]
            assert not p._pumping and not p._queue  # appended here, not via the loop
            p.flush()
            offsets = [f.result(0).offset for f in futures]
        assert offsets == sorted(offsets) and len(set(offsets)) == 200
        assert p._async._acc.used_memory == 0
    finally:
        host.run(broker.stop())
        host.stop()


def test_blocking_send_gives_up_after_max_block_ms(broker: FakeBroker) -> None:
    host = LoopThread("fake-broker")
    host.run(broker.start())
    try:
        with Producer(bootstrap_servers=broker.bootstrap, buffer_memory=3000,
                      batch_size=1000, linger_ms=1, max_block_ms=200,
                      enable_idempotence=False) as p:
            p.send("t", b"x", partition=0).result(5)
            broker.delay_s[0] = 2  # answers too late: memory stays in use
            started = time.monotonic()
            futures = [p.send("t", b"y" * 900, partition=0) for _ in range(5)]
            with pytest.raises(KafkaTimeoutError, match=r"max\.block\.ms=200"):
                futures[-1].result(5)
            assert time.monotonic() - started < 1.5
            broker.delay_s[0] = 0
            p.flush()
            assert sum(f.exception() is None for f in futures) >= 2
    finally:
        host.run(broker.stop())
        host.stop()
