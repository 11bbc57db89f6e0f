"""How the broker's cost grows with the work: partitions, producer ids, groups, transactions.

One broker on this machine (`BrokerProcess`, default settings: every acknowledged write
fsynced), started and stopped by the bench; a fresh data directory per point.

1. Partitions (1, 100, 1,000, 10,000): one topic with that many partitions, the same
   total load (`--records` x 1 KiB, confluent-kafka / librdkafka, acks=all, linger 5 ms,
   records spread round-robin over the partitions); produce MB/s, the broker's RSS,
   open files (/proc/<pid>/fd), memory maps (/proc/<pid>/maps) and threads after it;
   then the time from spawning the broker to its first served Metadata after a clean
   stop and after kill -9 (right after the load, so every partition's tail lies past the
   checkpointed recovery point and is CRC-checked again, Kafka's worst case).
   Each point runs under the settings in `--configs` (`new`: the defaults; `serial`:
   `num.recovery.threads.per.data.dir=1` and `log.max.open.files` above the need, i.e.
   every file open and one partition opened after the other, as before this bench;
   `nofsync`: `new` without an fsync per acknowledged write, Kafka's default).
2. Idle producer ids (1,000 .. 1,000,000): the broker's producer-state manager is fed
   one idempotent batch header per producer id (`ProducerStateManager.update`, the
   path every append takes after validation: writing them over the wire would take
   hours at a million ids), in this process; RSS growth, then the snapshot's size and
   its write (fsynced) and load times.
3. Consumer groups (10 .. 10,000), each with one committed offset
   (AlterConsumerGroupOffsets through confluent-kafka's AdminClient); the broker's RSS,
   then, after a clean restart, the time to the first served Metadata and until the
   last group's offset is served again (the coordinator's replay of
   __consumer_offsets; it answers COORDINATOR_LOAD_IN_PROGRESS until then).
4. Open transactions (1 .. 1,000): that many transactional producers (Tidegate's
   AsyncProducer, one event loop) each leave one record in an open transaction; then
   one more producer runs `--txns` one-record transactions; commit_transaction()
   latency p50 / p99.

Curves are drawn with matplotlib into bench/scale_*.png (`--no-plot` skips them).
Figures come from a shared, loaded 2-core machine: compare points of one run only.

    .venv/bin/python bench/scale.py [--quick] [--parts partitions,pids,groups,txns]
        [--records 50000] [--rounds 1] [--configs new,serial]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._topics import create_topics
from tests.integration.conftest import BrokerProcess

from tidegate.records.batch import BatchHeader
from tidegate.storage.producer_state import ProducerStateManager

HERE = Path(__file__).resolve().parent
TS = 1_700_000_000_000
CONFIGS: dict[str, dict[str, str]] = {
    "new": {},
    "serial": {"num.recovery.threads.per.data.dir": "1", "log.max.open.files": "1000000"},
    # the same as `new` without an fsync per acknowledged write (Kafka's default): shows
    # what the per-partition fsyncs cost as the partitions multiply
    "nofsync": {"log.flush.interval.messages": "9223372036854775807"},
}


# -- process probes ---------------------------------------------------------------------


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def probe(pid: int) -> dict[str, float]:
    return {
        "rss_mb": rss_mb(pid),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "maps": len(Path(f"/proc/{pid}/maps").read_text().splitlines()),
        "threads": len(os.listdir(f"/proc/{pid}/task")),
    }


def start_timed(b: BrokerProcess, timeout: float = 600.0) -> float:
    """Seconds from spawning the broker to its first answered Metadata request."""
    from confluent_kafka.admin import AdminClient

    t0 = time.perf_counter()
    b.start(timeout=timeout)
    AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=timeout)
    return time.perf_counter() - t0


def pid_of(b: BrokerProcess) -> int:
    assert b.proc is not None
    return b.proc.pid


# -- 1. partitions ----------------------------------------------------------------------


def produce(bootstrap: str, topic: str, partitions: int, n: int, size: int) -> float:
    """MB/s from the first produce() to the last acknowledgement."""
    from confluent_kafka import Producer

    p = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
        "batch.size": 1_000_000, "compression.type": "none",
        "queue.buffering.max.messages": n + 1000, "queue.buffering.max.kbytes": 2_097_151,
        "message.timeout.ms": 600_000,
    })
    p.list_topics(topic, timeout=60)
    errors: list[object] = []

    def cb(err: object, _m: object) -> None:
        if err is not None:
            errors.append(err)

    value = b"x" * size
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(600)
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    return n * size / 1e6 / elapsed


def partitions_point(count: int, config: str, records: int, size: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tidegate-scale-") as tmp:
        b = BrokerProcess(Path(tmp) / "data", overrides=CONFIGS[config])
        row: dict[str, Any] = {"partitions": count, "config": config}
        try:
            start_timed(b)
            row["create_s"] = create_topics(b.bootstrap, ["scale"], count, timeout=900)
            row["mb_s"] = produce(b.bootstrap, "scale", count, records, size)
            row.update(probe(pid_of(b)))
            b.stop(timeout=600)
            row["start_clean_s"] = start_timed(b)
            # a second load, then kill -9: its tails lie past the checkpointed recovery
            # point (checkpointed every 60 s), so the start must CRC-check them again
            produce(b.bootstrap, "scale", count, max(count, records // 10), size)
            b.kill()
            row["start_kill9_s"] = start_timed(b)
            row["fds_after_restart"] = probe(pid_of(b))["fds"]
        except Exception as exc:  # a point that fails is a finding, reported as such
            row["error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
            bad = [ln for ln in b.log_lines if "rror" in ln or "Too many" in ln]
            if bad:
                row["error"] += f" (broker: {bad[-1][-300:]})"
        finally:
            b.kill()
    return row


# -- 2. idle producer ids ---------------------------------------------------------------


def producers_point(count: int) -> dict[str, Any]:
    gc.collect()
    before = rss_mb()
    psm = ProducerStateManager()
    t0 = time.perf_counter()
    for i in range(count):
        psm.update(BatchHeader(
            base_offset=3 * i, batch_length=100, partition_leader_epoch=0, magic=2, crc=0,
            attributes=0, last_offset_delta=2, base_timestamp=TS, max_timestamp=TS,
            producer_id=1_000_000 + i, producer_epoch=0, base_sequence=0, records_count=3,
        ), TS)
    fill_s = time.perf_counter() - t0
    row: dict[str, Any] = {"producer_ids": count, "rss_growth_mb": rss_mb() - before,
                           "update_us": fill_s / count * 1e6}
    with tempfile.TemporaryDirectory(prefix="tidegate-scale-") as tmp:
        t0 = time.perf_counter()
        path = psm.take_snapshot(Path(tmp))
        row["snapshot_write_s"] = time.perf_counter() - t0
        row["snapshot_mb"] = path.stat().st_size / 1e6
        loaded = ProducerStateManager()
        t0 = time.perf_counter()
        loaded.load_latest_snapshot(Path(tmp), psm.map_end_offset)
        row["snapshot_load_s"] = time.perf_counter() - t0
        assert len(loaded.producers) == count
    del psm, loaded
    gc.collect()
    return row


# -- 3. consumer groups -----------------------------------------------------------------


def commit_offsets(bootstrap: str, topic: str, groups: int) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    pending: list[Any] = []
    for g in range(groups):
        req = ConsumerGroupTopicPartitions(f"g{g}", [TopicPartition(topic, 0, g + 1)])
        pending.extend(admin.alter_consumer_group_offsets([req], request_timeout=120).values())
        if len(pending) >= 200:
            for f in pending:
                f.result()
            pending.clear()
    for f in pending:
        f.result()


def group_offset(bootstrap: str, topic: str, group: str) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    res = admin.list_consumer_group_offsets([req], request_timeout=300)[group].result()
    return int(res.topic_partitions[0].offset)


def groups_point(count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tidegate-scale-") as tmp:
        b = BrokerProcess(Path(tmp) / "data")
        row: dict[str, Any] = {"groups": count}
        try:
            start_timed(b)
            create_topics(b.bootstrap, ["g"], 1)
            base = rss_mb(pid_of(b))
            t0 = time.perf_counter()
            commit_offsets(b.bootstrap, "g", count)
            row["commit_s"] = time.perf_counter() - t0
            row["rss_mb"] = rss_mb(pid_of(b))
            row["rss_growth_mb"] = row["rss_mb"] - base
            b.stop(timeout=600)
            t0 = time.perf_counter()
            row["start_s"] = start_timed(b)
            assert group_offset(b.bootstrap, "g", f"g{count - 1}") == count
            row["loaded_s"] = time.perf_counter() - t0
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
        finally:
            b.kill()
    return row


# -- 4. open transactions ---------------------------------------------------------------


async def _txn_latencies(bootstrap: str, open_txns: int, txns: int) -> list[float]:
    from tidegate.client.producer.producer import AsyncProducer

    def conf(tid: str) -> dict[str, object]:
        return {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0}

    holders = [AsyncProducer(conf(f"open-{i}")) for i in range(open_txns)]
    sem = asyncio.Semaphore(50)

    async def hold(p: AsyncProducer) -> None:
        async with sem:
            await p.start()
            await p.init_transactions()
            p.begin_transaction()
            await p.send_and_wait("t", b"open", partition=0)

    await asyncio.gather(*(hold(p) for p in holders))
    lat = []
    async with AsyncProducer(conf("measured")) as p:
        await p.init_transactions()
        for _ in range(txns):
            p.begin_transaction()
            await p.send_and_wait("t", b"x" * 100, partition=0)
            t0 = time.perf_counter()
            await p.commit_transaction()
            lat.append(time.perf_counter() - t0)
    for p in holders:
        await p.abort_transaction()
        await p.close()
    return lat


def txns_point(count: int, txns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tidegate-scale-") as tmp:
        b = BrokerProcess(Path(tmp) / "data")
        row: dict[str, Any] = {"open_txns": count}
        try:
            start_timed(b)
            create_topics(b.bootstrap, ["t"], 1)
            lat = sorted(asyncio.run(_txn_latencies(b.bootstrap, count, txns)))
            row["commit_p50_ms"] = lat[len(lat) // 2] * 1000
            row["commit_p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
            row["rss_mb"] = rss_mb(pid_of(b))
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
        finally:
            b.kill()
    return row


# -- output -----------------------------------------------------------------------------


def fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(title: str, rows: list[dict[str, Any]]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys and k != "error"]
    print(f"\n### {title}\n")
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(fmt(r.get(k, "-")) for k in keys) + " |")
    for r in rows:
        if "error" in r:
            print(f"\n{r.get('config', '')} {next(iter(r.values()))}: {r['error']}")
    sys.stdout.flush()


def median_rows(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """One row per key tuple: the median of every numeric field over the rounds, with
    the spread (min-max) of the first measured field."""
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    merged = []
    for group in out.values():
        m: dict[str, Any] = {k: group[0][k] for k in keys}
        m["rounds"] = len(group)
        for k in group[0]:
            vals = [r[k] for r in group if isinstance(r.get(k), int | float) and k not in keys]
            if vals:
                m[k] = statistics.median(vals)
        errs = [r["error"] for r in group if "error" in r]
        if errs:
            m["error"] = errs[0]
        merged.append(m)
    return merged


def plot(name: str, rows: list[dict[str, Any]], x: str, ys: list[tuple[str, str]],
         series: str | None = None) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no plot)")
        return
    fig, axes = plt.subplots(1, len(ys), figsize=(4.2 * len(ys), 3.4))
    axes = [axes] if len(ys) == 1 else list(axes)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(str(r[series]) if series else "", []).append(r)
    for ax, (key, label) in zip(axes, ys):
        for s, rs in groups.items():
            pts = [(r[x], r[key]) for r in rs if isinstance(r.get(key), int | float)]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=s or None)
        ax.set_xscale("log")
        ax.set_xlabel(x.replace("_", " "))
        ax.set_title(label, fontsize=10)
        ax.grid(True, alpha=0.3)
        if series:
            ax.legend(fontsize=8)
    fig.tight_layout()
    path = HERE / f"scale_{name}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    print(f"(curve: {path.relative_to(HERE.parent)})")


def run(name: str, fn: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    t0 = time.perf_counter()
    rows = fn()
    print(f"({name}: {time.perf_counter() - t0:.0f} s)")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="two small points per part (~15 s idle; make bench-quick)")
    ap.add_argument("--parts", default="partitions,pids,groups,txns")
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--configs", default="new")
    ap.add_argument("--partitions", default="")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args()
    q = args.quick
    parts = set(args.parts.split(","))
    counts = ([int(c) for c in args.partitions.split(",")] if args.partitions
              else [1, 300] if q else [1, 100, 1000, 10_000])
    records = 3000 if q else args.records
    configs = args.configs.split(",")
    print(f"scale bench on {os.cpu_count()} cores (a shared, loaded machine), "
          f"{'quick' if q else 'full'} sizes")
    if "partitions" in parts:
        def parts_rows() -> list[dict[str, Any]]:
            rows = []
            for rnd in range(args.rounds):
                for c in counts:
                    # the configs' order rotates each round: drift hits both alike
                    for cfg in configs[rnd % len(configs):] + configs[:rnd % len(configs)]:
                        rows.append(partitions_point(c, cfg, records, args.size))
                        print("  ", rows[-1], flush=True)
            return median_rows(rows, ("partitions", "config"))
        rows = run("partitions", parts_rows)
        table(f"Partitions ({records:,} x {args.size} B in total, medians of {args.rounds})",
              rows)
        if not args.no_plot:
            plot("partitions", rows, "partitions",
                 [("mb_s", "produce MB/s"), ("fds", "open files"), ("rss_mb", "RSS MB"),
                  ("start_kill9_s", "start after kill -9 (s)")], series="config")
    if "pids" in parts:
        pcounts = [1000, 30_000] if q else [1000, 10_000, 100_000, 1_000_000]
        rows = run("producer ids", lambda: [producers_point(c) for c in pcounts])
        table("Idle producer ids (one partition's producer state)", rows)
        if not args.no_plot:
            plot("producer_ids", rows, "producer_ids",
                 [("rss_growth_mb", "memory growth MB"), ("snapshot_write_s", "snapshot write s"),
                  ("snapshot_load_s", "snapshot load s")])
    if "groups" in parts:
        gcounts = [10, 200] if q else [10, 100, 1000, 10_000]
        rows = run("groups", lambda: [groups_point(c) for c in gcounts])
        table("Consumer groups (one committed offset each)", rows)
        if not args.no_plot:
            plot("groups", rows, "groups",
                 [("rss_growth_mb", "broker RSS growth MB"),
                  ("loaded_s", "restart to last group served (s)")])
    if "txns" in parts:
        tcounts = [1, 30] if q else [1, 10, 100, 1000]
        rows = run("txns", lambda: [txns_point(c, 10 if q else 100) for c in tcounts])
        table("Open transactions (one more producer commits one-record transactions)", rows)
        if not args.no_plot:
            plot("open_txns", rows, "open_txns",
                 [("commit_p50_ms", "commit p50 ms"), ("commit_p99_ms", "commit p99 ms"),
                  ("rss_mb", "broker RSS MB")])


if __name__ == "__main__":
    main()
