"""What transactions cost on one broker and on 3 brokers (RF=3), each figure beside its reference.

confluent-kafka (librdkafka) is the load generator. One run starts (through
`bench/_cluster_launch.py`) an embedded broker and, when ZooKeeper is installed (`make
deps-system`), ZooKeeper and 3 cluster brokers; every topic on the cluster has
replication factor 3 and min.insync.replicas=2, and so have `__transaction_state`
(transaction.state.log.replication.factor=3, transaction.state.log.min.isr=2) and
`__consumer_offsets` (offsets.topic.replication.factor=3). Every other setting is
Tidegate's default (every acknowledged write fsynced, on each replica). Each part runs on
both targets in rotating order round after round (so drift on a shared machine hits
both) and prints them side by side:

1. Transactional vs idempotent produce: one producer, 1 KiB records, acks=all; the
   transactional producer commits every `--commit-ms` (100 ms) and blocks in
   `commit_transaction()` as an application would (its latency and the commits/s are
   printed too). Rounds alternate the modes; best and median rounds and the brokers'
   CPU time per record (all their threads, /proc schedstat) are printed. Aim: <= 3 % loss.
2. One-record transactions: `--producers` (8) producers, each in its own process (or
   thread, `--workers threads`), each looping begin / produce one record /
   `commit_transaction()` for `--seconds`, started together. Aggregate commits per
   second (those finished inside the window) and the latency of `commit_transaction()`
   and of the whole transaction. Aim: >= 2,000 commits/s, p50 <= 5 ms (each aim's
   verdict is printed for each target). The floor beside it: one fsync of this disk
   (4 KiB write + fdatasync in the brokers' data dir, median of 200), since a commit is
   durable only after one.
3. read_committed vs read_uncommitted: the transactional topic of part 1 (all committed,
   its COMMIT markers interleaved) consumed from offset 0 by each isolation level, in
   alternating rounds. Aim: read_committed / read_uncommitted >= 0.95.

Apache Kafka is measured beside them as two more targets when its jars are there (`make
deps-kafka`; `bench/peer_kafka.py`, `--peer`): one KRaft node with Kafka's defaults (no
fsync) and one with `log.flush.interval.messages=1` (every appended batch flushed before
the answer, as Tidegate does), the same load generator and settings, the same rounds.

    .venv/bin/python bench/transactions.py [--records 200000] [--rounds 3] [--quick]
        [--targets embedded,cluster] [--parts 1,2,3] [--peer auto|none|kafka,kafka-fsync]
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peer_kafka
from bench._cluster_launch import (
    Broker,
    admin,
    create_topics,
    fsync_floor_ms,
    launched,
    pct,
    progress,
    zookeeper_missing,
)

TARGETS = {"embedded": "embedded broker", "cluster": "3 brokers, RF=3",
           **{m: label for m, (label, _o) in peer_kafka.MODES.items()}}
# the cluster brokers' internal topics as Kafka's defaults have them (also Tidegate's
# cluster-mode defaults: said here so that the run does not depend on them)
INTERNAL_RF3 = {"offsets.topic.replication.factor": "3",
                "transaction.state.log.replication.factor": "3",
                "transaction.state.log.min.isr": "2"}
PRODUCE_MODES = ("idempotent", "transactional")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def produce(bootstrap: str, topic: str, n: int, size: int, txn_id: str | None,
            commit_ms: int, queue: int) -> tuple[float, list[float]]:
    """Records per second from the first produce() to the last acknowledgement (for a
    transactional producer, the last commit), and each commit_transaction()'s time (ms:
    the flush of what is still queued, then EndTxn and its markers). At most
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
    commits: list[float] = []
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
            t0 = time.perf_counter()
            p.commit_transaction(60)  # flushes, then commits
            commits.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{len(failures)} deliveries failed, e.g. {failures[0]}")
    return n / elapsed, commits


def one_record_txns(bootstrap: str, topic: str, txn_id: str, start_at: float,
                    stop_at: float, partition: int
                    ) -> tuple[list[float], list[float], float]:
    """Loop begin / produce one 1 KiB record / commit from `start_at` to `stop_at`
    (time.monotonic()); the commit_transaction() and whole-transaction latencies (ms)
    of the transactions finished inside the window, and the CPU seconds this process
    (the Python loop and librdkafka's threads) used in the window."""
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
    cpu_at_start = time.process_time()  # all of this process's threads (librdkafka's too)
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
    return commits, whole, time.process_time() - cpu_at_start


