"""Produce and consume throughput of four Python Kafka clients against one Tidegate broker.

Clients: Tidegate's own (asyncio `AsyncProducer`/`AsyncConsumer`, and the blocking
`Producer`/`Consumer` facade), confluent-kafka (librdkafka), aiokafka and kafka-python.
Each is measured producing and consuming records of each size (100 B and 1 KiB by
default), in one run against the same broker, and the results are printed as msgs/s
with ratios against aiokafka and confluent-kafka.

Settings, the same for every client where it has them:

- produce: acks=1 on a broker with `log.flush.interval.messages=10000` (so the
  broker's fsync is not what is measured: at the default 1, acks=1 waits for it
  as acks=all does), linger 5 ms,
  batch size 64 KiB (confluent-kafka: ``batch.size=65536``; kafka-python
  ``batch_size``; aiokafka ``max_batch_size``), no compression, idempotence off,
  unkeyed records (each client's default partitioner for unkeyed records), default
  in-flight limits; the timer runs from the first send to the last acknowledgement
  (connections and metadata are set up before it starts); every delivery is checked,
  as the application goes (futures are not all held to the end: see `_settle`).
- consume: every client reads the same topic (written once beforehand by
  confluent-kafka, spread evenly over the partitions) from offset 0 by manual
  assignment, with default fetch settings
  and at most 500 records per poll; the timer runs from the first poll until all
  records have been returned.

Every measurement runs in a fresh interpreter (one client per process), with the
default asyncio event loop for the asyncio clients. The broker is
`tests.integration.conftest.BrokerProcess` with its default settings, on the same
machine. Each cell is measured `--repeat` times, interleaved with the other clients, and
the table shows the median and the range. `--baseline-src` measures Tidegate's clients
from a second tree (a before-change worktree) in the same rounds. Besides msgs/s the
table shows CPU microseconds per message: of the client process (all its threads,
librdkafka's included), which varies much less than throughput when other work shares
the machine, and of the broker during the run.

    .venv/bin/python bench/clients.py                     # about 1-2 minutes
    .venv/bin/python bench/clients.py --records 1000000 --repeat 3
    .venv/bin/python bench/clients.py --tidegate-src ../old-checkout/src   # before/after
    .venv/bin/python bench/clients.py --no-produce --clients tidegate,tidegate-sync,confluent \
        --repeat 5 --baseline-src /tmp/before/src      # after and before in the same rounds
    .venv/bin/python bench/clients.py --clients tidegate,aiokafka --sizes 100
    .venv/bin/python bench/clients.py --no-produce --tidegate-consumer queued.max.messages.kbytes=0
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Workers find the client under test through PYTHONPATH (see --tidegate-src).
if not os.environ.get("TIDEGATE_BENCH_WORKER"):
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

CLIENTS = ("tidegate", "tidegate-sync", "confluent", "aiokafka", "kafka-python")
LINGER_MS = 5
BATCH_BYTES = 65_536
POLL_RECORDS = 500
TIMEOUT_S = 300.0


Timing = tuple[float, float]  # (wall seconds, CPU seconds of this process, all threads)


def _now() -> Timing:
    return time.perf_counter(), time.process_time()


def _since(start: Timing) -> Timing:
    return time.perf_counter() - start[0], time.process_time() - start[1]


# -- producers -----------------------------------------------------------------------
# Each returns the seconds from its first send to its last acknowledgement.


def _settle(pending: deque[Any], is_done: Callable[[Any], bool],
            check: Callable[[Any], object], everything: bool = False) -> None:
    """Check the delivery futures at the front of `pending` that have completed (all of
    them with `everything`): the application looks at its results as it goes rather than
    holding a future per record for the whole run, which would make the garbage
    collector, not the client, the cost being measured."""
    while pending and (everything or is_done(pending[0])):
        check(pending.popleft())


def _payloads(size: int) -> list[bytes]:
    # A handful of distinct random values, reused: building them is not measured.
    return [os.urandom(size) for _ in range(16)]


def produce_tidegate(bootstrap: str, topic: str, n: int, size: int) -> Timing:
    from tidegate.client import AsyncProducer

    values = _payloads(size)

    async def main() -> Timing:
        async with AsyncProducer(
            bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS, batch_size=BATCH_BYTES,
            compression_type="none", enable_idempotence=False,
        ) as p:
            await p.partitions_for(topic)
            send = p.send
            pending: deque[asyncio.Future[Any]] = deque()
            start = _now()
            for i in range(n):
                pending.append(await send(topic, values[i & 15]))
                if not i & 1023:
                    _settle(pending, asyncio.Future.done, asyncio.Future.result)
            await p.flush()
            elapsed = _since(start)
            _settle(pending, asyncio.Future.done, asyncio.Future.result, everything=True)
            return elapsed

    return asyncio.run(main())


def produce_tidegate_sync(bootstrap: str, topic: str, n: int, size: int) -> Timing:
    from tidegate.client import Producer

    values = _payloads(size)
    with Producer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS, batch_size=BATCH_BYTES,
        compression_type="none", enable_idempotence=False,
    ) as p:
        p.partitions_for(topic)
        send = p.send
        pending: deque[concurrent.futures.Future[Any]] = deque()
        start = _now()
        for i in range(n):
            pending.append(send(topic, values[i & 15]))
            if not i & 1023:
                _settle(pending, concurrent.futures.Future.done,
                        concurrent.futures.Future.result)
        p.flush()
        elapsed = _since(start)
        # After flush() every future is done; a timeout here would be a client bug.
        _settle(pending, concurrent.futures.Future.done, lambda f: f.result(60),
                everything=True)
    return elapsed


def produce_confluent(bootstrap: str, topic: str, n: int, size: int) -> Timing:
    from confluent_kafka import Producer

    values = _payloads(size)
    p = Producer({
        "bootstrap.servers": bootstrap, "acks": 1, "linger.ms": LINGER_MS,
        "batch.size": BATCH_BYTES, "compression.type": "none", "enable.idempotence": False,
    })
    p.list_topics(topic, timeout=30)
    failures: list[object] = []
    acked = 0

    def report(err: object, _msg: object) -> None:
        nonlocal acked
        if err is not None:
            failures.append(err)
        else:
            acked += 1

    produce, poll = p.produce, p.poll
    start = _now()
    for i in range(n):
        while True:
            try:
                produce(topic, values[i & 15], on_delivery=report)
                break
            except BufferError:  # queue.buffering.max.messages reached: serve callbacks
                poll(0.001)
        if not i & 1023:
            poll(0)
    remaining = p.flush(TIMEOUT_S)
    elapsed = _since(start)
    if remaining or failures or acked != n:
        raise SystemExit(f"confluent-kafka: {acked} of {n} acknowledged, "
                         f"{len(failures)} failed, e.g. {failures[:1]}")
    return elapsed


def produce_aiokafka(bootstrap: str, topic: str, n: int, size: int) -> Timing:
    from aiokafka import AIOKafkaProducer

    values = _payloads(size)

    async def main() -> Timing:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS,
            max_batch_size=BATCH_BYTES, compression_type=None, enable_idempotence=False,
        )
        await p.start()
        try:
            await p.partitions_for(topic)
            send = p.send
            pending: deque[asyncio.Future[Any]] = deque()
            start = _now()
            for i in range(n):
                pending.append(await send(topic, values[i & 15]))
                if not i & 1023:
                    _settle(pending, asyncio.Future.done, asyncio.Future.result)
            await p.flush()
            elapsed = _since(start)
            _settle(pending, asyncio.Future.done, asyncio.Future.result, everything=True)
        finally:
            await p.stop()
        return elapsed

    return asyncio.run(main())


def produce_kafka_python(bootstrap: str, topic: str, n: int, size: int) -> Timing:
    from kafka import KafkaProducer

    values = _payloads(size)
    p = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS, batch_size=BATCH_BYTES,
        compression_type=None, enable_idempotence=False,
    )
    try:
        p.partitions_for(topic)
        send = p.send
        pending: deque[Any] = deque()
        start = _now()
        for i in range(n):
            pending.append(send(topic, values[i & 15]))
            if not i & 1023:
                _settle(pending, lambda f: f.is_done, lambda f: f.get(0))
        p.flush(TIMEOUT_S)
        elapsed = _since(start)
        _settle(pending, lambda f: f.is_done, lambda f: f.get(0), everything=True)
    finally:
        p.close()
    return elapsed


# -- consumers -----------------------------------------------------------------------
# Each reads `n` records of `topic` (partitions 0..parts-1) from offset 0 and returns
# the seconds from its first poll until it has them all.


def _tidegate_consumer_config() -> dict[str, object]:
    """Extra settings for Tidegate's consumers (--tidegate-consumer, via the env)."""
    return dict(json.loads(os.environ.get("TIDEGATE_BENCH_CONSUMER", "{}")))


