"""Group coordinator benchmarks: rebalance time and `__consumer_offsets` reload time.

1. Join: N confluent-kafka (librdkafka) consumers subscribe to one group over a topic
   of P partitions on a broker subprocess (`group.initial.rebalance.delay.ms=0`, so the
   figure is the protocol's own time); measured from the first subscribe until the
   group is Stable with N members whose assignments cover every partition and every
   consumer has its partitions. The assignment is computed by the client leader, as
   in Kafka's classic protocol: `range` (eager) and `cooperative-sticky` (incremental,
   several rebalances) — librdkafka's assignors, then Tidegate's own consumers and
   assignors (`tidegate.assignors`).
2. Reload: M committed offsets (1000 groups x M/1000 partitions) are written into a
   fresh data directory through the coordinator runtime itself, then (a) the
   coordinator's replay of all `__consumer_offsets` partitions is timed in-process,
   and (b) a broker subprocess is started on that directory and timed until it
   listens (the broker replays the coordinator before it listens) and until an
   OffsetFetch answers.

Apache Kafka runs part 1 with the confluent-kafka consumers beside Tidegate when its jars
are there (`make deps-kafka`, `--peer`; `bench/peer_kafka.py`), with the same
`group.initial.rebalance.delay.ms=0`, each assignor on Tidegate then on Kafka.

    .venv/bin/python bench/groups.py [--consumers 10] [--partitions 900] [--offsets 1000000]
        [--peer auto|none|kafka,kafka-fsync] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peer_kafka
from tests.integration.conftest import BrokerProcess


def bench_join(bootstrap: str, assignor: str, consumers: int, partitions: int) -> float:
    from confluent_kafka import Consumer, ConsumerGroupState
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = f"bench-{assignor}", f"bench-{assignor}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    owned: list[set[int]] = [set() for _ in range(consumers)]

    cooperative = assignor == "cooperative-sticky"

    def listeners(i: int) -> dict[str, object]:
        def on_assign(c: Any, parts: list[Any]) -> None:
            owned[i].update(tp.partition for tp in parts)
            if cooperative:
                c.incremental_assign(parts)

        def on_revoke(c: Any, parts: list[Any]) -> None:
            owned[i].difference_update(tp.partition for tp in parts)
            if cooperative:
                c.incremental_unassign(parts)

        return {"on_assign": on_assign, "on_revoke": on_revoke}

    cs = [Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                    "partition.assignment.strategy": assignor,
                    "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
                    "enable.auto.commit": False}) for _ in range(consumers)]
    start = time.perf_counter()
    for i, c in enumerate(cs):
        c.subscribe([topic], **listeners(i))
    deadline = start + 120
    done = None
    while time.perf_counter() < deadline:
        for c in cs:
            c.poll(0.01)
        if sum(len(o) for o in owned) == partitions and all(owned) and \
                len(set().union(*owned)) == partitions:
            d = admin.describe_consumer_groups([group])[group].result(10)
            parts = [tp.partition for m in d.members for tp in m.assignment.topic_partitions]
            if d.state == ConsumerGroupState.STABLE and len(d.members) == consumers and \
                    sorted(parts) == list(range(partitions)):
                done = time.perf_counter() - start
                break
    for c in cs:
        c.close()
    if done is None:
        raise RuntimeError(f"{assignor}: the group did not become Stable within 120 s")
    return done


def offsets_topic_ready(bootstrap: str) -> None:
    """Untimed, on Kafka: it creates `__consumer_offsets` (50 partitions) when a group's
    coordinator is first looked up, which Tidegate does at start; one consumer joins a
    group of its own until it has its partition."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("warm-up", 1, 1)])["warm-up"].result(60)
    assigned: list[Any] = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "warm-up",
                  "enable.auto.commit": False})
    c.subscribe(["warm-up"], on_assign=lambda _c, parts: assigned.extend(parts))
    deadline = time.monotonic() + 60
    while not assigned and time.monotonic() < deadline:
        c.poll(0.1)
    c.close()