def _process_worker(queue: Any, *args: Any) -> None:
    try:
        queue.put(one_record_txns(*args))
    except BaseException as e:  # reported to the parent, which fails the run
        queue.put(e)


def commit_round(bootstrap: str, topic: str, producers: int, partitions: int,
                 seconds: float, workers: str, rnd: int, warmup: float | None = None
                 ) -> tuple[float, list[float], list[float], float | None]:
    """Aggregate commits/s of `producers` one-record transactional producers, the
    pooled commit_transaction() and whole-transaction latencies (ms), and the load
    generator's CPU ms per commit (producer processes only: threads share one process
    with the bench, so None); `warmup` seconds (by default 3 + 0.3 per producer) for
    the clients' start before the window opens."""
    if warmup is None:  # client start, init_transactions, first metadata
        warmup = 3.0 + 0.3 * producers
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
    commits = [x for c, _w, _cpu in results for x in c]
    whole = [x for _c, w, _cpu in results for x in w]
    if not commits:
        raise SystemExit("no transaction committed inside the window")
    client_ms = (None if workers == "threads"
                 else sum(cpu for _c, _w, cpu in results) * 1000 / len(commits))
    return len(commits) / seconds, commits, whole, client_ms


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


@dataclass
class Target:
    """What one part of the run measured on one target (the embedded broker or the cluster)."""

    rates: dict[str, list[float]] = field(  # part 1: records/s per mode, one per round
        default_factory=lambda: {m: [] for m in PRODUCE_MODES})
    cpu: dict[str, list[float]] = field(  # part 1: the brokers' CPU us per record
        default_factory=lambda: {m: [] for m in PRODUCE_MODES})
    txn_commits: list[list[float]] = field(default_factory=list)  # part 1: commit ms per round
    txn_rates: list[float] = field(default_factory=list)  # part 1: commits/s per round
    commit_rates: list[float] = field(default_factory=list)  # part 2: commits/s per round
    # part 2, per round: commit p50, p99, whole-transaction p50, p99 (ms), broker CPU ms/commit
    commit_p: list[tuple[float, float, float, float, float]] = field(default_factory=list)
    # part 2, per round: CPU ms per commit of the Tidegate brokers' event-loop threads
    # (the one thread all requests run on: its ceiling is the broker's; None for Kafka)
    loop_cpu: list[float | None] = field(default_factory=list)
    # part 2, per round: CPU ms per commit of the 8 producer processes (the load
    # generator shares the 2 cores: broker + clients bound the rate; None for threads)
    client_cpu: list[float | None] = field(default_factory=list)
    reads: dict[str, list[float]] = field(  # part 3: records/s per isolation level
        default_factory=lambda: {lv: [] for lv in ISOLATION_LEVELS})


@dataclass
class Results:
    targets: dict[str, Target]
    floor: tuple[float, float] = (0.0, 0.0)  # one 4 KiB fdatasync, median and p99 (ms)
    load: tuple[float, float] = (0.0, 0.0)  # load average at start and at end
    client: str = ""
    notes: list[str] = field(default_factory=list)


def _cpu(brokers: list[Broker]) -> float:
    return sum(b.cpu_seconds() for b in brokers)


def _loop_cpu(brokers: list[Any]) -> float | None:
    """CPU seconds so far of the Tidegate brokers' main threads, where the event loop
    runs (Linux schedstat); None for other brokers (Kafka's JVM)."""
    total = 0
    for b in brokers:
        if not isinstance(b, Broker) or b.proc is None:
            return None
        try:
            stat = Path(f"/proc/{b.proc.pid}/task/{b.proc.pid}/schedstat").read_text()
        except OSError:
            return None
        total += int(stat.split()[0])
    return total / 1e9


