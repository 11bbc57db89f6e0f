"""What transactions cost: produce, commit and read_committed figures, each beside its reference.

confluent-kafka (librdkafka) is the load generator; one broker (`BrokerProcess`, default
settings: every acknowledged write fsynced) serves every part, and each figure is printed
beside the reference measured in the same run, with the aim it is judged against.

1. Transactional vs idempotent produce: one producer, 1 KiB records, acks=all; the
   transactional producer commits every `--commit-ms` (100 ms) and blocks in
   `commit_transaction()` as an application would. Rounds alternate the two modes (so
   drift on a shared machine hits both); best and median rounds and the broker's CPU
   time per record (all its threads, /proc schedstat) are printed. Aim: <= 3 % loss.
2. One-record transactions: `--producers` (8) producers, each in its own process (or
   thread, `--workers threads`), each looping begin / produce one record /
   `commit_transaction()` for `--seconds`, started together. Aggregate commits per
   second (those finished inside the window) and the latency of `commit_transaction()`
   and of the whole transaction. Aim: >= 2,000 commits/s, p50 <= 5 ms. The floor beside
   it: one fsync of this disk (4 KiB write + fdatasync in the broker's data dir,
   median of 200), since a commit is durable only after at least one.
3. read_committed vs read_uncommitted: the transactional topic of part 1 (all committed,
   its COMMIT markers interleaved) consumed from offset 0 by each isolation level, in
   alternating rounds. Aim: read_committed / read_uncommitted >= 0.95.

    .venv/bin/python bench/transactions.py [--records 200000] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.idempotence import broker_cpu_seconds
from tests.integration.conftest import BrokerProcess

PRODUCE_MODES = ("idempotent", "transactional")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def fsync_floor_ms(directory: Path, n: int) -> tuple[float, float]:
    """Median and p99 (ms) of one 4 KiB append + fdatasync in `directory`."""
    block = os.urandom(4096)
    path = directory / "fsync-floor.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    times = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            times.append((time.perf_counter() - start) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times), _pct(times, 99)


def _pct(values: list[float], p: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100)[p - 1]


def produce(bootstrap: str, topic: str, n: int, size: int, txn_id: str | None,
            commit_ms: int, queue: int) -> tuple[float, int]:
    """Records per second from the first produce() to the last acknowledgement (for a
    transactional producer, the last commit), and the number of transactions. At most
    `queue` records wait in the client, so produce() keeps pace with the broker and a
    transaction holds what was sent in `commit_ms` (an unbounded queue would make each
    commit wait for seconds of backlog)."""
    from confluent_kafka import Producer

    conf: dict[str, str | int | bool] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "compression.type": "none",
        "queue.buffering.max.messages": queue,
        "queue.buffering.max.kbytes": 1_048_576,
    }
    if txn_id is not None:
        conf["transactional.id"] = txn_id
    p = Producer(conf)
    payload = os.urandom(size)
    failures: list[object] = []

    def cb(err: object, _m: object) -> None:
        if err is not None:
            failures.append(err)

    def send(i: int) -> None:
        while True:
            try:
                p.produce(topic, payload, str(i).encode(), on_delivery=cb)
                return
            except BufferError:
                p.poll(0.01)

    if txn_id is not None:
        p.init_transactions(30)
    p.list_topics(topic, timeout=10)  # connected, metadata and producer id before the clock
    interval = commit_ms / 1000
    txns = 0
    start = time.perf_counter()
    if txn_id is None:
        for i in range(n):
            send(i)
        if p.flush(300):
            raise SystemExit("flush timed out")
    else:
        i = 0
        while i < n:
            p.begin_transaction()
            until = time.perf_counter() + interval
            while i < n and (i % 64 or time.perf_counter() < until):
                send(i)
                i += 1
            p.commit_transaction(60)  # flushes, then commits
            txns += 1
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{len(failures)} deliveries failed, e.g. {failures[0]}")
    return n / elapsed, txns


def one_record_txns(bootstrap: str, topic: str, txn_id: str, start_at: float,
                    stop_at: float, partition: int) -> tuple[list[float], list[float]]:
    """Loop begin / produce one 1 KiB record / commit from `start_at` to `stop_at`
    (time.monotonic()); the commit_transaction() and whole-transaction latencies (ms)
    of the transactions finished inside the window."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "linger.ms": 0, "acks": "all"})
    p.init_transactions(30)
    p.list_topics(topic, timeout=10)
    payload = os.urandom(1024)
    commits: list[float] = []
    whole: list[float] = []
    while time.monotonic() < start_at:
        time.sleep(0.001)
    while True:
        t0 = time.monotonic()
        if t0 >= stop_at:
            break
        p.begin_transaction()
        p.produce(topic, payload, partition=partition)
        t1 = time.monotonic()
        p.commit_transaction(30)
        t2 = time.monotonic()
        if t2 <= stop_at:
            commits.append((t2 - t1) * 1000)
            whole.append((t2 - t0) * 1000)
    return commits, whole