def bench_join_tidegate(bootstrap: str, assignor: str, consumers: int, partitions: int
                        ) -> float:
    """The same with Tidegate's own consumers (and so its own assignors, which run in
    the group leader), each polling in a thread of its own."""
    import threading

    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient, NewTopic

    from tidegate.client import Consumer

    topic, group = f"bench-tg-{assignor}", f"bench-tg-{assignor}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    owned: list[set[int]] = [set() for _ in range(consumers)]
    stop = threading.Event()

    def member(i: int) -> None:
        class Listener:
            def on_partitions_assigned(self, parts: set[tuple[str, int]]) -> None:
                owned[i].update(p for _, p in parts)

            def on_partitions_revoked(self, parts: set[tuple[str, int]]) -> None:
                owned[i].difference_update(p for _, p in parts)

        with Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "partition.assignment.strategy": assignor,
                       "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
                       "enable.auto.commit": False}) as c:
            c.subscribe([topic], Listener())
            while not stop.is_set():
                c.poll(timeout_ms=50)

    threads = [threading.Thread(target=member, args=(i,), daemon=True)
               for i in range(consumers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    done = None
    while time.perf_counter() < start + 120:
        time.sleep(0.01)
        if sum(len(o) for o in owned) == partitions and all(owned) and \
                len(set().union(*owned)) == partitions:
            d = admin.describe_consumer_groups([group])[group].result(10)
            parts = [tp.partition for m in d.members for tp in m.assignment.topic_partitions]
            if d.state == ConsumerGroupState.STABLE and len(d.members) == consumers and \
                    sorted(parts) == list(range(partitions)):
                done = time.perf_counter() - start
                break
    stop.set()
    for t in threads:
        t.join(30)
    if done is None:
        raise RuntimeError(f"tidegate {assignor}: the group did not become Stable in 120 s")
    return done


def write_offsets(data_dir: Path, total: int) -> tuple[float, int]:
    """Commit `total` offsets through the runtime into `data_dir`; (seconds, bytes)."""
    from tidegate.common.config import BrokerConfig
    from tidegate.coordinator.group import offsets
    from tidegate.coordinator.group.messages import CommitPartition, OffsetCommitRequest
    from tidegate.server.broker import Broker
    from tidegate.server.group_coordinator import OFFSETS_TOPIC

    broker = Broker(BrokerConfig({"log.dirs": str(data_dir)}))
    broker.load()
    runtime = broker.group_coordinator.runtime
    broker.create_topic(OFFSETS_TOPIC, runtime.num_partitions,
                        {"cleanup.policy": "compact", "segment.bytes": "104857600"})
    for p in range(runtime.num_partitions):
        lg = broker.get_log(OFFSETS_TOPIC, p)
        assert lg is not None
        shard, _ = runtime.load(p, lg)
        runtime.publish(p, lg, shard)
    per_group = 1000
    start = time.perf_counter()
    for g in range(total // per_group):
        gid = f"bench-group-{g}"
        req = OffsetCommitRequest(gid, -1, "", None, -1, tuple(
            CommitPartition(f"topic-{i // 100}", i % 100, 1000 + i, -1, "")
            for i in range(per_group)))
        runtime.execute(runtime.partition_for(gid),
                        lambda s, now, req=req: offsets.commit(s, req, now))
    elapsed = time.perf_counter() - start
    size = sum(lg.size_bytes for t, _, lg in broker.logs.logs() if t == OFFSETS_TOPIC)
    broker.close()
    return elapsed, size


def time_coordinator_load(data_dir: Path) -> tuple[float, int]:
    from tidegate.common.config import BrokerConfig
    from tidegate.server.broker import Broker
    from tidegate.server.group_coordinator import OFFSETS_TOPIC

    broker = Broker(BrokerConfig({"log.dirs": str(data_dir)}))
    broker.load()
    runtime = broker.group_coordinator.runtime
    start = time.perf_counter()
    records = 0
    for p in range(runtime.num_partitions):
        lg = broker.get_log(OFFSETS_TOPIC, p)
        assert lg is not None
        _shard, stats = runtime.load(p, lg)
        records += stats.records
    elapsed = time.perf_counter() - start
    broker.close()
    return elapsed, records


def time_broker_start(data_dir: Path) -> tuple[float, float]:
    """(seconds until the broker listens, seconds until an OffsetFetch answers)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    b = BrokerProcess(data_dir)
    start = time.perf_counter()
    b.start(timeout=120)
    listening = time.perf_counter() - start
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("bench-group-7")])["bench-group-7"].result(60)
    answered = time.perf_counter() - start
    assert len(res.topic_partitions) == 1000, len(res.topic_partitions)
    b.stop()
    return listening, answered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--consumers", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=900)
    ap.add_argument("--offsets", type=int, default=1_000_000)
    ap.add_argument("--skip-join", action="store_true")
    ap.add_argument("--skip-reload", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="4 consumers, 60 partitions, 20,000 offsets")
    peer_kafka.add_peer_option(ap)
    args = ap.parse_args()
    if args.quick:
        args.consumers, args.partitions, args.offsets = 4, 60, 20_000
    peers, why_not = peer_kafka.wanted(args.peer)
    print(f"# {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    tmp = Path(tempfile.mkdtemp(prefix="tidegate-bench-groups-"))
    try:
        if not args.skip_join:
            no_delay = {"group.initial.rebalance.delay.ms": "0"}
            kafkas = peer_kafka.start(tmp, peers, overrides=no_delay)  # not timed
            for kafka in kafkas.values():
                offsets_topic_ready(kafka.bootstrap)
            b = BrokerProcess(tmp / "join", overrides=no_delay)
            b.start()
            try:
                for client, run in (("confluent-kafka", bench_join),
                                    ("tidegate", bench_join_tidegate)):
                    for assignor in ("range", "cooperative-sticky"):
                        took = run(b.bootstrap, assignor, args.consumers, args.partitions)
                        print(f"join  {args.consumers} {client} consumers, "
                              f"{args.partitions} partitions, {assignor:<18}: Stable with "
                              f"assignments in {took:6.2f} s")
                        for mode, kafka in kafkas.items() if run is bench_join else ():
                            took = run(kafka.bootstrap, assignor, args.consumers,
                                       args.partitions)
                            print(f"      the same on {peer_kafka.MODES[mode][0]:<27}: "
                                  f"Stable with assignments in {took:6.2f} s")
            finally:
                b.stop()
                peer_kafka.stop_all(kafkas)
            print(peer_kafka.describe(peers) if why_not is None else f"note: {why_not}")
        if not args.skip_reload:
            data = tmp / "reload"
            wrote, size = write_offsets(data, args.offsets)
            print(f"write {args.offsets:,} offsets through the runtime: {wrote:6.2f} s "
                  f"({size / 1e6:.0f} MB in __consumer_offsets)")
            loaded, records = time_coordinator_load(data)
            print(f"load  {records:,} records, coordinator replay only: {loaded:6.2f} s "
                  f"({records / loaded:,.0f} records/s)")
            listening, answered = time_broker_start(data)
            print(f"start broker on that directory: listening after {listening:6.2f} s, "
                  f"first OffsetFetch answered after {answered:6.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