def consume_tidegate(bootstrap: str, topic: str, n: int, parts: int) -> Timing:
    from tidegate.client import AsyncConsumer, TopicPartition

    async def main() -> Timing:
        async with AsyncConsumer(_tidegate_consumer_config(), bootstrap_servers=bootstrap,
                                 auto_offset_reset="earliest",
                                 max_poll_records=POLL_RECORDS) as c:
            c.assign([TopicPartition(topic, p) for p in range(parts)])
            got = 0
            start = _now()
            deadline = time.perf_counter() + TIMEOUT_S
            while got < n and time.perf_counter() < deadline:
                for r in await c.poll(timeout_ms=1000):
                    got += r.value is not None
            elapsed = _since(start)
        _check_count("tidegate", got, n)
        return elapsed

    return asyncio.run(main())


def consume_tidegate_sync(bootstrap: str, topic: str, n: int, parts: int) -> Timing:
    from tidegate.client import Consumer, TopicPartition

    with Consumer(_tidegate_consumer_config(), bootstrap_servers=bootstrap,
                  auto_offset_reset="earliest", max_poll_records=POLL_RECORDS) as c:
        c.assign([TopicPartition(topic, p) for p in range(parts)])
        got = 0
        start = _now()
        deadline = time.perf_counter() + TIMEOUT_S
        while got < n and time.perf_counter() < deadline:
            for r in c.poll(timeout_ms=1000):
                got += r.value is not None
        elapsed = _since(start)
    _check_count("tidegate-sync", got, n)
    return elapsed


