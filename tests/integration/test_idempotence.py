"""Idempotent producers end to end: real clients, a connection-dropping proxy, kill -9.

Each run writes records whose value is their index i to partition i % PARTITIONS, through
`FaultProxy`, which lets every Nth Produce request reach the broker and then drops the
connection before the client sees the (successful) answer, so the client retries a
batch that is already in the log. The broker advertises the proxy's address, so every
produce goes through it. The log is then read with a different library than the one
that produced (it bootstraps at the broker; fetches pass the proxy untouched, it only
interferes with Produce) and checked: with idempotence each partition holds exactly
i = p, p + P, p + 2P, ... once each and in order; without it the same faults leave
duplicates, which shows the check can see them.

The restart tests also withhold Produce responses just before the broker dies (the
batches are fsynced and acknowledged by the broker, unknown to the client), so the
client retries them after the restart: the broker recognises them from state rebuilt
from the log (kill -9) or from its clean-shutdown snapshot (SIGTERM).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess, free_port
from tests.integration.faultproxy import FaultProxy
from tests.integration.rawclient import RawClient

from tidegate.records.builder import build_batch

N = 100_000
PARTITIONS = 3
TOPIC = "idem"


class Setup:
    def __init__(self, tmp_path: Path, drop_every: int) -> None:
        broker_port = free_port()
        self.proxy = FaultProxy(broker_port, drop_every=drop_every)
        self.proxy.start()
        self.broker = BrokerProcess(
            tmp_path / "data",
            port=broker_port,
            overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.proxy.port}"},
        )
        self.broker.start()
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)

    def close(self) -> None:
        self.broker.stop()
        self.proxy.stop()


@pytest.fixture
def setup(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Setup]:
    s = Setup(tmp_path, getattr(request, "param", 5))
    try:
        yield s
    finally:
        s.close()


def confluent_producer(bootstrap: str, idempotent: bool) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": idempotent,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 500,
            "queue.buffering.max.messages": 2 * N,
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "message.timeout.ms": 120_000,
        }
    )


def produce_confluent(p: Producer, n: int, errors: list[object], acked: list[int]) -> None:
    def on_delivery(err: object, _msg: object) -> None:
        if err is None:
            acked.append(1)
        else:
            errors.append(err)

    for i in range(n):
        while True:
            try:
                p.produce(TOPIC, b"%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def produce_kafka_python(
    bootstrap: str, n: int, idempotent: bool, errors: list[object], acked: list[int]
) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=idempotent,
        acks="all",
        linger_ms=5,
        batch_size=8192,
        retry_backoff_ms=20,
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=200,
        delivery_timeout_ms=120_000,
    )
    for i in range(n):
        f = p.send(TOPIC, b"%d" % i, partition=i % PARTITIONS)
        f.add_callback(lambda _md: acked.append(1))
        f.add_errback(errors.append)
    p.flush(120)
    p.close()


def read_kafka_python(bootstrap: str) -> dict[int, list[int]]:
    """Every value in every partition, in offset order, read up to the log end."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning()
    end = {tp.partition: off for tp, off in c.end_offsets(tps).items()}
    out: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    last = {p: -1 for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while any(last[p] + 1 < end[p] for p in out) and time.monotonic() < deadline:
        for tp, msgs in c.poll(500, max_records=20000).items():
            for m in msgs:
                out[tp.partition].append(int(m.value))
                last[tp.partition] = m.offset
    c.close()
    return out


def read_confluent(bootstrap: str) -> dict[int, list[int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    end = {
        p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
        for p in range(PARTITIONS)
    }
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    out: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    last = {p: -1 for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while any(last[p] + 1 < end[p] for p in out) and time.monotonic() < deadline:
        for m in c.consume(10000, 0.5):
            assert not m.error(), m.error()
            out[m.partition()].append(int(m.value()))
            last[m.partition()] = m.offset()
    c.close()
    return out


def assert_exactly_once_in_order(values: dict[int, list[int]], n: int) -> None:
    for p, got in values.items():
        want = list(range(p, n, PARTITIONS))
        if got != want:
            dups = len(got) - len(set(got))
            missing = len(set(want) - set(got))
            first_bad = next(
                (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None
            )
            raise AssertionError(
                f"partition {p}: {len(got)} records, {dups} duplicates, {missing} missing, "
                f"first difference at position {first_bad}"
            )


def duplicates(values: dict[int, list[int]]) -> int:
    return sum(len(v) - len(set(v)) for v in values.values())


def test_confluent_idempotent_producer_writes_exactly_once_through_drops(setup: Setup) -> None:
    errors: list[object] = []
    produce_confluent(confluent_producer(setup.proxy.bootstrap, True), N, errors, [])
    assert not errors, errors[:5]
    assert setup.proxy.stats.dropped >= 10, setup.proxy.stats
    assert_exactly_once_in_order(read_kafka_python(setup.broker.bootstrap), N)
    assert "Traceback" not in setup.broker.logs()


def test_kafka_python_idempotent_producer_writes_exactly_once_through_drops(
    setup: Setup,
) -> None:
    errors: list[object] = []
    produce_kafka_python(setup.proxy.bootstrap, N, True, errors, [])
    assert not errors, errors[:5]
    assert setup.proxy.stats.dropped >= 10, setup.proxy.stats
    assert_exactly_once_in_order(read_confluent(setup.broker.bootstrap), N)
    assert "Traceback" not in setup.broker.logs()


@pytest.mark.parametrize("lib", ["confluent", "kafka-python"])
def test_without_idempotence_the_same_faults_duplicate_records(setup: Setup, lib: str) -> None:
    n = 20_000
    if lib == "confluent":
        errors: list[object] = []
        produce_confluent(confluent_producer(setup.proxy.bootstrap, False), n, errors, [])
        assert not errors, errors[:5]
        values = read_kafka_python(setup.broker.bootstrap)
    else:
        errors = []
        produce_kafka_python(setup.proxy.bootstrap, n, False, errors, [])
        assert not errors, errors[:5]
        values = read_confluent(setup.broker.bootstrap)
    assert setup.proxy.stats.dropped >= 3, setup.proxy.stats
    assert duplicates(values) > 0, "dropped connections caused no duplicates: the check is blind"
    assert set().union(*map(set, values.values())) == set(range(n))  # nothing lost either


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
@pytest.mark.parametrize("lib", ["confluent", "kafka-python"])
def test_dedup_survives_broker_restart(setup: Setup, lib: str, how: str) -> None:
    """Restart mid-run with batches the broker wrote but the client never heard of."""
    errors: list[object] = []
    acked: list[int] = []

    def run() -> None:
        try:
            if lib == "confluent":
                p = confluent_producer(setup.proxy.bootstrap, True)
                produce_confluent(p, N, errors, acked)
            else:
                produce_kafka_python(setup.proxy.bootstrap, N, True, errors, acked)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while len(acked) < N // 4 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(acked) >= N // 4, "produce too slow to test anything"
        setup.proxy.swallow_responses = True
        # Until the client stops sending (max.in.flight unanswered requests), or 5 s.
        until = time.monotonic() + 5
        while setup.proxy.stats.swallowed == 0 and time.monotonic() < until:
            time.sleep(0.001)
        seen = -1
        while seen != setup.proxy.stats.swallowed and time.monotonic() < until:
            seen = setup.proxy.stats.swallowed
            time.sleep(0.2)
        if how == "kill -9":
            setup.broker.kill()
        else:
            assert setup.broker.stop() == 0
        swallowed = setup.proxy.stats.swallowed
        assert len(acked) < N, "everything was acknowledged before the restart"
    finally:
        setup.proxy.swallow_responses = False
        if setup.broker.proc is None:
            setup.broker.start()
        t.join(180)
    assert not t.is_alive()
    assert not errors, errors[:5]
    assert swallowed >= 1, setup.proxy.stats
    read = read_kafka_python if lib == "confluent" else read_confluent
    assert_exactly_once_in_order(read(setup.broker.bootstrap), N)
    assert "Traceback" not in setup.broker.logs()


def _produce(c: RawClient, batch: bytes, acks: int = -1) -> tuple[int, int]:
    r = c.call(
        0,
        9,
        {
            "acks": acks,
            "timeout": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    part = r.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def test_init_producer_id_and_produce_error_codes_on_the_wire(tmp_path: Path) -> None:
    """InitProducerId and each idempotence answer of Produce, also across a clean restart
    (the snapshot keeps only each producer's last batch)."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        c = RawClient(broker.bootstrap)
        c.call(3, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
        r = c.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000})
        assert (r.error_code, r.producer_epoch) == (0, 0)
        pid = int(r.producer_id)
        # KIP-360 bump request without a transactional id: a fresh id, epoch 0 (as Kafka)
        r = c.call(
            22,
            4,
            {
                "transactional_id": None,
                "transaction_timeout": 60000,
                "producer_id": pid,
                "producer_epoch": 0,
            },
        )
        assert (r.error_code, r.producer_epoch) == (0, 0) and int(r.producer_id) > pid
        r = c.call(22, 4, {"transactional_id": "txn", "transaction_timeout": 60000})
        assert r.error_code == 0 and r.producer_epoch == 0  # the transaction coordinator
        r = c.call(22, 4, {"transactional_id": "", "transaction_timeout": 60000})
        assert r.error_code == 42  # INVALID_REQUEST

        def batch(seq: int, count: int = 2, epoch: int = 0, producer_id: int = pid) -> bytes:
            records = [(1_700_000_000_000 + i, None, b"%d" % (seq + i)) for i in range(count)]
            return build_batch(
                records, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq
            )

        offsets = [_produce(c, batch(seq)) for seq in range(0, 12, 2)]
        assert offsets == [(0, off) for off in range(0, 12, 2)]
        assert _produce(c, batch(8)) == (0, 8)  # cached duplicate: original offset
        assert _produce(c, batch(8), acks=1) == (0, 8)
        assert _produce(c, batch(0)) == (46, -1)  # older than the cache: DUPLICATE_SEQUENCE
        assert _produce(c, batch(20)) == (45, -1)  # gap: OUT_OF_ORDER_SEQUENCE_NUMBER
        assert _produce(c, batch(1, epoch=1)) == (45, -1)  # new epoch must start at 0
        assert _produce(c, batch(0, epoch=1)) == (0, 12)
        assert _produce(c, batch(2, epoch=0)) == (47, -1)  # fenced: INVALID_PRODUCER_EPOCH
        assert _produce(c, batch(-1)) == (87, -1)  # producer id without sequence
        assert _produce(c, batch(2, epoch=1) + batch(4, epoch=1)) == (87, -1)  # two batches
        assert _produce(c, batch(2, epoch=1)) == (0, 14)
        c.close()
        assert broker.stop() == 0
        broker.start()
        c = RawClient(broker.bootstrap)
        assert _produce(c, batch(2, epoch=1)) == (0, 14)  # the snapshot's last batch
        assert _produce(c, batch(0, epoch=1)) == (46, -1)  # written, offsets forgotten
        assert _produce(c, batch(4, epoch=1)) == (0, 16)
        c.close()
    finally:
        broker.stop()
    assert "Traceback" not in broker.logs()
