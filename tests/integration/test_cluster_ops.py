"""The controller's operations on a real 3-broker cluster: controlled shutdown during a
rolling restart under load, preferred/unclean leader election (ElectLeaders from
confluent-kafka's admin client), automatic leader rebalance, and partition reassignment
with data copy (AlterPartitionReassignments / ListPartitionReassignments from
kafka-python's admin client).

Rolling restart: an idempotent acks=all confluent-kafka producer and a consumer run
while each broker in turn gets SIGTERM (controlled shutdown: its leaderships move before
it stops), is restarted and rejoins every ISR. No delivery may fail, every acknowledged
record is read back exactly once, and the log holds nothing else. The test prints how
long each broker took to stop and how long the controller took to move its leaderships.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from tests.integration.cli_util import cli
from tests.integration.cluster import Cluster, high_watermark, produce_numbers, wait_for
from tests.integration.conftest import BrokerProcess
from tests.integration.rawclient import RawClient

TOPIC = "rolling"
PARTITIONS = 3


def _md(c: Cluster, via: int, topic: str) -> dict[int, Any]:
    admin = AdminClient({"bootstrap.servers": c.brokers[via].bootstrap})
    md = admin.list_topics(topic, timeout=10)
    return dict(md.topics[topic].partitions)


def _leaders(c: Cluster, via: int, topic: str) -> dict[int, int]:
    return {p: pm.leader for p, pm in _md(c, via, topic).items()}


def _full_isr(c: Cluster, via: int, topic: str, rf: int) -> bool:
    parts = _md(c, via, topic)
    return bool(parts) and all(len(pm.isrs) == rf and pm.leader >= 0 for pm in parts.values())


def _dump(c: Cluster) -> None:
    """On failure: what the controllers did, and each broker's last lines."""
    for bid, b in c.brokers.items():
        lines = b.log_lines
        ops = [ln for ln in lines if "controller" in ln or "election" in ln
               or "shutdown" in ln or "Traceback" in ln or "ERROR" in ln]
        print(f"--- broker {bid}: controller and shutdown events")
        print("\n".join(ops[-80:]))
        print(f"--- broker {bid}: last lines")
        print("\n".join(lines[-60:]))


def _code(err: Any) -> int:
    """The error code of a per-partition admin result (a KafkaError or KafkaException)."""
    inner = err if isinstance(err, KafkaError) else err.args[0]
    return int(inner.code())


def _controller(c: Cluster, via: int) -> int:
    admin = AdminClient({"bootstrap.servers": c.brokers[via].bootstrap})
    return int(admin.list_topics(timeout=10).controller_id)


