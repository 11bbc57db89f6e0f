"""Produce and consume throughput of a Tidegate broker, beside the disk's own bandwidth.

The load generator is the cheapest available (`--load`, bench/load.py): a small C program
on librdkafka (~1.1 us of CPU per record), Kafka's ProducerPerformance, or confluent-kafka
in this process (~3.3 us), so the load's CPU does not decide the figures on a small
machine; the one that ran is printed, with its CPU per record beside the broker's. 1 KiB
records, produced to its own topic in each of three modes: acks=all,
acks=1 (on one node both are answered once the data is fsynced and below the high
watermark), and acks=1 to a topic with a relaxed flush policy (`flush.messages` > 1:
answered after the write, flushed in the background); `--rounds` rounds of the three
in rotating order, median and range printed. The first acks=all topic is then consumed,
and each mode's round trip is timed with one record per request, each waited for
(where acks=1 pays its fsync). In the same run the disk under the data directory is
measured writing 1 MiB blocks with an fdatasync after each (what the broker must do to
acknowledge a request durably) and with a single fdatasync at the end.

Apache Kafka runs beside it when its jars are there (`make deps-kafka`, `--peer`; see
`bench/peer_kafka.py`): acks=all in each round after Tidegate's modes, with Kafka's
defaults (no fsync) and with `log.flush.interval.messages=1`, then consumed the same way.

Every target is measured in the same run, each alone: before each timed produce (every
Tidegate mode, every Kafka mode) the bench calls sync(2), which returns once every dirty
page is written back (`settle`). Kafka's default fsyncs nothing, so its round leaves
~300 MB dirty; without the sync the kernel writes them back some 30 s later
(`vm.dirty_expire_centisecs`), in whichever round is running then, and that round's
fsyncs share the disk with it. The idle JVMs are left running: stopping them (SIGSTOP)
during the other targets' rounds changed nothing measurable (docs/benchmarks.md).

    .venv/bin/python bench/produce_consume.py [--records 300000] [--partitions 3] [--rounds 3]
        [--peer auto|none|kafka,kafka-fsync] [--load auto|c|java|python] [--quick]
        [--per-round]

`--per-round` measures the fsync-per-MiB reference again before every round (the disk's
speed varies over minutes at length) and prints each round beside it, with the broker's
CPU split user/system, its page faults and the page cache's Dirty/Writeback.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import load as loads
from bench import peer_kafka
from tests.integration.conftest import BrokerProcess

RELAXED_FLUSH_MESSAGES = 10_000


def disk_bandwidth(directory: Path, total_mb: int, sync_each: bool) -> float:
    block = os.urandom(1 << 20)
    path = directory / "disk-bench.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(total_mb):
            os.write(fd, block)
            if sync_each:
                os.fdatasync(fd)
        os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return total_mb / elapsed


def settle() -> None:
    """Write back every dirty page before a timed round (Linux's sync(2) waits for the
    writeback), so no target's round pays for the page cache an earlier one left dirty
    (module docstring). Not timed."""
    os.sync()


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) from /proc/<pid>/stat."""
    user, system, _minflt, _majflt = process_counters(pid)
    return user + system


def process_counters(pid: int) -> tuple[float, float, int, int]:
    """(user s, system s, minor faults, major faults) of a process from /proc/<pid>/stat:
    at length a slow round shows whether the broker paid in page faults (fresh buffers,
    mmap growth) or in kernel time (writeback throttling) rather than in Python."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    # after the ")" proc(5)'s field n is at n - 3: minflt (10), majflt (12), utime (14),
    # stime (15)
    return int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7]), int(fields[9])


def page_cache_mb() -> tuple[int, int]:
    """(Dirty, Writeback) of /proc/meminfo in MB: the page cache a round leaves for the
    kernel to write back, which throttles writers (balance_dirty_pages) above its limit."""
    got = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Dirty", "Writeback"):
            got[key] = int(rest.split()[0]) // 1024
    return got.get("Dirty", 0), got.get("Writeback", 0)


def produce(bootstrap: str, topic: str, n: int, size: int, acks: str,
            load: str = "python", partitions: int = 1) -> loads.LoadResult:
    """MB/s and the load's CPU of producing `n` records (bench/load.py)."""
    return loads.run(load, bootstrap, topic, n, size, acks, partitions)


