"""Tidegate's own producer with idempotence, end to end through faults.

Same method as `test_idempotence` (whose setup and checks this reuses): records whose
value is their index i go to partition i % PARTITIONS through `FaultProxy`, which lets
every Nth Produce request reach the broker and then drops the connection before the
client sees the answer, so the client retries a batch already in the log. The log is
then read back with confluent-kafka (a different implementation) and checked: with
idempotence every partition holds i = p, p + P, ... exactly once and in order; without
it the same faults leave duplicates (so the check can see them). A kill -9 of the
broker mid-run, with acknowledgements withheld just before, must not break dedup.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.test_idempotence import (
    PARTITIONS,
    TOPIC,
    Setup,
    assert_exactly_once_in_order,
    duplicates,
    read_confluent,
)

from tidegate.client import Producer
from tidegate.client.types import RecordMetadata

N = 100_000


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    s = Setup(tmp_path, 5)
    try:
        yield s
    finally:
        s.close()


def tidegate_producer(bootstrap: str, idempotent: bool) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": idempotent,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1024,  # many requests, hence many faults
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "delivery.timeout.ms": 120_000,
        }
    )


def produce(
    p: Producer, n: int, acked: list[int] | None = None
) -> list[concurrent.futures.Future[RecordMetadata]]:
    futures = []
    for i in range(n):
        f = p.send(TOPIC, b"%d" % i, partition=i % PARTITIONS)
        if acked is not None:
            f.add_done_callback(lambda f: acked.append(1) if f.exception() is None else None)
        futures.append(f)
    p.flush(120_000)
    return futures


def failures(futures: list[concurrent.futures.Future[RecordMetadata]]) -> list[BaseException]:
    return [e for f in futures if (e := f.exception(0)) is not None]


def test_idempotent_producer_writes_exactly_once_in_order_through_drops(setup: Setup) -> None:
    with tidegate_producer(setup.proxy.bootstrap, True) as p:
        futures = produce(p, N)
        idem = p._async._idem
        assert idem is not None and idem.producer_id >= 0
        print(setup.proxy.stats, "producer id resets:", idem.resets)
        # Lost answers are plain retries with the same sequences: no KIP-360 reset.
        assert idem.resets == 0
    assert not failures(futures)[:5]
    assert setup.proxy.stats.dropped >= 50, setup.proxy.stats
    # Offsets: increasing per partition (a duplicate answer from the broker's cache
    # carries the original offset; DUPLICATE_SEQUENCE_NUMBER would give -1).
    last = {p: -1 for p in range(PARTITIONS)}
    for f in futures:
        md = f.result()
        if md.offset >= 0:
            assert md.offset > last[md.partition]
            last[md.partition] = md.offset
    assert_exactly_once_in_order(read_confluent(setup.broker.bootstrap), N)
    assert "Traceback" not in setup.broker.logs()


def test_without_idempotence_the_same_faults_duplicate_records(setup: Setup) -> None:
    n = 20_000
    with tidegate_producer(setup.proxy.bootstrap, False) as p:
        futures = produce(p, n)
    assert not failures(futures)[:5]
    assert setup.proxy.stats.dropped >= 3, setup.proxy.stats
    values = read_confluent(setup.broker.bootstrap)
    assert duplicates(values) > 0, "dropped connections caused no duplicates: the check is blind"
    assert set().union(*map(set, values.values())) == set(range(n))  # nothing lost either


def test_dedup_survives_broker_kill_9(setup: Setup) -> None:
    """kill -9 mid-run with batches the broker wrote but the client never heard of."""
    errors: list[BaseException] = []
    acked: list[int] = []

    def run() -> None:
        try:
            with tidegate_producer(setup.proxy.bootstrap, True) as p:
                errors.extend(failures(produce(p, N, acked)))
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
        until = time.monotonic() + 5
        while setup.proxy.stats.swallowed == 0 and time.monotonic() < until:
            time.sleep(0.001)
        seen = -1
        while seen != setup.proxy.stats.swallowed and time.monotonic() < until:
            seen = setup.proxy.stats.swallowed
            time.sleep(0.2)
        setup.broker.kill()
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
    assert_exactly_once_in_order(read_confluent(setup.broker.bootstrap), N)
    assert "Traceback" not in setup.broker.logs()