def _process_worker(queue: Any, *args: Any) -> None:
    try:
        queue.put(one_record_txns(*args))
    except BaseException as e:  # reported to the parent, which fails the run
        queue.put(e)


def commit_round(bootstrap: str, topic: str, producers: int, partitions: int,
                 seconds: float, workers: str, rnd: int) -> tuple[float, list[float], list[float]]:
    """Aggregate commits/s of `producers` one-record transactional producers, and the
    pooled commit_transaction() and whole-transaction latencies (ms)."""
    warmup = 3.0 + 0.3 * producers  # client start, init_transactions, first metadata
    start_at = time.monotonic() + warmup
    stop_at = start_at + seconds
    jobs = [(bootstrap, topic, f"bench-1rec-{rnd}-{k}", start_at, stop_at, k % partitions)
            for k in range(producers)]
    results: list[Any] = []
    if workers == "threads":
        lock = threading.Lock()

        def run(job: tuple[Any, ...]) -> None:
            try:
                r: Any = one_record_txns(*job)
            except BaseException as e:
                r = e
            with lock:
                results.append(r)

        threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=_process_worker, args=(queue, *j)) for j in jobs]
        for pr in procs:
            pr.start()
        results = [queue.get(timeout=warmup + seconds + 120) for _ in procs]
        for pr in procs:
            pr.join(30)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise SystemExit(f"a transactional producer failed: {errors[0]!r}")
    commits = [x for c, _w in results for x in c]
    whole = [x for _c, w in results for x in w]
    if not commits:
        raise SystemExit("no transaction committed inside the window")
    return len(commits) / seconds, commits, whole


