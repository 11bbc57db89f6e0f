"""The benchmarks still run: `bench/transactions.py --quick` and `bench/transactions_client.py
--quick` against a real broker.

A smoke run, not a timed test: it checks that the script starts its broker, drives every
part with confluent-kafka and prints each table row with a number in it (so a change to
the broker or the clients that breaks the benchmark shows up here, not at `make bench`).
The figures themselves are not judged: the short run and the shared machine make them
meaningless.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.integration.conftest import ROOT

ROWS = (
    "records/s, median",
    "records/s, same-round ratio, median",
    "broker CPU us/record, median",
    "commits/s, aggregate",
    "commit_transaction() p50, ms",
    "whole transaction p99, ms",
    "read_committed, records/s",
    "read_uncommitted, records/s",
    "read_committed / read_uncommitted",
)


def test_transactions_bench_quick() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "transactions.py"), "--quick"],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^machine: .+, \d+ cores, Python \d", out, re.M), out
    assert re.search(r"^disk floor: .* median \d+\.\d+ ms", out, re.M), out
    for row in ROWS:
        line = next((ln for ln in out.splitlines() if ln.strip().startswith(row)), None)
        assert line is not None, f"no {row!r} row in:\n{out}"
        assert re.search(r"\d[\d,]*\.?\d*", line[len(row) + 2:]), f"no figure in {line!r}"
    assert re.search(r": (met|MISSED)$", out, re.M), out  # the aims have verdicts


CLIENT_ROWS = ("tidegate-async, records/s", "tidegate-sync, records/s", "confluent, records/s")


def test_transactions_client_bench_quick() -> None:
    """bench/transactions_client.py --quick: both tables, every client's row with a
    figure, the aims with verdicts."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "transactions_client.py"),
                           "--quick"], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^machine: .+, \d+ cores, Python \d", out, re.M), out
    for part in ("1. transactional produce", "2. read_committed consume"):
        assert part in out, out
    for row in CLIENT_ROWS:
        lines = [ln for ln in out.splitlines() if ln.strip().startswith(row)]
        assert len(lines) == 2, f"{row!r} not in both tables:\n{out}"
        for line in lines:
            assert re.search(r"\d[\d,]*", line.strip()[len(row):]), f"no figure in {line!r}"
    assert len(re.findall(r"confluent-kafka: (met|MISSED)$", out, re.M)) == 4, out