def consume_confluent(bootstrap: str, topic: str, n: int, parts: int) -> Timing:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
        got = 0
        start = _now()
        deadline = time.perf_counter() + TIMEOUT_S
        while got < n and time.perf_counter() < deadline:
            for m in c.consume(POLL_RECORDS, 1.0):
                if m.error():
                    raise SystemExit(f"confluent-kafka: {m.error()}")
                got += m.value() is not None
        elapsed = _since(start)
    finally:
        c.close()
    _check_count("confluent-kafka", got, n)
    return elapsed


def consume_aiokafka(bootstrap: str, topic: str, n: int, parts: int) -> Timing:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main() -> Timing:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None)
        await c.start()
        try:
            c.assign([TopicPartition(topic, p) for p in range(parts)])
            got = 0
            start = _now()
            deadline = time.perf_counter() + TIMEOUT_S
            while got < n and time.perf_counter() < deadline:
                batch = await c.getmany(timeout_ms=1000, max_records=POLL_RECORDS)
                for msgs in batch.values():
                    for m in msgs:
                        got += m.value is not None
            elapsed = _since(start)
        finally:
            await c.stop()
        _check_count("aiokafka", got, n)
        return elapsed

    return asyncio.run(main())


def consume_kafka_python(bootstrap: str, topic: str, n: int, parts: int) -> Timing:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      auto_offset_reset="earliest", group_id=None,
                      max_poll_records=POLL_RECORDS)
    try:
        c.assign([TopicPartition(topic, p) for p in range(parts)])
        got = 0
        start = _now()
        deadline = time.perf_counter() + TIMEOUT_S
        while got < n and time.perf_counter() < deadline:
            for msgs in c.poll(1000).values():
                for m in msgs:
                    got += m.value is not None
        elapsed = _since(start)
    finally:
        c.close()
    _check_count("kafka-python", got, n)
    return elapsed


def _check_count(name: str, got: int, n: int) -> None:
    if got != n:
        raise SystemExit(f"{name}: consumed {got} of {n} records")


PRODUCERS: dict[str, Callable[[str, str, int, int], Timing]] = {
    "tidegate": produce_tidegate, "tidegate-sync": produce_tidegate_sync,
    "confluent": produce_confluent, "aiokafka": produce_aiokafka,
    "kafka-python": produce_kafka_python,
}
CONSUMERS: dict[str, Callable[[str, str, int, int], Timing]] = {
    "tidegate": consume_tidegate, "tidegate-sync": consume_tidegate_sync,
    "confluent": consume_confluent, "aiokafka": consume_aiokafka,
    "kafka-python": consume_kafka_python,
}
LABELS = {"tidegate": "tidegate (asyncio)", "tidegate-sync": "tidegate (blocking)",
          "confluent": "confluent-kafka", "aiokafka": "aiokafka",
          "kafka-python": "kafka-python"}


