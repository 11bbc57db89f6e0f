"""Produce cost per record as the partitions of one request grow, with the C load.

Each point is a fresh broker (default settings: every acknowledged write fsynced, or
`--nofsync`: topics with flush.messages=1000000) and one topic of N partitions;
`bench/load.py`'s c load sends `--records` x `--size` B records, acks=all, `--chunk`
records to one partition before the next (1: one record per partition in turn, so every
request carries one small batch per partition, the per-batch cost that made throughput
fall at 1,000 partitions). Printed per point: MB/s, the broker's CPU per record (its
/proc stat before and after) and the load's. `--tree DIR` (repeatable) runs the same
points against other source trees too (a `git worktree` of an older commit with its C
extension built), interleaved round by round, for before/after figures in one run.

    .venv/bin/python bench/load_sweep.py [--partitions 1,100,1000] [--records 60000]
        [--chunk 1] [--rounds 3] [--nofsync] [--tree /tmp/before]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import load as loads  # noqa: E402

# one point in a child process, so that each tree's own tests/integration/conftest.py
# starts its own broker (its src/ on PYTHONPATH)
POINT = r"""
import json, subprocess, sys, tempfile
from pathlib import Path
tree, partitions, records, size, chunk, nofsync, binary = sys.argv[1:8]
sys.path.insert(0, tree)
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess

def cpu(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    import os
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

p = int(partitions)
config = {"flush.messages": "1000000"} if nofsync == "1" else {}
with tempfile.TemporaryDirectory() as tmp:
    broker = BrokerProcess(Path(tmp))
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for fut in admin.create_topics([NewTopic(t, p, 1, config=config)
                                        for t in ("warmup", "t")]).values():
            fut.result(300)
        def run(topic, n):
            out = subprocess.run([binary, broker.bootstrap, topic, str(n), size, "all",
                                  str(p), "5", chunk], capture_output=True, text=True, check=True)
            return json.loads(out.stdout.strip().splitlines()[-1])
        run("warmup", min(int(records), 20000))
        c0 = cpu(broker.proc.pid)
        rep = run("t", int(records))
        c1 = cpu(broker.proc.pid)
        n = int(records)
        print(json.dumps({"mb_s": rep["bytes"] / rep["seconds"] / 1e6,
                          "broker_us": (c1 - c0) / n * 1e6,
                          "load_us": rep["cpu_seconds"] / n * 1e6}))
    finally:
        broker.stop()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", default="1,100,1000")
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=1, help="records per partition in turn")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nofsync", action="store_true", help="topics with flush.messages=1e6")
    ap.add_argument("--tree", action="append", default=[], help="another source tree")
    args = ap.parse_args()
    why = loads.unavailable("c")
    if why is not None:
        raise SystemExit(f"the c load is needed: {why}")
    trees = {"this tree": str(ROOT), **{t: t for t in args.tree}}
    points = [int(p) for p in args.partitions.split(",")]
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    for r in range(args.rounds):
        for p in points:
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                out = subprocess.run(
                    [sys.executable, "-c", POINT, trees[name], str(p), str(args.records),
                     str(args.size), str(args.chunk), "1" if args.nofsync else "0",
                     str(loads.C_BINARY)], capture_output=True, text=True)
                lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
                if not lines:
                    raise SystemExit(f"{name}, {p} partitions failed: {out.stderr[-800:]}")
                results.setdefault((p, name), []).append(json.loads(lines[0]))
    print(f"workload: {args.records} records x {args.size} B, c load (bench/load.py), "
          f"{args.chunk} record(s) per partition in turn, acks=all, "
          f"{'no fsync (flush.messages=1000000)' if args.nofsync else 'fsync per write'}, "
          f"{args.rounds} rounds interleaved (median, min-max)")
    print(f"{'partitions':>10}  {'tree':<20}{'MB/s':>20}{'broker us/rec':>22}{'load us/rec':>20}")
    for (p, name), rows in sorted(results.items()):
        def cell(key: str, rows: list[dict[str, float]] = rows) -> str:
            vals = [row[key] for row in rows]
            return f"{statistics.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f})"
        print(f"{p:>10}  {name:<20}{cell('mb_s'):>20}{cell('broker_us'):>22}"
              f"{cell('load_us'):>20}")


if __name__ == "__main__":
    main()
