"""What replication costs and how fast leadership moves: a 3-broker cluster beside one broker.

The bench starts its own ZooKeeper (Debian's `zookeeper` package through
`tidegate.cli.zk_launch`; `make deps-system` installs it), three cluster brokers
(`python -m tidegate.cli.main serve` with `broker.id`, `zookeeper.connect` under the
chroot /bench and a listener each) and one plain embedded broker (no
`zookeeper.connect`), all on this machine, and measures in one run:

1. Produce: the same confluent-kafka producer settings (acks=all, 1 KiB values,
   linger.ms 5, 1 MB batches, no compression, a bounded client queue) against a topic
   with replication factor 3 (`min.insync.replicas=2`) and one with replication factor
   1 on the cluster, and against the embedded broker; `--rounds` rounds in rotating
   order, medians printed side by side: MB/s, records/s, delivery latency under load
   (produce() to the delivery report), the brokers' CPU time per record, and the round
   trip of one record at a time (each waited for).
2. Consume from offset 0 of each round-1 topic (librdkafka's per-broker statistics say
   which broker served the bytes), and from a follower when the brokers implement
   KIP-392 (`replica.selector.class`); if they do not, the row says "not available".
3. Failover: kill -9 of the leader of a 1-partition RF=3 topic, `--kills` times (the
   killed broker restarted and back in the ISR before the next kill): time until a
   surviving broker's Metadata names a new leader, and until an idempotent acks=all
   producer's next record is acknowledged. Failover is bound by
   `zookeeper.session.timeout.ms` (a dead broker's registration lasts that long):
   Kafka's default is 18 s; the bench uses `--session-ms` (4000) and prints it. Every
   acknowledged record of that topic is then read back once.

Every broker setting is Tidegate's default (Kafka's, except that every acknowledged
write is fsynced on each replica: log.flush.interval.messages=1) except
zookeeper.session.timeout.ms and, for KIP-392, `broker.rack` (rack-1..3, one per broker)
and `replica.selector.class`. Everything shares this machine's cores and one disk, so
RF=3 here pays three replicas' CPU and fsyncs on the same hardware, unlike a real cluster.

    .venv/bin/python bench/cluster.py [--records 300000] [--rounds 3] [--kills 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._cluster_launch import (
    Broker,
    admin,
    create_topics,
    fsync_floor_ms,
    launched,
    partitions_of,
    pct,
    progress,
    wait_for,
    zookeeper_missing,
)

PARTITIONS = 3
QUEUE = 20_000  # records a producer may hold unacknowledged: the latency under load bound
# (label, replication factor or None for the embedded broker); the produce rows
MODES: list[tuple[str, int | None]] = [
    ("embedded broker", None),
    ("cluster RF=1", 1),
    ("cluster RF=3, min.insync.replicas=2", 3),
]


# -- load --------------------------------------------------------------------------------


@dataclass
class Produced:
    seconds: float
    latencies_ms: list[float]
    broker_cpu: float


def produce(bootstrap: str, topic: str, n: int, size: int, brokers: list[Broker]) -> Produced:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "batch.size": 1_000_000, "compression.type": "none",
                  "enable.idempotence": False, "queue.buffering.max.messages": QUEUE,
                  "queue.buffering.max.kbytes": 1_048_576})
    payload = os.urandom(size)
    sent = [0.0] * n
    lat: list[float] = []
    failures: list[object] = []

    def cb(err: object, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            lat.append((time.perf_counter() - sent[int(msg.key())]) * 1000)

    p.list_topics(topic, timeout=10)  # connected and metadata known before the clock
    cpu0 = sum(b.cpu_seconds() for b in brokers)
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                sent[i] = time.perf_counter()
                p.produce(topic, payload, str(i).encode(), on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300):
        raise SystemExit(f"{topic}: flush timed out")
    elapsed = time.perf_counter() - start
    cpu = sum(b.cpu_seconds() for b in brokers) - cpu0
    if failures:
        raise SystemExit(f"{topic}: {len(failures)} deliveries failed, e.g. {failures[0]}")
    return Produced(elapsed, lat, cpu)


def round_trips_ms(bootstrap: str, topic: str, n: int) -> list[float]:
    """One 1 KiB record per request, each waited for (acks=all, linger 0)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    payload = os.urandom(1024)
    p.produce(topic, payload, partition=0)  # connect and fetch metadata first
    p.flush(30)
    out = []
    for _ in range(n):
        start = time.perf_counter()
        p.produce(topic, payload, partition=0)
        if p.flush(30):
            raise SystemExit(f"{topic}: round trip not delivered")
        out.append((time.perf_counter() - start) * 1000)
    return out