def consume(bootstrap: str, topic: str, n: int, partitions: int, isolation: str) -> float:
    """Records per second reading `n` records from offset 0, first poll to last record."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{isolation}",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 10485760,
    })
    c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    while got < n:
        msgs = c.consume(min(10_000, n - got), 10.0)
        if not msgs:
            break
        for m in msgs:
            if m.error() is not None:
                raise SystemExit(f"consume error: {m.error()}")
        got += len(msgs)
    elapsed = time.perf_counter() - start
    c.close()
    if got != n:
        raise SystemExit(f"{isolation}: consumed {got} of {n}")
    return n / elapsed


def _rotated(items: tuple[str, ...], r: int) -> tuple[str, ...]:
    k = r % len(items)
    return items[k:] + items[:k]


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def run(args: argparse.Namespace) -> None:
    from confluent_kafka import libversion, version
    from confluent_kafka.admin import AdminClient, NewTopic

    res = Results({m: [] for m in PRODUCE_MODES}, {m: [] for m in PRODUCE_MODES}, [], [], [],
                  {lv: [] for lv in ISOLATION_LEVELS})
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-",
                                     dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        res.floor = fsync_floor_ms(data, args.fsyncs)
        broker = BrokerProcess(data)
        broker.start()
        try:
            assert broker.proc is not None
            pid = broker.proc.pid
            bs = broker.bootstrap
            admin = AdminClient({"bootstrap.servers": bs})
            topics = [f"{m}-{r}" for r in range(args.rounds) for m in PRODUCE_MODES]
            topics += ["warmup", "one-record"]
            fs = admin.create_topics([NewTopic(t, args.partitions, 1) for t in topics])
            for f in fs.values():
                f.result(30)
            del admin  # its connection would log the broker's shutdown
            for txn_id in (None, "bench-warmup"):  # both modes: connections, page cache
                produce(bs, "warmup", max(args.records // 5, 1000), args.size, txn_id,
                        args.commit_ms, args.queue)
            for r in range(args.rounds if 1 in args.parts or 3 in args.parts else 0):
                for mode in _rotated(PRODUCE_MODES, r):  # part 1, alternating
                    before = broker_cpu_seconds(pid)
                    txn_id = f"bench-produce-{r}" if mode == "transactional" else None
                    rate, k = produce(bs, f"{mode}-{r}", args.records, args.size, txn_id,
                                      args.commit_ms, args.queue)
                    res.rates[mode].append(rate)
                    res.cpu[mode].append((broker_cpu_seconds(pid) - before) / args.records * 1e6)
                    if txn_id is not None:
                        res.txns.append(k)
            for r in range(args.rounds if 2 in args.parts else 0):
                before = broker_cpu_seconds(pid)
                rate, commits, whole = commit_round(bs, "one-record", args.producers,
                                                    args.partitions, args.seconds,
                                                    args.workers, r)
                cpu_ms = (broker_cpu_seconds(pid) - before) * 1000 / len(commits)
                res.commit_rates.append(rate)
                res.commit_p.append((statistics.median(commits), _pct(commits, 99),
                                     statistics.median(whole), _pct(whole, 99), cpu_ms))
            for r in range(args.rounds if 3 in args.parts else 0):
                for level in _rotated(ISOLATION_LEVELS, r):  # part 3, alternating, same data
                    res.reads[level].append(consume(bs, "transactional-0", args.records,
                                                    args.partitions, level))
        finally:
            broker.stop()
    v = version()
    v = v if isinstance(v, str) else v[0]
    res.client = f"confluent-kafka {v} (librdkafka {libversion()[0]})"
    report(args, res)


@dataclass
class Results:
    rates: dict[str, list[float]]  # part 1: records/s per mode, one per round
    cpu: dict[str, list[float]]  # part 1: broker CPU us per record
    txns: list[int]  # part 1: transactions per transactional round
    commit_rates: list[float]  # part 2: aggregate commits/s per round
    # part 2, per round: commit p50, p99, whole-transaction p50, p99 (ms), broker CPU ms/commit
    commit_p: list[tuple[float, float, float, float, float]]
    reads: dict[str, list[float]]  # part 3: records/s per isolation level
    floor: tuple[float, float] = (0.0, 0.0)  # one 4 KiB fdatasync, median and p99 (ms)
    client: str = ""


def report(args: argparse.Namespace, res: Results) -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {res.client}")
    print(f"disk floor: 4 KiB write + fdatasync in the data dir, {args.fsyncs} times: "
          f"median {res.floor[0]:.2f} ms, p99 {res.floor[1]:.2f} ms")
    if res.txns:
        _report_produce(args, res)
    if res.commit_rates:
        _report_commits(args, res)
    if res.reads["read_committed"]:
        _report_reads(args, res)


def _report_produce(args: argparse.Namespace, res: Results) -> None:
    med = statistics.median
    print(f"\n1. produce, one producer, {args.records:,} x {args.size} B, acks=all, "
          f"{args.partitions} partitions, {args.rounds} rounds alternated; transactional "
          f"commits every {args.commit_ms} ms ({med(res.txns):.0f} transactions per round)")
    print(f"  {'':34}{'idempotent':>14}{'transactional':>15}{'difference':>12}   aim")
    for label, values, fmt in (
        ("records/s, best round", {m: max(v) for m, v in res.rates.items()}, ",.0f"),
        ("records/s, median", {m: med(v) for m, v in res.rates.items()}, ",.0f"),
        ("broker CPU us/record, median", {m: med(v) for m, v in res.cpu.items()}, ".2f"),
    ):
        idem, txn = values["idempotent"], values["transactional"]
        diff = (txn / idem - 1) * 100
        aim = f"<= 3 % loss: {_verdict(-diff <= 3)}" if label.startswith("records/s") else ""
        print(f"  {label:34}{idem:>14{fmt}}{txn:>15{fmt}}{diff:>+11.1f}%   {aim}")
    # each transactional round beside the idempotent one next to it in time
    paired = [t / i for t, i in zip(res.rates["transactional"], res.rates["idempotent"])]
    diff = (med(paired) - 1) * 100
    print(f"  {'records/s, same-round ratio, median':34}{'':>14}{med(paired):>15.3f}"
          f"{diff:>+11.1f}%   <= 3 % loss: {_verdict(-diff <= 3)}")
    for m in PRODUCE_MODES:
        print(f"  rounds {m + ':':27}{', '.join(f'{x:,.0f}' for x in res.rates[m])}")


def _report_commits(args: argparse.Namespace, res: Results) -> None:
    med = statistics.median
    print(f"\n2. one-record transactions, {args.producers} producers ({args.workers}), "
          f"{args.seconds:g} s x {args.rounds} rounds")
    print(f"  {'':34}{'best':>14}{'median':>15}{'fsync floor':>12}   aim")
    best_r, med_r = max(res.commit_rates), med(res.commit_rates)
    print(f"  {'commits/s, aggregate':34}{best_r:>14,.0f}{med_r:>15,.0f}{'':>12}   "
          f">= 2,000: {_verdict(med_r >= 2000)}")
    labels = ("commit_transaction() p50, ms", "commit_transaction() p99, ms",
              "whole transaction p50, ms", "whole transaction p99, ms")
    p50 = med([c[0] for c in res.commit_p])
    for k, label in enumerate(labels):
        vals = [c[k] for c in res.commit_p]
        fl = res.floor[k % 2]
        aim = f"<= 5 ms: {_verdict(p50 <= 5)}" if k == 0 else ""
        print(f"  {label:34}{min(vals):>14.2f}{med(vals):>15.2f}{fl:>12.2f}   {aim}")
    cpu = [c[4] for c in res.commit_p]
    print(f"  {'broker CPU ms per commit':34}{min(cpu):>14.2f}{med(cpu):>15.2f}")
    print(f"  rounds, commits/s: {', '.join(f'{x:,.0f}' for x in res.commit_rates)}")


def _report_reads(args: argparse.Namespace, res: Results) -> None:
    med = statistics.median
    rc, ru = res.reads["read_committed"], res.reads["read_uncommitted"]
    print(f"\n3. consume {args.records:,} transactional records (all committed) from offset "
          f"0, {args.rounds} rounds alternated")
    print(f"  {'':34}{'best':>14}{'median':>15}")
    for level in ISOLATION_LEVELS:
        vals = res.reads[level]
        print(f"  {level + ', records/s':34}{max(vals):>14,.0f}{med(vals):>15,.0f}")
    ratio = med(rc) / med(ru)
    print(f"  {'read_committed / read_uncommitted':34}{max(rc) / max(ru):>14.2f}{ratio:>15.2f}"
          f"{'':>12}   >= 0.95: {_verdict(ratio >= 0.95)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--commit-ms", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--workers", choices=("processes", "threads"), default="processes")
    ap.add_argument("--fsyncs", type=int, default=200)
    ap.add_argument("--queue", type=int, default=10_000,
                    help="part 1: records that may wait in the client (both modes)")
    ap.add_argument("--parts", default="1,2,3", help="which parts to run, e.g. 1,3")
    ap.add_argument("--quick", action="store_true",
                    help="a short smoke run: few records, 1 round, 2 producers for 1 s")
    args = ap.parse_args()
    args.parts = {int(x) for x in args.parts.split(",")}
    if args.quick:
        args.records, args.rounds, args.producers, args.seconds = 3000, 1, 2, 1.0
        args.fsyncs, args.workers = 20, "threads"
    run(args)


if __name__ == "__main__":
    main()
