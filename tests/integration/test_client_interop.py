"""Tidegate's Python client against other Kafka clients, a real broker, and misuse.

- Under every codec: Tidegate producer -> kafka-python and aiokafka consumers, and
  kafka-python / aiokafka producers -> Tidegate consumer, with keys (and null keys),
  values (and tombstones), headers (binary values, non-ASCII names, empty values) and
  explicit CreateTime timestamps compared record by record, per-partition order kept,
  and keyed records in the partition Java's murmur2 partitioner picks.
- Keyed records land where kafka-python's default partitioner puts them (librdkafka's
  murmur2_random is covered in test_cli_client.py).
- The broker is killed (SIGKILL) and restarted on the same port while the producer
  (acks=all, retries, max.in.flight=1) sends: nothing acknowledged is lost, nothing
  is reordered (retries may duplicate until the idempotent producer arrives).
- Misuse raises the documented exception: use after close, unknown topic with broker
  auto-creation off, oversized records (client- and broker-side), bad configuration.

Round trips with confluent-kafka, the admin client and the CLI are in
test_cli_client.py.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.clients import Got
from tests.integration.clients import consume as consume_with
from tests.integration.conftest import BrokerProcess

from tidegate.client import (
    Admin,
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ClientClosedError,
    ConfigError,
    Consumer,
    Producer,
    RecordMetadata,
    TopicPartition,
)
from tidegate.client.partitioner import partition_for_key
from tidegate.common.errors import MessageTooLargeError, UnknownTopicOrPartitionError

pytestmark = pytest.mark.interop

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 3
N = 600
TS0 = 1_700_000_000_000

Headers = tuple[tuple[str, bytes], ...]
Sent = tuple[bytes | None, bytes | None, Headers, int]  # key, value, headers, timestamp


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(bootstrap: str, name: str, partitions: int = PARTITIONS,
           configs: dict[str, str] | None = None) -> None:
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topic(name, partitions, configs=configs)


def records(n: int = N) -> list[Sent]:
    """Record i carries header ("i", i); every 10th has a null key, every 50th a null
    value (never both: other clients refuse that); headers include binary and empty
    values and a non-ASCII name."""
    out: list[Sent] = []
    for i in range(n):
        key = None if i % 10 == 9 else (b"\xff\x00k" if i % 10 == 8 else b"key-%d" % (i % 37))
        value = None if i % 50 == 48 else b"%d:" % i + b"v" * (i % 300)
        headers: Headers = (("i", b"%d" % i),)
        if i % 3 == 0:
            headers += (("bin", b"\x00\xff\x80"), ("ünï", b""))
        out.append((key, value, headers, TS0 + 7 * i))
    return out


def check(sent: list[Sent], got: list[Got], keyed_partitions: bool = True) -> None:
    """`got` holds exactly `sent`, field for field, in per-partition send order."""
    assert len(got) == len(sent), f"expected {len(sent)} records, got {len(got)}"
    by_index = {int(dict(g.headers)["i"]): g for g in got}
    assert sorted(by_index) == list(range(len(sent))), "records missing or duplicated"
    for i, (key, value, headers, ts) in enumerate(sent):
        g = by_index[i]
        assert (g.key, g.value, tuple(g.headers), g.timestamp) == (key, value, headers, ts), i
        if key is not None and keyed_partitions:
            assert g.partition == partition_for_key(key, PARTITIONS), (i, key)
    per_partition: dict[int, list[Got]] = defaultdict(list)
    for g in got:
        per_partition[g.partition].append(g)
    for part, items in per_partition.items():
        items.sort(key=lambda g: g.offset)
        order = [int(dict(g.headers)["i"]) for g in items]
        assert order == sorted(order), f"partition {part} is not in send order"


# -- producing with one client, consuming with another --------------------------------


async def produce_tidegate(bootstrap: str, topic: str, sent: list[Sent], codec: str) -> None:
    async with AsyncProducer(bootstrap_servers=bootstrap, compression_type=codec,
                             linger_ms=5) as p:
        futs = [await p.send(topic, v, key=k, headers=list(h), timestamp_ms=ts)
                for k, v, h, ts in sent]
        await p.flush()
    for f in futs:
        f.result()


def produce_kafka_python(bootstrap: str, topic: str, sent: list[Sent], codec: str) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                      compression_type=None if codec == "none" else codec)
    try:
        futs = [p.send(topic, value=v, key=k, headers=list(h), timestamp_ms=ts)
                for k, v, h, ts in sent]
        p.flush(60)
        for f in futs:
            f.get(timeout=60)
    finally:
        p.close()


async def produce_aiokafka(bootstrap: str, topic: str, sent: list[Sent], codec: str) -> None:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                         compression_type=None if codec == "none" else codec)
    await p.start()
    try:
        futs = [await p.send(topic, v, key=k, headers=list(h), timestamp_ms=ts)
                for k, v, h, ts in sent]
        await p.flush()
        for f in futs:
            await f
    finally:
        await p.stop()


async def consume_tidegate(bootstrap: str, topic: str, n: int) -> list[Got]:
    got: list[Got] = []
    async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += [Got(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp)
                    for r in await c.poll(timeout_ms=500)]
    return got


async def consume_to_end(bootstrap: str, topic: str) -> list[Got]:
    """Everything in the topic now (the count is unknown: retries may duplicate)."""
    got: list[Got] = []
    async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        ends = await c.end_offsets(tps)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            behind = [tp for tp, end in ends.items() if await c.position(tp) < end]
            if not behind:
                break
            got += [Got(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp)
                    for r in await c.poll(timeout_ms=500)]
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_tidegate_producer_to_kafka_python_and_aiokafka_consumers(
    shared_broker: BrokerProcess, codec: str
) -> None:
    bs = shared_broker.bootstrap
    topic = topic_name(f"tg-out-{codec}")
    create(bs, topic)
    sent = records()
    asyncio.run(produce_tidegate(bs, topic, sent, codec))
    for lib in ("kafka-python", "aiokafka"):
        check(sent, consume_with(lib, bs, topic, len(sent), timeout=30))


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_and_aiokafka_producers_to_tidegate_consumer(
    shared_broker: BrokerProcess, codec: str
) -> None:
    bs = shared_broker.bootstrap
    sent = records()
    for lib in ("kafka-python", "aiokafka"):
        topic = topic_name(f"{lib}-in-{codec}")
        create(bs, topic)
        if lib == "kafka-python":
            produce_kafka_python(bs, topic, sent, codec)
        else:
            asyncio.run(produce_aiokafka(bs, topic, sent, codec))
        # Their default partitioners are murmur2 too: keyed records land where ours put them.
        check(sent, asyncio.run(consume_tidegate(bs, topic, len(sent))))


def test_keyed_records_land_where_kafka_pythons_default_partitioner_puts_them(
    shared_broker: BrokerProcess,
) -> None:
    from kafka import KafkaProducer

    bs = shared_broker.bootstrap
    topic = topic_name("kp-keys")
    create(bs, topic, 7)
    keys = [b"user-%d" % i for i in range(60)] + [b"", b"\xff\x00", "ключ".encode(),
                                                   b"k" * 1000]
    kp = KafkaProducer(bootstrap_servers=bs)
    try:
        kp_parts = {k: kp.send(topic, b"kp", key=k).get(timeout=30).partition for k in keys}
    finally:
        kp.close()
    with Producer(bootstrap_servers=bs) as p:
        futs = {k: p.send(topic, b"tg", key=k) for k in keys}
        tg_parts = {k: f.result(30).partition for k, f in futs.items()}
    assert tg_parts == kp_parts
    assert tg_parts == {k: partition_for_key(k, 7) for k in keys}
    assert len(set(tg_parts.values())) > 3


# -- the broker dies mid-stream ---------------------------------------------------------


def test_broker_killed_mid_stream_loses_nothing_acknowledged(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    topic = topic_name("kill")
    try:
        create(broker.bootstrap, topic)
        acked, total = asyncio.run(_send_through_a_crash(broker, topic))
        got = asyncio.run(consume_to_end(broker.bootstrap, topic))
    finally:
        broker.stop()
    # Every acknowledged record is at the offset it was acknowledged with.
    at = {(g.partition, g.offset): g for g in got}
    for index, (partition, offset) in acked.items():
        g = at.get((partition, offset))
        assert g is not None and g.value == b"%d" % index, (index, partition, offset)
    assert len(acked) == total, "every record was acknowledged in the end (retries)"
    # Per partition, records are in send order. A batch written just before the crash
    # but not acknowledged is sent again, so duplicates are possible (until the
    # idempotent producer); the first copies must be in order.
    for part in range(PARTITIONS):
        values = [int(g.value or b"") for g in sorted(got, key=lambda g: g.offset)
                  if g.partition == part]
        first = list(dict.fromkeys(values))
        assert first == sorted(first), f"partition {part} reordered"
        assert set(first) == {i for i, (p, _) in acked.items() if p == part}


async def _send_through_a_crash(broker: BrokerProcess, topic: str
                                ) -> tuple[dict[int, tuple[int, int]], int]:
    """Send for a while, SIGKILL the broker mid-stream, restart it on the same port,
    keep sending; return {index: (partition, offset)} of acknowledged records."""
    acked: dict[int, tuple[int, int]] = {}
    errors: list[BaseException] = []
    async with AsyncProducer(
        bootstrap_servers=broker.bootstrap, acks="all", linger_ms=2,
        max_in_flight_requests_per_connection=1, request_timeout_ms=5000,
        retry_backoff_ms=50, reconnect_backoff_ms=50, reconnect_backoff_max_ms=200,
    ) as p:
        futs: list[asyncio.Future[RecordMetadata]] = []
        waiting_at_restart = 0

        async def crash() -> None:
            nonlocal waiting_at_restart
            await asyncio.sleep(1.0)
            assert any(f.done() and not f.exception() for f in futs), "nothing acked yet"
            await asyncio.to_thread(broker.kill)
            await asyncio.sleep(0.3)  # sends pile up while the broker is down
            await asyncio.to_thread(broker.start)
            waiting_at_restart = sum(not f.done() for f in futs)

        crasher = asyncio.create_task(crash())
        i = 0
        start = time.monotonic()
        while time.monotonic() - start < 4.0 or not crasher.done():
            for _ in range(50):
                futs.append(await p.send(topic, b"%d" % i, key=b"k%d" % (i % 11)))
                i += 1
            await asyncio.sleep(0.005)
        await crasher
        assert waiting_at_restart > 0, "nothing was waiting for the broker"
        await p.flush()
        for index, f in enumerate(futs):
            if f.exception() is not None:
                errors.append(f.exception())  # type: ignore[arg-type]
            else:
                meta = f.result()
                acked[index] = (meta.partition, meta.offset)
    assert not errors, errors[:3]
    return acked, i


# -- misuse ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker that does not create topics on demand."""
    b = BrokerProcess(tmp_path_factory.mktemp("strict") / "data",
                      overrides={"auto.create.topics.enable": "false"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_use_after_close_raises_client_closed_error(strict_broker: BrokerProcess) -> None:
    bs = strict_broker.bootstrap
    topic = topic_name("closed")
    create(bs, topic, 1)

    async def main() -> None:
        p = AsyncProducer(bootstrap_servers=bs)
        await p.send_and_wait(topic, b"x")
        await p.close()
        with pytest.raises(ClientClosedError, match="producer is closed"):
            await p.send(topic, b"y")
        c = AsyncConsumer(bootstrap_servers=bs)
        c.assign([TopicPartition(topic, 0)])
        await c.close()
        with pytest.raises(ClientClosedError, match="consumer is closed"):
            await c.poll(timeout_ms=10)

    asyncio.run(main())
    p = Producer(bootstrap_servers=bs)
    p.close()
    with pytest.raises(ClientClosedError):
        p.send(topic, b"z")
    c = Consumer(bootstrap_servers=bs)
    c.close()
    with pytest.raises(ClientClosedError):
        c.poll(timeout_ms=10)


def test_unknown_topic_with_auto_create_off(strict_broker: BrokerProcess) -> None:
    bs = strict_broker.bootstrap
    missing = topic_name("missing")

    async def main() -> None:
        # The producer asks for the topic, then waits max.block.ms for it to appear.
        async with AsyncProducer(bootstrap_servers=bs, max_block_ms=1000) as p:
            t0 = time.monotonic()
            with pytest.raises(UnknownTopicOrPartitionError, match="not in the cluster "
                               "metadata after 1000 ms") as info:
                await p.send(missing, b"x")
            assert 0.9 < time.monotonic() - t0 < 10
            assert info.value.name == "UNKNOWN_TOPIC_OR_PARTITION"
        # A consumer that may not create topics is told at once.
        async with AsyncConsumer(bootstrap_servers=bs, allow_auto_create_topics=False) as c:
            with pytest.raises(UnknownTopicOrPartitionError, match="does not exist"):
                await c.partitions_for_topic(missing)

    asyncio.run(main())
    with Admin(bootstrap_servers=bs) as admin:
        assert missing not in admin.list_topics()


def test_oversized_records(strict_broker: BrokerProcess) -> None:
    bs = strict_broker.bootstrap
    topic = topic_name("big")
    create(bs, topic, 1, {"max.message.bytes": "2000"})
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with AsyncProducer(bootstrap_servers=bs, max_request_size=10_000,
                                 buffer_memory=1_000_000) as p:
            # Too big for max.request.size: refused before it leaves the client.
            with pytest.raises(MessageTooLargeError, match=r"max\.request\.size=10000"):
                await p.send(topic, b"x" * 10_001)
            # Fits the client, not the topic's max.message.bytes: the broker refuses.
            fut = await p.send(topic, b"x" * 5000)
            with pytest.raises(MessageTooLargeError) as info:
                await fut
            assert info.value.name == "MESSAGE_TOO_LARGE" and not info.value.retriable
            assert (await p.send_and_wait(topic, b"small")).offset == 0
        async with AsyncProducer(bootstrap_servers=bs, buffer_memory=4096) as p:
            with pytest.raises(MessageTooLargeError, match=r"buffer\.memory=4096"):
                await p.send(topic, b"x" * 5000)

    asyncio.run(main())
    with Admin(bootstrap_servers=bs) as admin:
        assert admin.list_offsets({tp: -1})[tp].offset == 1  # type: ignore[union-attr]


def test_bad_configuration_fails_at_construction() -> None:
    # Nothing is listening on port 1: ConfigError comes before any connection attempt.
    cases: list[tuple[type, dict[str, object], str]] = [
        (AsyncProducer, {"lingr.ms": 5}, "did you mean linger.ms"),
        (Producer, {"acks": "2"}, "allowed values are all, -1, 0, 1"),
        (Producer, {"compression.type": "brotli"}, "allowed values are none, gzip"),
        (AsyncConsumer, {"auto.offset.reset": "smallest"}, "earliest, latest, none"),
        (Consumer, {"fetch.max.wait.ms": 40_000}, "request.timeout.ms=30000 must be larger"),
        (AsyncAdmin, {"bootstrap.servers": "localhost"}, "must look like host:port"),
        (Admin, {"request.timeout.ms": "soon"}, "must be an integer"),
        (AsyncProducer, {"delivery.timeout.ms": 1000}, "must be at least linger.ms"),
    ]
    for cls, config, message in cases:
        full = {"bootstrap.servers": "127.0.0.1:1", **config}
        with pytest.raises(ConfigError, match=message):
            cls(full)
    assert issubclass(ConfigError, ValueError)
