"""The asyncio client end to end against an in-memory fake broker.

Covers what a real broker makes hard to provoke: version negotiation against a broker
with other ranges, pipelining, request timeouts, retriable produce errors, acks=0,
topic-id based Produce/Fetch (v13+), and consumer positions/seek/pause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from tidegate.client import AsyncConsumer, AsyncProducer, ConsumerRecord, TopicPartition
from tidegate.client.consumer.group_offsets import InvalidGroupIdError
from tidegate.client.errors import (
    ClientClosedError,
    KafkaConnectionError,
    NoOffsetForPartitionError,
    RequestTimedOutError,
)
from tidegate.client.net import BrokerConnection
from tidegate.common.errors import MessageTooLargeError, UnknownTopicOrPartitionError

from .fake_broker import FakeBroker

T = TypeVar("T")


def run(fn: Callable[[FakeBroker], Awaitable[T]], **topics: int) -> T:
    async def main() -> T:
        broker = await FakeBroker(topics=dict(topics) or {"t": 2}).start()
        try:
            return await asyncio.wait_for(fn(broker), 20)
        finally:
            await broker.stop()
    return asyncio.run(main())


def test_negotiation_picks_highest_common_and_falls_back_for_api_versions() -> None:
    async def body(broker: FakeBroker) -> None:
        broker.versions[18] = (0, 2)  # does not know ApiVersions v3/v4
        broker.versions[3] = (0, 7)
        conn = await BrokerConnection.open("127.0.0.1", broker.port)
        assert conn.versions[18] == 2 and conn.versions[3] == 7
        assert broker.requests[:2] == [(18, 4), (18, 2)]
        await conn.close()
    run(body)


def test_pipelined_requests_and_timeout_closes_connection() -> None:
    async def body(broker: FakeBroker) -> None:
        conn = await BrokerConnection.open("127.0.0.1", broker.port)
        data = {"topics": None, "allow_auto_topic_creation": False}
        results = await asyncio.gather(*(conn.request(3, data) for _ in range(20)))
        assert all(r.brokers[0].port == broker.port for r in results)
        broker.delay_s[3] = 1.0
        with pytest.raises(RequestTimedOutError):
            await conn.request(3, data, timeout_ms=100)
        assert conn.closed
        with pytest.raises(KafkaConnectionError):
            await conn.request(3, data)
    run(body)


def test_unreachable_broker_error_names_the_address() -> None:
    async def body() -> None:
        with pytest.raises(KafkaConnectionError,
                           match=r"cannot reach 127\.0\.0\.1:1 \(connection refused\)"):
            await BrokerConnection.open("127.0.0.1", 1)
    asyncio.run(body())


@pytest.mark.parametrize("produce_max,fetch_max", [(9, 12), (13, 18)])
def test_produce_then_consume_by_name_and_by_topic_id(produce_max: int, fetch_max: int) -> None:
    async def body(broker: FakeBroker) -> None:
        broker.versions[0] = (3, produce_max)
        broker.versions[1] = (4, fetch_max)
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=1) as p:
            futs = [await p.send("t", b"v%d" % i, key=b"k%d" % i, headers=[("h", "x")])
                    for i in range(50)]
            await p.flush()
            metas = [f.result() for f in futs]
        assert all(m.offset >= 0 for m in metas)
        async with AsyncConsumer(bootstrap_servers=broker.bootstrap,
                                 auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
            got: list[ConsumerRecord] = []
            while len(got) < 50:
                got += await c.poll(timeout_ms=2000)
        by_value = {r.value: r for r in got}
        for i, m in enumerate(metas):
            r = by_value[b"v%d" % i]
            assert (r.partition, r.offset, r.key, r.headers) == (
                m.partition, m.offset, b"k%d" % i, (("h", b"x"),))
        assert max(v for k, v in broker.requests if k == 0) == produce_max
        assert max(v for k, v in broker.requests if k == 1) == fetch_max
    run(body)


def test_retriable_errors_are_retried_in_order_with_max_in_flight_1() -> None:
    async def body(broker: FakeBroker) -> None:
        broker.produce_errors[("t", 0)] = [6, 6]  # NOT_LEADER_OR_FOLLOWER twice
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=0,
                                 retry_backoff_ms=10,
                                 max_in_flight_requests_per_connection=1) as p:
            futs = [await p.send("t", b"%d" % i, partition=0) for i in range(5)]
            offsets = [(await f).offset for f in futs]
        assert offsets == sorted(offsets) == list(range(5))
        assert broker.produce_requests >= 3
    run(body)


def test_non_retriable_error_fails_the_records_and_retries_exhaust() -> None:
    async def body(broker: FakeBroker) -> None:
        broker.produce_errors[("t", 0)] = [87]  # INVALID_RECORD: not retriable
        broker.produce_errors[("t", 1)] = [6] * 10
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=0,
                                 retries=2, retry_backoff_ms=5) as p:
            f0 = await p.send("t", b"a", partition=0)
            f1 = await p.send("t", b"b", partition=1)
            with pytest.raises(Exception, match="INVALID_RECORD"):
                await f0
            with pytest.raises(Exception, match="NOT_LEADER_OR_FOLLOWER"):
                await f1
        assert len(broker.produce_errors[("t", 1)]) == 7  # 1 try + 2 retries
    run(body)


def test_acks_0_and_callbacks_and_size_limit_and_closed() -> None:
    async def body(broker: FakeBroker) -> None:
        seen: list[object] = []
        p = AsyncProducer(bootstrap_servers=broker.bootstrap, acks=0, linger_ms=0,
                          max_request_size=1000)
        fut = await p.send("t", b"x", partition=1, on_delivery=lambda m, e: seen.append((m, e)))
        meta = await fut
        assert meta.offset == -1 and meta.partition == 1
        await asyncio.sleep(0)
        assert seen == [(meta, None)]
        with pytest.raises(MessageTooLargeError, match=r"max\.request\.size=1000"):
            await p.send("t", b"x" * 2000)
        await p.close()
        with pytest.raises(ClientClosedError, match="producer is closed"):
            await p.send("t", b"x")
        assert broker.log[("t", 1)].next_offset == 1
    run(body)


def test_unknown_topic_times_out_with_clear_message() -> None:
    async def body(broker: FakeBroker) -> None:
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, max_block_ms=300) as p:
            with pytest.raises(UnknownTopicOrPartitionError, match="tidegate topics create"):
                await p.send("missing", b"x")
    run(body)


def test_keyed_records_use_murmur2_partitions() -> None:
    from tidegate.client.partitioner import partition_for_key

    async def body(broker: FakeBroker) -> None:
        async with AsyncProducer(bootstrap_servers=broker.bootstrap) as p:
            for i in range(30):
                m = await p.send_and_wait("t", b"v", key=b"key-%d" % i)
                assert m.partition == partition_for_key(b"key-%d" % i, 5)
    run(body, t=5)


def test_consumer_seek_pause_offsets_and_reset_none() -> None:
    async def body(broker: FakeBroker) -> None:
        tp = TopicPartition("t", 0)
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=0) as p:
            for i in range(10):
                await p.send_and_wait("t", b"%d" % i, partition=0, timestamp_ms=1000 + i)
        async with AsyncConsumer(bootstrap_servers=broker.bootstrap, max_poll_records=3) as c:
            c.assign([tp])
            assert await c.position(tp) == 10  # latest
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 10}
            found = await c.offsets_for_times({tp: 1004, TopicPartition("t", 1): 5})
            hit = found[tp]
            assert hit is not None and hit.offset == 4
            assert found[TopicPartition("t", 1)] is None
            c.seek(tp, 4)
            batch = await c.poll(timeout_ms=2000)
            assert [r.offset for r in batch] == [4, 5, 6]  # max.poll.records
            assert await c.position(tp) == 7
            c.pause(tp)
            assert await c.poll(timeout_ms=200) == []
            c.resume(tp)
            assert [r.offset for r in await c.poll(timeout_ms=2000)] == [7, 8, 9]
            c.seek_to_beginning(tp)
            assert (await c.poll(timeout_ms=2000))[0].offset == 0
            with pytest.raises(InvalidGroupIdError, match=r"group\.id"):  # no group.id
                c.subscribe(["t"])
        async with AsyncConsumer(bootstrap_servers=broker.bootstrap,
                                 auto_offset_reset="none") as c:
            c.assign([tp])
            with pytest.raises(NoOffsetForPartitionError, match=r"auto\.offset\.reset=none"):
                await c.poll(timeout_ms=2000)
            c.seek(tp, 99)
            with pytest.raises(Exception, match="out of range"):
                await c.poll(timeout_ms=2000)
            c.seek(tp, 9)
            assert [r.value for r in await c.poll(timeout_ms=2000)] == [b"9"]
    run(body)


def test_producer_reconnects_with_backoff_after_broker_restart() -> None:
    async def body(broker: FakeBroker) -> None:
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=0,
                                 retry_backoff_ms=20, reconnect_backoff_ms=20,
                                 reconnect_backoff_max_ms=100) as p:
            assert (await p.send_and_wait("t", b"a", partition=0)).offset == 0
            await broker.stop()
            fut = await p.send("t", b"b", partition=0)
            await asyncio.sleep(0.5)  # refused connections meanwhile, backing off
            assert not fut.done()
            before = broker.connections
            await broker.start()
            assert (await fut).offset == 1
            assert broker.connections == before + 1
    run(body)


def test_reconnect_backoff_grows_exponentially_to_the_max() -> None:
    from tidegate.client.config import ClientConfig
    from tidegate.client.net import NetworkClient

    net = NetworkClient(ClientConfig.from_dict(
        {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 1000}))
    waits = [net._backoff_s(n) for n in range(1, 8)]
    for n, w in enumerate(waits, start=1):
        expected = min(50 * 2 ** (n - 1), 1000) / 1000
        assert expected * 0.8 <= w <= expected * 1.2
