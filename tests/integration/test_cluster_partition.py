"""Cluster faults that are not crashes: an isolated leader, and a paused follower.

Three brokers (tests/integration/cluster.py), a one-partition topic with replication
factor 3 and `min.insync.replicas=2`.

1. Isolated leader: each broker runs as its own simulated host
   (tests/integration/netpartition.py, iptables), and the leader L is cut off from
   ZooKeeper and from the other brokers, while the test (the clients) still reaches every
   broker. A confluent-kafka producer on L's side of the partition (a process of L's
   host: tests/integration/side_producer.py) writes to L: its acks=all writes must not be
   acknowledged (L can neither move its high watermark nor shrink its ISR in ZooKeeper);
   its acks=1 writes may be (L alone: Kafka's documented acks=1 risk, they are L's
   divergent tail). Meanwhile L's ZooKeeper session expires, the controller elects a new
   leader among the other two and acks=all writes through them succeed. Healed, L comes
   back as a follower, truncates its tail and rejoins the ISR: every acknowledged acks=all
   record is read back exactly once and in order, nothing L alone took survives, and the
   partition's .log files are byte-identical on the three brokers.
2. Paused follower: SIGSTOP a follower past `replica.lag.time.max.ms` (6 s): the leader
   takes it out of the ISR (a conditional ZooKeeper write; the session is made longer
   than the pause so that this, not the broker's death, is what shrinks the ISR), acks=all
   writes go on with two replicas; SIGCONT: it catches up and is put back; the same
   checks at the end.

Timings (partition to new leader, heal to rejoined ISR, pause to ISR shrink, resume to
ISR expansion) are printed. On failure the brokers' logs are printed.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration import side_producer
from tests.integration.cluster import Cluster, high_watermark, wait_for
from tests.integration.netpartition import Network, PartitionUnavailable
from tests.integration.rawclient import RawClient

TOPIC = "split"


@dataclass
class View:
    """Partition 0 of TOPIC as one broker's metadata shows it."""

    leader: int
    epoch: int
    isr: tuple[int, ...]
    controller: int


def _view(c: Cluster, via: int) -> View | None:
    # a raw Metadata request to exactly this broker: librdkafka would ask any broker it knows
    client = RawClient(c.brokers[via].bootstrap, timeout=2)
    try:
        md = client.call(3, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
    finally:
        client.close()
    topic = md.topics[0]
    if topic.error_code != 0 or not topic.partitions:
        return None
    p = topic.partitions[0]
    return View(p.leader_id, p.leader_epoch, tuple(sorted(p.isr_nodes)), md.controller_id)


def _create_topic(c: Cluster) -> View:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})]
                        )[TOPIC].result(30)

    def settled() -> View | None:
        v = _view(c, 1)
        return v if v is not None and v.leader > 0 and len(v.isr) == 3 else None

    return wait_for("a leader and a full ISR", settled)  # type: ignore[return-value]


def _produce_all(bootstrap: str, values: list[str], timeout: float = 60) -> list[str]:
    """Idempotent acks=all writes; returns the values acknowledged (all, or the test fails)."""
    acked: list[str] = []
    errors: list[str] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            acked.append(msg.value().decode())  # type: ignore[union-attr]
        else:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": int(timeout * 1000), "linger.ms": 2})
    for v in values:
        p.produce(TOPIC, value=v.encode(), on_delivery=report)
        p.poll(0)
    p.flush(timeout + 10)
    assert not errors, errors[:5]
    assert acked == values, "acks=all writes through a healthy majority, all acknowledged"
    return acked


def _read_all(c: Cluster) -> tuple[list[str], int]:
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "verify",
                         "enable.auto.commit": False})
    try:
        hw = high_watermark(consumer, TOPIC, 0)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while len(seen) < hw and time.monotonic() < deadline:
            for m in consumer.consume(10000, 0.5):
                if m.error() is None:
                    seen.append(m.value().decode())  # type: ignore[union-attr]
        return seen, hw
    finally:
        consumer.close()