@dataclass
class Consumed:
    seconds: float
    rx_by_node: dict[int, int] = field(default_factory=dict)  # librdkafka's rxbytes


def consume(bootstrap: str, topic: str, n: int, partitions: list[int],
            extra: dict[str, str] | None = None) -> Consumed:
    from confluent_kafka import Consumer, TopicPartition

    stats: list[str] = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-cluster",
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                  "max.partition.fetch.bytes": 10485760, "statistics.interval.ms": 200,
                  "stats_cb": stats.append, **(extra or {})})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    got = 0
    start = time.perf_counter()
    while got < n:
        # ask for no more than is left: consume() waits out its timeout for a full batch
        msgs = c.consume(min(10000, n - got), 10.0)
        if not msgs:
            break
        for m in msgs:
            if m.error() is not None:
                raise SystemExit(f"{topic}: consume error {m.error()}")
        got += len(msgs)
    elapsed = time.perf_counter() - start
    until = time.monotonic() + 0.5  # one more statistics report, after the last fetch
    while time.monotonic() < until:
        c.poll(0.05)
    c.close()
    if got != n:
        raise SystemExit(f"{topic}: consumed {got} records, {n} expected")
    rx: dict[int, int] = {}
    if stats:
        for b in json.loads(stats[-1])["brokers"].values():
            if b["nodeid"] >= 0:
                rx[b["nodeid"]] = rx.get(b["nodeid"], 0) + b["rxbytes"]
    return Consumed(elapsed, rx)


def follower_fetch_missing() -> str | None:
    """None when the brokers implement KIP-392, else why the follower row is empty."""
    from tidegate.common.config import BROKER_KEYS

    if "replica.selector.class" in BROKER_KEYS:
        return None
    return "not available (no replica.selector.class: KIP-392 is not implemented)"


# -- failover ----------------------------------------------------------------------------

FAILOVER_TOPIC = "failover"


@dataclass
class Kill:
    broker: int
    was_controller: bool
    new_leader: int
    metadata_s: float  # kill -> a survivor's Metadata names another leader
    ack_s: float  # kill -> the next acks=all record is acknowledged
    rejoin_s: float  # restart -> the broker is back in the ISR


