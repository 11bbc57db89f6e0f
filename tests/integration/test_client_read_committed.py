"""Tidegate's consumer with ``isolation.level=read_committed`` on a real broker.

confluent-kafka (librdkafka) writes committed and aborted transactions of three
transactional producers interleaved record by record with a non-transactional
producer, across three partitions (each record flushed before the next, so the log
order is the write order). Tidegate's consumer — asyncio and blocking — must return
exactly the committed and non-transactional records of each partition, in log order,
and end with its position at the end offset (the LSO, which is the high watermark once
nothing is open: the position moves past the trailing markers). librdkafka's
read_committed consumer reads the same records (the cross-check). read_uncommitted
returns the aborted records too, but never a control record. With a transaction left
open, the read stops at the LSO and continues once it commits.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess

from tidegate.client import AsyncConsumer, Consumer, TopicPartition

pytestmark = pytest.mark.interop

PARTITIONS = 3
PerPartition = dict[int, list[bytes]]


@pytest.fixture(scope="module")
def rc_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("rc") / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def write_interleaved(bootstrap: str, topic: str, seed: int, rounds: int = 5
                      ) -> tuple[PerPartition, PerPartition]:
    """Write the interleaved transactions; return (committed, everything) per
    partition, in log order."""
    rng = random.Random(seed)
    txn = [ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                              "transactional.id": f"{topic}-w{i}"}) for i in range(3)]
    plain = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for p in txn:
        p.init_transactions(30)
    everything: PerPartition = {p: [] for p in range(PARTITIONS)}
    visible: set[bytes] = set()  # non-transactional and committed values
    n = 0
    for r in range(rounds):
        pending: list[list[bytes]] = [[] for _ in txn]
        for p in txn:
            p.begin_transaction()
        for _ in range(40):
            who = rng.randrange(len(txn) + 1)
            part = rng.randrange(PARTITIONS)
            value = b"r%d-w%d-%d" % (r, who, n)
            n += 1
            producer = plain if who == len(txn) else txn[who]
            producer.produce(topic, value, partition=part)
            assert producer.flush(30) == 0  # so the log order is this order
            everything[part].append(value)
            if who == len(txn):
                visible.add(value)
            else:
                pending[who].append(value)
        outcomes = [True, False, rng.random() < 0.5]  # at least one commit, one abort
        rng.shuffle(outcomes)
        for i in rng.sample(range(len(txn)), len(txn)):  # end them in a random order
            if outcomes[i]:
                txn[i].commit_transaction(30)
                visible.update(pending[i])
            else:
                txn[i].abort_transaction(30)
    committed = {p: [v for v in vals if v in visible] for p, vals in everything.items()}
    return committed, everything


def confluent_read(bootstrap: str, topic: str) -> PerPartition:
    c = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": f"x-{time.time_ns()}",
                           "isolation.level": "read_committed", "enable.auto.commit": False,
                           "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    out: PerPartition = {p: [] for p in range(PARTITIONS)}
    try:
        c.assign([CTP(topic, p, 0) for p in range(PARTITIONS)])
        eof: set[int] = set()
        deadline = time.monotonic() + 30
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                eof.add(m.partition())
                continue
            out[m.partition()].append(m.value())
    finally:
        c.close()
    return out


async def tidegate_read_async(bootstrap: str, topic: str, isolation: str
                              ) -> tuple[PerPartition, dict[int, int], dict[int, int]]:
    """Read until every position reaches the end offset; (values, positions, ends)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    async with AsyncConsumer({"bootstrap.servers": bootstrap, "isolation.level": isolation,
                              "auto.offset.reset": "earliest"}) as c:
        c.assign(tps)
        ends = await c.end_offsets(tps)
        out: PerPartition = {p: [] for p in range(PARTITIONS)}
        last: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for r in await c.poll(200):
                assert r.offset > last.get(r.partition, -1)  # in log order
                last[r.partition] = r.offset
                assert r.value is not None
                out[r.partition].append(r.value)
            positions = {tp.partition: await c.position(tp) for tp in tps}
            if all(positions[tp.partition] >= ends[tp] for tp in tps):
                break
        return out, positions, {tp.partition: e for tp, e in ends.items()}


