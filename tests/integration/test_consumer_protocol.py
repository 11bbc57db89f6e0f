"""KIP-848 (`group.protocol=consumer`) with librdkafka consumers on a real broker.

One broker for the module, with a short consumer session (3 s) and heartbeat interval
(300 ms) so that membership changes settle in about a second.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess

pytestmark = pytest.mark.interop

PARTITIONS = 12


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kip848") / "data", overrides={
        "group.consumer.session.timeout.ms": "3000",
        "group.consumer.heartbeat.interval.ms": "300",
    })
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _topic(b: BrokerProcess, name: str, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(name, str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def _consumer(b: BrokerProcess, group: str, **extra: Any) -> Consumer:
    return Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest", **extra})


def _parts(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def _poll_until(cs: list[Consumer], done: Any, timeout: float = 20.0) -> dict[int, set[bytes]]:
    got: dict[int, set[bytes]] = {i: set() for i in range(len(cs))}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, c in enumerate(cs):
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                got[i].add(m.value())
        if done(got):
            return got
    raise AssertionError(f"not done in {timeout}s: {[sorted(_parts(c)) for c in cs]}")


def test_three_members_split_disjointly_then_rebalance_on_close(kbroker: BrokerProcess) -> None:
    _topic(kbroker, "split", 120)
    cs = [_consumer(kbroker, "g-split") for _ in range(3)]
    for c in cs:
        c.subscribe(["split"])
    got = _poll_until(cs, lambda g: sum(map(len, g.values())) == 120
                      and all(len(_parts(c)) == 4 for c in cs))
    parts = [_parts(c) for c in cs]
    assert set().union(*parts) == set(range(PARTITIONS))
    assert sum(map(len, parts)) == PARTITIONS  # disjoint
    assert set().union(*got.values()) == {str(i).encode() for i in range(120)}
    # the group as ConsumerGroupDescribe shows it
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})  # alive until answered
    desc = admin.describe_consumer_groups(["g-split"])["g-split"].result(10)
    assert len(desc.members) == 3
    assert sorted(p for m in desc.members for p in
                  (tp.partition for tp in m.assignment.topic_partitions)) == list(range(12))
    cs[2].close()  # a leave (epoch -1): its partitions go to the others
    _poll_until(cs[:2], lambda g: len(_parts(cs[0]) | _parts(cs[1])) == PARTITIONS
                and not _parts(cs[0]) & _parts(cs[1]))
    for c in cs[:2]:
        c.close()


VICTIM = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "g-kill",
              "group.protocol": "consumer", "auto.offset.reset": "earliest",
              "enable.auto.commit": False})
c.subscribe(["kill"])
while True:
    m = c.poll(0.1)
    if m is not None and m.error() is None:
        c.commit(m, asynchronous=False)
        print(m.value().decode(), flush=True)
"""


def test_killed_member_replaced_after_session_timeout(kbroker: BrokerProcess) -> None:
    _topic(kbroker, "kill", 0)
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, kbroker.bootstrap],
                              stdout=subprocess.PIPE, text=True)
    survivor = _consumer(kbroker, "g-kill", **{"enable.auto.commit": False})
    survivor.subscribe(["kill"])
    try:
        _poll_until([survivor], lambda g: 0 < len(_parts(survivor)) < PARTITIONS)
        p = Producer({"bootstrap.servers": kbroker.bootstrap, "linger.ms": 0})
        for i in range(60):
            p.produce("kill", str(i).encode(), partition=i % PARTITIONS)
        assert p.flush(30) == 0
        time.sleep(1.0)  # the victim reads and commits its share
        victim.kill()  # kill -9: no leave; the session timeout (3 s) removes it
        victim.wait(10)
        seen = {line.strip().encode() for line in (victim.stdout.read() if victim.stdout
                                                   else "").splitlines() if line.strip()}
        got = _poll_until([survivor], lambda g: len(_parts(survivor)) == PARTITIONS
                          and len(g[0] | seen) == 60, timeout=20)
        assert got[0] | seen == {str(i).encode() for i in range(60)}
    finally:
        if victim.poll() is None:
            victim.kill()
        survivor.close()


def test_transactional_consume_transform_produce_commits_offsets(kbroker: BrokerProcess
                                                                  ) -> None:
    """KIP-447 with member epochs: the offsets sent to the transaction are committed."""
    _topic(kbroker, "txn-in", 24)
    c = _consumer(kbroker, "g-txn", **{"enable.auto.commit": False,
                                       "isolation.level": "read_committed"})
    c.subscribe(["txn-in"])
    p = Producer({"bootstrap.servers": kbroker.bootstrap, "transactional.id": "kip848-t"})
    p.init_transactions(30)
    got = _poll_until([c], lambda g: len(g[0]) == 24)
    p.begin_transaction()
    for v in got[0]:
        p.produce("txn-in-out", v)
    p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    committed = c.committed(c.assignment(), 10)
    assert sum(tp.offset for tp in committed) == 24
    c.close()
