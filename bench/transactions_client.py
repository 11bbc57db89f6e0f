"""Tidegate's transactional client beside confluent-kafka's: produce with commits, then
read_committed consumption, on one broker in one run.

One broker (`BrokerProcess`, default settings: every acknowledged write fsynced) serves
every part; rounds alternate the clients (the order rotates each round, so drift on a
shared machine hits all of them) and each client's figure is printed beside
confluent-kafka's from the same run, with the aim it is judged against.

1. Transactional produce: one producer, `--records` x 1 KiB records (keyed, default
   partitioner), acks=all, linger 5 ms, batch.size 1,000,000, no compression, at most
   ~10,000 records waiting in the client (confluent-kafka
   ``queue.buffering.max.messages``; Tidegate ``buffer.memory`` of 10,000 records), a
   commit every `--commit-ms` (100 ms) blocking in `commit_transaction()` as an
   application would. Timed from the first send to the last commit. Clients: Tidegate's
   `AsyncProducer` (asyncio), its blocking `Producer`, confluent-kafka's `Producer`.
   Aim: each Tidegate client >= 0.8 x confluent-kafka (median rounds).
2. read_committed consumption: the topic confluent-kafka wrote transactionally in
   round 0 of part 1 (all committed, COMMIT markers interleaved) read from offset 0 by
   manual assignment, `isolation.level=read_committed`, fetch.max.bytes 50 MiB,
   max.partition.fetch.bytes 10 MiB, up to 10,000 records per poll; timed from the
   first poll to the last record. Clients: Tidegate's `AsyncConsumer`, its blocking
   `Consumer`, confluent-kafka's `Consumer`. Aim: each Tidegate client >= 0.8 x
   confluent-kafka (median rounds).

3. Consume-transform-produce (`--parts 3`, not run by default): confluent-kafka (the
   load generator) reads `--ctp-input` 100 B records from a group, writes each to an
   output topic and commits every `--ctp-batch` records with
   `send_offsets_to_transaction`, so every commit also sends AddOffsetsToTxn and
   TxnOffsetCommit; `--seconds` per round. Commits/s and the broker's CPU per
   transaction (all its threads, Linux schedstat). `--broker-trees` runs one broker per
   source tree (a worktree's root, e.g. a before-tree) and alternates them round by
   round, so a broker-side change is measured before/after in one run.

Every measurement runs in this process, one after the other (the clients' own threads
are the only concurrency).

    .venv/bin/python bench/transactions_client.py [--records 100000] [--rounds 3] [--quick]
        [--parts 1,2] [--broker-trees .,/tmp/before] [--ctp-batch 1] [--seconds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.integration.conftest as broker_conftest
from tests.integration.conftest import BrokerProcess

PRODUCERS = ("tidegate-async", "tidegate-sync", "confluent")
CONSUMERS = ("tidegate-async", "tidegate-sync", "confluent")
QUEUE = 10_000  # records that may wait in a client
BATCH_BYTES = 1_000_000
POLL_RECORDS = 10_000
TIMEOUT_S = 300.0
AIM = 0.8


def _tidegate_producer_config(bootstrap: str, txn_id: str, size: int) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "acks": "all",
            "linger.ms": 5, "batch.size": BATCH_BYTES, "compression.type": "none",
            # room for about QUEUE records (record overhead included), as confluent's
            # queue.buffering.max.messages
            "buffer.memory": QUEUE * (size + 64)}


def produce_tidegate_async(bootstrap: str, topic: str, n: int, size: int, txn_id: str,
                           commit_ms: int) -> tuple[float, int]:
    from tidegate.client import AsyncProducer

    payload = os.urandom(size)
    interval = commit_ms / 1000

    async def main() -> tuple[float, int]:
        async with AsyncProducer(_tidegate_producer_config(bootstrap, txn_id, size)) as p:
            await p.init_transactions()
            await p.partitions_for(topic)
            send = p.send
            txns = i = 0
            start = time.perf_counter()
            while i < n:
                p.begin_transaction()
                until = time.perf_counter() + interval
                while i < n and (i % 64 or time.perf_counter() < until):
                    await send(topic, payload, str(i).encode())
                    i += 1
                await p.commit_transaction()  # flushes; a failed record fails it
                txns += 1
            return n / (time.perf_counter() - start), txns

    return asyncio.run(main())


def produce_tidegate_sync(bootstrap: str, topic: str, n: int, size: int, txn_id: str,
                          commit_ms: int) -> tuple[float, int]:
    from tidegate.client import Producer

    payload = os.urandom(size)
    interval = commit_ms / 1000
    with Producer(_tidegate_producer_config(bootstrap, txn_id, size)) as p:
        p.init_transactions()
        p.partitions_for(topic)
        send = p.send
        txns = i = 0
        start = time.perf_counter()
        while i < n:
            p.begin_transaction()
            until = time.perf_counter() + interval
            while i < n and (i % 64 or time.perf_counter() < until):
                send(topic, payload, str(i).encode())
                i += 1
            p.commit_transaction()
            txns += 1
        return n / (time.perf_counter() - start), txns


def produce_confluent(bootstrap: str, topic: str, n: int, size: int, txn_id: str,
                      commit_ms: int) -> tuple[float, int]:
    from confluent_kafka import Producer

    p = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": txn_id, "acks": "all",
        "enable.idempotence": True, "linger.ms": 5, "batch.size": BATCH_BYTES,
        "compression.type": "none", "queue.buffering.max.messages": QUEUE,
        "queue.buffering.max.kbytes": 1_048_576,
    })
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

    p.init_transactions(30)
    p.list_topics(topic, timeout=10)
    interval = commit_ms / 1000
    txns = i = 0
    start = time.perf_counter()
    while i < n:
        p.begin_transaction()
        until = time.perf_counter() + interval
        while i < n and (i % 64 or time.perf_counter() < until):
            send(i)
            i += 1
        p.commit_transaction(60)
        txns += 1
    rate = n / (time.perf_counter() - start)
    if failures:
        raise SystemExit(f"confluent-kafka: {len(failures)} deliveries failed, "
                         f"e.g. {failures[0]}")
    return rate, txns


def _tidegate_consumer_config(bootstrap: str) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
            "max.poll.records": POLL_RECORDS}


def consume_tidegate_async(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    from tidegate.client import AsyncConsumer, TopicPartition

    async def main() -> float:
        async with AsyncConsumer(_tidegate_consumer_config(bootstrap)) as c:
            await c.partitions_for_topic(topic)
            c.assign([TopicPartition(topic, p) for p in range(partitions)])
            got = 0
            start = time.perf_counter()
            deadline = start + TIMEOUT_S
            while got < n and time.perf_counter() < deadline:
                got += len(await c.poll(1000))
            elapsed = time.perf_counter() - start
        _check_count("tidegate-async", got, n)
        return n / elapsed

    return asyncio.run(main())


def consume_tidegate_sync(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    from tidegate.client import Consumer, TopicPartition

    with Consumer(_tidegate_consumer_config(bootstrap)) as c:
        c.partitions_for_topic(topic)
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got = 0
        start = time.perf_counter()
        deadline = start + TIMEOUT_S
        while got < n and time.perf_counter() < deadline:
            got += len(c.poll(1000))
        elapsed = time.perf_counter() - start
    _check_count("tidegate-sync", got, n)
    return n / elapsed


def consume_confluent(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
    try:
        c.list_topics(topic, timeout=10)
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = 0
        start = time.perf_counter()
        deadline = start + TIMEOUT_S
        while got < n and time.perf_counter() < deadline:
            for m in c.consume(min(POLL_RECORDS, n - got), 1.0):
                if m.error() is not None:
                    raise SystemExit(f"confluent-kafka: {m.error()}")
                got += 1
        elapsed = time.perf_counter() - start
    finally:
        c.close()
    _check_count("confluent", got, n)
    return n / elapsed


def _check_count(name: str, got: int, n: int) -> None:
    if got != n:
        raise SystemExit(f"{name}: read {got} of {n} committed records")


ProduceFn = Callable[[str, str, int, int, str, int], tuple[float, int]]
ConsumeFn = Callable[[str, str, int, int], float]
PRODUCE: dict[str, ProduceFn] = {"tidegate-async": produce_tidegate_async,
                                 "tidegate-sync": produce_tidegate_sync,
                                 "confluent": produce_confluent}
CONSUME: dict[str, ConsumeFn] = {"tidegate-async": consume_tidegate_async,
                                 "tidegate-sync": consume_tidegate_sync,
                                 "confluent": consume_confluent}


def _rotated(items: tuple[str, ...], r: int) -> tuple[str, ...]:
    k = r % len(items)
    return items[k:] + items[:k]


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def run(args: argparse.Namespace) -> None:
    from confluent_kafka import libversion, version
    from confluent_kafka.admin import AdminClient, NewTopic

    rates: dict[str, list[float]] = {c: [] for c in PRODUCERS}
    txns: dict[str, list[int]] = {c: [] for c in PRODUCERS}
    reads: dict[str, list[float]] = {c: [] for c in CONSUMERS}
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-",
                                     dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        broker = BrokerProcess(Path(tmp) / "data")
        broker.start()
        try:
            bs = broker.bootstrap
            admin = AdminClient({"bootstrap.servers": bs})
            topics = [f"{c}-{r}" for r in range(args.rounds) for c in PRODUCERS]
            topics += [f"warmup-{c}" for c in PRODUCERS]
            for f in admin.create_topics([NewTopic(t, args.partitions, 1)
                                          for t in topics]).values():
                f.result(30)
            del admin  # its connection would log the broker's shutdown
            for c in PRODUCERS:  # connections, page cache, imports
                PRODUCE[c](bs, f"warmup-{c}", max(args.records // 10, 1000), args.size,
                           f"bench-warmup-{c}", args.commit_ms)
            for r in range(args.rounds):
                for c in _rotated(PRODUCERS, r):
                    rate, k = PRODUCE[c](bs, f"{c}-{r}", args.records, args.size,
                                         f"bench-{c}-{r}", args.commit_ms)
                    rates[c].append(rate)
                    txns[c].append(k)
            for r in range(args.rounds):
                for c in _rotated(CONSUMERS, r):
                    reads[c].append(CONSUME[c](bs, "confluent-0", args.records,
                                               args.partitions))
        finally:
            broker.stop()
    v = version()
    client = f"confluent-kafka {v if isinstance(v, str) else v[0]} (librdkafka {libversion()[0]})"
    report(args, client, rates, txns, reads)


def broker_cpu_s(broker: BrokerProcess) -> float:
    """CPU time of every thread of the broker so far (Linux schedstat)."""
    assert broker.proc is not None
    total = 0
    for task in Path(f"/proc/{broker.proc.pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass  # a thread that ended between the listing and the read
    return total / 1e9


def broker_loop_cpu_s(broker: BrokerProcess) -> float:
    """CPU time so far of the broker's main thread, where its event loop runs."""
    assert broker.proc is not None
    pid = broker.proc.pid
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


