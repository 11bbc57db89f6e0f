"""Consumer groups against a real broker process, with real clients as the oracle.

- four libraries (confluent-kafka, kafka-python, aiokafka, Tidegate's own client)
  share one group on a 12-partition topic while records are produced: disjoint
  assignments covering every partition; one member is SIGKILLed and the others take
  its partitions after the session timeout; a new member joins and partitions move;
  nothing is lost and records are redelivered only where the killed member had not
  committed;
- committed offsets and group metadata survive a kill -9 of the broker (replay);
- offsets expire per retention; deleting a topic deletes its offsets;
- static membership (KIP-345) restarts without a rebalance;
- kcat -G consumes as a group and resumes from its commits;
- the `tidegate groups` CLI.

Consumers that may be killed run as subprocesses (`WORKER` below) printing JSON events.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.clients import create_topic
from tests.integration.conftest import ROOT, BrokerProcess

pytestmark = pytest.mark.interop

FAST = {"group.initial.rebalance.delay.ms": "0"}

WORKER = r'''
import asyncio, json, signal, sys, time
lib, bootstrap, topic, group, client_id, instance = sys.argv[1:7]
session_ms = 6000
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
def emit(**ev):
    print(json.dumps(ev), flush=True)
pending = {}
last_commit = [time.monotonic()]
def due():
    return time.monotonic() - last_commit[0] >= 1.0

if lib == "confluent":
    from confluent_kafka import Consumer, TopicPartition
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": session_ms, "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 20000, "partition.assignment.strategy": "roundrobin",
            "topic.metadata.refresh.interval.ms": 1000}
    if instance != "-":
        conf["group.instance.id"] = instance
    c = Consumer(conf)
    def commit(parts=None):
        todo = {p: o for p, o in pending.items() if parts is None or p in parts}
        if not todo:
            return
        try:
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in todo.items()],
                     asynchronous=False)
            emit(ev="commit", offsets=todo)
        except Exception as e:
            emit(ev="commit_failed", error=str(e))
        for p in todo:
            pending.pop(p, None)
    def on_assign(cons, parts):
        emit(ev="assign", parts=sorted(tp.partition for tp in cons.assignment()) +
             sorted(tp.partition for tp in parts))
    def on_revoke(cons, parts):
        commit({tp.partition for tp in parts})
        emit(ev="revoke", parts=sorted(tp.partition for tp in parts))
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    emit(ev="ready")
    while not stop:
        for m in c.consume(200, 0.2):
            if m.error():
                emit(ev="error", error=str(m.error()))
                continue
            emit(ev="rec", p=m.partition(), o=m.offset(), v=m.value().decode())
            pending[m.partition()] = m.offset() + 1
        if due():
            commit(); last_commit[0] = time.monotonic()
    commit()
    c.close()
elif lib == "kafka-python":
    from kafka import KafkaConsumer, TopicPartition, ConsumerRebalanceListener
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.structs import OffsetAndMetadata
    kw = {}
    if instance != "-":
        kw["group_instance_id"] = instance
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=session_ms, heartbeat_interval_ms=1000,
                      max_poll_interval_ms=20000, metadata_max_age_ms=1000,
                      partition_assignment_strategy=[RoundRobinPartitionAssignor], **kw)
    def commit(parts=None):
        todo = {p: o for p, o in pending.items() if parts is None or p in parts}
        if not todo:
            return
        try:
            c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                      for p, o in todo.items()})
            emit(ev="commit", offsets=todo)
        except Exception as e:
            emit(ev="commit_failed", error=repr(e))
        for p in todo:
            pending.pop(p, None)
    class L(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            commit({tp.partition for tp in revoked})
            emit(ev="revoke", parts=sorted(tp.partition for tp in revoked))
        def on_partitions_assigned(self, assigned):
            emit(ev="assign", parts=sorted(tp.partition for tp in c.assignment()))
    c.subscribe([topic], listener=L())
    emit(ev="ready")
    while not stop:
        for tp, msgs in c.poll(200, max_records=200).items():
            for m in msgs:
                emit(ev="rec", p=tp.partition, o=m.offset, v=m.value.decode())
                pending[tp.partition] = m.offset + 1
        if due():
            commit(); last_commit[0] = time.monotonic()
    commit()
    c.close()
elif lib == "tidegate":
    from tidegate.client import Consumer, TopicPartition
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": session_ms, "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 20000, "metadata.max.age.ms": 1000,
            "partition.assignment.strategy": "roundrobin"}
    if instance != "-":
        conf["group.instance.id"] = instance
    c = Consumer(conf)
    def commit(parts=None):
        todo = {p: o for p, o in pending.items() if parts is None or p in parts}
        if not todo:
            return
        try:
            c.commit({TopicPartition(topic, p): o for p, o in todo.items()})
            emit(ev="commit", offsets=todo)
        except Exception as e:
            emit(ev="commit_failed", error=repr(e))
        for p in todo:
            pending.pop(p, None)
    class L:
        def on_partitions_revoked(self, revoked):
            commit({p for _, p in revoked})
            emit(ev="revoke", parts=sorted(p for _, p in revoked))
        def on_partitions_assigned(self, assigned):
            emit(ev="assign", parts=sorted(p for _, p in c.assignment()))
    c.subscribe([topic], L())
    emit(ev="ready")
    while not stop:
        for r in c.poll(timeout_ms=200):
            emit(ev="rec", p=r.partition, o=r.offset, v=r.value.decode())
            pending[r.partition] = r.offset + 1
        if due():
            commit(); last_commit[0] = time.monotonic()
    commit()
    c.close()
else:
    from aiokafka import AIOKafkaConsumer, TopicPartition, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    async def main():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=session_ms, heartbeat_interval_ms=1000,
                             max_poll_interval_ms=20000, metadata_max_age_ms=1000,
                             partition_assignment_strategy=(RoundRobinPartitionAssignor,))
        async def commit(parts=None):
            todo = {p: o for p, o in pending.items() if parts is None or p in parts}
            if not todo:
                return
            try:
                await c.commit({TopicPartition(topic, p): o for p, o in todo.items()})
                emit(ev="commit", offsets=todo)
            except Exception as e:
                emit(ev="commit_failed", error=repr(e))
            for p in todo:
                pending.pop(p, None)
        class L(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                await commit({tp.partition for tp in revoked})
                emit(ev="revoke", parts=sorted(tp.partition for tp in revoked))
            async def on_partitions_assigned(self, assigned):
                emit(ev="assign", parts=sorted(tp.partition for tp in c.assignment()))
        await c.start()
        c.subscribe([topic], listener=L())
        emit(ev="ready")
        while not stop:
            batch = await c.getmany(timeout_ms=200, max_records=200)
            for tp, msgs in batch.items():
                for m in msgs:
                    emit(ev="rec", p=tp.partition, o=m.offset, v=m.value.decode())
                    pending[tp.partition] = m.offset + 1
            if due():
                await commit(); last_commit[0] = time.monotonic()
        await commit()
        await c.stop()
    asyncio.run(main())
emit(ev="closed")
'''


class Worker:
    """A consumer subprocess of one library; `events` fills from its stdout."""

    def __init__(self, lib: str, bootstrap: str, topic: str, group: str, client_id: str,
                 instance: str | None = None) -> None:
        self.lib, self.client_id = lib, client_id
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, lib, bootstrap, topic, group, client_id,
             instance or "-"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._threads = [
            threading.Thread(target=self._pump, daemon=True),
            threading.Thread(target=self._pump_err, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                self.stderr.append(line)

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def records(self) -> list[tuple[int, int, str]]:
        return [(e["p"], e["o"], e["v"]) for e in list(self.events) if e["ev"] == "rec"]

    def assignment(self) -> list[int] | None:
        for e in reversed(list(self.events)):
            if e["ev"] == "assign":
                return list(e["parts"])
            if e["ev"] == "revoke":
                return []
        return None

    def max_commits(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for e in list(self.events):
            if e["ev"] == "commit":
                for p, o in e["offsets"].items():
                    out[int(p)] = max(out.get(int(p), 0), o)
        return out

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def describe(self) -> str:
        err = "".join(self.stderr)[-2000:]
        return f"{self.lib}/{self.client_id} rc={self.proc.poll()} stderr={err}"


class Producer:
    """Produces numbered records round-robin over the partitions until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 300) -> None:
        from confluent_kafka import Producer as P

        self.p = P({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.acked: dict[str, tuple[int, int]] = {}
        self.errors: list[object] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _cb(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked[msg.value().decode()] = (msg.partition(), msg.offset())

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.p.produce(self.topic, str(i).encode(), partition=i % self.partitions,
                           on_delivery=self._cb)
            self.p.poll(0)
            i += 1
            time.sleep(1 / self.rate)
        self.p.flush(30)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def describe(bootstrap: str, group: str) -> Any:
    a = admin(bootstrap)  # keep the client alive until the future completes
    return a.describe_consumer_groups([group])[group].result(10)


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    a = admin(bootstrap)
    futs = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    res = futs[group].result(10)
    return {(t.topic, t.partition): t.offset for t in res.topic_partitions}


def wait_for(cond: Callable[[], Any], timeout: float, what: str, step: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as e:  # the broker may be restarting; clients retrying
            last = e
        else:
            if last:
                return last
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def stable_assignment(bootstrap: str, group: str, members: int, partitions: int
                      ) -> dict[str, list[int]] | None:
    """client id -> partitions, once the group is Stable with `members` members whose
    assignments are disjoint and cover every partition."""
    from confluent_kafka import ConsumerGroupState

    d = describe(bootstrap, group)
    if d.state != ConsumerGroupState.STABLE or len(d.members) != members:
        return None
    out = {m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
           for m in d.members}
    flat = [p for ps in out.values() for p in ps]
    if sorted(flat) != list(range(partitions)):
        return None
    return out


@pytest.fixture
def fast_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides=FAST)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_four_libraries_share_a_group_and_survive_a_kill(fast_broker: BrokerProcess) -> None:
    """confluent-kafka, kafka-python, aiokafka and Tidegate's own client in one group."""
    bs, topic, group, n_parts = fast_broker.bootstrap, "grp", "g-libs", 12
    create_topic(bs, topic, n_parts)
    producer = Producer(bs, topic, n_parts)
    workers = [
        Worker("confluent", bs, topic, group, "w-confluent"),
        Worker("kafka-python", bs, topic, group, "w-kafka-python"),
        Worker("aiokafka", bs, topic, group, "w-aiokafka"),
        Worker("tidegate", bs, topic, group, "w-tidegate"),
    ]
    try:
        first = wait_for(lambda: stable_assignment(bs, group, 4, n_parts), 60,
                         "4 members with disjoint assignments covering 12 partitions")
        assert set(first) == {w.client_id for w in workers}
        assert all(first.values()), first  # 12 partitions, 3 members: everyone has some
        for w in workers:
            wait_for(lambda w=w: w.assignment() == first[w.client_id], 30,
                     f"{w.client_id} to see its assignment")
        time.sleep(2)  # consume and commit for a while

        victim = workers[1]
        victim.kill()
        killed_at = time.monotonic()
        survivors = [workers[0], workers[2], workers[3]]
        second = wait_for(lambda: stable_assignment(bs, group, 3, n_parts), 60,
                          "the survivors to take over every partition")
        took = time.monotonic() - killed_at
        assert set(second) == {w.client_id for w in survivors}
        assert took >= 4.5, f"rebalanced after {took:.1f}s, before the session timeout"

        newcomer = Worker("kafka-python", bs, topic, group, "w-newcomer")
        workers.append(newcomer)
        third = wait_for(lambda: stable_assignment(bs, group, 4, n_parts), 60,
                         "the newcomer to get partitions")
        assert third["w-newcomer"], third
        moved = set(third["w-newcomer"])
        assert any(moved & set(ps) for ps in second.values())  # partitions moved to it
        time.sleep(1)
    finally:
        producer.stop()
    try:
        assert not producer.errors, producer.errors[:3]
        produced = producer.acked
        alive = [w for w in workers if w is not workers[1]]

        def all_consumed() -> bool:
            seen = {v for w in workers for _, _, v in w.records()}
            return set(produced) <= seen

        wait_for(all_consumed, 60, "every produced record to be consumed")
    finally:
        for w in workers:
            w.stop()
    for w in alive:
        assert w.proc.returncode == 0, w.describe()
    # No loss, and duplicates only where a deliverer had not committed past the record.
    deliveries: dict[tuple[int, int], list[Worker]] = {}
    for w in workers:
        for p, o, v in w.records():
            assert produced.get(v) == (p, o), (v, p, o)
            deliveries.setdefault((p, o), []).append(w)
    assert {produced[v] for v in produced} <= set(deliveries)
    by_deliverers: dict[tuple[str, ...], int] = {}
    for (p, o), ws in deliveries.items():
        if len(ws) > 1:
            assert any(w.max_commits().get(p, 0) <= o for w in ws), (
                f"record {p}/{o} delivered {len(ws)} times although committed")
            key = tuple(w.client_id for w in ws)
            by_deliverers[key] = by_deliverers.get(key, 0) + 1
    dups = sum(len(ws) - 1 for ws in deliveries.values())
    victim_uncommitted = sum(
        1 for p, o, _ in workers[1].records() if o >= workers[1].max_commits().get(p, 0))
    # Survivors commit on revocation, so redelivery is the victim's uncommitted tail
    # (plus the odd batch caught between a revocation and its commit).
    print(f"redelivered {dups} records; the victim had {victim_uncommitted} uncommitted; "
          f"by deliverers: {by_deliverers}")
    assert dups <= victim_uncommitted + 10 * len(alive), (dups, victim_uncommitted,
                                                          by_deliverers)
    assert not any(len(set(k)) < len(k) for k in by_deliverers), by_deliverers
    wait_for(lambda: len(describe(bs, group).members) == 0, 30, "the group to empty")


def test_offsets_and_group_survive_a_broker_kill(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=FAST)
    b.start()
    worker = None
    try:
        bs = b.bootstrap
        create_topic(bs, "persist", 4)
        producer = Producer(bs, "persist", 4, rate=200)
        time.sleep(1)
        producer.stop()
        worker = Worker("kafka-python", bs, "persist", "g-persist", "w-persist")
        before = wait_for(lambda: stable_assignment(bs, "g-persist", 1, 4), 60, "stable")
        wait_for(lambda: sum(o for o in committed(bs, "g-persist").values() if o > 0)
                 >= len(producer.acked), 30, "commits of every record")
        offsets = committed(bs, "g-persist")
        members = {m.member_id for m in describe(bs, "g-persist").members}
        b.kill()
        b.start()
        after = describe(bs, "g-persist")
        # Loaded from its record: same members and assignment, no rebalance needed.
        assert {m.member_id for m in after.members} == members
        assert stable_assignment(bs, "g-persist", 1, 4) == before
        assert committed(bs, "g-persist") == offsets
        worker.stop()
        worker = None
        wait_for(lambda: len(describe(bs, "g-persist").members) == 0, 30, "the member to leave")
        b.stop()
        b.start()
        from confluent_kafka import ConsumerGroupState

        d = describe(bs, "g-persist")
        assert d.state == ConsumerGroupState.EMPTY and d.members == []
        assert committed(bs, "g-persist") == offsets
    finally:
        if worker is not None:
            worker.stop()
        b.stop()


def _commit_simple(bs: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit as a consumer that uses no group management (generation -1)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    c = KafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False)
    c.assign([TopicPartition(topic, p) for p in offsets])
    c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    c.close()


def test_offsets_expire_per_retention(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides={
        **FAST, "offsets.retention.minutes": "0", "offsets.retention.check.interval.ms": "300"})
    b.start()
    worker = None
    try:
        bs = b.bootstrap
        create_topic(bs, "exp", 2)
        producer = Producer(bs, "exp", 2, rate=200)
        time.sleep(0.5)
        producer.stop()
        # A Stable group keeps the offsets of the topics it subscribes to...
        worker = Worker("confluent", bs, "exp", "g-live", "w-live")
        wait_for(lambda: sum(committed(bs, "g-live").values()) == len(producer.acked), 60,
                 "the live group to commit everything")
        # ...while a group that only stores offsets expires them from their commit time,
        _commit_simple(bs, "g-simple", "exp", {0: 3})
        wait_for(lambda: "g-simple" not in _group_ids(bs), 10, "simple group offsets to expire")
        time.sleep(1)
        assert sum(committed(bs, "g-live").values()) == len(producer.acked)
        # ...and an Empty group loses its offsets, then itself, once retention has passed
        # since it became Empty.
        worker.stop()
        worker = None
        wait_for(lambda: "g-live" not in _group_ids(bs), 10, "the empty group to expire")
        assert committed(bs, "g-live") == {}
    finally:
        if worker is not None:
            worker.stop()
        b.stop()


def _group_ids(bs: str) -> set[str]:
    a = admin(bs)
    res = a.list_consumer_groups().result(10)
    return {g.group_id for g in res.valid}


def test_deleting_a_topic_deletes_its_offsets(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    create_topic(bs, "keep", 1)
    create_topic(bs, "gone", 2)
    _commit_simple(bs, "g-del", "keep", {0: 1})
    _commit_simple(bs, "g-del", "gone", {0: 5, 1: 6})
    assert committed(bs, "g-del") == {("keep", 0): 1, ("gone", 0): 5, ("gone", 1): 6}
    a = admin(bs)
    a.delete_topics(["gone"])["gone"].result(10)
    wait_for(lambda: committed(bs, "g-del") == {("keep", 0): 1}, 10, "offsets of gone to go")
    broker.restart()
    assert committed(bs, "g-del") == {("keep", 0): 1}


def test_static_member_restart_keeps_its_assignment(fast_broker: BrokerProcess) -> None:
    bs, topic, group = fast_broker.bootstrap, "static", "g-static"
    create_topic(bs, topic, 6)
    a = Worker("confluent", bs, topic, group, "w-a", instance="inst-a")
    b = Worker("confluent", bs, topic, group, "w-b", instance="inst-b")
    try:
        first = wait_for(lambda: stable_assignment(bs, group, 2, 6), 60, "two static members")
        ids = {m.group_instance_id: m.member_id for m in describe(bs, group).members}
        wait_for(lambda: b.assignment() == first["w-b"], 30, "b to see its assignment")
        revokes_before = sum(1 for e in b.events if e["ev"] == "revoke")
        a.kill()  # a static member does not leave; it comes back within the session
        a = Worker("confluent", bs, topic, group, "w-a", instance="inst-a")
        wait_for(lambda: a.assignment() == first["w-a"], 30, "a to get its partitions back")
        d = describe(bs, group)
        now = {m.group_instance_id: m.member_id for m in d.members}
        assert now["inst-b"] == ids["inst-b"]
        assert now["inst-a"] != ids["inst-a"]  # the restart got a new member id
        assert stable_assignment(bs, group, 2, 6) == first
        time.sleep(2)
        assert sum(1 for e in b.events if e["ev"] == "revoke") == revokes_before  # no rebalance
    finally:
        a.stop()
        b.stop()


def test_new_partitions_are_assigned_after_the_clients_notice(
        fast_broker: BrokerProcess) -> None:
    """Kafka's classic protocol leaves partition growth to the clients' metadata
    refresh: the leader rejoins and the coordinator rebalances."""
    from confluent_kafka.admin import NewPartitions

    bs, topic, group = fast_broker.bootstrap, "grow", "g-grow"
    create_topic(bs, topic, 2)
    workers = [Worker("confluent", bs, topic, group, "w-c"),
               Worker("kafka-python", bs, topic, group, "w-k")]
    try:
        wait_for(lambda: stable_assignment(bs, group, 2, 2), 60, "two members, 2 partitions")
        a = admin(bs)
        a.create_partitions([NewPartitions(topic, 4)])[topic].result(10)
        grown = wait_for(lambda: stable_assignment(bs, group, 2, 4), 60,
                         "the new partitions to be assigned")
        assert all(len(ps) == 2 for ps in grown.values()), grown
    finally:
        for w in workers:
            w.stop()


def test_kcat_group_consumption_resumes_from_commits(fast_broker: BrokerProcess) -> None:
    import shutil

    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed"
    bs = fast_broker.bootstrap
    create_topic(bs, "kc", 3)
    producer = Producer(bs, "kc", 3, rate=1000)
    time.sleep(0.5)
    producer.stop()
    n = len(producer.acked)

    def run() -> list[str]:
        out = subprocess.run([kcat, "-b", bs, "-G", "g-kcat", "kc", "-e", "-q", "-f", "%s\n",
                              "-X", "auto.offset.reset=earliest"],
                             capture_output=True, text=True, timeout=60, check=True)
        return out.stdout.split()

    assert sorted(run(), key=int) == sorted(producer.acked, key=int)
    assert sum(committed(bs, "g-kcat").values()) == n
    assert run() == []  # resumes from the committed offsets


def test_groups_cli(fast_broker: BrokerProcess) -> None:
    bs = fast_broker.bootstrap
    create_topic(bs, "cli", 2)
    producer = Producer(bs, "cli", 2, rate=500)
    time.sleep(0.4)
    producer.stop()
    n = len(producer.acked)
    _commit_simple(bs, "g-cli", "cli", {0: 1, 1: 2})

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT / "src")
        return subprocess.run(
            [sys.executable, "-m", "tidegate.cli.main", "groups", *args, "--bootstrap-server", bs],
            capture_output=True, text=True, timeout=60, env=env)

    out = cli("list")
    assert out.returncode == 0 and "g-cli" in out.stdout, out
    out = cli("describe", "g-cli")
    assert out.returncode == 0, out
    lines = [ln.split() for ln in out.stdout.splitlines() if ln.startswith("cli ")]
    end = {p: sum(1 for v in producer.acked.values() if v[0] == p) for p in (0, 1)}
    assert sorted((int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in lines) == [
        (0, 1, end[0], end[0] - 1), (1, 2, end[1], end[1] - 2)]
    assert cli("reset-offsets", "g-cli", "--topic", "cli", "--to-latest").returncode == 0
    assert committed(bs, "g-cli") == {("cli", 0): end[0], ("cli", 1): end[1]}
    assert cli("reset-offsets", "g-cli", "--topic", "cli", "--to-offset", "1").returncode == 0
    assert committed(bs, "g-cli") == {("cli", 0): 1, ("cli", 1): 1}
    assert cli("reset-offsets", "g-cli", "--topic", "cli", "--to-earliest").returncode == 0
    assert committed(bs, "g-cli") == {("cli", 0): 0, ("cli", 1): 0}
    assert n == end[0] + end[1]
    out = cli("delete", "g-cli")
    assert out.returncode == 0, out
    assert "g-cli" not in _group_ids(bs)
    out = cli("describe", "no-such-group")
    assert out.returncode != 0 and "no-such-group" in out.stderr


def test_raw_api_versions_clients_rarely_use(broker: BrokerProcess) -> None:
    """Batched and topic-id forms, exercised with raw requests."""
    from tests.integration.rawclient import RawClient

    bs = broker.bootstrap
    create_topic(bs, "raw", 2)
    c = RawClient(bs)
    r = c.call(10, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]})
    assert [(x.key, int(x.node_id), x.error_code.value) for x in r.coordinators] == [
        ("a", 1, 0), ("b", 1, 0)]
    r = c.call(10, 4, {"key_type": 1, "coordinator_keys": ["txn", ""]})
    assert [(x.key, int(x.node_id), x.error_code.name) for x in r.coordinators] == [
        ("txn", 1, "none"), ("", -1, "invalid_request")]
    topic_id = c.call(3, 12, {"topics": [{"name": "raw"}], "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False}).topics[0].topic_id
    # OffsetCommit v10 names topics by id; v9 by name.
    r = c.call(8, 10, {"group_id": "g-raw", "generation_id_or_member_epoch": -1,
                       "member_id": "", "topics": [{"topic_id": topic_id, "partitions": [
                           {"partition_index": 0, "committed_offset": 7,
                            "committed_metadata": "m"}]}]})
    assert r.topics[0].topic_id == topic_id and r.topics[0].partitions[0].error_code.value == 0
    r = c.call(8, 9, {"group_id": "g-raw2", "generation_id_or_member_epoch": -1,
                      "member_id": "", "topics": [{"name": "nope", "partitions": [
                          {"partition_index": 0, "committed_offset": 1}]}]})
    assert r.topics[0].partitions[0].error_code.name == "unknown_topic_or_partition"
    # OffsetFetch v8+: several groups at once, null topics = everything.
    r = c.call(9, 8, {"groups": [{"group_id": "g-raw", "topics": None},
                                 {"group_id": "none", "topics": [
                                     {"name": "raw", "partition_indexes": [1]}]}]})
    g0, g1 = r.groups
    assert [(t.name, p.partition_index, p.committed_offset, p.metadata)
            for t in g0.topics for p in t.partitions] == [("raw", 0, 7, "m")]
    assert g1.topics[0].partitions[0].committed_offset == -1
    r = c.call(9, 10, {"groups": [{"group_id": "g-raw", "topics": [
        {"topic_id": topic_id, "partition_indexes": [0]}]}], "require_stable": True})
    assert r.groups[0].topics[0].topic_id == topic_id
    assert r.groups[0].topics[0].partitions[0].committed_offset == 7
    # JoinGroup v0 (no member id round trip), then LeaveGroup v5 batch.
    sub_ = b"\x00\x00\x00\x00\x00\x01\x00\x03raw\xff\xff\xff\xff"
    r = c.call(11, 0, {"group_id": "g-old", "session_timeout": 6000, "member_id": "",
                       "protocol_type": "consumer",
                       "protocols": [{"name": "range", "metadata": sub_}]})
    assert r.error_code.value == 0 and r.member_id and r.leader == r.member_id
    member = r.member_id
    r = c.call(13, 5, {"group_id": "g-old", "members": [
        {"member_id": member, "group_instance_id": None, "reason": "bye"},
        {"member_id": "ghost", "group_instance_id": None}]})
    assert [m.error_code.name for m in r.members] == ["none", "unknown_member_id"]
    # ListGroups v5 filters by state and type; DescribeGroups v6 reports unknown groups.
    r = c.call(16, 5, {"states_filter": ["Empty"], "types_filter": ["classic"]})
    assert {g.group_id for g in r.groups} >= {"g-raw", "g-old"}
    assert all(g.group_type == "classic" for g in r.groups)
    assert c.call(16, 5, {"states_filter": [], "types_filter": ["consumer"]}).groups == ()
    r = c.call(15, 6, {"groups": ["missing"], "include_authorized_operations": False})
    assert r.groups[0].error_code.name == "group_id_not_found"
    # OffsetDelete, then DeleteGroups.
    r = c.call(47, 0, {"group_id": "g-raw", "topics": [
        {"name": "raw", "partitions": [{"partition_index": 0}]}]})
    assert r.error_code.value == 0 and r.topics[0].partitions[0].error_code.value == 0
    # (g-raw held nothing but that offset: like a restarted Kafka coordinator, we no
    # longer know it)
    r = c.call(42, 2, {"groups_names": ["g-old", "missing", "g-raw"]})
    assert [x.error_code.name for x in r.results] == [
        "none", "group_id_not_found", "group_id_not_found"]
    c.close()
