"""The broker's CPU per Produce request as the partitions of one topic grow, beside Kafka.

`bench/load_sweep.py` drives librdkafka, whose batching changes with the partition
count (fewer records per request at 1,000 partitions), so its CPU per record mixes the
cost per request with the request's size. Here the requests are the same at every
point: encoded once (Produce v9, acks=all by default, one partition per request as
librdkafka sends them, one batch of `--records` x `--size` B records, no producer id,
no compression), then sent round-robin over the N partitions of one topic by
`--connections` raw TCP connections, each keeping `--depth` requests pipelined (send
a batch, read its answers, send the next), for `--seconds` per round. Reported per
point (1, 100, 1,000 partitions by default) and target: requests/s, MB/s, the broker's
CPU per request (all its threads, /proc schedstat before/after the round) and for
Tidegate its event-loop thread alone; the ratio of each to the target's own at the
fewest partitions (1.00 would be the flat cost issue 20's goal 5 aims at).

Each point starts a fresh Tidegate broker per source tree (this tree, and each `--tree
DIR`, e.g. a `git worktree` of main with its C extensions built: an A/B in one run), so
the broker has exactly that topic's logs (and the internal ones); the Kafka peer
(`--peer`, default `kafka`: Kafka's defaults, no fsync) runs once for the whole run,
warmed up untimed, and gets a fresh topic per point, deleted after it. Tidegate keeps
its default (every acknowledged write fsynced) unless `--nofsync` (the topic's
flush.messages=1000000). Before timing, every partition of every target has answered a
Produce without error; each round rotates the order of the targets and calls sync(2)
before each target's load (untimed). The load generator (this process, one thread per
connection) reads only each answer's size, so it costs the broker's cores little.
`--records 1` shows the fixed cost of a request (librdkafka's requests at 1,000
partitions carry a few records each); `--nofsync` takes the group commit out.

    .venv/bin/python bench/produce_requests.py [--partitions 1,100,1000] [--rounds 3]
        [--seconds 5] [--connections 2] [--depth 8] [--records 64] [--size 1024]
        [--acks -1] [--nofsync] [--tree /work/main] [--peer kafka|kafka-fsync|none]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peer_kafka
from bench._cluster_launch import Broker, progress, stop_all
from bench._topics import create_topics, delete_topics
from bench.requests import (
    TreeBroker,
    _connect,
    _read_frame,
    await_answers,
    loop_cpu,
    run_pumps,
    send_frames,
)

from tidegate.protocol.framing import encode_frame
from tidegate.protocol.headers import encode_request_header, parse_response_header
from tidegate.protocol.messages import build, decode, encode, request_class, response_class
from tidegate.records.builder import build_batch

PRODUCE = (0, 9)
ROOT = Path(__file__).resolve().parents[1]


def produce_requests(topic: str, partitions: int, records: int, size: int,
                     acks: int) -> list[bytes]:
    """One framed Produce request per partition, each carrying the same batch."""
    value = bytes(size)
    batch = build_batch((int(time.time() * 1000), None, value) for _ in range(records))
    cls = request_class(*PRODUCE)
    out = []
    for p in range(partitions):
        body = encode(build(cls, {"acks": acks, "timeout": 30000, "topic_data": [
            {"name": topic, "partition_data": [{"index": p, "records": batch}]}]}))
        out.append(encode_frame(encode_request_header(*PRODUCE, p, "bench", True) + body))
    return out


def wait_writable(bootstrap: str, requests: list[bytes], timeout: float = 120.0) -> None:
    """Each partition's request once, again until every answer has no error."""
    cls = response_class(*PRODUCE)
    deadline = time.monotonic() + timeout
    left = list(requests)
    with _connect(bootstrap) as sock:
        while left:
            failed = []
            for req in left:
                sock.sendall(req)
                frame = _read_frame(sock)
                _, pos = parse_response_header(frame, True)
                resp: Any = decode(cls, frame, pos)
                if any(int(p.error_code) for t in resp.responses
                       for p in t.partition_responses):
                    failed.append(req)
            left = failed
            if left and time.monotonic() > deadline:
                raise SystemExit(f"{len(left)} partitions still refuse Produce on {bootstrap}")
            if left:
                time.sleep(0.2)