# -- orchestration -------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    """One measurement in this (fresh) process; prints (wall, cpu) seconds as JSON."""
    if args.worker == "produce":
        timing = PRODUCERS[args.client](args.bootstrap, args.topic, args.records, args.size)
    else:
        timing = CONSUMERS[args.client](args.bootstrap, args.topic, args.records,
                                        args.partitions)
    print(json.dumps({"wall": timing[0], "cpu": timing[1]}))


class Result:
    """One cell of the table: msgs/s, and CPU microseconds per message in the client
    and in the broker (the broker's from /proc, so Linux only)."""

    def __init__(self, rate: float, client_us: float, broker_us: float | None) -> None:
        self.rate = rate
        self.client_us = client_us
        self.broker_us = broker_us
        self.low = self.high = rate


def median(results: list[Result]) -> Result:
    """The cell's figures: the median of each (msgs/s, CPU per message), and the
    range of msgs/s in `low`/`high`."""
    def mid(xs: list[float]) -> float:
        xs = sorted(xs)
        n = len(xs)
        return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2

    brokers = [r.broker_us for r in results if r.broker_us is not None]
    out = Result(mid([r.rate for r in results]), mid([r.client_us for r in results]),
                 mid(brokers) if brokers else None)
    out.low = min(r.rate for r in results)
    out.high = max(r.rate for r in results)
    return out


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far, if /proc tells."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def measure(kind: str, client: str, broker_pid: int, bootstrap: str, topic: str,
            records: int, size: int, partitions: int, client_src: Path) -> Result:
    cmd = [sys.executable, __file__, "--worker", kind, "--client", client.split("@")[0],
           "--bootstrap", bootstrap, "--topic", topic, "--records", str(records),
           "--size", str(size), "--partitions", str(partitions)]
    env = dict(os.environ)
    env["TIDEGATE_BENCH_WORKER"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(client_src), str(ROOT),
                                         env.get("PYTHONPATH", "")])
    before = process_cpu(broker_pid)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S * 2)
    after = process_cpu(broker_pid)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} with {client} failed:\n{proc.stderr[-3000:]}")
    timing = json.loads(proc.stdout.strip().splitlines()[-1])
    # The broker's figure covers the whole worker (its setup too): an upper bound.
    broker_us = None if before is None or after is None else \
        (after - before) / records * 1e6
    return Result(records / timing["wall"], timing["cpu"] / records * 1e6, broker_us)


