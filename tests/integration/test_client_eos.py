"""Exactly-once consume-transform-produce with Tidegate's client (client/eos.py) on a
real broker.

An input topic holds N unique values. Two processor instances share one consumer
group, each with its own transactional.id, and turn every value v into ``out-v`` in
an output topic, committing the consumed offsets inside each transaction:

- threads: a blocking `TransactionalProcessor` and an asyncio
  `AsyncTransactionalProcessor`; the blocking one is closed midway (its partitions
  move to the other through a rebalance, KIP-447's revoke-then-commit path);
- kill: one instance in a subprocess is SIGKILLed midway with a transaction open; the
  survivor gets its partitions once the group drops it, and reads from the committed
  offsets once the broker aborts the dead transaction at its timeout.

Afterwards a read_committed read of the output (librdkafka's and Tidegate's) holds every
input value exactly once, and the group's committed offsets equal the input's end.
A transform that fails aborts the transaction and rewinds (KAFKA-17582): nothing is
lost.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess

from tidegate.client import AsyncConsumer, AsyncProducer, Consumer, Producer, TopicPartition
from tidegate.client.eos import AsyncTransactionalProcessor, Output, TransactionalProcessor

pytestmark = pytest.mark.interop

PARTITIONS = 4
N = 4000


@pytest.fixture
def eos_broker(tmp_path: Any) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides={
        "group.initial.rebalance.delay.ms": "0",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def setup_topics(bs: str, n: int = N) -> list[bytes]:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("in", "out")]).values():
        f.result(30)
    values = [b"v%06d" % i for i in range(n)]
    p = ConfluentProducer({"bootstrap.servers": bs, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce("in", v, partition=i % PARTITIONS)
    assert p.flush(30) == 0
    return values


def consumer_config(bs: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bs, "group.id": "eos", "enable.auto.commit": False,
            "heartbeat.interval.ms": 200,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            "max.poll.records": 200, **extra}


def transform(r: Any) -> list[Output]:
    return [Output("out", b"out-" + r.value, partition=r.partition)]


def committed_offsets(bs: str) -> dict[int, int]:
    c = ConfluentConsumer({"bootstrap.servers": bs, "group.id": "eos"})
    try:
        found = c.committed([CTP("in", p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        c.close()


def wait_committed(bs: str, n: int, timeout: float = 90) -> None:
    expected = {p: len(range(p, n, PARTITIONS)) for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if committed_offsets(bs) == expected:
            return
        time.sleep(0.3)
    raise AssertionError(f"committed offsets {committed_offsets(bs)} != {expected}")


def check_output(bs: str, values: list[bytes]) -> None:
    async def read() -> list[bytes]:
        tps = [TopicPartition("out", p) for p in range(PARTITIONS)]
        async with AsyncConsumer({"bootstrap.servers": bs, "isolation.level": "read_committed",
                                  "auto.offset.reset": "earliest"}) as c:
            c.assign(tps)
            ends = await c.end_offsets(tps)
            out: list[bytes] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                out += [r.value for r in await c.poll(200) if r.value is not None]
                if all([await c.position(tp) >= ends[tp] for tp in tps]):
                    return out
            raise AssertionError("output not read to its end")
    got = Counter(asyncio.run(read()))
    expected = Counter(b"out-" + v for v in values)
    missing = expected - got
    duplicated = {v: n for v, n in got.items() if n > 1}
    assert not missing and not duplicated and got == expected, (
        f"{len(missing)} missing (e.g. {list(missing)[:5]}), {len(duplicated)} duplicated "
        f"(e.g. {list(duplicated.items())[:5]}), {len(got)} distinct")
    assert committed_offsets(bs) == {p: len(range(p, len(values), PARTITIONS))
                                     for p in range(PARTITIONS)}


def test_two_instances_one_closed_midway(eos_broker: BrokerProcess) -> None:
    bs = eos_broker.bootstrap
    values = setup_topics(bs)
    stop_a, stop_b = threading.Event(), threading.Event()
    processed = Counter[str]()
    errors: list[BaseException] = []
    metadata: list[Any] = []

    def blocking_instance() -> None:
        try:
            with Consumer(consumer_config(bs, **{"client.id": "a"})) as c, \
                    Producer({"bootstrap.servers": bs, "transactional.id": "eos-a"}) as p:
                def count(r: Any) -> list[Output]:
                    processed["a"] += 1
                    time.sleep(0.0005)  # slow enough that b gets work too
                    return transform(r)
                proc = TransactionalProcessor(c, p, count)
                proc.run(["in"], should_stop=lambda: stop_a.is_set())
                metadata.append(c.group_metadata())
        except BaseException as e:
            errors.append(e)

    def async_instance() -> None:
        async def main() -> None:
            async with AsyncConsumer(consumer_config(bs, **{"client.id": "b"})) as c, \
                    AsyncProducer({"bootstrap.servers": bs, "transactional.id": "eos-b"}) as p:
                async def count(r: Any) -> list[Output]:
                    processed["b"] += 1
                    await asyncio.sleep(0.002)  # the heartbeat runs meanwhile
                    return transform(r)
                # long transactions: a rebalance finds one open, and the revoke must
                # commit it (else its records would be read and written again)
                proc = AsyncTransactionalProcessor(c, p, count, commit_interval_ms=1500)
                await proc.start(["in"])
                while not stop_b.is_set():
                    await proc.step()
                await proc.close()
                metadata.append(c.group_metadata())
        try:
            asyncio.run(main())
        except BaseException as e:
            errors.append(e)

    ta = threading.Thread(target=blocking_instance)
    tb = threading.Thread(target=async_instance)
    ta.start()
    tb.start()
    deadline = time.monotonic() + 60
    while processed["a"] < N // 8 and time.monotonic() < deadline and not errors:
        time.sleep(0.05)
    stop_a.set()  # a closes midway: b takes over its partitions
    ta.join(60)
    wait_committed(bs, N)
    stop_b.set()
    tb.join(60)
    assert not errors, errors
    assert processed["a"] > 0 and processed["b"] > 0
    for m in metadata:  # KIP-447 metadata of a joined member
        assert m.group_id == "eos" and m.generation_id >= 1 and m.member_id
    check_output(bs, values)


KILLED_PROCESSOR = r"""
import sys, time
from tidegate.client import Consumer, Producer
from tidegate.client.eos import Output, TransactionalProcessor
bs = sys.argv[1]
c = Consumer({"bootstrap.servers": bs, "group.id": "eos", "enable.auto.commit": False,
              "isolation.level": "read_committed", "auto.offset.reset": "earliest",
              "session.timeout.ms": 6000, "max.poll.records": 50, "client.id": "doomed"})