def test_rolling_restart_with_controlled_shutdown(tmp_path: Path) -> None:
    # percentage 0: every partition off its preferred replica counts. With Kafka's 10 %,
    # a partition whose first election found its preferred replica not yet back in the
    # ISR stays where it is once the others moved back (1 of ~18 is under 10 %).
    c = Cluster(tmp_path, overrides={"leader.imbalance.check.interval.seconds": "2",
                                     "leader.imbalance.per.broker.percentage": "0"})
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                      config={"min.insync.replicas": "2"})])[TOPIC].result(30)
        wait_for("full ISRs", lambda: _full_isr(c, 1, TOPIC, 3))
        acked: set[int] = set()
        failed: list[object] = []
        client_errors: list[KafkaError] = []

        def delivered(err: object, msg: Any) -> None:
            if err is not None:
                failed.append(err)
            else:
                acked.add(int(msg.value()))

        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                             "enable.idempotence": True, "message.timeout.ms": 60000,
                             "linger.ms": 5, "error_cb": client_errors.append})
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "rolling",
                             "enable.auto.commit": False, "error_cb": client_errors.append})
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        seen: list[int] = []
        positions: list[tuple[int, int]] = []  # (partition, offset) of each record read
        consumer_errors: list[KafkaError] = []
        stop = threading.Event()

        def produce() -> None:
            produce_numbers(producer, TOPIC, stop, delivered, pause_every=100, flush_s=60)

        def consume() -> None:
            # until the producer has flushed and every acknowledged record was read
            while not (flushed.is_set() and len(seen) >= len(acked)):
                for m in consumer.consume(1000, 0.2):
                    if m.error() is not None:
                        consumer_errors.append(m.error())
                    else:
                        seen.append(int(m.value()))
                        positions.append((m.partition(), m.offset()))
                if flushed.is_set() and time.monotonic() > deadline[0]:
                    return

        deadline = [float("inf")]
        flushed = threading.Event()
        writer = threading.Thread(target=produce)
        reader = threading.Thread(target=consume)
        writer.start()
        reader.start()
        stops: list[tuple[int, float, str]] = []
        seen_after: list[float] = []  # exit to the survivor's metadata showing the moves
        try:
            time.sleep(1.0)
            for bid in (1, 2, 3):
                survivor = 1 + bid % 3
                t0 = time.monotonic()
                assert c.brokers[bid].stop() == 0
                took = time.monotonic() - t0
                # nothing is led by the stopped broker once it has exited: the controller
                # moved its leaderships before answering (the log line below), and the
                # survivors apply the new states from ZooKeeper's watches moments later
                # (seconds on a loaded machine: ~50 __consumer_offsets states as well)
                t1 = time.monotonic()
                wait_for(f"survivor {survivor} to see broker {bid}'s leaderships moved",
                         lambda via=survivor, gone=bid: not {gone, -1} & set(
                             _leaders(c, via, TOPIC).values()), timeout=15, every=0.05)
                seen_after.append(time.monotonic() - t1)
                moved = re.findall(r"controlled shutdown succeeded in (\d+) ms",
                                   "\n".join(c.brokers[bid].log_lines))
                assert moved, "\n".join(c.brokers[bid].log_lines[-40:])
                stops.append((bid, took, moved[-1]))
                c.restart(bid)
                wait_for(f"broker {bid} back in every ISR",
                         lambda via=survivor: _full_isr(c, via, TOPIC, 3), timeout=40)
            time.sleep(1.0)
        finally:
            stop.set()
            writer.join(90)
            deadline[0] = time.monotonic() + 60
            flushed.set()
            reader.join(90)
            consumer.close()
        print("\nrolling restart under acks=all load: " + "; ".join(
            f"broker {b} stopped in {t:.2f} s (leaderships moved in {ms} ms)"
            for b, t, ms in stops)
            + "; survivors saw the moves " + ", ".join(f"{x:.2f}" for x in seen_after)
            + " s after the exit"
            + f"; {len(acked)} acknowledged; client errors: "
            + (", ".join(sorted({e.name() for e in client_errors + consumer_errors}))
               or "none"))
        assert not failed, failed[:5]
        assert not [e for e in client_errors + consumer_errors if e.fatal()], client_errors
        assert len(acked) > 500
        twice = sorted(p for p, n in Counter(positions).items() if n > 1)
        assert len(seen) == len(set(seen)), f"read twice: {len(twice)} offsets {twice[:3]}.." \
                                            f"{twice[-3:]}; {len(seen) - len(set(seen))} values"
        assert set(seen) == acked, f"lost: {len(acked - set(seen))}, " \
                                   f"unacknowledged: {len(set(seen) - acked)}"
        check = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "hw"})
        hw = sum(high_watermark(check, TOPIC, p) for p in range(PARTITIONS))
        check.close()
        assert hw == len(acked), "the logs hold every acknowledged record once, nothing else"
        # auto.leader.rebalance.enable (every 2 s here) hands leadership back to the
        # preferred replicas the rolling restart took it from
        wait_for("preferred leaders back", lambda: all(
            pm.leader == pm.replicas[0] for pm in _md(c, 1, TOPIC).values()), timeout=30)
    except BaseException:
        _dump(c)
        raise
    finally:
        c.stop()


