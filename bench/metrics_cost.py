"""What metrics cost: produce throughput with metrics on vs off, and a 2,000-partition scrape.

Two brokers run side by side on the same disk: one with the HTTP listener on
(`http.listeners=http://127.0.0.1:0`: request counters in the request path, the KIP-714
APIs advertised) and scraped every `--scrape-interval` seconds during the load, one
with `http.listeners=` empty (no counters at all). Each round produces the same
workload (confluent-kafka, bench/produce_consume.py's producer) to both, in alternating
order; the median of the rounds is compared. Two modes: acks=all with Tidegate's
default fsync per write, and acks=1 to a topic with `flush.messages` 10000, where the
broker's CPU rather than the disk is the limit, so the counters' share is largest.

Then a topic of `--scrape-partitions` partitions is created on the metrics broker and
/metrics is fetched `--scrapes` times: the wall time of each scrape (HTTP included)
and the size of the answer are printed.

    .venv/bin/python bench/metrics_cost.py [--records 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.produce_consume import produce
from tests.integration.conftest import BrokerProcess

MODES = [("acks=all, fsync per write", "all", {}),
         ("acks=1, flush.messages=10000", "1", {"flush.messages": "10000"})]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def counting_cost_us(n: int = 20000) -> tuple[float, float]:
    """CPU microseconds RequestMetrics adds to one Produce (3 partitions of ~100 KB
    batches) and to one Fetch answering 3 partitions, measured in this process."""
    from tidegate.protocol.messages import build, request_class, response_class
    from tidegate.records.builder import build_batch
    from tidegate.server.context import RequestContext
    from tidegate.server.metrics.requests import RequestMetrics

    batch = build_batch([(1_700_000_000_000, None, b"x" * 1024, ()) for _ in range(100)])
    parts = [{"index": i, "records": batch} for i in range(3)]
    req = build(request_class(0, 9), {"acks": -1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": parts}]})
    resp = build(response_class(0, 9), {"responses": [{"name": "t", "partition_responses": [
        {"index": i, "error_code": 0} for i in range(3)]}]})
    freq = build(request_class(1, 12), {"max_wait": 0, "min_bytes": 1, "topics": [
        {"topic": "t", "partitions": [{"partition": i, "fetch_offset": 0,
                                       "partition_max_bytes": 1 << 20} for i in range(3)]}]})
    fresp = build(response_class(1, 12), {"responses": [{"topic": "t", "partitions": [
        {"partition_index": i, "records": batch} for i in range(3)]}]})
    rm = RequestMetrics(lambda _id: None)
    out = []
    for key, rq, rs in ((0, req, resp), (1, freq, fresp)):
        ctx = RequestContext(key, 9 if key == 0 else 12, 1, "bench", "peer")
        t0 = time.process_time()
        for _ in range(n):
            rm._count(ctx, rq, rs, 0.0, 0.0, 0.0)
        out.append((time.process_time() - t0) / n * 1e6)
    return out[0], out[1]


def count_produce_requests(url: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "kafka_network_requestmetrics_requests_total"
               and s.labels.get("request") == "Produce")


def scrape_once(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        body = r.read()
    return (time.perf_counter() - t0) * 1000.0, len(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scrape-interval", type=float, default=1.0)
    ap.add_argument("--scrape-partitions", type=int, default=2000)
    ap.add_argument("--scrapes", type=int, default=20)
    args = ap.parse_args()

    from confluent_kafka.admin import AdminClient, NewTopic

    rates: dict[tuple[str, bool], list[float]] = {}
    cpu: dict[tuple[str, bool], float] = {}  # broker CPU seconds spent producing
    with tempfile.TemporaryDirectory(dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp:
        on = BrokerProcess(Path(tmp) / "on", overrides={"http.listeners": "http://127.0.0.1:0"})
        off = BrokerProcess(Path(tmp) / "off", overrides={"http.listeners": ""})
        on.start()
        off.start()
        assert on.http_url is not None and off.http_url is None
        stop = threading.Event()
        scrapes: list[float] = []

        def scraper() -> None:
            while not stop.wait(args.scrape_interval):
                scrapes.append(scrape_once(str(on.http_url))[0])

        thread = threading.Thread(target=scraper, daemon=True)
        thread.start()
        try:
            for b in (on, off):
                admin = AdminClient({"bootstrap.servers": b.bootstrap})
                topics = [NewTopic(f"m{m}-r{r}", args.partitions, 1, config=cfg)
                          for r in range(args.rounds) for m, (_l, _a, cfg) in enumerate(MODES)]
                for fut in admin.create_topics(topics).values():
                    fut.result(60)
            for r in range(args.rounds):
                for m, (label, acks, _cfg) in enumerate(MODES):
                    order = (on, off) if (r + m) % 2 == 0 else (off, on)
                    for b in order:
                        assert b.proc is not None
                        c0 = cpu_seconds(b.proc.pid)
                        rate = produce(b.bootstrap, f"m{m}-r{r}", args.records, args.size,
                                       acks).mb_s
                        cpu[(label, b is on)] = cpu.get((label, b is on), 0.0) + \
                            cpu_seconds(b.proc.pid) - c0
                        rates.setdefault((label, b is on), []).append(rate)
            stop.set()
            thread.join()
            produce_requests = count_produce_requests(str(on.http_url))
            admin = AdminClient({"bootstrap.servers": on.bootstrap})
            admin.create_topics([NewTopic("wide", args.scrape_partitions, 1)])["wide"].result(600)
            scrape_once(str(on.http_url))  # warm
            wide = [scrape_once(str(on.http_url)) for _ in range(args.scrapes)]
        finally:
            stop.set()
            on.stop()
            off.stop()

    produce_us, fetch_us = counting_cost_us()
    mb = args.records * args.size / 1e6
    print(f"machine: {os.cpu_count()} cores; workload: {args.records} x {args.size} B = "
          f"{mb:.0f} MB per run, {args.partitions} partitions, {args.rounds} rounds, "
          f"on/off alternating; metrics broker scraped every {args.scrape_interval:g} s")
    print(f"{'mode':<34}{'metrics on':>12}{'off':>10}{'loss':>9}   (MB/s, median; range)")
    for label, _a, _c in MODES:
        a, b = rates[(label, True)], rates[(label, False)]
        ma, mb_ = statistics.median(a), statistics.median(b)
        print(f"{label:<34}{ma:>12.1f}{mb_:>10.1f}{(1 - ma / mb_) * 100:>8.1f}%   "
              f"on {min(a):.0f}-{max(a):.0f}, off {min(b):.0f}-{max(b):.0f}")
    # CPU per GB is steadier than MB/s on a shared machine: the broker's own CPU time
    print(f"{'broker CPU seconds per GB produced':<34}{'on':>12}{'off':>10}{'extra':>9}")
    gb = args.records * args.size * args.rounds / 1e9
    for label, _a, _c in MODES:
        con, coff = cpu[(label, True)] / gb, cpu[(label, False)] / gb
        print(f"{label:<34}{con:>12.2f}{coff:>10.2f}{(con / coff - 1) * 100:>8.1f}%")
    print(f"request counting, CPU per request: Produce (3 x 100 KB) {produce_us:.1f} us, "
          f"Fetch (3 partitions) {fetch_us:.1f} us")
    # the deterministic part of the cost: counting x requests, against the CPU the
    # broker spends on the same bytes with metrics off
    per_gb = produce_requests / (gb * len(MODES))
    off_cpu = statistics.mean(cpu[(label, False)] / gb for label, _a, _c in MODES)
    print(f"Produce requests per GB: {per_gb:.0f}; counting them costs "
          f"{per_gb * produce_us / 1e6:.4f} CPU s per GB = "
          f"{per_gb * produce_us / 1e6 / off_cpu * 100:.2f} % of the broker's CPU per GB")
    if scrapes:
        med = statistics.median(scrapes)
        print(f"scrapes during the load: {len(scrapes)}, median {med:.1f} ms, max "
              f"{max(scrapes):.1f} ms: {med / 10:.2f} % of one core scraped every second, "
              f"{med / 150:.2f} % every 15 s")
    times = sorted(t for t, _ in wide)
    total = args.scrape_partitions + 100  # + __consumer_offsets and __transaction_state
    print(f"scrape of {total} partitions ({args.scrapes} scrapes, {wide[-1][1] / 1e6:.1f} MB): "
          f"median {statistics.median(times):.0f} ms, p95 {times[int(len(times) * .95) - 1]:.0f}"
          f" ms, max {times[-1]:.0f} ms")


if __name__ == "__main__":
    main()
