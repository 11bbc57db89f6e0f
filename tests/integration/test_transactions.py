"""Transactions end to end with unmodified clients against a real broker process.

- confluent-kafka (librdkafka), kafka-python and aiokafka transactional producers: what a
  committed transaction wrote is visible to read_committed consumers, what an aborted
  one wrote is not (read_uncommitted sees it), control records are never returned, and
  a read_committed consumer's position reaches the end of the log (past the markers);
- offsets sent in a transaction (send_offsets_to_transaction) appear only on commit;
- fencing: a second producer with the same transactional.id fences the first, whose
  open transaction is aborted and whose later writes are refused;
- a transaction whose producer goes silent is aborted at its timeout and the last
  stable offset moves on;
- kill -9 of the broker: committed transactions survive, an open one is aborted at its
  timeout after the restart;
- kcat with -X transactional.id commits at EOF.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess

FAST_TIMEOUTS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


@pytest.fixture
def txn_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides=FAST_TIMEOUTS)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def create(bootstrap: str, *topics: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result(30)


def txn_producer(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                     "linger.ms": 5, **extra})


def read_all(bootstrap: str, topic: str, isolation: str, expect_end: bool = True,
             timeout: float = 30) -> list[bytes]:
    """Every value of `topic` as `isolation` sees it, reading until each partition's
    position reaches the end offset (the LSO for read_committed). With
    `expect_end=False` it returns at the first 0.2 s without a record: only for reads
    that must see nothing, since one partition's first fetch may come a
    fetch.wait.max.ms after another's."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        tps = [TopicPartition(topic, p, 0) for p in md.partitions]
        c.assign(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
                continue
            marks = [c.get_watermark_offsets(tp, timeout=5, cached=False) for tp in tps]
            # an empty partition has no position yet: it is at its low watermark
            positions = [p.offset if p.offset >= 0 else low
                         for p, (low, _) in zip(c.position(tps), marks)]
            ends = [high for _, high in marks]
            # for read_committed the end is the LSO; with nothing open it is the high
            # watermark, so the position must move past the trailing markers
            if not expect_end or all(p >= e for p, e in zip(positions, ends)):
                return values
        raise AssertionError(f"did not reach the end of {topic}: {positions} vs {ends}")
    finally:
        c.close()


def test_confluent_commit_and_abort(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create(bs, "ta", "tb")
    p = txn_producer(bs, "tx-confluent")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(100):
        p.produce("ta", value=f"c{i}".encode(), partition=i % 3)
        p.produce("tb", value=f"c{i}".encode(), partition=i % 3)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(50):
        p.produce("ta", value=f"a{i}".encode(), partition=i % 3)
        p.produce("tb", value=f"a{i}".encode(), partition=i % 3)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("ta", value=b"last", partition=0)
    p.commit_transaction(30)
    for topic in ("ta", "tb"):
        committed = read_all(bs, topic, "read_committed")
        expected = {f"c{i}".encode() for i in range(100)} | ({b"last"} if topic == "ta" else set())
        assert sorted(committed) == sorted(expected)
        everything = read_all(bs, topic, "read_uncommitted")
        assert {f"a{i}".encode() for i in range(50)} <= set(everything)
        assert len(everything) == len(expected) + 50  # no control record comes through


def test_offsets_in_transaction_visible_only_on_commit(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create(bs, "src", "dst", partitions=1)
    group = "ctp"
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("src", 0, 0)])
    p = txn_producer(bs, "tx-offsets")
    p.init_transactions(30)

    def committed() -> int:
        return int(consumer.committed([TopicPartition("src", 0)], timeout=10)[0].offset)

    p.begin_transaction()
    p.produce("dst", value=b"x")
    p.send_offsets_to_transaction([TopicPartition("src", 0, 42)],
                                  consumer.consumer_group_metadata(), 30)
    p.abort_transaction(30)
    assert committed() < 0  # aborted: nothing committed
    p.begin_transaction()
    p.produce("dst", value=b"y")
    p.send_offsets_to_transaction([TopicPartition("src", 0, 7)],
                                  consumer.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    assert committed() == 7
    consumer.close()
    assert read_all(bs, "dst", "read_committed") == [b"y"]


def test_fencing_by_a_second_producer(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create(bs, "fence", partitions=1)
    old = txn_producer(bs, "tx-fence")
    old.init_transactions(30)
    old.begin_transaction()
    old.produce("fence", value=b"zombie-1")
    old.flush(30)
    new = txn_producer(bs, "tx-fence")
    new.init_transactions(30)  # fences `old` and aborts its open transaction
    new.begin_transaction()
    new.produce("fence", value=b"fresh")
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        old.produce("fence", value=b"zombie-2")
        old.commit_transaction(30)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower()
    assert read_all(bs, "fence", "read_committed") == [b"fresh"]


def test_silent_producer_is_aborted_at_its_timeout(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create(bs, "silent", partitions=1)
    p = txn_producer(bs, "tx-silent", **{"transaction.timeout.ms": 2000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("silent", value=b"never")
    p.flush(30)
    c = Consumer({"bootstrap.servers": bs, "group.id": "lso", "isolation.level": "read_committed"})
    tp = TopicPartition("silent", 0)

    def lso() -> int:  # librdkafka lists offsets with the consumer's isolation level
        return int(c.get_watermark_offsets(tp, timeout=10, cached=False)[1])

    assert lso() == 0  # the open transaction pins the LSO at its first offset
    started = time.monotonic()
    while lso() == 0 and time.monotonic() - started < 15:
        time.sleep(0.1)
    waited = time.monotonic() - started
    assert lso() == 2, "the timed-out transaction was not aborted"  # data + ABORT marker
    assert waited < 6, f"aborted {waited:.1f} s after a 2 s timeout"
    assert read_all(bs, "silent", "read_committed") == []
    assert read_all(bs, "silent", "read_uncommitted") == [b"never"]
    c.close()
    # the producer was fenced by the abort's epoch bump: its commit fails
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_kafka_python_transactions(txn_broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka")
    bs = txn_broker.bootstrap
    create(bs, "kp", partitions=2)
    p = kafka.KafkaProducer(bootstrap_servers=bs, transactional_id="tx-kp")
    p.init_transactions()
    p.begin_transaction()
    for i in range(20):
        p.send("kp", f"c{i}".encode(), partition=i % 2)
    p.commit_transaction()
    p.begin_transaction()
    for i in range(10):
        p.send("kp", f"a{i}".encode(), partition=i % 2)
    p.flush()
    p.abort_transaction()
    p.close()
    assert sorted(read_all(bs, "kp", "read_committed")) == sorted(
        f"c{i}".encode() for i in range(20))
    c = kafka.KafkaConsumer("kp", bootstrap_servers=bs, auto_offset_reset="earliest",
                            isolation_level="read_committed", consumer_timeout_ms=3000)
    got = sorted(m.value for m in c)
    c.close()
    assert got == sorted(f"c{i}".encode() for i in range(20))


def test_aiokafka_transactions(txn_broker: BrokerProcess) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    bs = txn_broker.bootstrap
    create(bs, "aio", partitions=2)

    async def run() -> list[bytes]:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bs, transactional_id="tx-aio")
        await p.start()
        try:
            async with p.transaction():
                for i in range(20):
                    await p.send("aio", f"c{i}".encode(), partition=i % 2)
            await p.begin_transaction()
            for i in range(10):
                await p.send("aio", f"a{i}".encode(), partition=i % 2)
            await p.abort_transaction()
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer("aio", bootstrap_servers=bs, auto_offset_reset="earliest",
                                      isolation_level="read_committed")
        await c.start()
        got: list[bytes] = []
        try:
            end = time.monotonic() + 15
            while len(got) < 20 and time.monotonic() < end:
                batch = await c.getmany(timeout_ms=500)
                for msgs in batch.values():
                    got += [m.value for m in msgs]
        finally:
            await c.stop()
        return got

    got = asyncio.run(run())
    assert sorted(got) == sorted(f"c{i}".encode() for i in range(20))


def test_committed_survives_kill9_and_open_txn_is_aborted(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=FAST_TIMEOUTS)
    b.start()
    try:
        bs = b.bootstrap
        create(bs, "crash", partitions=2)
        p = txn_producer(bs, "tx-crash", **{"transaction.timeout.ms": 3000})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(30):
            p.produce("crash", value=f"c{i}".encode(), partition=i % 2)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce("crash", value=b"open", partition=0)
        p.flush(30)
        b.kill()
        b.start()
        deadline = time.monotonic() + 20
        values: list[bytes] = []
        while time.monotonic() < deadline:
            try:
                values = read_all(bs, "crash", "read_committed", timeout=5)
                break
            except AssertionError:
                continue  # the open transaction still pins the LSO
        assert sorted(values) == sorted(f"c{i}".encode() for i in range(30))
        assert b"open" in read_all(bs, "crash", "read_uncommitted")
    finally:
        b.stop()


def test_kcat_transactional_produce(txn_broker: BrokerProcess) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed (make deps-system)")
    bs = txn_broker.bootstrap
    create(bs, "kc", partitions=1)
    lines = "\n".join(f"v{i}" for i in range(10)) + "\n"
    subprocess.run([kcat, "-b", bs, "-P", "-t", "kc", "-X", "transactional.id=tx-kcat"],
                   input=lines, text=True, check=True, timeout=60)
    assert read_all(bs, "kc", "read_committed") == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize("point", ["after-prepare-durable", "between-markers",
                                   "before-complete", "after-complete-appended"])
def test_broker_killed_while_finishing_a_commit(tmp_path: Path, point: str) -> None:
    """The broker dies (test fault hook) at each point of the commit's second phase; after
    a restart the coordinator finishes the commit: everything visible, exactly once."""
    b = BrokerProcess(tmp_path / "data", overrides={"tidegate.test.fault.point": point})
    b.start()
    bs = b.bootstrap
    create(bs, "fp", "fq", partitions=2)
    p = txn_producer(bs, f"tx-{point}", **{"message.timeout.ms": 10000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(20):
        p.produce("fp" if i % 2 else "fq", value=f"v{i}".encode(), partition=(i // 2) % 2)
    try:
        p.commit_transaction(10)
    except KafkaException:
        pass  # the broker died before answering (or right after): the outcome is decided
    assert b.proc is not None
    b.proc.wait(30)  # it killed itself at the fault point
    assert f"test fault point {point} reached" in b.logs()
    b.overrides.pop("tidegate.test.fault.point")
    b.proc = None
    b.start()
    try:
        got = read_all(bs, "fp", "read_committed") + read_all(bs, "fq", "read_committed")
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
        # and a new producer with the same id starts cleanly (nothing left pending)
        p2 = txn_producer(bs, f"tx-{point}")
        p2.init_transactions(30)
        p2.begin_transaction()
        p2.produce("fp", value=b"after", partition=0)
        p2.commit_transaction(30)
        assert b"after" in read_all(bs, "fp", "read_committed")
    finally:
        b.stop()