def fill_input(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        while True:
            try:
                p.produce(topic, os.urandom(100), str(i).encode())
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(60):
        raise SystemExit("input records not delivered")


def ctp_confluent(broker: BrokerProcess, src: str, dst: str, group: str, batch: int,
                  seconds: float) -> tuple[float, float, float]:
    """Commits/s, broker CPU ms per commit (all threads) and the event loop's share, of a
    consume-transform-produce loop."""
    from confluent_kafka import Consumer, KafkaException, Producer

    bs = broker.bootstrap
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"{group}-txn",
                  "linger.ms": 0, "acks": "all"})
    try:
        c.subscribe([src])
        p.init_transactions(30)
        while not c.assignment():  # joined: the first records wait in the fetch queue
            c.poll(0.1)
        commits = 0
        cpu0, loop0, start = broker_cpu_s(broker), broker_loop_cpu_s(broker), time.perf_counter()
        until = start + seconds
        while time.perf_counter() < until:
            msgs = c.consume(batch, 1.0)
            if not msgs:
                raise SystemExit(f"{group}: the input ran out (raise --ctp-input)")
            p.begin_transaction()
            for m in msgs:
                if m.error() is not None:
                    raise KafkaException(m.error())
                p.produce(dst, m.value(), m.key())
            p.send_offsets_to_transaction(c.position(c.assignment()),
                                          c.consumer_group_metadata(), 30)
            p.commit_transaction(30)
            commits += 1
        elapsed = time.perf_counter() - start
        cpu = broker_cpu_s(broker) - cpu0
        loop = broker_loop_cpu_s(broker) - loop0
    finally:
        c.close()
    return commits / elapsed, cpu / commits * 1000, loop / commits * 1000


