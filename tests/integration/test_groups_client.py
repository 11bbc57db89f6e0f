"""Tidegate's consumer in consumer groups on a real broker, with librdkafka
(confluent-kafka) consumers in the same group as the interoperability oracle.

Each member runs its poll loop in a thread of its own, as separate applications
would; the tests watch the members' assignments (from their rebalance callbacks) and
the records they receive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess

from tidegate.client import Consumer, TopicPartition

pytestmark = pytest.mark.interop

PARTITIONS = 6


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker that starts rebalances of new groups at once (the 3 s
    group.initial.rebalance.delay.ms only slows tests down)."""
    b = BrokerProcess(tmp_path_factory.mktemp("groups") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep it alive until done
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % PARTITIONS)
    assert p.flush(30) == 0


class Member:
    """One group member polling in its own thread; `assignment` follows its
    rebalance callbacks and `values` collects what it read."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.assignment: set[int] = set()
        self.callbacks = 0  # rebalance callbacks seen
        self.values: list[bytes] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> Member:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error

    def _main(self) -> None:
        try:
            self.run(self._stop)
        except BaseException as e:
            self.error = e

    def run(self, stop: threading.Event) -> None:
        raise NotImplementedError


class TidegateMember(Member):
    def __init__(self, name: str, bootstrap: str, topic: str, group: str,
                 **config: Any) -> None:
        super().__init__(name)
        self.config = {"bootstrap.servers": bootstrap, "group.id": group,
                       "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                       "heartbeat.interval.ms": 500, **config}
        self.topic = topic

    def run(self, stop: threading.Event) -> None:
        member = self

        class Listener:
            def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
                member.assignment |= {p for _, p in partitions}
                member.callbacks += 1

            def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
                member.assignment -= {p for _, p in partitions}
                member.callbacks += 1

        with Consumer(self.config) as c:
            c.subscribe([self.topic], Listener())
            while not stop.is_set():
                self.values += [r.value or b"" for r in c.poll(timeout_ms=100)]


class ConfluentMember(Member):
    def __init__(self, name: str, bootstrap: str, topic: str, group: str,
                 **config: Any) -> None:
        super().__init__(name)
        self.config = {"bootstrap.servers": bootstrap, "group.id": group,
                       "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                       "heartbeat.interval.ms": 500, **config}
        self.topic = topic

    def run(self, stop: threading.Event) -> None:
        c = ConfluentConsumer(self.config)
        cooperative = self.config.get("partition.assignment.strategy") == "cooperative-sticky"

        def on_assign(consumer: Any, partitions: list[Any]) -> None:
            self.assignment |= {p.partition for p in partitions}
            if cooperative:
                consumer.incremental_assign(partitions)

        def on_revoke(consumer: Any, partitions: list[Any]) -> None:
            self.assignment -= {p.partition for p in partitions}
            if cooperative:
                consumer.incremental_unassign(partitions)

        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not stop.is_set():
                msg = c.poll(0.1)
                if msg is not None and msg.error() is None:
                    self.values.append(msg.value())
        finally:
            c.close()


class KafkaPythonMember(Member):
    def __init__(self, name: str, bootstrap: str, topic: str, group: str,
                 strategy: str) -> None:
        super().__init__(name)
        self.bootstrap, self.topic, self.group, self.strategy = bootstrap, topic, group, strategy

    def run(self, stop: threading.Event) -> None:
        from kafka import KafkaConsumer
        from kafka.consumer.subscription_state import ConsumerRebalanceListener
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.coordinator.assignors.sticky.sticky_assignor import (
            StickyPartitionAssignor,
        )

        assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                    "sticky": StickyPartitionAssignor}[self.strategy]
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.assignment -= {tp.partition for tp in revoked}

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.assignment |= {tp.partition for tp in assigned}

        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                          auto_offset_reset="earliest", session_timeout_ms=6000,
                          heartbeat_interval_ms=500, partition_assignment_strategy=[assignor])
        c.subscribe([self.topic], listener=Listener())
        try:
            while not stop.is_set():
                for records in c.poll(timeout_ms=100).values():
                    self.values += [r.value for r in records]
        finally:
            c.close()


def wait_for(what: str, condition: Callable[[], bool], members: list[Member],
             timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for m in members:
            if m.error is not None:
                raise m.error
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: " + ", ".join(
                f"{m.name}={sorted(m.assignment)}" for m in members))
        time.sleep(0.1)


def split(members: list[Member], n: int = PARTITIONS) -> bool:
    """Disjoint assignments covering all partitions, everyone with a share."""
    sets = [m.assignment for m in members]
    return (sum(map(len, sets)) == n and set().union(*sets) == set(range(n))
            and all(len(s) >= n // len(members) for s in sets))


def test_two_members_split_the_topic_and_the_survivor_gets_everything(
        group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "g-split")
    values = [b"%d" % i for i in range(600)]
    produce(bootstrap, "g-split", values)
    a = TidegateMember("a", bootstrap, "g-split", "split").start()
    b = TidegateMember("b", bootstrap, "g-split", "split").start()
    wait_for("a 3/3 split", lambda: split([a, b]) and len(a.values) + len(b.values) >= 600,
             [a, b])
    assert len(a.assignment) == len(b.assignment) == 3
    assert sorted(a.values + b.values) == sorted(values)  # each record once
    a.stop()  # commits, revokes, leaves: b takes over at once
    wait_for("b alone", lambda: b.assignment == set(range(PARTITIONS)), [b], timeout=30)
    more = [b"more-%d" % i for i in range(60)]
    produce(bootstrap, "g-split", more)
    wait_for("b reads on", lambda: sum(v.startswith(b"more-") for v in b.values) >= 60, [b])
    b.stop()
    assert sorted(v for v in a.values + b.values if v.startswith(b"more-")) == sorted(more)


def test_committed_offsets_resume_after_a_restart(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "g-resume")
    produce(bootstrap, "g-resume", [b"old-%d" % i for i in range(120)])
    first = TidegateMember("first", bootstrap, "g-resume", "resume",
                           **{"auto.commit.interval.ms": 200}).start()
    wait_for("the old records", lambda: len(first.values) >= 120, [first])
    first.stop()  # auto-commit on close
    produce(bootstrap, "g-resume", [b"new-%d" % i for i in range(60)])
    second = TidegateMember("second", bootstrap, "g-resume", "resume").start()
    wait_for("the new records", lambda: len(second.values) >= 60, [second])
    time.sleep(1)  # would anything old come back?
    second.stop()
    assert sorted(second.values) == sorted(b"new-%d" % i for i in range(60))
    with Consumer({"bootstrap.servers": bootstrap, "group.id": "resume"}) as c:
        committed = c.committed([TopicPartition("g-resume", p) for p in range(PARTITIONS)])
    assert {tp.partition: om.offset for tp, om in committed.items() if om} == \
        {p: 30 for p in range(PARTITIONS)}


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
@pytest.mark.parametrize("tidegate_first", [True, False], ids=["tidegate-leads",
                                                                  "librdkafka-leads"])
def test_mixed_group_with_confluent_consumers(group_broker: BrokerProcess, strategy: str,
                                              tidegate_first: bool) -> None:
    bootstrap = group_broker.bootstrap
    topic = f"g-mixed-{strategy}-{int(tidegate_first)}"
    create_topic(bootstrap, topic)
    values = [b"%d" % i for i in range(300)]
    produce(bootstrap, topic, values)
    cfg = {"partition.assignment.strategy": strategy}
    ours = TidegateMember("tidegate", bootstrap, topic, topic, **cfg)
    theirs = ConfluentMember("librdkafka", bootstrap, topic, topic, **cfg)
    leader, follower = (ours, theirs) if tidegate_first else (theirs, ours)
    leader.start()
    wait_for("the first member alone", lambda: len(leader.assignment) == PARTITIONS, [leader])
    follower.start()
    wait_for("a 3/3 split", lambda: split([ours, theirs]), [ours, theirs])
    wait_for("all records", lambda: len(set(ours.values) | set(theirs.values)) >= 300,
             [ours, theirs])
    assert set(ours.values) | set(theirs.values) == set(values)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([topic])[topic].result(30)
    assert described.partition_assignor == strategy
    assert len(described.members) == 2
    # Both ran the same assignor: the follower holds exactly its share.
    assert len(ours.assignment) == len(theirs.assignment) == 3
    if strategy == "range":  # range: members sorted by member id, contiguous ranges
        assert ours.assignment in ({0, 1, 2}, {3, 4, 5})
    follower.stop()
    wait_for("the leader alone again", lambda: len(leader.assignment) == PARTITIONS, [leader])
    leader.stop()


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky"])
def test_mixed_group_with_kafka_python_consumers(group_broker: BrokerProcess,
                                                 strategy: str) -> None:
    bootstrap = group_broker.bootstrap
    topic = f"g-kp-{strategy}"
    create_topic(bootstrap, topic)
    values = [b"%d" % i for i in range(120)]
    produce(bootstrap, topic, values)
    ours = TidegateMember("tidegate", bootstrap, topic, topic,
                          **{"partition.assignment.strategy": strategy}).start()
    wait_for("tidegate alone", lambda: len(ours.assignment) == PARTITIONS, [ours])
    theirs = KafkaPythonMember("kafka-python", bootstrap, topic, topic, strategy).start()
    wait_for("a 3/3 split", lambda: split([ours, theirs]), [ours, theirs])
    wait_for("all records", lambda: len(set(ours.values) | set(theirs.values)) >= 120,
             [ours, theirs])
    ours.stop()
    wait_for("kafka-python alone", lambda: len(theirs.assignment) == PARTITIONS, [theirs])
    theirs.stop()


def test_static_member_restart_gets_its_partitions_back_without_a_rebalance(
        group_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "g-static")
    cfg = {"group.instance.id": "static-a", "session.timeout.ms": 10000}
    a = TidegateMember("a", bootstrap, "g-static", "static", **cfg).start()
    b = TidegateMember("b", bootstrap, "g-static", "static",
                       **{"group.instance.id": "static-b"}).start()
    wait_for("a 3/3 split", lambda: split([a, b]), [a, b])
    mine = set(a.assignment)
    time.sleep(0.5)
    seen = b.callbacks
    a.stop()  # a static member does not leave: b keeps its three
    time.sleep(1)
    assert len(b.assignment) == 3
    a = TidegateMember("a", bootstrap, "g-static", "static", **cfg).start()
    wait_for("a back", lambda: a.assignment == mine, [a, b], timeout=30)
    time.sleep(1)
    assert len(b.assignment) == 3
    assert b.callbacks == seen  # b never noticed: no rebalance
    a.stop()
    b.stop()


def test_member_survives_a_broker_restart(tmp_path: Path) -> None:
    """The coordinator goes away and comes back: the member finds it again, rejoins
    and reads on from its committed offsets."""
    b = BrokerProcess(tmp_path / "data", overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    try:
        create_topic(b.bootstrap, "g-restart")
        produce(b.bootstrap, "g-restart", [b"before-%d" % i for i in range(60)])
        m = TidegateMember("m", b.bootstrap, "g-restart", "restart",
                           **{"auto.commit.interval.ms": 100,
                              "reconnect.backoff.max.ms": 200}).start()
        wait_for("the first records", lambda: len(m.values) >= 60, [m])
        time.sleep(0.5)  # let an auto-commit land
        b.restart()
        produce(b.bootstrap, "g-restart", [b"after-%d" % i for i in range(60)])
        wait_for("the records after the restart",
                 lambda: sum(v.startswith(b"after-") for v in m.values) >= 60, [m], timeout=90)
        m.stop()
        assert sorted(v for v in m.values if v.startswith(b"after-")) == sorted(
            b"after-%d" % i for i in range(60))
    finally:
        b.stop()
