"""Produce cost per record as the partitions of one request grow, with the C load, beside
Apache Kafka on the same load.

Each Tidegate point is a fresh broker (default settings: every acknowledged write
fsynced, or `--nofsync`: topics with flush.messages=1000000) and one topic of N
partitions; `bench/load.py`'s c load sends `--records` x `--size` B records, acks=all,
linger 5 ms, `--chunk` records to one partition before the next (1: one record per
partition in turn, so every request carries one small batch per partition, the
per-batch cost that made throughput fall at 1,000 partitions). Printed per point: MB/s,
the broker's CPU per record (its /proc stat utime + stime before and after) and the
load's, and each target's MB/s and broker CPU as a ratio of its own figure at the
fewest partitions (1.00 everywhere would be the flat cost the issue aims at).
`--load java` uses Kafka's Java producer instead (ProducerPerformance with the
RoundRobinPartitioner: one record per partition in turn): librdkafka sends one partition
per Produce request (so with the c load the cost that grows with partitions is the cost
per request), the Java client puts every partition's batch for a broker into one request,
so there the cost per partition in a request shows; the JVM's load costs far more CPU
per record than the c load, so read its broker CPU per record, not its MB/s. `--load go`
(bench/load_go/, franz-go) packs partitions into requests as the Java client does (at
most 1 MiB a request, 5 in flight, its defaults) at about the c load's CPU per record:
the per-partition curve at full rate.
After the rounds the bench measures the disk's own floor for each point: 1 MiB spread
over N files and made durable the way a flush round of N partitions does it (syncfs from
8 files on, else an fdatasync per file), beside one file: the per-file layout's cost that
no broker with a file per partition (Kafka's layout too) escapes when every write is
fsynced.
`--tree DIR` (repeatable) runs the same points against other source trees too (a
`git worktree` of an older commit with its C extension built), for before/after figures
in one run.

Apache Kafka runs beside it when its jars are there (`make deps-kafka`; `--peer`, see
`bench/peer_kafka.py`): Kafka's default (no fsync) and `log.flush.interval.messages=1`
(each appended batch flushed before the answer, as Tidegate's default), one JVM per mode
started once for the whole run and warmed up untimed (its JIT), then for each point a
fresh topic of N partitions, the same warm-up and the same timed C load as Tidegate's,
the JVM's CPU read from its /proc stat the same way; the point's topics are deleted
after it (untimed). Every target (each tree, each Kafka mode) runs each point once per
round, the order rotated round by round. Before each timed load the bench calls sync(2)
(untimed), so no target pays for the page cache an earlier one left dirty (Kafka's
default writes back nothing itself).

    .venv/bin/python bench/load_sweep.py [--partitions 1,100,1000] [--records 60000]
        [--chunk 1] [--rounds 3] [--nofsync] [--load c|go|java] [--tree /tmp/before]
        [--peer auto|none|kafka,kafka-fsync]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import load as loads  # noqa: E402
from bench import peer_kafka  # noqa: E402
from bench._topics import create_topics, delete_topics  # noqa: E402

# one point in a child process, so that each tree's own tests/integration/conftest.py
# starts its own broker (its src/ on PYTHONPATH)
POINT = r"""
import json, os, subprocess, sys, tempfile
from pathlib import Path
tree, partitions, records, size, chunk, nofsync, binary = sys.argv[1:8]
sys.path.insert(0, tree)
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess

def cpu(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

p = int(partitions)
config = {"flush.messages": "1000000"} if nofsync == "1" else {}
with tempfile.TemporaryDirectory() as tmp:
    broker = BrokerProcess(Path(tmp))
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for fut in admin.create_topics([NewTopic(t, p, 1, config=config)
                                        for t in ("warmup", "t")]).values():
            fut.result(300)
        def run(topic, n):
            if binary.startswith("java:"):  # the running bench's bench/load.py
                sys.path.insert(0, binary[len("java:"):])
                from bench import load as loads
                r = loads.run_java_round_robin(broker.bootstrap, topic, n, int(size), "all", p)
                return {"bytes": r.mb_s * 1e6, "seconds": 1.0, "cpu_seconds": r.load_cpu_s}
            out = subprocess.run([binary, broker.bootstrap, topic, str(n), size, "all",
                                  str(p), "5", chunk], capture_output=True, text=True, check=True)
            return json.loads(out.stdout.strip().splitlines()[-1])
        run("warmup", min(int(records), 20000))
        os.sync()  # untimed: no dirty pages of an earlier target written back in this run
        c0 = cpu(broker.proc.pid)
        rep = run("t", int(records))
        c1 = cpu(broker.proc.pid)
        n = int(records)
        print(json.dumps({"mb_s": rep["bytes"] / rep["seconds"] / 1e6,
                          "broker_us": (c1 - c0) / n * 1e6,
                          "load_us": rep["cpu_seconds"] / n * 1e6}))
    finally:
        broker.stop()
"""


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) from /proc/<pid>/stat, as POINT's."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def c_load(bootstrap: str, topic: str, n: int, args: argparse.Namespace,
           partitions: int) -> dict[str, float]:
    """The load's report (bytes, seconds, cpu_seconds) with POINT's exact arguments."""
    if args.load == "java":
        r = loads.run_java_round_robin(bootstrap, topic, n, args.size, "all", partitions)
        return {"bytes": r.mb_s * 1e6, "seconds": 1.0, "cpu_seconds": r.load_cpu_s}
    binary = loads.GO_BINARY if args.load == "go" else loads.C_BINARY
    command = [str(binary), bootstrap, topic, str(n), str(args.size), "all",
               str(partitions), "5", str(args.chunk)]
    attempt = 0
    while True:
        attempt += 1
        out = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if out.returncode == 0:
            report: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
            return report
        why = out.stderr.strip()[-300:]
        # Only the untimed first record is tried again: a topic created a moment ago can
        # still be unknown to the first Metadata (a KRaft peer still deleting the last
        # point's 1,000 partitions publishes the new topic late). A failure once the
        # timed load runs is the point's result, not retried.
        if "first record" not in why or attempt == 6:
            raise SystemExit(f"the load on {topic} failed: {why}")
        print(f"  ... the load's first record failed (attempt {attempt}), again in 5 s: "
              f"{why}", flush=True)
        time.sleep(5)


def kafka_pid(kafka: peer_kafka.KafkaBroker) -> int:
    pid = kafka.proc.pid if kafka.proc is not None else kafka.shared_pid
    assert pid is not None, "a started or shared Kafka peer"
    return pid


def kafka_warm(kafka: peer_kafka.KafkaBroker, args: argparse.Namespace) -> None:
    """Untimed, once per JVM: it compiles its hot paths while serving the first requests."""
    create_topics(kafka.bootstrap, ["jit"], 1)
    c_load(kafka.bootstrap, "jit", max(args.records // 2, 20_000), args, 1)
    delete_topics(kafka.bootstrap, ["jit"])


def kafka_point(kafka: peer_kafka.KafkaBroker, p: int, r: int,
                args: argparse.Namespace) -> dict[str, float]:
    """One point on a running Kafka: fresh topics, POINT's warm-up and timed load."""
    names = [f"warmup-{p}-{r}", f"t-{p}-{r}"]
    create_topics(kafka.bootstrap, names, p)
    try:
        c_load(kafka.bootstrap, names[0], min(args.records, 20_000), args, p)
        os.sync()
        pid = kafka_pid(kafka)
        c0 = process_cpu_seconds(pid)
        rep = c_load(kafka.bootstrap, names[1], args.records, args, p)
        c1 = process_cpu_seconds(pid)
    finally:
        delete_topics(kafka.bootstrap, names)  # untimed; keeps the JVM's files and disk flat
    n = args.records
    return {"mb_s": rep["bytes"] / rep["seconds"] / 1e6, "broker_us": (c1 - c0) / n * 1e6,
            "load_us": rep["cpu_seconds"] / n * 1e6}


def tree_point(tree: str, p: int, args: argparse.Namespace) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", POINT, tree, str(p), str(args.records), str(args.size),
         str(args.chunk), "1" if args.nofsync else "0",
         f"java:{ROOT}" if args.load == "java"
         else str(loads.GO_BINARY if args.load == "go" else loads.C_BINARY)],
        capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"{tree}, {p} partitions failed: {out.stderr[-800:]}")
    point: dict[str, float] = json.loads(lines[0])
    return point