def run_ctp(args: argparse.Namespace) -> None:
    """Part 3: one broker per source tree, rounds alternated between them."""
    from confluent_kafka.admin import AdminClient, NewTopic

    trees = [Path(t).resolve() for t in args.broker_trees.split(",")]
    commits: dict[str, list[float]] = {str(t): [] for t in trees}
    cpu: dict[str, list[float]] = {str(t): [] for t in trees}
    loop_cpu: dict[str, list[float]] = {str(t): [] for t in trees}
    n_input = args.ctp_input
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-",
                                     dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        brokers: list[BrokerProcess] = []
        try:
            for i, tree in enumerate(trees):
                broker_conftest.ROOT = tree  # the broker runs `tree`/src
                b = BrokerProcess(Path(tmp) / f"data-{i}")
                b.start()
                brokers.append(b)
                admin = AdminClient({"bootstrap.servers": b.bootstrap})
                for f in admin.create_topics([NewTopic(t, args.partitions, 1)
                                              for t in ("ctp-in", "ctp-out")]).values():
                    f.result(30)
                del admin
                fill_input(b.bootstrap, "ctp-in", n_input)
                ctp_confluent(b, "ctp-in", "ctp-out", "warmup", args.ctp_batch, 1.0)
            for r in range(args.rounds):
                for t in _rotated(tuple(str(t) for t in trees), r):
                    b = brokers[[str(x) for x in trees].index(t)]
                    rate, ms, loop_ms = ctp_confluent(b, "ctp-in", "ctp-out", f"ctp-{r}",
                                                      args.ctp_batch, args.seconds)
                    commits[t].append(rate)
                    cpu[t].append(ms)
                    loop_cpu[t].append(loop_ms)
        finally:
            for b in brokers:
                b.stop()
    print(f"\n3. consume-transform-produce (confluent-kafka), {args.ctp_batch} record(s) per "
          f"transaction with send_offsets_to_transaction, {args.partitions} partitions, "
          f"{args.seconds:g} s x {args.rounds} rounds alternated between brokers")
    print(f"  {'broker tree':40}{'commits/s median (range)':>28}"
          f"{'broker CPU ms/commit median (range)':>38}")
    for t in commits:
        c, m = commits[t], cpu[t]
        print(f"  {t:40}{statistics.median(c):>12,.0f} ({min(c):,.0f}-{max(c):,.0f})"
              f"{statistics.median(m):>20.3f} ({min(m):.3f}-{max(m):.3f})")
    for t in commits:
        lp = loop_cpu[t]
        print(f"  {t:40}{'event-loop thread CPU ms/commit':>28}{statistics.median(lp):>20.3f} "
              f"({min(lp):.3f}-{max(lp):.3f})")
    for t in commits:
        print(f"  rounds {t}: " + ", ".join(
            f"{c:,.0f}/s {m:.3f} ms (loop {lp:.3f})"
            for c, m, lp in zip(commits[t], cpu[t], loop_cpu[t], strict=True)))