def _pump(bootstrap: str, requests: list[bytes], start: int, depth: int,
          stop: threading.Event, counts: list[int], i: int) -> None:
    """Send `depth` consecutive requests (round-robin over the partitions), read their
    answers (sizes only), again."""
    with _connect(bootstrap) as sock:
        n, k, pending = 0, start, b""
        while not stop.is_set():
            send_frames(sock, [requests[(k + j) % len(requests)] for j in range(depth)])
            k = (k + depth) % len(requests)
            pending = await_answers(sock, pending, depth)
            n += depth
            counts[i] = n


def load_round(bootstrap: str, requests: list[bytes], connections: int, depth: int,
               seconds: float) -> tuple[int, float]:
    """(requests answered, elapsed seconds) of `connections` pumps run for `seconds`."""
    step = max(1, len(requests) // connections)
    return run_pumps(_pump, [(bootstrap, requests, i * step, depth)
                             for i in range(connections)], seconds, join_s=60)


Row = tuple[float, float, float, float | None]  # requests/s, MB/s, CPU us/req, loop us/req


def run_point(p: int, args: argparse.Namespace, trees: dict[str, Path], base: Path,
              kafkas: dict[str, Any], res: dict[tuple[int, str], list[Row]]) -> None:
    """Fresh Tidegate brokers and a fresh topic of `p` partitions everywhere, then
    `--rounds` timed rounds over the targets, order rotated."""
    topic = f"bench-{p}"
    config = {"flush.messages": "1000000"} if args.nofsync else {}
    brokers: dict[str, Any] = {name: TreeBroker(name, base / f"{i}-{p}", tree)
                               for i, (name, tree) in enumerate(trees.items())}
    try:
        for b in brokers.values():
            b.start()
        for b in brokers.values():
            b.wait_ready()
        brokers.update(kafkas)
        requests = produce_requests(topic, p, args.records, args.size, args.acks)
        for name, b in brokers.items():
            progress(f"{p} partitions: topic and warm-up, {name}")
            create_topics(b.bootstrap, [topic], p, config=config if name in trees else {})
            wait_writable(b.bootstrap, requests)
            load_round(b.bootstrap, requests, args.connections, args.depth, 1.0)
        names = list(brokers)
        per_request = len(requests[0])
        for r in range(args.rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                b = brokers[name]
                progress(f"{p} partitions, round {r + 1}/{args.rounds}: {name}")
                os.sync()
                cpu0, loop0 = b.cpu_seconds(), loop_cpu(b)
                n, elapsed = load_round(b.bootstrap, requests, args.connections,
                                        args.depth, args.seconds)
                cpu1, loop1 = b.cpu_seconds(), loop_cpu(b)
                loop_us = None if loop0 is None or loop1 is None else (loop1 - loop0) / n * 1e6
                res.setdefault((p, name), []).append(
                    (n / elapsed, n * per_request / elapsed / 1e6, (cpu1 - cpu0) / n * 1e6,
                     loop_us))
        for b in kafkas.values():
            delete_topics(b.bootstrap, [topic])
    finally:
        stop_all([b for b in brokers.values() if isinstance(b, Broker)])
        for b in brokers.values():
            if isinstance(b, Broker):
                shutil.rmtree(b.data_dir, ignore_errors=True)  # disk stays flat


def _cell(values: list[float], digits: int = 1) -> str:
    return (f"{statistics.median(values):,.{digits}f} "
            f"({min(values):,.{digits}f}-{max(values):,.{digits}f})")


def report(res: dict[tuple[int, str], list[Row]], points: list[int],
           targets: list[str]) -> None:
    base = min(points)
    print(f"\n{'partitions':>10}  {'target':<16}{'requests/s':>22}{'MB/s':>20}"
          f"{'broker CPU us/req':>26}{f'x{base}p':>7}{'loop CPU us/req':>22}{f'x{base}p':>7}")
    for p in sorted(points):
        for name in targets:
            rows = res.get((p, name), [])
            if not rows:
                continue
            cpu = [c for _r, _m, c, _l in rows]
            loops = [lp for _r, _m, _c, lp in rows if lp is not None]
            base_rows = res.get((base, name), [])
            x_cpu = statistics.median(cpu) / statistics.median(c for _r, _m, c, _l in base_rows)
            base_loops = [lp for _r, _m, _c, lp in base_rows if lp is not None]
            x_loop = (f"{statistics.median(loops) / statistics.median(base_loops):.2f}"
                      if loops and base_loops else "-")
            print(f"{p:>10}  {name:<16}{_cell([r for r, _m, _c, _l in rows], 0):>22}"
                  f"{_cell([m for _r, m, _c, _l in rows]):>20}{_cell(cpu):>26}{x_cpu:>7.2f}"
                  f"{_cell(loops) if loops else '-':>22}{x_loop:>7}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--partitions", default="1,100,1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=2)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--records", type=int, default=64, help="records in each request")
    ap.add_argument("--size", type=int, default=1024, help="bytes of each record's value")
    ap.add_argument("--acks", type=int, default=-1, choices=(-1, 1))
    ap.add_argument("--nofsync", action="store_true",
                    help="Tidegate's topic with flush.messages=1000000 (Kafka unchanged)")
    ap.add_argument("--tree", action="append", default=[], type=Path,
                    help="another source tree whose broker runs beside this tree's")
    peer_kafka.add_peer_option(ap)
    ap.set_defaults(peer="kafka")
    args = ap.parse_args()
    points = [int(p) for p in args.partitions.split(",")]
    modes, note = peer_kafka.wanted(args.peer)
    trees = {"this tree": ROOT, **{str(t): t.resolve() for t in args.tree}}
    size = len(produce_requests("bench-1", 1, args.records, args.size, args.acks)[0])
    print(f"bench/produce_requests.py: {platform.machine()}, {os.cpu_count()} cores, load "
          f"average {os.getloadavg()[0]:.1f}; Produce v9 acks={args.acks}, one partition "
          f"per request, {args.records} x {args.size} B records ({size:,} B a request), "
          f"{args.connections} connections x {args.depth} pipelined, {args.rounds} rounds "
          f"of {args.seconds:g} s per target and point; Tidegate "
          f"{'without fsync (flush.messages=1000000)' if args.nofsync else 'fsync per write'}")
    if note:
        print(note)
    if modes:
        print(peer_kafka.describe(modes))
    res: dict[tuple[int, str], list[Row]] = {}
    with (tempfile.TemporaryDirectory(prefix="tidegate-bench-",
                                      dir=os.environ.get("TIDEGATE_BENCH_DIR")) as tmp,
          peer_kafka.peers(Path(tmp), modes) as started):
        kafkas = {peer_kafka.MODES[m][0]: b for m, b in started.items()}
        for label, k in kafkas.items():  # its JIT compiles while serving: untimed
            progress(f"warm-up, {label}")
            create_topics(k.bootstrap, ["jit"], 1)
            reqs = produce_requests("jit", 1, args.records, args.size, args.acks)
            wait_writable(k.bootstrap, reqs)
            load_round(k.bootstrap, reqs, args.connections, args.depth, 5.0)
            delete_topics(k.bootstrap, ["jit"])
        for p in points:
            run_point(p, args, trees, Path(tmp), kafkas, res)
    print(f"\nmedian (min-max) of the rounds; xNp: the target's median over its own at "
          f"{min(points)} partition(s); load average at the end {os.getloadavg()[0]:.1f}")
    report(res, points, [*trees, *(peer_kafka.MODES[m][0] for m in modes)])


if __name__ == "__main__":
    main()