def measure(args: argparse.Namespace, res: Results, where: dict[str, tuple[str, list[Broker]]]
            ) -> None:
    """The three parts, each target in turn within a round, the order rotating by round."""
    names = tuple(where)
    combos = tuple(f"{t}:{m}" for t in names for m in PRODUCE_MODES)
    for r in range(args.rounds if 1 in args.parts or 3 in args.parts else 0):
        for combo in _rotated(combos, r):  # part 1
            t, mode = combo.split(":")
            (bs, brokers), out = where[t], res.targets[t]
            progress(f"round {r + 1}/{args.rounds}: produce, {TARGETS[t]}, {mode}")
            before = _cpu(brokers)
            txn_id = f"bench-produce-{r}" if mode == "transactional" else None
            rate, commits = produce(bs, f"{mode}-{r}", args.records, args.size, txn_id,
                                    args.commit_ms, args.queue)
            out.rates[mode].append(rate)
            out.cpu[mode].append((_cpu(brokers) - before) / args.records * 1e6)
            if txn_id is not None:
                out.txn_commits.append(commits)
                out.txn_rates.append(len(commits) * rate / args.records)
    for r in range(args.rounds if 2 in args.parts else 0):
        for t in _rotated(names, r):  # part 2
            (bs, brokers), out = where[t], res.targets[t]
            progress(f"round {r + 1}/{args.rounds}: one-record transactions, {TARGETS[t]}")
            before, loop_before = _cpu(brokers), _loop_cpu(brokers)
            rate, commits, whole, client_ms = commit_round(bs, "one-record", args.producers,
                                                args.partitions, args.seconds,
                                                args.workers, r, args.warmup)
            cpu_ms = (_cpu(brokers) - before) * 1000 / len(commits)
            loop_after = _loop_cpu(brokers)
            out.loop_cpu.append(None if loop_before is None or loop_after is None
                                else (loop_after - loop_before) * 1000 / len(commits))
            out.commit_rates.append(rate)
            out.client_cpu.append(client_ms)
            out.commit_p.append((statistics.median(commits), pct(commits, 99),
                                 statistics.median(whole), pct(whole, 99), cpu_ms))
    for r in range(args.rounds if 3 in args.parts else 0):
        for t in _rotated(names, r):  # part 3, same data
            progress(f"round {r + 1}/{args.rounds}: consume, {TARGETS[t]}")
            for level in _rotated(ISOLATION_LEVELS, r):
                res.targets[t].reads[level].append(consume(
                    where[t][0], "transactional-0", args.records, args.partitions, level))


def run(args: argparse.Namespace, res: Results) -> None:
    from confluent_kafka.admin import NewTopic

    topics = [f"{m}-{r}" for r in range(args.rounds) for m in PRODUCE_MODES]
    topics += ["warmup", "one-record"]
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-",
                                     dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        base = Path(tmp)
        res.floor = fsync_floor_ms(base, args.fsyncs)
        # --quick: the brokers stop together at the end and the last one's controlled
        # shutdown, finding no controller, would retry after Kafka's 5 s backoff (as in
        # bench/cluster.py; no figure depends on it)
        quick_stop = {"controlled.shutdown.retry.backoff.ms": "200"} if args.quick else {}
        with launched(base, session_ms=None, cluster="cluster" in args.targets,
                      embedded="embedded" in args.targets,
                      overrides=lambda _bid: {**INTERNAL_RF3, **quick_stop}) as brokers, \
                peer_kafka.peers(base, [t for t in args.targets
                                        if t in peer_kafka.MODES]) as kafkas:
            where: dict[str, tuple[str, list[Any]]] = {}  # Broker or KafkaBroker
            if brokers.embedded is not None:
                single = admin(brokers.embedded.bootstrap)
                for f in single.create_topics([NewTopic(t, args.partitions, 1)
                                               for t in topics]).values():
                    f.result(30)
                del single  # its connection would log the broker's shutdown
                where["embedded"] = (brokers.embedded.bootstrap, [brokers.embedded])
            if brokers.cluster:
                create_topics(brokers.bootstrap, [(t, args.partitions, 3) for t in topics],
                              brokers.everyone)
                where["cluster"] = (brokers.bootstrap, list(brokers.cluster.values()))
            for mode, kafka in kafkas.items():
                peer_admin = admin(kafka.bootstrap)
                for f in peer_admin.create_topics([NewTopic(t, args.partitions, 1)
                                                   for t in topics]).values():
                    f.result(30)
                where[mode] = (kafka.bootstrap, [kafka])
            # both modes and both isolation levels once, untimed: connections, page cache,
            # and on the cluster the creation of __transaction_state and __consumer_offsets
            warm = max(args.records // 5, 1000)
            for t, (bs, _brokers) in where.items():
                progress(f"warm-up, {TARGETS[t]}")
                for txn_id in (None, "bench-warmup"):
                    produce(bs, "warmup", warm, args.size, txn_id, args.commit_ms, args.queue)
                for level in ISOLATION_LEVELS:
                    consume(bs, "warmup", 2 * warm, args.partitions, level)
            measure(args, res, where)


def _row(label: str, values: list[str], aim: str = "", width: int = 14) -> None:
    line = f"  {label:40}" + "".join(f"{v:>{width}}" for v in values)
    print((line + (f"   {aim}" if aim else "")).rstrip())


def _aim(name: str, oks: dict[str, bool]) -> str:
    return f"{name}: " + ", ".join(f"{t} {_verdict(ok)}" for t, ok in oks.items())


def report(args: argparse.Namespace, res: Results) -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {res.client}; load average "
          f"{res.load[0]:.2f} at start, {res.load[1]:.2f} at end")
    print(f"disk floor: 4 KiB write + fdatasync in the data dir, {args.fsyncs} times: "
          f"median {res.floor[0]:.2f} ms, p99 {res.floor[1]:.2f} ms")
    print("targets: " + "; ".join(f"{t}: {TARGETS[t]}" for t in res.targets)
          + (" (ZooKeeper and 3 brokers on this machine's cores and disk; every topic "
             "min.insync.replicas=2, " + ", ".join(f"{k}={v}" for k, v in INTERNAL_RF3.items())
             + ")" if "cluster" in res.targets else ""))
    for note in res.notes:
        print(f"note: {note}")
    ts = list(res.targets.values())
    if ts and ts[0].txn_commits:
        _report_produce(args, res)
    if ts and ts[0].commit_rates:
        _report_commits(args, res)
    if ts and ts[0].reads["read_committed"]:
        _report_reads(args, res)