@pytest.fixture(scope="module")
def quiet_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A cluster without automatic rebalance, so the tests decide who leads."""
    c = Cluster(tmp_path_factory.mktemp("ops"),
                overrides={"auto.leader.rebalance.enable": "false"})
    c.start()
    try:
        yield c
    except BaseException:
        print(c.failure_report())
        raise
    finally:
        c.stop()


def test_elect_leaders_preferred_and_errors(quiet_cluster: Cluster) -> None:
    c = quiet_cluster
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("elect", 3, 3)])["elect"].result(30)
    wait_for("full ISRs", lambda: _full_isr(c, 1, "elect", 3))
    # move leadership off broker 2's preferred partitions: a controlled shutdown does
    preferred = {p: pm.replicas[0] for p, pm in _md(c, 1, "elect").items()}
    assert c.brokers[2].stop() == 0
    c.restart(2)
    wait_for("broker 2 back in sync", lambda: _full_isr(c, 1, "elect", 3), timeout=40)
    moved = [p for p, leader in _leaders(c, 1, "elect").items() if leader != preferred[p]]
    assert moved, "broker 2 led something before its restart"
    tps = [TopicPartition("elect", p) for p in range(3)]
    result = admin.elect_leaders(ElectionType.PREFERRED, tps).result(30)
    for tp, err in result.items():
        if tp.partition in moved:
            assert err is None, (tp, err)
        else:
            assert err is not None and _code(err) == KafkaError.ELECTION_NOT_NEEDED
    assert _leaders(c, 3, "elect") == preferred  # the answer waits for the new leaders
    # again: nothing to do; and a partition that does not exist
    again = admin.elect_leaders(ElectionType.PREFERRED,
                                [TopicPartition("elect", 0), TopicPartition("elect", 7)]
                                ).result(30)
    codes = {tp.partition: _code(err) for tp, err in again.items()}
    assert codes == {0: KafkaError.ELECTION_NOT_NEEDED, 7: KafkaError.UNKNOWN_TOPIC_OR_PART}
    # every partition, unclean: every leader is alive, so nothing is reported
    assert admin.elect_leaders(ElectionType.UNCLEAN, None).result(30) == {}
    # a broker that is not the controller answers NOT_CONTROLLER for each partition
    other = next(b for b in (1, 2, 3) if b != _controller(c, 1))
    raw = RawClient(c.brokers[other].bootstrap)
    try:
        resp = raw.call(43, 2, {"election_type": 0, "timeout": 5000, "topic_partitions": [
            {"topic": "elect", "partitions": [0, 1]}]})
    finally:
        raw.close()
    assert resp.error_code == 0
    assert [int(p.error_code) for r in resp.replica_election_results
            for p in r.partition_result] == [41, 41]


def test_reassignment_moves_data_and_deletes_the_old_replica(quiet_cluster: Cluster) -> None:
    c = quiet_cluster
    controller = _controller(c, 1)
    src, dst = [b for b in (1, 2, 3) if b != controller]
    kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
    try:
        kadmin.create_topics([KNewTopic("moving", replica_assignments={0: [src]})])
        wait_for("a leader", lambda: _leaders(c, 1, "moving") == {0: src})
        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(3000):
            producer.produce("moving", value=f"v{i}".encode())
        assert producer.flush(30) == 0
        tp = KTopicPartition("moving", 0)
        # Kafka's errors: an unknown broker, an unknown partition, nothing to cancel
        assert kadmin.alter_partition_reassignments({tp: [9]})[tp] is \
            InvalidReplicationAssignmentError
        unknown = KTopicPartition("moving", 5)
        assert kadmin.alter_partition_reassignments({unknown: [dst]})[unknown] is \
            UnknownTopicOrPartitionError
        assert kadmin.alter_partition_reassignments({tp: None})[tp] is \
            NoReassignmentInProgressError

        # in flight while the new replica cannot fetch (paused below its session timeout);
        # then cancelled: back on the origin, the added replica dropped
        c.pause(dst)
        try:
            assert kadmin.alter_partition_reassignments({tp: [dst]}) == {tp: None}
            ongoing = kadmin.list_partition_reassignments()
            assert ongoing == {tp: {"replicas": [dst, src], "adding_replicas": [dst],
                                    "removing_replicas": [src]}}, ongoing
            assert kadmin.alter_partition_reassignments({tp: None}) == {tp: None}
            assert kadmin.list_partition_reassignments() == {}
        finally:
            c.resume(dst)
        wait_for("the cancelled replica deleted",
                 lambda: not (c.base / f"broker-{dst}" / "moving-0").exists(), timeout=20)

        # the real move: data copied to dst, leadership moved, src's copy deleted
        t0 = time.monotonic()
        assert kadmin.alter_partition_reassignments({tp: [dst]}) == {tp: None}
        wait_for("the reassignment to finish", lambda: (
            kadmin.list_partition_reassignments() == {}
            and _md(c, 1, "moving")[0].replicas == [dst]
            and _leaders(c, 1, "moving") == {0: dst}), timeout=30)
        took = time.monotonic() - t0
        wait_for("the old replica deleted",
                 lambda: not (c.base / f"broker-{src}" / "moving-0").exists(), timeout=20)
        consumer = Consumer({"bootstrap.servers": c.brokers[dst].bootstrap,
                             "group.id": "moved", "enable.auto.commit": False})
        consumer.assign([TopicPartition("moving", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3000 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(1000, 0.5) if m.error() is None]
        consumer.close()
        assert got == [f"v{i}".encode() for i in range(3000)]
        print(f"\nreassignment of 3000 records from broker {src} to {dst}: {took:.2f} s")
    finally:
        kadmin.close()


def test_a_new_controller_finishes_a_reassignment(quiet_cluster: Cluster) -> None:
    """The reassignment in flight lives in the topic znode: the controller elected after
    the one that started it completes it."""
    c = quiet_cluster
    controller = _controller(c, 1)
    src, dst = [b for b in (1, 2, 3) if b != controller]
    kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
    try:
        kadmin.create_topics([KNewTopic("handover", replica_assignments={0: [src]})])
        wait_for("a leader", lambda: _leaders(c, src, "handover") == {0: src})
        tp = KTopicPartition("handover", 0)
        c.pause(dst)  # the new replica cannot catch up yet
        try:
            assert kadmin.alter_partition_reassignments({tp: [dst]}) == {tp: None}
            assert c.brokers[controller].stop() == 0  # controlled shutdown, new controller
        finally:
            c.resume(dst)
        wait_for("the new controller to finish the move", lambda: (
            _md(c, src, "handover")[0].replicas == [dst]
            and _leaders(c, src, "handover") == {0: dst}), timeout=30)
        assert _controller(c, src) != controller
        wait_for("the old replica deleted",
                 lambda: not (c.base / f"broker-{src}" / "handover-0").exists(), timeout=20)
    finally:
        kadmin.close()
        if c.brokers[controller].proc is None:
            c.restart(controller)


def test_cli_leaders_elect_and_topics_reassign(quiet_cluster: Cluster) -> None:
    c = quiet_cluster
    bs = ["--bootstrap-server", c.bootstrap]
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("clitopic", 2, 2)])["clitopic"].result(30)
    wait_for("full ISRs", lambda: _full_isr(c, 1, "clitopic", 2))
    r = cli("leaders", "elect", "--topic", "clitopic", *bs)
    assert r.returncode == 0, r.stderr
    assert b"Valid replica already elected for partitions clitopic-0, clitopic-1" in r.stdout
    r = cli("leaders", "elect", "--all-topic-partitions", "--election-type", "unclean", *bs)
    assert r.returncode == 0 and b"No partition needed" in r.stderr, r
    replicas = _md(c, 1, "clitopic")[0].replicas
    target = [b for b in (1, 2, 3) if b not in replicas] + replicas[:1]
    r = cli("topics", "reassign", "--topic", "clitopic", "--partition", "0", "--replicas",
            ",".join(map(str, target)), "--wait", *bs)
    assert r.returncode == 0, r.stderr
    assert b"complete" in r.stdout
    assert _md(c, 1, "clitopic")[0].replicas == target
    r = cli("topics", "reassign", "--list", *bs)
    assert r.returncode == 0 and b"no reassignments in progress" in r.stderr
    r = cli("topics", "reassign", "--topic", "clitopic", "--partition", "0", "--replicas",
            "9", *bs)
    assert r.returncode == 1 and b"INVALID_REPLICA_ASSIGNMENT" in r.stderr, r.stderr
    r = cli("topics", "reassign", "--topic", "clitopic", "--partition", "1", "--cancel", *bs)
    assert r.returncode == 1 and b"NO_REASSIGNMENT_IN_PROGRESS" in r.stderr, r.stderr


def test_single_broker_answers_as_a_one_broker_cluster(broker: BrokerProcess) -> None:
    """Without ZooKeeper: every partition already has its only (preferred) leader, a
    reassignment can only name this broker, and ControlledShutdown is not served."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("solo", 2, 1)])["solo"].result(30)
    got = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("solo", 0),
                                                       TopicPartition("solo", 9)]).result(30)
    assert {tp.partition: _code(e) for tp, e in got.items()} == {
        0: KafkaError.ELECTION_NOT_NEEDED, 9: KafkaError.UNKNOWN_TOPIC_OR_PART}
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        tp = KTopicPartition("solo", 0)
        assert kadmin.alter_partition_reassignments({tp: [1]}) == {tp: None}
        assert kadmin.alter_partition_reassignments({tp: [1, 2]})[tp] is \
            InvalidReplicationAssignmentError
        assert kadmin.alter_partition_reassignments({tp: None})[tp] is \
            NoReassignmentInProgressError
        assert kadmin.list_partition_reassignments() == {}
    finally:
        kadmin.close()
    raw = RawClient(broker.bootstrap)
    try:
        versions = raw.call(18, 3, {"client_software_name": "t",
                                    "client_software_version": "1"})
        keys = {int(a.api_key) for a in versions.api_keys}
        assert {43, 45, 46} <= keys and 7 not in keys
    finally:
        raw.close()
