"""Read-your-writes after acks=1: an acknowledged record is at once below the end offset.

On a single node the in-sync replica set is the leader alone, so, as on a one-replica
Kafka, acks=1 and acks=all mean the same: the answer comes once the record is durable
and below the high watermark. A client that produces with acks=1 (aiokafka's default)
and then asks for the end offset, or fetches without waiting, must find its record.
With a relaxed flush policy (`flush.messages` > 1) the high watermark moves at append
and acks=1 is answered then. acks=0 stays fire-and-forget: no answer at all.
"""

from __future__ import annotations

import asyncio
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess
from tests.integration.rawclient import RawClient

from tidegate.protocol.messages import build, encode, request_class
from tidegate.records.builder import build_batch

ROUNDS = 1_000


def _create(broker: BrokerProcess, topic: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])[topic].result(30)


def _produce_then_list_offsets(broker: BrokerProcess, topic: str, rounds: int) -> list[str]:
    """Produce one record per round with acks=1, wait for its delivery report, then ask
    the broker (not a cache) for the end offset; return one line per miss."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 0})
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "ryw", "enable.auto.commit": False}
    )
    tp = TopicPartition(topic, 0)
    misses: list[str] = []
    delivered: list[tuple[KafkaError | None, Message]] = []
    try:
        for i in range(rounds):
            delivered.clear()
            producer.produce(
                topic,
                b"v%d" % i,
                partition=0,
                on_delivery=lambda err, msg: delivered.append((err, msg)),
            )
            assert producer.flush(30) == 0, f"round {i}: not delivered"
            err, msg = delivered[0]
            assert err is None, f"round {i}: {err}"
            offset = msg.offset()
            assert offset == i, (offset, i)
            _low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            if high <= offset:
                misses.append(f"round {i}: acked at offset {offset}, end offset {high}")
    finally:
        consumer.close()
    return misses


def test_acks1_record_is_below_the_end_offset_at_once(broker: BrokerProcess) -> None:
    _create(broker, "ryw")
    misses = _produce_then_list_offsets(broker, "ryw", ROUNDS)
    assert not misses, f"{len(misses)} of {ROUNDS} acknowledged records not visible: {misses[:5]}"


def test_acks1_on_a_relaxed_flush_topic_is_visible_at_once(broker: BrokerProcess) -> None:
    # flush.messages > 1: answered after the append, the high watermark moved with it
    _create(broker, "ryw-relaxed", {"flush.messages": "10000"})
    misses = _produce_then_list_offsets(broker, "ryw-relaxed", 300)
    assert not misses, misses[:5]


def _fetch_no_wait(c: RawClient, topic: str, offset: int) -> Any:
    r = c.call(
        1,
        12,
        {
            "max_wait": 0,
            "min_bytes": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
            "forgotten_topics_data": [],
        },
    )
    return r.responses[0].partitions[0]


def _produce_raw(c: RawClient, topic: str, acks: int, value: bytes) -> Any:
    batch = build_batch([(1_700_000_000_000, None, value, ())])
    payload = {
        "acks": acks,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    if acks == 0:
        body = encode(build(request_class(0, 9), payload))
        c.send_frame(c.request_bytes(0, 9, body))
        return None
    return c.call(0, 9, payload).responses[0].partition_responses[0]


def test_acks1_then_fetch_without_waiting_returns_the_record_and_acks0_gets_no_answer(
    broker: BrokerProcess,
) -> None:
    _create(broker, "ryw-fetch")
    c = RawClient(broker.bootstrap)
    try:
        for i in range(200):
            part = _produce_raw(c, "ryw-fetch", 1, b"v%d" % i)
            assert (part.error_code, part.base_offset) == (0, i)
            f = _fetch_no_wait(c, "ryw-fetch", i)
            assert f.error_code == 0
            assert f.high_watermark > i, f"round {i}: high watermark {f.high_watermark}"
            assert f.records, f"round {i}: Fetch returned nothing at the acknowledged offset"
        # acks=0: no answer; the next answer on the connection is the Fetch's
        # (RawClient.call checks the correlation id)
        _produce_raw(c, "ryw-fetch", 0, b"fire-and-forget")
        f = _fetch_no_wait(c, "ryw-fetch", 0)
        assert f.error_code == 0
    finally:
        c.close()


def test_aiokafka_acks1_then_end_offsets(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTP

    _create(broker, "ryw-aio")
    rounds = 300

    async def run() -> list[str]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks=1)
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await producer.start()
        await consumer.start()
        tp = AioTP("ryw-aio", 0)
        misses = []
        try:
            for i in range(rounds):
                md = await producer.send_and_wait("ryw-aio", b"v%d" % i, partition=0)
                end = (await consumer.end_offsets([tp]))[tp]
                if end <= md.offset:
                    misses.append(f"round {i}: acked at {md.offset}, end offset {end}")
        finally:
            await producer.stop()
            await consumer.stop()
        return misses

    misses = asyncio.run(run())
    assert not misses, f"{len(misses)} of {rounds} not visible: {misses[:5]}"