def disk_floor(directory: Path, files: int, total: int = 1 << 20, times: int = 15) -> float:
    """Median seconds to make `total` bytes durable when they are spread over `files`
    files (one write to each), as a flush round of that many partitions must: syncfs(2)
    of the file system from 8 files on (Tidegate's `log.flush.syncfs.threshold`), an
    fdatasync per file below. What the per-file layout costs the disk whatever the
    broker does (Kafka's layout too)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    each = b"x" * max(1, total // files)
    folder = directory / f"floor-{files}"
    folder.mkdir(exist_ok=True)
    fds = [os.open(folder / f"{i:05d}.log", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
           for i in range(files)]
    try:
        took = []
        for _ in range(times):
            for fd in fds:
                os.write(fd, each)
            t0 = time.perf_counter()
            if files >= 8 and hasattr(libc, "syncfs"):
                if libc.syncfs(fds[0]) != 0:
                    raise OSError(ctypes.get_errno(), "syncfs failed")
            else:
                for fd in fds:
                    os.fdatasync(fd)
            took.append(time.perf_counter() - t0)
        return statistics.median(took)
    finally:
        for fd in fds:
            os.close(fd)
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()


def print_table(results: dict[tuple[int, str], list[dict[str, float]]], targets: list[str],
                points: list[int]) -> None:
    base = min(points)
    print(f"{'partitions':>10}  {'target':<20}{'MB/s':>22}{f'x{base}p':>7}"
          f"{'broker us/rec':>22}{f'x{base}p':>7}{'load us/rec':>24}")
    for p in sorted(points):
        for name in targets:
            rows = results[(p, name)]

            def med(key: str, who: str = name, at: int = p) -> float:
                return statistics.median(row[key] for row in results[(at, who)])

            def cell(key: str, rows: list[dict[str, float]] = rows) -> str:
                vals = [row[key] for row in rows]
                return f"{statistics.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f})"

            flat_mb = med("mb_s") / med("mb_s", at=base)
            base_cpu = med("broker_us", at=base)
            flat_cpu = f"{med('broker_us') / base_cpu:.2f}" if base_cpu > 0 else "-"
            print(f"{p:>10}  {name:<20}{cell('mb_s'):>22}{flat_mb:>7.2f}"
                  f"{cell('broker_us'):>22}{flat_cpu:>7}{cell('load_us'):>24}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--partitions", default="1,100,1000")
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=1, help="records per partition in turn")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nofsync", action="store_true",
                    help="Tidegate's topics with flush.messages=1e6 (Kafka's modes unchanged)")
    ap.add_argument("--tree", action="append", default=[], help="another source tree")
    ap.add_argument("--load", choices=("c", "go", "java"), default="c",
                    help="c: librdkafka, one partition per Produce request; go: franz-go, "
                    "every partition's batch in requests of up to 1 MiB per broker; java: "
                    "Kafka's Java producer, records to partitions in turn, every partition's "
                    "batch in one request per broker (--chunk does not apply)")
    peer_kafka.add_peer_option(ap)
    args = ap.parse_args()
    why = loads.unavailable(args.load)
    if why is not None:
        raise SystemExit(f"the {args.load} load is needed: {why}")
    modes, why_not = peer_kafka.wanted(args.peer)
    trees = {"this tree": str(ROOT), **{t: t for t in args.tree}}
    labels = {m: peer_kafka.MODES[m][0] for m in modes}
    targets = [*trees, *labels.values()]
    points = [int(p) for p in args.partitions.split(",")]
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="tidegate-load-sweep-",
                                     dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        kafkas = peer_kafka.start(Path(tmp), modes)  # once for the run; not timed
        try:
            for kafka in kafkas.values():
                kafka_warm(kafka, args)
            by_label = {labels[m]: k for m, k in kafkas.items()}
            for r in range(args.rounds):
                for p in points:
                    # rotated round by round: no target always runs first or last
                    k = r % len(targets)
                    for name in targets[k:] + targets[:k]:
                        print(f"  ... round {r + 1}, {p} partitions, {name}",
                              file=sys.stderr, flush=True)
                        point = (kafka_point(by_label[name], p, r, args) if name in by_label
                                 else tree_point(trees[name], p, args))
                        results.setdefault((p, name), []).append(point)
            floors = {p: disk_floor(Path(tmp), p) for p in {1, *points}}
        finally:
            peer_kafka.stop_all(kafkas)
    how = (f"c load (bench/load.py, librdkafka: one partition per request), {args.chunk} "
           "record(s) per partition in turn" if args.load == "c" else
           f"go load (bench/load_go, franz-go: every partition's batch in requests of up to "
           f"1 MiB, 5 in flight), {args.chunk} record(s) per partition in turn"
           if args.load == "go" else
           "java load (Kafka's ProducerPerformance, RoundRobinPartitioner: one record per "
           "partition in turn, all partitions' batches in one request per broker, 64 KiB batches)")
    print(f"workload: {args.records} records x {args.size} B, {how}, acks=all, linger 5 ms, "
          "Tidegate "
          f"{'without fsync (flush.messages=1000000)' if args.nofsync else 'fsync per write'}"
          f", {args.rounds} rounds, targets rotated (median, min-max); "
          f"xNp: the target's median over its own at {min(points)} partition(s)")
    print_table(results, targets, points)
    print("the disk, same run: 1 MiB written over N files (one write each) and made durable "
          "(syncfs from 8 files on, else an fdatasync per file), median of 15, and as a "
          "multiple of one file's:")
    one = floors[1]
    for p in sorted(points):
        print(f"{p:>10}  files: {floors[p] * 1e3:7.2f} ms {floors[p] / one:7.2f} x")
    if why_not is not None:
        print(f"note: {why_not}")
    elif modes:
        print(peer_kafka.describe(modes) + "; a fresh topic per point")


if __name__ == "__main__":
    main()
