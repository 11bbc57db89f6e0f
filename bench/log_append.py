"""In-process cost of `Log.append` for client batches (a script, not a test).

    .venv/bin/python bench/log_append.py [kind ...]

Prints the best time per append of 15 runs for each kind: one-record batches (no
producer id, idempotent, transactional: the fixed cost per append) and 1 MiB batches of
1,000 x 1 KiB records (the cost per record). Beside it, the reference measured in the
same run: the same bytes appended to a plain file with one `os.write` each (the page
cache's share; what `Log.append` adds is the rest). Each append gets a read-only `memoryview`
of a built batch, as the Produce handler passes it; default log config, a fresh log in a
temporary directory. To compare trees, run it with each on PYTHONPATH, alternating
(docs/benchmarks.md, "Durable produce").
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tidegate.common.clock import SystemClock
from tidegate.records.builder import BatchBuilder
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log

KINDS = ("plain1", "idem1", "txn1", "large", "large_idem")


def build(n: int, size: int, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    b = BatchBuilder(
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        is_transactional=txn,
    )
    now = int(time.time() * 1000)
    value = os.urandom(size // 2).hex().encode()
    for i in range(n):
        b.append(now, b"key-%d" % i, value)
    return b.build()


def batches(kind: str, number: int, seq: int) -> list[bytes]:
    """`number` batches of `kind`; idempotent ones continue the sequence from `seq`."""
    if kind == "plain1":
        return [build(1, 100)] * number
    if kind == "idem1":
        return [build(1, 100, pid=7, seq=seq + i) for i in range(number)]
    if kind == "txn1":
        return [build(1, 100, pid=8, seq=seq + i, txn=True) for i in range(number)]
    if kind == "large":
        return [build(1000, 1024)] * number
    return [build(1000, 1024, pid=9, seq=seq + 1000 * i) for i in range(number)]


def run(kind: str, reps: int, number: int) -> float:
    """Best microseconds per append over `reps` runs of `number` appends."""
    d = Path(tempfile.mkdtemp())
    log = Log.open(d / "bench-0", LogConfig(), SystemClock())
    best, seq = float("inf"), 0
    try:
        for _ in range(reps):
            views = [memoryview(b).toreadonly() for b in batches(kind, number, seq)]
            seq += number * (1000 if kind == "large_idem" else 1)
            append = log.append
            t0 = time.perf_counter()
            for v in views:
                append(v, single_batch=True)
            best = min(best, (time.perf_counter() - t0) / number)
    finally:
        log.close()
        shutil.rmtree(d)
    return best * 1e6


def write_only(kind: str, reps: int, number: int) -> float:
    """The reference: best microseconds per `os.write` of the same batches to a file."""
    d = Path(tempfile.mkdtemp())
    fd = os.open(d / "plain", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    best = float("inf")
    try:
        for _ in range(reps):
            views = [memoryview(b).toreadonly() for b in batches(kind, number, 0)]
            t0 = time.perf_counter()
            for v in views:
                os.write(fd, v)
            best = min(best, (time.perf_counter() - t0) / number)
    finally:
        os.close(fd)
        shutil.rmtree(d)
    return best * 1e6


def main() -> None:
    kinds = sys.argv[1:] or KINDS
    print(f"{'batch':11s} {'Log.append':>12s} {'os.write':>10s}   (best of 15, us per append)")
    for kind in kinds:
        if kind not in KINDS:
            raise SystemExit(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
        number = 50 if kind.startswith("large") else 2000
        print(f"{kind:11s} {run(kind, 15, number):12.2f} {write_only(kind, 15, number):10.2f}")


if __name__ == "__main__":
    main()