def _report_produce(args: argparse.Namespace, res: Results) -> None:
    med = statistics.median
    print(f"\n1. produce, one producer, {args.records:,} x {args.size} B, acks=all, "
          f"{args.partitions} partitions, {args.rounds} rounds alternated; transactional "
          f"commits every {args.commit_ms} ms")
    print(f"  {'':40}" + "".join(f"{TARGETS[t]:>45}" for t in res.targets))
    _row("", [h for _t in res.targets for h in ("idempotent", "transactional", "difference")],
         width=15)
    oks: dict[str, bool] = {}
    for label, key, fmt in (("records/s, best round", max, ",.0f"),
                            ("records/s, median", med, ",.0f"),
                            ("broker CPU us/record, median", None, ".2f")):
        cells: list[str] = []
        for t, out in res.targets.items():
            vals = {m: key(out.rates[m]) if key else med(out.cpu[m]) for m in PRODUCE_MODES}
            diff = (vals["transactional"] / vals["idempotent"] - 1) * 100
            cells += [f"{vals['idempotent']:{fmt}}", f"{vals['transactional']:{fmt}}",
                      f"{diff:+.1f}%"]
            oks[t] = -diff <= 3
        _row(label, cells, _aim("<= 3 % loss", oks) if key else "", width=15)
    cells = []
    for t, out in res.targets.items():  # each transactional round beside its idempotent one
        paired = med([x / i for x, i in zip(out.rates["transactional"],
                                            out.rates["idempotent"])])
        cells += ["", f"{paired:.3f}", f"{(paired - 1) * 100:+.1f}%"]
        oks[t] = (1 - paired) * 100 <= 3
    _row("records/s, same-round ratio, median", cells, _aim("<= 3 % loss", oks), width=15)
    for label, fn in (("commit every 100 ms: commit p50, ms", lambda c: med(c)),
                      ("commit every 100 ms: commit p99, ms", lambda c: pct(c, 99))):
        cells = []
        for out in res.targets.values():
            cells += ["", f"{med([fn(c) for c in out.txn_commits]):.2f}", ""]
        _row(label.replace("100", str(args.commit_ms)), cells, width=15)
    cells = [c for out in res.targets.values()
             for c in ("", f"{med(out.txn_rates):.1f}", "")]
    _row(f"commit every {args.commit_ms} ms: commits/s", cells, width=15)
    for t, out in res.targets.items():
        for m in PRODUCE_MODES:
            print(f"  rounds, {TARGETS[t]}, {m}: {', '.join(f'{x:,.0f}' for x in out.rates[m])}")


