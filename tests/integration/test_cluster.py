"""Cluster mode: three brokers coordinated by a real ZooKeeper, seen by real clients.

Every check here is what an unmodified client sees of an ordinary multi-broker Kafka:
kcat's and confluent-kafka's metadata list every broker and one controller, topics
created through any broker get their partitions spread over the brokers, a request
sent to a broker that does not lead the partition is NOT_LEADER_OR_FOLLOWER, and data
produced through the cluster is consumed back whole.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.cluster import Cluster, cluster, wait_for
from tests.integration.rawclient import RawClient

__all__ = ["cluster"]


def _kcat_metadata(bootstrap: str, topic: str | None = None) -> dict[str, object]:
    args = ["kcat", "-b", bootstrap, "-L", "-J"] + (["-t", topic] if topic else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True)
    return dict(json.loads(out.stdout))


def _create(c: Cluster, name: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf)])[name].result(30)

    def leaders_known() -> bool:
        md = _kcat_metadata(c.brokers[1].bootstrap, name)
        topics = md["topics"]
        assert isinstance(topics, list)
        parts = topics[0]["partitions"]
        return len(parts) == partitions and all(p["leader"] > 0 for p in parts)

    wait_for(f"leaders of {name}", leaders_known)


def test_every_broker_describes_the_same_cluster(cluster: Cluster) -> None:
    name = f"spread-{uuid.uuid4().hex[:6]}"
    _create(cluster, name, 6, 1)
    seen = []
    for b in cluster.brokers.values():
        md = _kcat_metadata(b.bootstrap, name)
        brokers = sorted(x["id"] for x in md["brokers"])  # type: ignore[union-attr]
        assert brokers == [1, 2, 3]
        topic = md["topics"][0]  # type: ignore[index]
        leaders = sorted(p["leader"] for p in topic["partitions"])
        seen.append(leaders)
    assert seen[0] == seen[1] == seen[2]
    assert set(seen[0]) == {1, 2, 3}, "six partitions, RF 1: every broker leads some"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    desc = admin.describe_cluster().result(30)
    assert sorted(n.id for n in desc.nodes) == [1, 2, 3]
    assert desc.controller is not None and desc.controller.id in (1, 2, 3)


def test_produce_and_consume_through_the_cluster(cluster: Cluster) -> None:
    name = f"pc-{uuid.uuid4().hex[:6]}"
    _create(cluster, name, 6, 1)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                  "enable.idempotence": True})
    for i in range(600):
        p.produce(name, key=str(i).encode(), value=str(i).encode())
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{name}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([__import__("confluent_kafka").TopicPartition(name, i, 0) for i in range(6)])
    got: set[int] = set()
    deadline = __import__("time").monotonic() + 30
    while len(got) < 600 and __import__("time").monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.add(int(m.value()))
    c.close()
    assert got == set(range(600))


def test_a_broker_that_does_not_lead_answers_not_leader(cluster: Cluster) -> None:
    name = f"nl-{uuid.uuid4().hex[:6]}"
    _create(cluster, name, 1, 1)
    md = _kcat_metadata(cluster.brokers[1].bootstrap, name)
    leader = md["topics"][0]["partitions"][0]["leader"]  # type: ignore[index]
    other = next(b for bid, b in cluster.brokers.items() if bid != leader)
    # a broker that has not seen the topic yet answers UNKNOWN_TOPIC_OR_PARTITION (its
    # watch comes milliseconds after broker 1's; as in Kafka before UpdateMetadata)
    wait_for(f"broker {other.bootstrap} to know {name}", lambda: _kcat_metadata(
        other.bootstrap, name)["topics"][0]["partitions"][0]["leader"] == leader)  # type: ignore[index]
    raw = RawClient(other.bootstrap)
    try:
        resp = raw.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": name, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        assert resp.topics[0].partitions[0].error_code == 6  # NOT_LEADER_OR_FOLLOWER
        resp = raw.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "no-such-topic", "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        assert resp.topics[0].partitions[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    finally:
        raw.close()


def test_consumer_group_survives_its_coordinator(cluster: Cluster) -> None:
    """__consumer_offsets is created in ZooKeeper with replication factor 3 on the first
    FindCoordinator; a group's committed offsets survive the kill -9 of the broker that
    coordinates it (the new leader of its __consumer_offsets partition loads them), and
    the group resumes from them."""
    import time

    from confluent_kafka import TopicPartition

    name = f"grp-{uuid.uuid4().hex[:6]}"
    _create(cluster, name, 3, 3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(300):
        p.produce(name, key=str(i).encode(), value=str(i).encode())
    assert p.flush(30) == 0
    group = f"g-{name}"

    def consume(n: int) -> list[int]:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([name])
        got: list[int] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(int(m.value()))
        c.commit(asynchronous=False)
        c.close()
        return got

    first = consume(120)
    assert len(first) >= 120
    offsets_md = _kcat_metadata(cluster.brokers[1].bootstrap, "__consumer_offsets")
    parts = offsets_md["topics"][0]["partitions"]  # type: ignore[index]
    assert all(len(x["replicas"]) == 3 for x in parts), "RF 3 for __consumer_offsets"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    coordinator = admin.describe_consumer_groups([group])[group].result(30).coordinator.id
    cluster.kill(coordinator)
    try:
        checker = Consumer({"bootstrap.servers": ",".join(
            b.bootstrap for bid, b in cluster.brokers.items() if bid != coordinator),
            "group.id": group})
        committed = wait_for("committed offsets from the new coordinator", lambda: [
            tp.offset for tp in checker.committed(
                [TopicPartition(name, i) for i in range(3)], timeout=5)], timeout=60)
        checker.close()
        assert sum(max(o, 0) for o in committed) == len(first)  # type: ignore[union-attr]
        rest = consume(300 - len(first))
        assert sorted(first + rest) == list(range(300)), "resumed where it committed"
    finally:
        cluster.restart(coordinator)


def test_consumers_fetch_from_a_replica_in_their_rack(tmp_path: Path) -> None:
    """KIP-392: with replica.selector.class = Kafka's RackAwareReplicaSelector, the
    leader points a consumer whose client.rack matches a follower's broker.rack to that
    follower (librdkafka logs "preferred replica updated"), which serves the data."""
    import time

    from confluent_kafka import TopicPartition

    selector = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    c = Cluster(tmp_path, overrides={"replica.selector.class": selector})
    for bid, b in c.brokers.items():
        b.overrides["broker.rack"] = f"rack-{bid}"
    c.start()
    try:
        _create(c, "near", 1, 3)
        md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics("near", timeout=10)
        part = md.topics["near"].partitions[0]
        follower = next(r for r in part.replicas if r != part.leader)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(500):
            p.produce("near", value=str(i).encode())
        assert p.flush(30) == 0
        logs: list[str] = []
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "near",
                             "client.rack": f"rack-{follower}", "debug": "fetch",
                             "logger": _Collect(logs)})
        consumer.assign([TopicPartition("near", 0, 0)])
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 500 and time.monotonic() < deadline:
            got.extend(int(m.value()) for m in consumer.consume(500, 0.5) if not m.error())
        consumer.close()
        assert got == list(range(500))
        assert any(f"migrating from broker {part.leader} to {follower}" in line
                   for line in logs), "the leader named the follower in the client's rack"
    finally:
        c.stop()


class _Collect:
    """A logging.Logger stand-in for librdkafka's `logger` setting."""

    def __init__(self, into: list[str]) -> None:
        self.into = into

    def log(self, _level: int, fmt: str, *args: object) -> None:
        self.into.append(fmt % args if args else fmt)
