"""KIP-848 on a 3-broker cluster: the consumer group's coordinator follows the
`__consumer_offsets` partition's leadership like the classic one's. A group of three
`group.protocol=consumer` members splits 12 partitions (replicated, RF 3); the broker
leading the group's coordinator partition is killed; the new leader loads the group
from its replica of the records and the members carry on, with no record lost.

Slow (a cluster and a failover): runs under `make soak` (TIDEGATE_SOAK=1).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.cluster import Cluster

from tidegate.coordinator.runtime import partition_for

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.skipif(
    not os.environ.get("TIDEGATE_SOAK"), reason="soak run: `make soak` (TIDEGATE_SOAK=1)")]

PARTITIONS = 12
GROUP = "kip848-cluster"


@pytest.fixture(scope="module")
def kcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("kip848c"), overrides={
        "group.consumer.session.timeout.ms": "6000",
        "group.consumer.heartbeat.interval.ms": "500",
        "offsets.topic.num.partitions": "3",
    })
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_consumer_group_survives_coordinator_failover(kcluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": kcluster.bootstrap})
    admin.create_topics([NewTopic("kc", PARTITIONS, 3)])["kc"].result(60)
    p = Producer({"bootstrap.servers": kcluster.bootstrap, "acks": "all"})
    for i in range(120):
        p.produce("kc", str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(60) == 0
    cs = [Consumer({"bootstrap.servers": kcluster.bootstrap, "group.id": GROUP,
                    "group.protocol": "consumer", "auto.offset.reset": "earliest",
                    "enable.auto.commit": False}) for _ in range(3)]
    for c in cs:
        c.subscribe(["kc"])
    seen: set[bytes] = set()

    def poll_until(done: object, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in cs:
                m = c.poll(0.05)
                if m is not None and m.error() is None:
                    seen.add(m.value())
                    c.commit(m, asynchronous=False)
            if callable(done) and done():
                return
        raise AssertionError(f"timed out: {[len(c.assignment()) for c in cs]}, {len(seen)}")

    poll_until(lambda: len(seen) == 120 and all(len(c.assignment()) == 4 for c in cs), 60)
    parts = [{tp.partition for tp in c.assignment()} for c in cs]
    assert sum(map(len, parts)) == PARTITIONS and set().union(*parts) == set(range(12))
    # kill the broker leading the group's __consumer_offsets partition
    coord_partition = partition_for(GROUP, 3)
    md = admin.list_topics("__consumer_offsets", timeout=30)
    leader = md.topics["__consumer_offsets"].partitions[coord_partition].leader
    kcluster.kill(leader)
    for i in range(120, 180):
        p.produce("kc", str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(60) == 0
    poll_until(lambda: len(seen) == 180, 90)
    for c in cs:
        c.close()
    kcluster.restart(leader)