def _check_exactly_once(c: Cluster, acked: list[str]) -> list[str]:
    seen, hw = _read_all(c)
    assert len(seen) == len(set(seen)), "no duplicates"
    lost, extra = sorted(set(acked) - set(seen)), sorted(set(seen) - set(acked))
    assert not lost and not extra, f"lost: {lost[:10]}, extra: {extra[:10]}"
    assert hw == len(acked), "every acknowledged record once, nothing else"
    rank = {v: i for i, v in enumerate(acked)}
    assert seen == sorted(seen, key=rank.__getitem__), "in the order acknowledged"
    return seen


def _log_bytes(directory: Path) -> bytes:
    return b"".join((directory / name).read_bytes()
                    for name in sorted(os.listdir(directory)) if name.endswith(".log"))


def _digest(directory: Path) -> str:
    return hashlib.sha256(_log_bytes(directory)).hexdigest()


def _wait_identical(c: Cluster) -> None:
    def identical() -> bool:
        return len({_digest(c.base / f"broker-{b}" / f"{TOPIC}-0") for b in c.brokers}) == 1

    wait_for("byte-identical replicas", identical, timeout=30)


@pytest.fixture
def network() -> Iterator[Network]:
    """iptables rules of this test only, removed whatever happens (skip if impossible)."""
    try:
        net = Network()
    except PartitionUnavailable as e:
        pytest.skip(str(e))
    try:
        yield net
    finally:
        net.close()


def test_isolated_leader_stops_acking_and_its_tail_is_truncated(
    tmp_path: Path, network: Network
) -> None:
    net = network
    c = Cluster(tmp_path)
    try:
        hosts = {}
        for bid, broker in c.brokers.items():
            hosts[bid] = net.add_host(f"broker-{bid}", [broker.port])
            broker.group = hosts[bid].gid
        c.start()
        before = _create_topic(c)
        leader = before.leader
        a, b = (x for x in c.brokers if x != leader)
        majority = f"{c.brokers[a].bootstrap},{c.brokers[b].bootstrap}"
        acked = _produce_all(c.bootstrap, [f"before-{i:03d}" for i in range(50)])

        t0 = time.monotonic()
        net.isolate(hosts[leader])
        with ThreadPoolExecutor(1) as pool:
            # a client on L's side: it reaches L only
            l_all = pool.submit(side_producer.run, c.brokers[leader].bootstrap, TOPIC, "all",
                                6000, [f"L-all-{i}" for i in range(3)], hosts[leader].gid)

            def new_leader() -> View | None:
                v = _view(c, a)
                return v if v is not None and v.leader in (a, b) else None

            elected: View = wait_for("a new leader among the majority", new_leader,  # type: ignore[assignment]
                                     timeout=30, every=0.05)
            t_leader = time.monotonic() - t0
            l_one = side_producer.run(c.brokers[leader].bootstrap, TOPIC, "1", 5000,
                                      [f"L-one-{i}" for i in range(5)], hosts[leader].gid)
            stale = _view(c, leader)
            # the divergent tail, on L's disk (values are not compressed)
            on_disk = _log_bytes(c.base / f"broker-{leader}" / f"{TOPIC}-0")
            tail = on_disk.count(b"L-all-") + on_disk.count(b"L-one-")
            acked += _produce_all(majority, [f"during-{i:03d}" for i in range(100)])
            l_all_reports = l_all.result(60)
        dropped = net.dropped_packets()
        assert elected.epoch > before.epoch and leader not in elected.isr, elected
        assert len(l_all_reports) == 3, l_all_reports
        assert all(r["error"] is not None for r in l_all_reports), (
            f"the isolated leader acknowledged acks=all writes: {l_all_reports}")
        assert dropped > 0, "the partition dropped nothing"
        assert tail > 0, "the isolated leader took no write: nothing to truncate"

        t1 = time.monotonic()
        net.heal(hosts[leader])

        def rejoined() -> View | None:
            v = _view(c, elected.leader)
            return v if v is not None and leader in v.isr else None

        wait_for(f"broker {leader} back in the ISR", rejoined, timeout=60, every=0.1)
        t_rejoin = time.monotonic() - t1
        acked += _produce_all(c.bootstrap, [f"after-{i:03d}" for i in range(50)])

        seen = _check_exactly_once(c, acked)
        assert not [v for v in seen if v.startswith("L-")], "the isolated leader's tail survived"
        _wait_identical(c)
        l_one_acked = sum(r["error"] is None for r in l_one)
        print(f"\nisolated leader {leader} (epoch {before.epoch}, controller "
              f"{before.controller}): new leader {elected.leader} (epoch {elected.epoch}, "
              f"controller {elected.controller}) {t_leader:.2f} s after the partition; L still "
              f"saw {stale}; acks=all to L: {l_all_reports[0]['error']}; acks=1 to L: "
              f"{l_one_acked}/5 acknowledged; {tail} records in L's divergent tail, truncated; "
              f"{dropped} packets dropped; heal to back in the ISR: {t_rejoin:.2f} s; "
              f"{len(acked)} acks=all records read back once")
    except BaseException:
        print(c.failure_report())
        raise
    finally:
        net.heal_all()  # an isolated broker would wait out its controlled shutdown
        c.stop()


