"""What idempotence costs: produce throughput with and without it, and producer-state memory.

1. Throughput: confluent-kafka (librdkafka) produces the same records to one broker with
   `enable.idempotence` false and true (acks=all both), in rotating rounds so drift
   in the machine hits all alike; best and median rounds are printed side by side with
   the difference in %. librdkafka caps an idempotent producer at 5 requests in flight
   per connection (and in practice one per partition), so a third run, idempotence off
   with that cap, separates the client's pipelining from the broker's work. Wall-clock
   throughput is noisy on a shared machine, so the broker's CPU time per record (all its
   threads, from /proc schedstat) is printed too: what idempotence costs the broker.
2. The broker's own append path in-process (`Log.append`, no network, no fsync): the
   same number of batches with and without producer ids, to isolate the cost of the
   sequence check and the state update.
3. Memory of 100,000 idle producer ids in one partition's `ProducerStateManager`
   (tracemalloc), beside `memory_estimate()`, plus the size and write/load time of the
   snapshot that holds them.

Apache Kafka runs part 1 too when its jars are there (`make deps-kafka`, `--peer`; see
`bench/peer_kafka.py`): its default (no fsync) and `log.flush.interval.messages=1`, the
same modes and rounds, the targets' order rotating round by round.

    .venv/bin/python bench/idempotence.py [--records 200000] [--size 100] [--rounds 3]
        [--peer auto|none|kafka,kafka-fsync] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peer_kafka
from tests.integration.conftest import BrokerProcess

from tidegate.common.clock import ManualClock
from tidegate.records.batch import BatchHeader
from tidegate.records.builder import build_batch
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log
from tidegate.storage.producer_state import ProducerStateManager

TS = 1_700_000_000_000


def broker_cpu_seconds(pid: int) -> float:
    """CPU time used so far by every thread of process `pid` (Linux schedstat, ns)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
    return total / 1e9


def produce(
    bootstrap: str, topic: str, n: int, size: int, idempotent: bool, in_flight: int | None = None
) -> float:
    """Records per second, from the first produce() to the last acknowledgement."""
    from confluent_kafka import Producer

    conf: dict[str, str | int | bool] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "compression.type": "none",
        "enable.idempotence": idempotent,
        "queue.buffering.max.messages": n + 1000,
        "queue.buffering.max.kbytes": 1_048_576,
    }
    if in_flight is not None:
        conf["max.in.flight.requests.per.connection"] = in_flight
    p = Producer(conf)
    payload = os.urandom(size)
    failures: list[object] = []

    def cb(err: object, _m: object) -> None:
        if err is not None:
            failures.append(err)

    p.list_topics(topic, timeout=10)  # connect (and get a producer id) before the clock
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, str(i).encode(), on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300):
        raise SystemExit("flush timed out")
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{len(failures)} deliveries failed, e.g. {failures[0]}")
    return n / elapsed


def _row(
    label: str, off: float, on: float, fmt: str = ",.0f", lower_is_better: bool = False
) -> str:
    diff = (on / off - 1) * 100
    note = " (cost)" if lower_is_better else ""
    return f"  {label:26}{off:>16{fmt}}{on:>16{fmt}}{diff:>+11.1f}%{note}"


# (label, enable.idempotence, max.in.flight.requests.per.connection or librdkafka's default)
MODES = (
    ("off", False, None),
    ("off, 5 in flight", False, 5),  # the pipelining cap idempotence imposes
    ("on", True, None),
)