def _table(title: str, unit: str, values: dict[str, list[float]]) -> None:
    med = statistics.median
    ref = med(values["confluent"])
    print(title)
    print(f"  {'':30}{'best':>12}{'median':>12}{'x confluent':>13}   aim")
    for c, vals in values.items():
        ratio = med(vals) / ref
        aim = "" if c == "confluent" else f">= {AIM} x confluent-kafka: {_verdict(ratio >= AIM)}"
        print(f"  {c + ', ' + unit:30}{max(vals):>12,.0f}{med(vals):>12,.0f}{ratio:>13.2f}   "
              f"{aim}".rstrip())
    for c, vals in values.items():
        print(f"  rounds {c + ':':23}{', '.join(f'{x:,.0f}' for x in vals)}")


def report(args: argparse.Namespace, client: str, rates: dict[str, list[float]],
           txns: dict[str, list[int]], reads: dict[str, list[float]]) -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {client}")
    per_round = ", ".join(f"{c} {statistics.median(k):.0f}" for c, k in txns.items())
    _table(f"\n1. transactional produce, one producer, {args.records:,} x {args.size} B, "
           f"acks=all, {args.partitions} partitions, a commit every {args.commit_ms} ms "
           f"(transactions per round: {per_round}), {args.rounds} rounds alternated",
           "records/s", rates)
    _table(f"\n2. read_committed consume of {args.records:,} transactional records (all "
           f"committed) from offset 0, {args.rounds} rounds alternated", "records/s", reads)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--commit-ms", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true",
                    help="a short smoke run: 3,000 records, 1 round")
    ap.add_argument("--parts", default="1,2", help="1,2: parts 1 and 2; 3: "
                    "consume-transform-produce")
    ap.add_argument("--broker-trees", default=str(Path(__file__).resolve().parents[1]),
                    help="part 3: comma-separated source trees, one broker each")
    ap.add_argument("--ctp-batch", type=int, default=1)
    ap.add_argument("--ctp-input", type=int, default=200_000)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds = 3000, 1
        args.ctp_input, args.seconds = 5000, 2.0
    parts = {int(x) for x in args.parts.split(",")}
    if parts & {1, 2}:
        run(args)
    if 3 in parts:
        run_ctp(args)


if __name__ == "__main__":
    main()