def test_paused_follower_leaves_and_rejoins_the_isr(tmp_path: Path) -> None:
    # a session longer than the pause: the leader's lag check shrinks the ISR, not the
    # controller noticing a dead broker (kill -9 covers that path)
    c = Cluster(tmp_path, overrides={"zookeeper.session.timeout.ms": "20000"})
    c.start()
    try:
        before = _create_topic(c)
        leader = before.leader
        follower = next(x for x in c.brokers if x != leader)
        acked: list[str] = []
        ack_times: list[float] = []
        failed: list[str] = []

        def report(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                acked.append(msg.value().decode())  # type: ignore[union-attr]
                ack_times.append(time.monotonic())
            else:
                failed.append(str(err))

        stop = threading.Event()

        def produce() -> None:
            # made and dropped in this thread: gone (quietly) before the brokers stop
            producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                                 "enable.idempotence": True, "message.timeout.ms": 120000,
                                 "linger.ms": 5})
            i = 0
            while not stop.is_set():
                producer.produce(TOPIC, value=f"v-{i:06d}".encode(), on_delivery=report)
                i += 1
                producer.poll(0.005)
            producer.flush(120)

        writer = threading.Thread(target=produce)
        writer.start()
        try:
            time.sleep(1.0)
            t0 = time.monotonic()
            c.pause(follower)

            def shrunk() -> View | None:
                v = _view(c, leader)
                return v if v is not None and follower not in v.isr else None

            after_shrink: View = wait_for("the ISR to shrink", shrunk,  # type: ignore[assignment]
                                          timeout=30, every=0.1)
            t_shrink = time.monotonic() - t0
            n_shrink = len(acked)
            time.sleep(1.5)  # acks=all go on with two in-sync replicas
            n_paused = len(acked) - n_shrink
            t1 = time.monotonic()
            c.resume(follower)

            def expanded() -> View | None:
                v = _view(c, leader)
                return v if v is not None and follower in v.isr else None

            wait_for("the ISR to expand", expanded, timeout=30, every=0.1)
            t_expand = time.monotonic() - t1
            time.sleep(1.0)
        finally:
            stop.set()
            writer.join(180)
        assert not failed, failed[:5]
        assert after_shrink.leader == leader and len(after_shrink.isr) == 2, after_shrink
        assert n_paused > 0, "acks=all writes stopped with two in-sync replicas"
        stalls = [later - earlier for earlier, later in itertools.pairwise(ack_times)]
        _check_exactly_once(c, acked)
        _wait_identical(c)
        print(f"\npaused follower {follower} (leader {leader}): ISR shrink {t_shrink:.2f} s "
              f"after SIGSTOP (replica.lag.time.max.ms 6000), acks=all paused at most "
              f"{max(stalls):.2f} s, {n_paused} acknowledged in 1.5 s with ISR "
              f"{after_shrink.isr}; ISR expansion {t_expand:.2f} s after SIGCONT; "
              f"{len(acked)} acks=all records read back once")
    except BaseException:
        print(c.failure_report())
        raise
    finally:
        c.stop()
