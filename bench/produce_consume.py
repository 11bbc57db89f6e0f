"""Produce and consume throughput of a Tidegate broker, beside the disk's own bandwidth.

confluent-kafka (librdkafka) is the load generator so the client is not what is
measured. 1 KiB records, acks=all. In the same run the disk under the data directory
is measured writing 1 MiB blocks with an fdatasync after each (what the broker must
do to acknowledge a request durably) and with a single fdatasync at the end.

    .venv/bin/python bench/produce_consume.py [--records 300000] [--partitions 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.conftest import BrokerProcess


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


def produce(bootstrap: str, topic: str, n: int, size: int) -> float:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "compression.type": "none",
            "enable.idempotence": False,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    payload = os.urandom(size)
    failures = []

    def cb(err: object, _m: object) -> None:
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, str(i).encode(), on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(300)
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{len(failures)} deliveries failed, e.g. {failures[0]}")
    return n * size / elapsed / 1e6


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--disk-mb", type=int, default=256)
    args = ap.parse_args()

    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory(dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        disk_sync = disk_bandwidth(data, args.disk_mb, sync_each=True)
        disk_raw = disk_bandwidth(data, args.disk_mb, sync_each=False)
        broker = BrokerProcess(data)
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("bench", args.partitions, 1)])["bench"].result(30)
            prod = produce(broker.bootstrap, "bench", args.records, args.size)
            cons = consume(broker.bootstrap, "bench", args.records, args.size, args.partitions)
        finally:
            broker.stop()
    mb = args.records * args.size / 1e6
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, {platform.python_version()}")
    print(
        f"workload: {args.records} records x {args.size} B = {mb:.0f} MB, "
        f"{args.partitions} partitions, acks=all, confluent-kafka load generator"
    )
    print(f"{'measurement':<44}{'MB/s':>10}{'vs disk':>10}")
    print(f"{'disk: 1 MiB writes + fdatasync each':<44}{disk_sync:>10.1f}{1.0:>10.2f}")
    print(
        f"{'disk: 1 MiB writes, one fdatasync':<44}{disk_raw:>10.1f}{disk_raw / disk_sync:>10.2f}"
    )
    print(f"{'tidegate produce (acks=all, fsynced)':<44}{prod:>10.1f}{prod / disk_sync:>10.2f}")
    print(f"{'tidegate consume':<44}{cons:>10.1f}{cons / disk_sync:>10.2f}")
    print(f"consume/produce ratio: {cons / prod:.2f}")


if __name__ == "__main__":
    main()