def throughput(args: argparse.Namespace) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    peers, why_not = peer_kafka.wanted(args.peer)
    names = ["tidegate", *peers]
    # per target (Tidegate, then each Kafka mode) and idempotence mode: one value per round
    rate = {t: {m[0]: [] for m in MODES} for t in names}
    cpu = {t: {m[0]: [] for m in MODES} for t in names}  # broker CPU us per record
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-") as tmp:
        kafkas = peer_kafka.start(Path(tmp), peers)  # before Tidegate; not timed
        broker = BrokerProcess(Path(tmp) / "data")
        broker.start()
        try:
            assert broker.proc is not None
            pid = broker.proc.pid
            where: dict[str, tuple[str, Callable[[], float]]] = {
                "tidegate": (broker.bootstrap, lambda: broker_cpu_seconds(pid)),
                **{m: (k.bootstrap, k.cpu_seconds) for m, k in kafkas.items()}}
            topics = [f"t{i}" for i in range(len(MODES) * args.rounds + 1)]
            for bootstrap, _cpu in where.values():
                admin = AdminClient({"bootstrap.servers": bootstrap})
                futures = admin.create_topics([NewTopic(t, args.partitions, 1) for t in topics])
                for f in futures.values():
                    f.result(30)
                # warm-up (and the JVM's compilation of its hot paths)
                produce(bootstrap, topics[-1], max(args.records // 5, 20_000), args.size, True)
            for r in range(args.rounds):
                for k in range(len(names)):  # the targets rotate too
                    t = names[(r + k) % len(names)]
                    bootstrap, cpu_seconds = where[t]
                    order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]  # rotate
                    for mode in order:
                        label, idem, in_flight = mode
                        topic = topics[len(MODES) * r + MODES.index(mode)]
                        before = cpu_seconds()
                        rate[t][label].append(
                            produce(bootstrap, topic, args.records, args.size, idem, in_flight))
                        cpu[t][label].append((cpu_seconds() - before) / args.records * 1e6)
        finally:
            broker.stop()
            peer_kafka.stop_all(kafkas)
    print(
        f"produce, librdkafka, acks=all, {args.records:,} x {args.size} B records, "
        f"{args.partitions} partitions, {args.rounds} rounds of each, order rotated"
    )
    print(peer_kafka.describe(peers) if why_not is None else f"note: {why_not}")
    for t in names:
        best = {k: max(v) for k, v in rate[t].items()}
        med = {k: statistics.median(v) for k, v in rate[t].items()}
        cpu_med = {k: statistics.median(v) for k, v in cpu[t].items()}
        head = "".join(f"{m[0]:>18}" for m in MODES)
        title = "Tidegate" if t == "tidegate" else peer_kafka.MODES[t][0]
        print(f"  {title + ', idempotence':26}{head}{'on vs off':>11}{'on vs off,5':>13}")
        for label, values, fmt in (
            ("records/s, best round", best, ",.0f"),
            ("records/s, median", med, ",.0f"),
            ("broker CPU us/record, med.", cpu_med, ".3f"),
        ):
            cells = "".join(f"{values[m[0]]:>18{fmt}}" for m in MODES)
            d1 = (values["on"] / values["off"] - 1) * 100
            d2 = (values["on"] / values["off, 5 in flight"] - 1) * 100
            print(f"  {label:26}{cells}{d1:>+10.1f}%{d2:>+12.1f}%")
        for label, values_ in rate[t].items():
            print(f"  rounds {label + ':':18} {', '.join(f'{x:,.0f}' for x in values_)}")


def append_path(batches: int) -> None:
    """Log.append in-process: plain batches vs batches from 100 idempotent producers."""
    records = [(TS + i, None, b"x" * 100) for i in range(10)]
    plain = build_batch(records)
    idem = [
        build_batch(records, producer_id=p, producer_epoch=0, base_sequence=10 * (i // 100))
        for i, p in ((i, i % 100) for i in range(batches))
    ]
    cfg = LogConfig(flush_messages=1_000_000)
    results = {}
    for name, data in (("off", [plain] * batches), ("on", idem)):
        with tempfile.TemporaryDirectory(prefix="tidegate-bench-") as tmp:
            lg = Log.open(Path(tmp) / "t-0", cfg, ManualClock(TS))
            start = time.perf_counter()
            for b in data:
                lg.append(b)
            results[name] = batches / (time.perf_counter() - start)
            lg.close()
    off, on = results["off"], results["on"]
    print(f"\nLog.append in-process, {batches:,} batches of 10 x 100 B (no network, no fsync)")
    print(_row("batches/s", off, on))
    print(
        f"  {'us per batch':26}{1e6 / off:>16.2f}{1e6 / on:>16.2f}{1e6 / on - 1e6 / off:>+11.2f} us"
    )


def memory(producers: int) -> None:
    headers = [
        BatchHeader(
            base_offset=3 * i,
            batch_length=100,
            partition_leader_epoch=0,
            magic=2,
            crc=0,
            attributes=0,
            last_offset_delta=2,
            base_timestamp=TS,
            max_timestamp=TS,
            producer_id=1_000_000 + i,
            producer_epoch=0,
            base_sequence=0,
            records_count=3,
        )
        for i in range(producers)
    ]
    psm = ProducerStateManager()
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for h in headers:
        psm.update(h, TS)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    print(f"\nproducer state of {producers:,} idle producer ids (one cached batch each)")
    print(f"  tracemalloc:        {used / 1e6:8.1f} MB  ({used / producers:.0f} B per producer)")
    print(f"  memory_estimate():  {psm.memory_estimate() / 1e6:8.1f} MB")
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-") as tmp:
        start = time.perf_counter()
        path = psm.take_snapshot(Path(tmp))
        wrote = time.perf_counter() - start
        loaded = ProducerStateManager()
        start = time.perf_counter()
        loaded.load_latest_snapshot(Path(tmp), psm.map_end_offset)
        read = time.perf_counter() - start
        print(
            f"  snapshot:           {path.stat().st_size / 1e6:8.1f} MB, written (fsynced) in "
            f"{wrote * 1000:.0f} ms, loaded in {read * 1000:.0f} ms"
        )
        assert len(loaded.producers) == producers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--append-batches", type=int, default=50_000)
    ap.add_argument("--producers", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true",
                    help="20,000 records, 1 round, 5,000 batches, 10,000 producer ids")
    peer_kafka.add_peer_option(ap)
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds, args.append_batches, args.producers = 20_000, 1, 5000, 10_000
    throughput(args)
    append_path(args.append_batches)
    memory(args.producers)


if __name__ == "__main__":
    main()