def failover(cluster: dict[int, Broker], kills: int) -> tuple[list[Kill], list[int]]:
    """Kill the partition's leader with SIGKILL `kills` times; returns the kills and the
    values acknowledged to the producer (for the read-back check)."""
    from confluent_kafka import Producer

    everyone = list(cluster.values())
    bootstrap = ",".join(b.bootstrap for b in everyone)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0,
                         "message.timeout.ms": 120_000, "log_level": 0})
    acked: list[int] = []
    errors: list[object] = []
    seq = [0]

    def send_one() -> float:
        """Produce the next value and wait for its delivery report; its time."""
        done: list[float] = []

        def cb(err: object, msg: Any) -> None:
            done.append(time.perf_counter())
            if err is not None:
                errors.append(err)
            else:
                acked.append(int(msg.value()))

        producer.produce(FAILOVER_TOPIC, str(seq[0]).encode(), partition=0, on_delivery=cb)
        seq[0] += 1
        while not done:
            producer.poll(0.005)
        if errors:
            raise SystemExit(f"acks=all record failed: {errors[0]}\n" + "\n".join(
                f"--- {b.name}\n{b.tail()}" for b in everyone))
        return done[0]

    for _ in range(20):  # connected, producer id assigned
        send_one()
    views = {bid: admin(b.bootstrap) for bid, b in cluster.items()}
    out: list[Kill] = []
    for _ in range(kills):
        md = views[1].list_topics(FAILOVER_TOPIC, timeout=5)  # all three are up here
        leader = md.topics[FAILOVER_TOPIC].partitions[0].leader
        was_controller = md.controller_id == leader
        survivor = views[min(bid for bid in cluster if bid != leader)]
        seen: list[tuple[float, int]] = []
        start = time.perf_counter()
        cluster[leader].kill()

        def watch(old: int = leader, view: Any = survivor, t0: float = start,
                  seen: list[tuple[float, int]] = seen) -> None:
            while time.perf_counter() - t0 < 120:
                try:
                    now = partitions_of(view, FAILOVER_TOPIC)[0].leader
                except Exception:  # the survivor's client notices the dead broker
                    now = -1
                if now not in (old, -1):
                    seen.append((time.perf_counter(), now))
                    return
                time.sleep(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        acked_at = send_one()
        watcher.join()
        if not seen:
            raise SystemExit(f"no new leader after killing broker {leader} in 120 s")
        cluster[leader].start()
        cluster[leader].wait_ready()
        restarted = time.perf_counter()
        wait_for(f"broker {leader} back in the ISR", lambda v=survivor: len(
            partitions_of(v, FAILOVER_TOPIC)[0].isrs) == 3, 120, everyone)
        out.append(Kill(leader, was_controller, seen[0][1], seen[0][0] - start,
                        acked_at - start, time.perf_counter() - restarted))
        progress(f"kill {len(out)}: {out[-1]}")
        for _ in range(5):
            send_one()
    producer.flush(30)
    return out, acked


def read_back(bootstrap: str, acked: list[int]) -> str:
    """Every acknowledged value of the failover topic exactly once, nothing else."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-cluster-check",
                  "enable.auto.commit": False})
    tp = TopicPartition(FAILOVER_TOPIC, 0, 0)
    _low, high = c.get_watermark_offsets(tp, timeout=10)
    c.assign([tp])
    values: list[int] = []
    deadline = time.monotonic() + 60
    while len(values) < high and time.monotonic() < deadline:
        for m in c.consume(min(1000, max(high - len(values), 1)), 1.0):
            if m.error() is not None:
                raise SystemExit(f"{FAILOVER_TOPIC}: consume error {m.error()}")
            values.append(int(m.value() or b"-1"))
    c.close()
    if sorted(values) != sorted(acked) or len(set(values)) != len(values):
        lost = set(acked) - set(values)
        raise SystemExit(f"read-back mismatch: {len(acked)} acknowledged, {len(values)} read "
                         f"(high watermark {high}), lost {sorted(lost)[:20]}")
    return f"{len(acked)} acknowledged, {len(values)} read back, each once"


# -- run and report ------------------------------------------------------------------------


@dataclass
class Results:
    produced: dict[str, list[Produced]]
    trips: dict[str, list[float]] = field(default_factory=dict)
    consumed: dict[str, tuple[int, Consumed] | str] = field(default_factory=dict)
    kills: list[Kill] = field(default_factory=list)
    check: str = ""
    notes: list[str] = field(default_factory=list)
    floor: tuple[float, float] = (0.0, 0.0)
    load: tuple[float, float] = (0.0, 0.0)
    client: str = ""


def consume_rows(args: argparse.Namespace, res: Results, cluster: dict[int, Broker],
                 embedded: Broker, missing: str | None) -> None:
    bootstrap = ",".join(b.bootstrap for b in cluster.values())
    all_parts = list(range(PARTITIONS))
    for m, (label, rf) in enumerate(MODES):
        where = embedded.bootstrap if rf is None else bootstrap
        short = label if rf is None else label.split(",")[0] + ", from leaders"
        res.consumed[short] = (
            args.records, consume(where, f"mode{m}-0", args.records, all_parts))
    follower_label = "cluster RF=3, from a follower (KIP-392)"
    if missing is not None:
        res.consumed[follower_label] = missing
        return
    # partitions not led by broker 1, fetched with broker 1's rack: a follower serves them
    topic = f"mode{len(MODES) - 1}-0"
    parts = partitions_of(admin(bootstrap), topic)
    theirs = [p for p, meta in parts.items() if meta.leader != 1]
    counts = record_count(bootstrap, topic, theirs)
    got = consume(bootstrap, topic, counts, theirs, {"client.rack": "rack-1"})
    total = sum(got.rx_by_node.values()) or 1
    if got.rx_by_node.get(1, 0) / total < 0.9:  # no number for what was not measured
        res.consumed[follower_label] = "asked for (client.rack) but served by the leaders"
        return
    res.consumed[follower_label] = (counts, got)
    res.notes.append(f"the follower row reads the {len(theirs)} partitions not led by broker 1 "
                     f"({counts} records) with client.rack=rack-1: broker 1 serves them")


def record_count(bootstrap: str, topic: str, partitions: list[int]) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-cluster-count"})
    n = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    c.close()
    return n


def run(args: argparse.Namespace, base: Path, res: Results) -> None:
    from confluent_kafka.admin import NewTopic

    missing = follower_fetch_missing()

    # --quick: the brokers stop together at the end, the controller first, and a broker
    # whose controlled shutdown finds no controller retries after Kafka's 5 s backoff;
    # no figure depends on it (the failover part kills with SIGKILL)
    quick_stop = {"controlled.shutdown.retry.backoff.ms": "200"} if args.quick else {}

    def rack(bid: int) -> dict[str, str]:
        if missing is not None:
            return quick_stop
        return {"broker.rack": f"rack-{bid}", "replica.selector.class":
                "org.apache.kafka.common.replica.RackAwareReplicaSelector", **quick_stop}

    with launched(base, zk_tick_ms=args.zk_tick_ms, session_ms=args.session_ms,
                  overrides=rack) as brokers:
        cluster, embedded = brokers.cluster, brokers.embedded
        assert embedded is not None
        everyone, bootstrap = brokers.everyone, brokers.bootstrap
        specs = [(f"mode{m}-{r}", PARTITIONS, rf) for r in range(args.rounds)
                 for m, (_label, rf) in enumerate(MODES) if rf is not None]
        create_topics(bootstrap, [*specs, (FAILOVER_TOPIC, 1, 3)], everyone)
        single = admin(embedded.bootstrap)  # kept: a collected client fails its futures
        for fut in single.create_topics([NewTopic(f"mode0-{r}", PARTITIONS, 1)
                                    for r in range(args.rounds)]).values():
            fut.result(30)
        # A follower's first fetch can beat its leader's election and then waits
        # replica.fetch.backoff.ms (1 s, as in Kafka): let that pass before the clock.
        time.sleep(2)
        for r in range(args.rounds):
            for k in range(len(MODES)):  # rotate the order: no mode always goes first
                m = (r + k) % len(MODES)
                label, rf = MODES[m]
                progress(f"round {r + 1}/{args.rounds}: produce, {label}")
                where, procs = ((embedded.bootstrap, [embedded]) if rf is None
                                else (bootstrap, list(cluster.values())))
                res.produced[label].append(
                    produce(where, f"mode{m}-{r}", args.records, args.size, procs))
        progress("consume")
        consume_rows(args, res, cluster, embedded, missing)
        progress("one record at a time")
        for m, (label, rf) in enumerate(MODES):
            where = embedded.bootstrap if rf is None else bootstrap
            res.trips[label] = round_trips_ms(where, f"mode{m}-0", args.round_trips)
        progress(f"failover: {args.kills} kills")
        res.kills, acked = failover(cluster, args.kills)
        res.check = read_back(bootstrap, acked)


def report(args: argparse.Namespace, res: Results) -> None:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB, "
          f"Python {platform.python_version()}, {res.client}; load average "
          f"{res.load[0]:.2f} at start, {res.load[1]:.2f} at end")
    print(f"disk floor: 4 KiB write + fdatasync in the data dir, {args.fsyncs} times: "
          f"median {res.floor[0]:.2f} ms, p99 {res.floor[1]:.2f} ms")
    print(f"setup: ZooKeeper (tickTime {args.zk_tick_ms} ms) + 3 cluster brokers + 1 embedded "
          "broker, all on this machine's cores and one disk, beside the load generator (one "
          "confluent-kafka client at a time, in this process); broker settings: Tidegate's "
          f"defaults (every acknowledged write fsynced on each replica), "
          f"zookeeper.session.timeout.ms={args.session_ms} (Kafka's default: 18000)"
          + ("" if follower_fetch_missing() else ", broker.rack=rack-<id> and "
             "replica.selector.class=RackAwareReplicaSelector on the cluster brokers"))
    mb = args.records * args.size / 1e6
    print(f"\n1. produce: {args.records} records x {args.size} B = {mb:.0f} MB per round, "
          f"{PARTITIONS} partitions, acks=all, linger.ms 5, batch.size 1 MB, no compression, "
          f"at most {QUEUE} records queued in the client; {args.rounds} rounds in rotating "
          "order, median (min-max)")
    print(f"{'':<40}{'MB/s':>18}{'records/s':>11}{'p50 ms':>9}{'p99 ms':>9}{'CPU us/rec':>12}"
          f"{'1-by-1 p50':>12}{'p99 ms':>8}")
    med: dict[str, float] = {}
    for label, runs in res.produced.items():
        rates = [args.records * args.size / r.seconds / 1e6 for r in runs]
        med[label] = statistics.median(rates)
        lat = [statistics.median(r.latencies_ms) for r in runs]
        p99 = [pct(r.latencies_ms, 99) for r in runs]
        cpu = [r.broker_cpu / args.records * 1e6 for r in runs]
        trips = res.trips[label]
        span = f"{med[label]:.1f} ({min(rates):.0f}-{max(rates):.0f})"
        print(f"{label:<40}{span:>18}{med[label] * 1e6 / args.size:>11,.0f}"
              f"{statistics.median(lat):>9.1f}{statistics.median(p99):>9.1f}"
              f"{statistics.median(cpu):>12.1f}{statistics.median(trips):>12.2f}"
              f"{pct(trips, 99):>8.2f}")
    rf3, rf1, one = (med[label] for label, _rf in reversed(MODES))
    print(f"RF=3 / RF=1: {rf3 / rf1:.2f}; RF=3 / embedded: {rf3 / one:.2f}; "
          f"RF=1 / embedded: {rf1 / one:.2f}")
    print(f"\n2. consume from offset 0 (the round-1 topics), {PARTITIONS} partitions")
    print(f"{'':<40}{'MB/s':>10}{'records/s':>11}   served by (share of bytes received)")
    for label, got in res.consumed.items():
        if isinstance(got, str):
            print(f"{label:<40}{got}")
            continue
        n, c = got
        total = sum(c.rx_by_node.values()) or 1
        shares = ", ".join(f"{node}: {rx * 100 / total:.0f} %"
                           for node, rx in sorted(c.rx_by_node.items()))
        print(f"{label:<40}{n * args.size / c.seconds / 1e6:>10.1f}{n / c.seconds:>11,.0f}"
              f"   {shares}")
    for note in res.notes:
        print(f"  ({note})")
    print(f"\n3. failover: kill -9 of the leader of a 1-partition RF=3 topic "
          f"(min.insync.replicas=2), {len(res.kills)} kills, the broker restarted and back in "
          f"the ISR before the next; zookeeper.session.timeout.ms={args.session_ms}")
    for i, k in enumerate(res.kills, 1):
        role = "leader and controller" if k.was_controller else "leader"
        print(f"  kill {i}: broker {k.broker} ({role}): new leader {k.new_leader} in a "
              f"survivor's metadata after {k.metadata_s:.2f} s, next acks=all record "
              f"acknowledged after {k.ack_s:.2f} s; back in the ISR {k.rejoin_s:.2f} s "
              "after it listened again")
    for label, values in (("new leader in a survivor's metadata, s",
                           [k.metadata_s for k in res.kills]),
                          ("next acks=all record acknowledged, s",
                           [k.ack_s for k in res.kills]),
                          ("restarted broker back in the ISR, s",
                           [k.rejoin_s for k in res.kills])):
        print(f"  {label:<42}p50 {statistics.median(values):6.2f}   p99 {pct(values, 99):6.2f}"
              f"   max {max(values):6.2f}")
    print(f"  read back: {res.check}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--round-trips", type=int, default=300)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--session-ms", type=int, default=4000,
                    help="zookeeper.session.timeout.ms of the cluster brokers")
    ap.add_argument("--zk-tick-ms", type=int, default=2000, help="ZooKeeper's tickTime")
    ap.add_argument("--fsyncs", type=int, default=200)
    ap.add_argument("--quick", action="store_true",
                    help="tiny counts, one round, one kill: checks the bench runs")
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds, args.round_trips, args.kills, args.fsyncs = 2000, 1, 20, 1, 20
    if (why := zookeeper_missing()) is not None:
        raise SystemExit(why)
    from confluent_kafka import libversion, version

    res = Results({label: [] for label, _rf in MODES})
    v = version()  # a str in some releases, a (str, int) tuple in others
    res.client = (f"confluent-kafka {v if isinstance(v, str) else v[0]} "
                  f"(librdkafka {libversion()[0]})")
    start_load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        res.floor = fsync_floor_ms(Path(tmp), args.fsyncs)
        run(args, Path(tmp), res)
        progress("done")
    res.load = (start_load, os.getloadavg()[0])
    report(args, res)


if __name__ == "__main__":
    main()
