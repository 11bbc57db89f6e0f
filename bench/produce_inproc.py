"""The broker's event-loop CPU per partition of a many-partition Produce, in process.

`bench/produce_requests.py` measures whole requests through TCP; this bench takes the
network, the frame reader and the flush threads out and times what grows with the
partitions of one request: the Produce handler (`server/handlers/produce.py`) over N
partitions of one topic, one batch of `--records` x 1 KiB records each (no producer id,
no compression, acks=all), awaited to its answer on a uvloop loop, in one process per
source tree (`--tree DIR`, e.g. a `git worktree` of main with its C extensions built: an
A/B in one run). Each round decodes the same pre-encoded request `--reps` times;
reported per point is the loop thread's CPU (`time.thread_time`) per partition, min and
median of the rounds. The reference beside it, measured in the same run: the floor of
what a partition's write must cost, one `os.pwritev` of the same batch to each of N
open files (the kernel's part; fsync excluded from both: under the default policy the
flush threads fsync, not the loop).

The topic keeps Tidegate's default (every acknowledged write fsynced, so each append
schedules a flush round) unless `--relaxed` (flush.messages=1000000). The targets run
interleaved, `--pairs` times each, in a rotating order.

    .venv/bin/python bench/produce_inproc.py [--partitions 1,100,1000] [--rounds 7]
        [--pairs 3] [--records 1] [--relaxed] [--tree /work/main] [--runs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECORD = b"v" * 1000


def _reps(n: int) -> int:
    """Requests per round: ~1,000-2,000 partition appends whatever N is."""
    return max(2, 2000 // n)


def run_handler(n: int, rounds: int, records: int, relaxed: bool) -> list[float]:
    """Loop-thread CPU µs per partition of `rounds` rounds (this process's tidegate)."""
    import uvloop

    from tidegate.common.config import BrokerConfig
    from tidegate.protocol import produce_request
    from tidegate.protocol.messages import build, encode, request_class
    from tidegate.records.builder import build_batch
    from tidegate.server.broker import Broker
    from tidegate.server.context import RequestContext
    from tidegate.server.handlers import produce

    reps = _reps(n)

    async def main(data_dir: str) -> list[float]:
        broker = Broker(BrokerConfig({"log.dirs": data_dir}))
        broker.load()
        broker.create_topic("t", n, {"flush.messages": "1000000"} if relaxed else {})
        now = int(time.time() * 1000)
        buf = bytearray(encode(build(request_class(0, 9), {
            "acks": -1, "timeout": 30000, "topic_data": [{"name": "t", "partition_data": [
                {"index": i, "records": build_batch([(now, b"k", RECORD)] * records)}
                for i in range(n)]}]})))
        loop = asyncio.get_running_loop()

        async def one() -> Any:
            req, _ = produce_request.decode(memoryview(buf), 0, 9)
            ctx = RequestContext(0, 9, 1, "bench", "peer", loop.create_future())
            return await produce.handle(broker, ctx, req)

        for _ in range(3):  # warm: files open, caches filled
            await one()
        out = []
        for _ in range(rounds):
            t0 = time.thread_time()
            for _ in range(reps):
                await one()
            out.append((time.thread_time() - t0) / reps / n * 1e6)
        broker.close()
        return out

    with tempfile.TemporaryDirectory(prefix="produce-inproc-") as d:
        return uvloop.run(main(d))


def run_floor(n: int, rounds: int, records: int) -> list[float]:
    """CPU µs per partition of one pwritev of a like batch to each of `n` files."""
    batch = RECORD * records + bytes(61 + 10 * records)  # ~ the batch's size
    out = []
    with tempfile.TemporaryDirectory(prefix="produce-inproc-floor-") as d:
        fds = [os.open(os.path.join(d, f"{i}.log"), os.O_CREAT | os.O_WRONLY, 0o644)
               for i in range(n)]
        try:
            reps = _reps(n)
            pos = 0
            for _ in range(rounds):
                t0 = time.thread_time()
                for _ in range(reps):
                    for fd in fds:
                        os.pwritev(fd, [batch[:61], batch[61:]], pos)
                    pos += len(batch)
                out.append((time.thread_time() - t0) / reps / n * 1e6)
                if pos > 64 << 20:  # the page cache stays small
                    pos = 0
        finally:
            for fd in fds:
                os.close(fd)
    return out


def _in_tree(tree: Path, what: str, n: int, args: argparse.Namespace) -> list[float]:
    """`run_handler` (or `run_floor`) on `tree`'s source in a process of its own."""
    call = (f"run_floor({n}, {args.rounds}, {args.records})" if what == "floor" else
            f"run_handler({n}, {args.rounds}, {args.records}, {args.relaxed})")
    code = (f"import json, sys; sys.path[:0] = [{str(tree / 'src')!r}, {str(ROOT)!r}]\n"
            "from bench.produce_inproc import run_floor, run_handler\n"
            f"print(json.dumps({call}))")
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"{tree} at {n} partitions failed:\n{proc.stderr[-3000:]}")
    return [float(x) for x in json.loads(proc.stdout.strip().splitlines()[-1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--partitions", default="1,100,1000")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pairs", type=int, default=3, help="runs of each target, interleaved")
    ap.add_argument("--records", type=int, default=1, help="1 KiB records per batch")
    ap.add_argument("--relaxed", action="store_true",
                    help="flush.messages=1000000 (no flush round per append)")
    ap.add_argument("--tree", action="append", default=[], type=Path,
                    help="another source tree (a git worktree) to run beside this one")
    ap.add_argument("--runs", action="store_true",
                    help="also print each run's median (the spread behind min and median)")
    args = ap.parse_args()
    targets = [("pwritev per partition (the floor)", ROOT, "floor"),
               ("this tree", ROOT, "handler")]
    targets += [(str(t), t.resolve(), "handler") for t in args.tree]
    points = [int(p) for p in args.partitions.split(",")]
    print(f"Produce handler in process, one batch of {args.records} x 1 KiB per partition, "
          f"{'relaxed flush' if args.relaxed else 'fsync per write (default)'}; "
          f"{args.pairs} runs x {args.rounds} rounds; loop CPU µs per partition",
          flush=True)
    print(f"{'partitions':>10}  {'target':<40}{'min':>9}{'median':>9}{'x floor':>9}")
    for n in points:
        runs: dict[str, list[float]] = {name: [] for name, _, _ in targets}
        for i in range(args.pairs):
            order = targets[i % len(targets):] + targets[:i % len(targets)]
            for name, tree, what in order:
                print(f"  {n} partitions: {name} ({i + 1}/{args.pairs})", file=sys.stderr,
                      flush=True)
                runs[name].append(statistics.median(_in_tree(tree, what, n, args)))
        floor = min(runs[targets[0][0]])
        for name, _, _ in targets:
            vals = runs[name]
            print(f"{n:>10}  {name:<40}{min(vals):>9.2f}{statistics.median(vals):>9.2f}"
                  f"{statistics.median(vals) / floor:>9.2f}", flush=True)
            if args.runs:
                print(f"{'':>12}runs: {', '.join(f'{v:.2f}' for v in vals)}", flush=True)


if __name__ == "__main__":
    main()