def tidegate_read_blocking(bootstrap: str, topic: str, isolation: str
                           ) -> tuple[PerPartition, dict[int, int], dict[int, int]]:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation,
                   "auto.offset.reset": "earliest"}) as c:
        c.assign(tps)
        ends = c.end_offsets(tps)
        out: PerPartition = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        positions: dict[int, int] = {}
        while time.monotonic() < deadline:
            for r in c.poll(200):
                assert r.value is not None
                out[r.partition].append(r.value)
            positions = {tp.partition: c.position(tp) for tp in tps}
            if all(positions[tp.partition] >= ends[tp] for tp in tps):
                break
        return out, positions, {tp.partition: e for tp, e in ends.items()}


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's high watermark once the last transaction's markers are written:
    commit_transaction() returns when the commit is decided, before its markers (as in
    Kafka), so until then the last stable offset trails the high watermark."""
    ends = {}
    for isolation in ("read_uncommitted", "read_committed"):
        c = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": "hw",
                               "isolation.level": isolation})
        ends[isolation] = c
    try:
        deadline = time.monotonic() + 10
        while True:
            hw, lso = ({p: c.get_watermark_offsets(CTP(topic, p), timeout=10, cached=False)[1]
                        for p in range(PARTITIONS)} for c in ends.values())
            if hw == lso or time.monotonic() > deadline:
                return hw
            time.sleep(0.05)
    finally:
        for c in ends.values():
            c.close()


def test_read_committed_returns_exactly_the_committed_records(rc_broker: BrokerProcess
                                                              ) -> None:
    bs = rc_broker.bootstrap
    create(bs, "rc-mix")
    committed, everything = write_interleaved(bs, "rc-mix", seed=7)
    assert sum(map(len, committed.values())) < sum(map(len, everything.values()))
    hw = high_watermarks(bs, "rc-mix")
    assert confluent_read(bs, "rc-mix") == committed  # the oracle agrees with the model

    got, positions, ends = asyncio.run(tidegate_read_async(bs, "rc-mix", "read_committed"))
    assert got == committed
    assert positions == ends == hw  # past the trailing markers: lag zero

    got, positions, ends = tidegate_read_blocking(bs, "rc-mix", "read_committed")
    assert got == committed
    assert positions == ends == hw


def test_read_uncommitted_sees_aborted_records_but_no_markers(rc_broker: BrokerProcess
                                                              ) -> None:
    bs = rc_broker.bootstrap
    create(bs, "ru-mix")
    _, everything = write_interleaved(bs, "ru-mix", seed=11, rounds=3)
    hw = high_watermarks(bs, "ru-mix")
    got, positions, ends = asyncio.run(tidegate_read_async(bs, "ru-mix", "read_uncommitted"))
    assert got == everything  # aborted data included, not one control record
    assert positions == ends == hw
    got, positions, _ = tidegate_read_blocking(bs, "ru-mix", "read_uncommitted")
    assert got == everything
    assert positions == hw


def test_read_committed_stops_at_an_open_transaction(rc_broker: BrokerProcess) -> None:
    bs = rc_broker.bootstrap
    create(bs, "rc-open")
    plain = ConfluentProducer({"bootstrap.servers": bs, "linger.ms": 0})
    txn = ConfluentProducer({"bootstrap.servers": bs, "transactional.id": "rc-open-w"})
    txn.init_transactions(30)
    plain.produce("rc-open", b"before", partition=0)
    plain.flush(30)
    txn.begin_transaction()
    txn.produce("rc-open", b"in-txn", partition=0)
    txn.flush(30)
    plain.produce("rc-open", b"after", partition=0)
    plain.flush(30)
    tp = TopicPartition("rc-open", 0)

    with Consumer({"bootstrap.servers": bs, "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        seen: list[bytes | None] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and c.position(tp) < 1:
            seen += [r.value for r in c.poll(200)]
        seen += [r.value for r in c.poll(500)]  # nothing more may come
        assert seen == [b"before"]
        assert c.position(tp) == 1 == c.end_offsets([tp])[tp]  # the LSO
        txn.commit_transaction(30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and c.position(tp) < 4:
            seen += [r.value for r in c.poll(200)]
        assert seen == [b"before", b"in-txn", b"after"]
        assert c.position(tp) == 4  # past the COMMIT marker at offset 3