def consume(bootstrap: str, topic: str, n: int, size: int, partitions: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 10485760,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    while got < n:
        msgs = c.consume(10000, 5.0)
        if not msgs:
            break
        got += len(msgs)
    elapsed = time.perf_counter() - start
    c.close()
    if got < n:
        raise SystemExit(f"consumed only {got} of {n}")
    return n * size / elapsed / 1e6


# (label, acks, topic config): the produce modes compared in one run
MODES: list[tuple[str, str, dict[str, str]]] = [
    ("acks=all, fsynced", "all", {}),
    ("acks=1", "1", {}),
    (
        f"acks=1, flush.messages={RELAXED_FLUSH_MESSAGES}",
        "1",
        {"flush.messages": str(RELAXED_FLUSH_MESSAGES)},
    ),
]


def round_trip_ms(bootstrap: str, topic: str, acks: str, n: int) -> list[float]:
    """One 1 KiB record per request, each waited for: what a caller that needs the
    answer before going on sees (and what acks=1 now pays, an fsync)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})
    payload = os.urandom(1024)
    p.produce(topic, payload, partition=0)  # connect and fetch metadata first
    p.flush(30)
    out = []
    for _ in range(n):
        start = time.perf_counter()
        p.produce(topic, payload, partition=0)
        if p.flush(30):
            raise SystemExit("round trip: not delivered")
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--disk-mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the produce modes")
    ap.add_argument("--round-trips", type=int, default=500)
    ap.add_argument("--quick", action="store_true", help="20,000 records, 1 round, 64 MB disk")
    ap.add_argument("--per-round", action="store_true",
                    help="print each round: the disk's fsync-per-MiB reference measured just "
                         "before it, and the broker's CPU split, page faults and dirty pages")
    ap.add_argument("--load", default="auto", choices=("auto", *loads.LOADS),
                    help="the load generator (bench/load.py); auto: the cheapest available")
    peer_kafka.add_peer_option(ap)
    args = ap.parse_args()
    load, load_notes = loads.choose(args.load)
    if args.quick:
        args.records, args.rounds, args.disk_mb, args.round_trips = 20_000, 1, 64, 50
    peers, why_not = peer_kafka.wanted(args.peer)
    kafka_rates: dict[str, list[float]] = {m: [] for m in peers}
    kafka_cpu: dict[str, list[float]] = {m: [] for m in peers}  # broker CPU us per record
    kafka_load: dict[str, list[float]] = {m: [] for m in peers}  # load CPU us per record
    kafka_cons: dict[str, float] = {}

    from confluent_kafka.admin import AdminClient, NewTopic

    rates: dict[str, list[float]] = {label: [] for label, _a, _c in MODES}
    cpu: dict[str, list[float]] = {label: [] for label, _a, _c in MODES}  # broker us/record
    load_cpu: dict[str, list[float]] = {label: [] for label, _a, _c in MODES}  # load us/record
    trips: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        disk_sync = disk_bandwidth(data, args.disk_mb, sync_each=True)
        disk_raw = disk_bandwidth(data, args.disk_mb, sync_each=False)
        kafkas = peer_kafka.start(Path(tmp), peers)  # before Tidegate; not timed
        broker = BrokerProcess(data)
        broker.start()
        try:
            for kafka in kafkas.values():
                kafka_admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
                for fut in kafka_admin.create_topics(
                        [NewTopic(f"bench-{r}", args.partitions, 1) for r in range(args.rounds)]
                        + [NewTopic("warmup", args.partitions, 1)]).values():
                    fut.result(30)
                # untimed: the JVM compiles its hot paths while it serves the first requests
                produce(kafka.bootstrap, "warmup", max(args.records // 2, 20_000), args.size, "all",
                        load, args.partitions)
            b = broker.bootstrap
            admin = AdminClient({"bootstrap.servers": b})
            topics = [
                NewTopic(f"bench-{m}-{r}", args.partitions, 1, config=MODES[m][2])
                for r in range(args.rounds)
                for m in range(len(MODES))
            ]
            for fut in admin.create_topics([*topics, NewTopic("warmup", args.partitions, 1)]
                                           ).values():
                fut.result(30)
            # untimed, as Kafka's: the broker's first requests pay imports and allocations
            produce(b, "warmup", 20_000, args.size, "all", load, args.partitions)
            for r in range(args.rounds):
                for k in range(len(MODES)):  # rotate the order: no mode always goes first
                    m = (r + k) % len(MODES)
                    label, acks, _config = MODES[m]
                    topic = f"bench-{m}-{r}"
                    pid = broker.proc.pid if broker.proc is not None else 0
                    ref = None
                    if args.per_round:  # the disk beside this round, not only at the start
                        settle()
                        ref = disk_bandwidth(data, args.disk_mb, sync_each=True)
                    settle()
                    before = process_counters(pid)
                    res = produce(b, topic, args.records, args.size, acks, load, args.partitions)
                    after = process_counters(pid)
                    dirty, writeback = page_cache_mb()
                    user, system, minflt, majflt = (x - y for x, y in zip(after, before,
                                                                          strict=True))
                    rates[label].append(res.mb_s)
                    cpu[label].append((user + system) / args.records * 1e6)
                    load_cpu[label].append(res.load_cpu_s / args.records * 1e6)
                    if ref is not None:
                        print(f"round {r} {label}: {res.mb_s:.0f} MB/s, disk {ref:.0f} MB/s "
                              f"({res.mb_s / ref:.2f} x); broker us/record user "
                              f"{user / args.records * 1e6:.2f} sys "
                              f"{system / args.records * 1e6:.2f}; faults minor {minflt:.0f} "
                              f"major {majflt:.0f}; after: Dirty {dirty} MB Writeback "
                              f"{writeback} MB", flush=True)
                for k in range(len(kafkas)):  # then Kafka, acks=all, its modes rotated too
                    mode = list(kafkas)[(r + k) % len(kafkas)]
                    settle()
                    before = kafkas[mode].cpu_seconds()
                    res = produce(kafkas[mode].bootstrap, f"bench-{r}", args.records, args.size,
                                  "all", load, args.partitions)
                    kafka_rates[mode].append(res.mb_s)
                    kafka_load[mode].append(res.load_cpu_s / args.records * 1e6)
                    kafka_cpu[mode].append((kafkas[mode].cpu_seconds() - before)
                                           / args.records * 1e6)
            cons = consume(b, "bench-0-0", args.records, args.size, args.partitions)
            for mode, kafka in kafkas.items():
                kafka_cons[mode] = consume(kafka.bootstrap, "bench-0", args.records, args.size,
                                           args.partitions)
            for m, (label, acks, _config) in enumerate(MODES):
                trips[label] = round_trip_ms(b, f"bench-{m}-0", acks, args.round_trips)
        finally:
            broker.stop()
            peer_kafka.stop_all(kafkas)
    mb = args.records * args.size / 1e6
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, {platform.python_version()}")
    print(
        f"workload: {args.records} records x {args.size} B = {mb:.0f} MB, "
        f"{args.partitions} partitions, {load} load generator, "
        f"{args.rounds} rounds per produce mode in rotating order (median, min-max)"
    )
    for note in load_notes:
        print(f"note: {note}")
    print(f"{'measurement':<48}{'MB/s':>10}{'vs disk':>10}   range   CPU us/record: broker, load")
    print(f"{'disk: 1 MiB writes + fdatasync each':<48}{disk_sync:>10.1f}{1.0:>10.2f}")
    print(
        f"{'disk: 1 MiB writes, one fdatasync':<48}{disk_raw:>10.1f}{disk_raw / disk_sync:>10.2f}"
    )
    medians = {}
    for label, values in rates.items():
        med = medians[label] = statistics.median(values)
        print(
            f"{'tidegate produce (' + label + ')':<48}{med:>10.1f}{med / disk_sync:>10.2f}"
            f"   {min(values):.0f}-{max(values):.0f}"
            f"   {statistics.median(cpu[label]):.2f}, {statistics.median(load_cpu[label]):.2f}"
        )
    print(f"{'tidegate consume':<48}{cons:>10.1f}{cons / disk_sync:>10.2f}")
    for mode, values in kafka_rates.items():
        name, med = peer_kafka.MODES[mode][0], statistics.median(values)
        print(f"{name + ' produce (acks=all)':<48}{med:>10.1f}{med / disk_sync:>10.2f}"
              f"   {min(values):.0f}-{max(values):.0f}   {statistics.median(kafka_cpu[mode]):.2f}"
              f", {statistics.median(kafka_load[mode]):.2f}")
    for mode, rate in kafka_cons.items():
        print(f"{peer_kafka.MODES[mode][0] + ' consume':<48}{rate:>10.1f}{rate / disk_sync:>10.2f}")
    if why_not is not None:
        print(f"note: {why_not}")
    elif peers:
        print(peer_kafka.describe(peers))
    all_rate, one_rate = medians[MODES[0][0]], medians[MODES[1][0]]
    ratio = one_rate / all_rate
    print(f"consume/produce ratio: {cons / all_rate:.2f}; acks=1 / acks=all: {ratio:.2f}")
    print(f"round trip, one 1 KiB record per request ({args.round_trips} each), ms:")
    for label, values in trips.items():
        q = statistics.quantiles(values, n=100)
        print(f"  {label:<46}median {statistics.median(values):6.2f}   p99 {q[98]:6.2f}")


if __name__ == "__main__":
    main()