def fill(bootstrap: str, topic: str, n: int, size: int, partitions: int) -> None:
    """Write the topic every consumer reads: `n` records, spread evenly (round robin)."""
    from confluent_kafka import Producer

    values = _payloads(size)
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": LINGER_MS,
                  "batch.size": BATCH_BYTES, "enable.idempotence": False})
    for i in range(n):
        while True:
            try:
                p.produce(topic, values[i & 15], partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(TIMEOUT_S):
        raise SystemExit("could not write the consume benchmark's topic")


def label(client: str) -> str:
    name, _, base = client.partition("@")
    return LABELS[name] + (" base" if base else "")


def table(title: str, cells: dict[tuple[str, int], list[Result]], clients: list[str],
          sizes: list[int]) -> list[str]:
    rows = {key: median(results) for key, results in cells.items()}
    out = [title]
    head = (f"{'client':<26}{'size':>6}{'msgs/s':>11}{'range':>21}{'MB/s':>8}"
            f"{'client us/msg':>15}{'broker us/msg':>15}{'vs aiokafka':>13}"
            f"{'vs confluent':>14}")
    out.append(head)
    out.append("-" * len(head))
    for size in sizes:
        for c in clients:
            r = rows[(c, size)]
            aio = rows.get(("aiokafka", size))
            ck = rows.get(("confluent", size))
            broker = "-" if r.broker_us is None else f"{r.broker_us:.2f}"
            spread = f"{r.low:,.0f}-{r.high:,.0f}"
            out.append(
                f"{label(c):<26}{size:>6}{r.rate:>11,.0f}{spread:>21}"
                f"{r.rate * size / 1e6:>8.1f}{r.client_us:>15.2f}{broker:>15}"
                f"{(f'{r.rate / aio.rate:.2f}' if aio else '-'):>13}"
                f"{(f'{r.rate / ck.rate:.2f}' if ck else '-'):>14}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=None,
                    help="records per measurement (default: 200000 for 100 B, 100000 "
                         "for 1 KiB; i.e. about 20 MB and 100 MB)")
    ap.add_argument("--sizes", default="100,1024", help="record value sizes in bytes")
    ap.add_argument("--clients", default=",".join(CLIENTS),
                    help=f"comma-separated subset of {', '.join(CLIENTS)}")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3,
                    help="measure each cell this many times (interleaved) and show the "
                         "median and the range (default 3)")
    ap.add_argument("--tidegate-src", type=Path, default=ROOT / "src", metavar="DIR",
                    help="take the clients (Tidegate's and the bench's imports) from this "
                         "src directory, e.g. another checkout's, to compare before/after; "
                         "the broker always runs from this checkout")
    ap.add_argument("--baseline-src", type=Path, default=None, metavar="DIR",
                    help="also measure Tidegate's clients from this src directory (e.g. "
                         "a worktree of HEAD) in the same rounds, as 'base' rows")
    ap.add_argument("--tidegate-consumer", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for Tidegate's consumers (Kafka's dotted key; "
                         "repeatable), e.g. queued.max.messages.kbytes=0 to fetch one "
                         "response at a time")
    ap.add_argument("--no-consume", action="store_true")
    ap.add_argument("--no-produce", action="store_true")
    # Internal: run one measurement in this process.
    ap.add_argument("--worker", choices=["produce", "consume"], help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return

    from bench._topics import create_topics
    from tests.integration.conftest import BrokerProcess

    extra = dict(kv.split("=", 1) for kv in args.tidegate_consumer)
    os.environ["TIDEGATE_BENCH_CONSUMER"] = json.dumps(extra)  # the workers inherit it
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    for c in clients:
        if c not in CLIENTS:
            ap.error(f"unknown client {c!r}; choose from {', '.join(CLIENTS)}")
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.baseline_src is not None:  # 'tidegate@base': Tidegate's client from there
        clients += [f"{c}@base" for c in clients if c.startswith("tidegate")]

    def src(client: str) -> Path:
        where: Path = args.baseline_src if client.endswith("@base") else args.tidegate_src
        return where

    def count(size: int) -> int:
        return args.records or (200_000 if size <= 512 else 100_000)

    produced: dict[tuple[str, int], list[Result]] = {}
    consumed: dict[tuple[str, int], list[Result]] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        broker = BrokerProcess(
            Path(tmp) / "data", overrides={"log.flush.interval.messages": "10000"}
        )
        broker.start()
        bs = broker.bootstrap
        assert broker.proc is not None
        pid = broker.proc.pid
        try:
            for size in sizes:
                n = count(size)
                if not args.no_consume:
                    source = f"consume-{size}"
                    create_topics(bs, [source], args.partitions)
                    fill(bs, source, n, size, args.partitions)
                for rep in range(args.repeat):
                    for c in clients:
                        if not args.no_produce:
                            topic = f"produce-{c.replace('@', '-')}-{size}-{rep}"
                            create_topics(bs, [topic], args.partitions)
                            r = measure("produce", c, pid, bs, topic, n, size, args.partitions,
                                        src(c))
                            produced.setdefault((c, size), []).append(r)
                            print(f"  produce {label(c):<25} {size:>5} B: {r.rate:>10,.0f} "
                                  "msgs/s", file=sys.stderr, flush=True)
                        if not args.no_consume:
                            r = measure("consume", c, pid, bs, source, n, size,
                                        args.partitions, src(c))
                            consumed.setdefault((c, size), []).append(r)
                            print(f"  consume {label(c):<25} {size:>5} B: {r.rate:>10,.0f} "
                                  "msgs/s", file=sys.stderr, flush=True)
        finally:
            broker.stop()
    elapsed = time.monotonic() - t0
    import aiokafka
    import confluent_kafka
    import kafka

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; broker and client share it")
    print(f"clients: confluent-kafka {confluent_kafka.version()[0]} (librdkafka "
          f"{confluent_kafka.libversion()[0]}), aiokafka {aiokafka.__version__}, "
          f"kafka-python {kafka.__version__}, tidegate (this tree)")
    print(f"workload: {args.partitions} partitions; "
          + ", ".join(f"{count(s):,} x {s} B" for s in sizes)
          + f"; acks=1, linger {LINGER_MS} ms, batch {BATCH_BYTES // 1024} KiB, no compression,"
          f" idempotence off; median of {args.repeat} rounds (range: lowest-highest)"
          + (f"; Tidegate consumer settings {extra}" if extra else ""))
    print()
    if produced:
        print("\n".join(table("produce (first send to last ack)", produced, clients, sizes)))
        print()
    if consumed:
        print("\n".join(table("consume (first poll to last record)", consumed, clients,
                              sizes)))
        print()
    print(f"total bench time {elapsed:.0f} s")


if __name__ == "__main__":
    main()