def _report_commits(args: argparse.Namespace, res: Results) -> None:
    med = statistics.median
    print(f"\n2. one-record transactions, {args.producers} producers ({args.workers}), "
          f"{args.seconds:g} s x {args.rounds} rounds alternated; medians of the rounds")
    names = list(res.targets)
    ratio = names == ["embedded", "cluster"]
    _row("", [TARGETS[t] for t in names] + (["cluster/embedded"] if ratio else [])
         + ["fsync floor"], width=18)

    def line(label: str, vals: dict[str, float], fmt: str, floor: str = "",
             aim: str = "") -> None:
        extra = [f"{vals['cluster'] / vals['embedded']:.2f}x"] if ratio else []
        _row(label, [f"{vals[t]:{fmt}}" for t in names] + extra + [floor], aim, width=18)

    rates = {t: med(out.commit_rates) for t, out in res.targets.items()}
    line("commits/s, aggregate", rates, ",.0f",
         aim=_aim(">= 2,000", {t: r >= 2000 for t, r in rates.items()}))
    labels = ("commit_transaction() p50, ms", "commit_transaction() p99, ms",
              "whole transaction p50, ms", "whole transaction p99, ms")
    for k, label in enumerate(labels):
        vals = {t: med([c[k] for c in out.commit_p]) for t, out in res.targets.items()}
        aim = _aim("<= 5 ms", {t: v <= 5 for t, v in vals.items()}) if k == 0 else ""
        line(label, vals, ".2f", f"{res.floor[k % 2]:.2f}", aim)
    line("broker CPU ms per commit (all brokers)",
         {t: med([c[4] for c in out.commit_p]) for t, out in res.targets.items()}, ".2f")
    loops = {t: [x for x in out.loop_cpu if x is not None] for t, out in res.targets.items()}
    _row("  of which the event-loop thread", [f"{med(v):.2f}" if v else "-"
                                               for v in loops.values()], width=18)
    clients = {t: [x for x in out.client_cpu if x is not None]
               for t, out in res.targets.items()}
    _row("producers' CPU ms per commit", [f"{med(v):.2f}" if v else "-"
                                           for v in clients.values()], width=18)
    for t, out in res.targets.items():
        print(f"  rounds, {TARGETS[t]}, commits/s: "
              f"{', '.join(f'{x:,.0f}' for x in out.commit_rates)}")


def _report_reads(args: argparse.Namespace, res: Results) -> None:
    med = statistics.median
    print(f"\n3. consume {args.records:,} transactional records (all committed) from offset "
          f"0, {args.rounds} rounds alternated; medians")
    _row("", [TARGETS[t] for t in res.targets], width=18)
    for level in ISOLATION_LEVELS:
        _row(f"{level}, records/s",
             [f"{med(out.reads[level]):,.0f}" for out in res.targets.values()], width=18)
    ratios = {t: med(out.reads["read_committed"]) / med(out.reads["read_uncommitted"])
              for t, out in res.targets.items()}
    _row("read_committed / read_uncommitted", [f"{x:.2f}" for x in ratios.values()],
         _aim(">= 0.95", {t: x >= 0.95 for t, x in ratios.items()}), width=18)


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
    ap.add_argument("--warmup", type=float, default=None,
                    help="part 2: seconds for the producers' start (3 + 0.3 per producer)")
    ap.add_argument("--fsyncs", type=int, default=200)
    ap.add_argument("--queue", type=int, default=10_000,
                    help="part 1: records that may wait in the client (both modes)")
    ap.add_argument("--parts", default="1,2,3", help="which parts to run, e.g. 1,3")
    ap.add_argument("--targets", default="embedded,cluster",
                    help="embedded (one broker) and/or cluster (ZooKeeper + 3 brokers, RF=3)")
    ap.add_argument("--quick", action="store_true",
                    help="a short smoke run: few records, 1 round, 2 producers for 1 s")
    peer_kafka.add_peer_option(ap)
    args = ap.parse_args()
    args.parts = {int(x) for x in args.parts.split(",")}
    args.targets = [t for t in TARGETS if t in args.targets.split(",")]
    if args.quick:
        args.records, args.rounds, args.producers, args.seconds = 3000, 1, 2, 1.0
        # two threads in this process connect and init_transactions() well inside 1 s
        # on an idle machine; the default 3.6 s wait was most of the quick run's time
        args.fsyncs, args.workers, args.warmup = 20, "threads", 1.0
    res = Results({})
    peers, why_not = peer_kafka.wanted(args.peer)
    args.targets += [p for p in peers if p not in args.targets]  # --targets may name them
    if why_not is not None:
        res.notes.append(why_not)
    elif peers:
        res.notes.append(peer_kafka.describe(peers))
    if "cluster" in args.targets and (why := zookeeper_missing()) is not None:
        args.targets.remove("cluster")
        res.notes.append(f"cluster not measured: {why}")
    if not args.targets:
        raise SystemExit("nothing to measure (--targets)")
    res.targets = {t: Target() for t in args.targets}
    from confluent_kafka import libversion, version

    v = version()  # a str in some releases, a (str, int) tuple in others
    res.client = (f"confluent-kafka {v if isinstance(v, str) else v[0]} "
                  f"(librdkafka {libversion()[0]})")
    res.load = (os.getloadavg()[0], 0.0)
    run(args, res)
    res.load = (res.load[0], os.getloadavg()[0])
    report(args, res)


if __name__ == "__main__":
    main()