p = Producer({"bootstrap.servers": bs, "transactional.id": "eos-doomed",
              "transaction.timeout.ms": 3000})
def slow(r):
    time.sleep(0.002)
    print("processed", flush=True)
    return [Output("out", b"out-" + r.value, partition=r.partition)]
TransactionalProcessor(c, p, slow, commit_interval_ms=300).run(["in"])
"""


def test_instance_killed_midway(eos_broker: BrokerProcess) -> None:
    bs = eos_broker.bootstrap
    values = setup_topics(bs, 2000)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    doomed = subprocess.Popen([sys.executable, "-c", KILLED_PROCESSOR, bs],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    stop = threading.Event()
    errors: list[BaseException] = []

    def survivor() -> None:
        try:
            with Consumer(consumer_config(bs, **{"client.id": "survivor"})) as c, \
                    Producer({"bootstrap.servers": bs, "transactional.id": "eos-s"}) as p:
                TransactionalProcessor(c, p, transform).run(
                    ["in"], should_stop=lambda: stop.is_set())
        except BaseException as e:
            errors.append(e)

    try:
        assert doomed.stdout is not None
        for seen, _ in enumerate(doomed.stdout, 1):  # until it is well into its work
            if seen == 300:
                break
        t = threading.Thread(target=survivor)
        t.start()
        time.sleep(2)  # a rebalance shares the partitions; the doomed one goes on
        os.kill(doomed.pid, signal.SIGKILL)  # mid-transaction, most likely
        doomed.wait(10)
        wait_committed(bs, len(values), timeout=120)
        stop.set()
        t.join(60)
        assert not errors, errors
        check_output(bs, values)
    finally:
        if doomed.poll() is None:
            doomed.kill()
        stop.set()


def test_failed_transform_aborts_and_rewinds(eos_broker: BrokerProcess) -> None:
    """The transform raises once in the middle of a transaction: the processor aborts,
    rewinds to the committed offsets and re-raises; running it again loses nothing."""
    bs = eos_broker.bootstrap
    values = setup_topics(bs, 1000)
    failed = threading.Event()

    def flaky(r: Any) -> list[Output]:
        if r.offset == 100 and r.partition == 1 and not failed.is_set():
            failed.set()
            raise RuntimeError("transform failed")
        return transform(r)

    with Consumer(consumer_config(bs)) as c, \
            Producer({"bootstrap.servers": bs, "transactional.id": "eos-flaky"}) as p:
        proc = TransactionalProcessor(c, p, flaky, commit_interval_ms=10_000,
                                      max_records_per_transaction=400)
        proc.start(["in"])
        with pytest.raises(RuntimeError, match="transform failed"):
            for _ in range(10_000):
                proc.step()
        assert proc.aborted_transactions == 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and committed_offsets(bs) != {
                p: len(values) // PARTITIONS for p in range(PARTITIONS)}:
            proc.step()
        proc.close()
    check_output(bs, values)
