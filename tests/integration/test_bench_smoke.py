"""The benchmarks still run: `bench/transactions.py --quick` against a real broker and a
real cluster, `bench/transactions_client.py --quick` against a real broker,
`bench/produce_requests.py` at a tiny size and `bench/cluster.py --quick` against a real
cluster.

A smoke run, not a timed test: it checks that the script starts its broker, drives every
part with confluent-kafka and prints each table row with a number in it (so a change to
the broker or the clients that breaks the benchmark shows up here, not at `make bench`).
The figures themselves are not judged: the short run and the shared machine make them
meaningless.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
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
    # no Kafka peer here (make bench-quick runs it): make test's time stays as it was
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "transactions.py"), "--quick",
                           "--peer", "none"],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^machine: .+, \d+ cores, Python \d", out, re.M), out
    assert re.search(r"^disk floor: .* median \d+\.\d+ ms", out, re.M), out
    for row in ROWS:
        line = next((ln for ln in out.splitlines() if ln.strip().startswith(row)), None)
        assert line is not None, f"no {row!r} row in:\n{out}"
        assert re.search(r"\d[\d,]*\.?\d*", line[len(row) + 2:]), f"no figure in {line!r}"
    assert re.search(r": embedded (met|MISSED)", out, re.M), out  # the aims have verdicts
    # the cluster (ZooKeeper + 3 brokers, RF=3) beside the embedded broker, when it can run
    from tidegate.cli import zk_launch

    try:
        zk_launch.find_zookeeper_classpath()
        zk_launch.find_java()
    except zk_launch.ZooKeeperNotInstalledError:
        assert "note: cluster not measured" in out, out
        return
    for row in ("commits/s, aggregate", "commit_transaction() p99, ms",
                "commit every 100 ms: commit p99, ms", "read_committed, records/s"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(row))
        figures = re.findall(r"\d[\d,]*\.?\d*x?", line[len(row) + 2:].split("   >=")[0])
        assert len(figures) >= 2, f"no embedded and cluster figures in {line!r}"
    assert re.search(r">= 2,000: embedded (met|MISSED), cluster (met|MISSED)$", out, re.M), out


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


def test_produce_requests_bench_tiny() -> None:
    """bench/produce_requests.py at 1 and 10 partitions, one 1 s round, no Kafka: a row
    per point with requests/s, MB/s, CPU per request and the loop's, and the ratios."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "produce_requests.py"),
                           "--partitions", "1,10", "--rounds", "1", "--seconds", "1",
                           "--records", "16", "--peer", "none"],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"Produce v9 acks=-1, .* 16 x 1024 B records", out), out
    fig = r"[\d,]+\.?\d* \([\d,]+\.?\d*-[\d,]+\.?\d*\)"
    for p, ratio in (("1", r"1\.00"), ("10", r"\d+\.\d\d")):
        row = rf"^\s+{p}  this tree\s+{fig}\s+{fig}\s+{fig}\s+{ratio}\s+{fig}\s+{ratio}$"
        assert re.search(row, out, re.M), f"no {p}-partition row in:\n{out}"


CLUSTER_ROWS = ("embedded broker", "cluster RF=1", "cluster RF=3, min.insync.replicas=2")


# bench/transactions.py --quick above already starts a cluster through the same launcher
@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                    reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
def test_cluster_bench_quick() -> None:
    """bench/cluster.py --quick (its own ZooKeeper, 3 cluster brokers and an embedded
    one; 2,000 records per row, one kill): every produce and consume row has figures,
    the follower row a figure or "not available", the kill its two times, and every
    acknowledged record of the failover topic was read back."""
    from tidegate.cli import zk_launch

    try:
        zk_launch.find_zookeeper_classpath()
        zk_launch.find_java()
    except zk_launch.ZooKeeperNotInstalledError as e:
        pytest.skip(str(e))
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "cluster.py"), "--quick"],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^machine: .+, \d+ cores, .*Python \d", out, re.M), out
    assert "zookeeper.session.timeout.ms=" in out, out
    for row in CLUSTER_ROWS:
        produce = [ln for ln in out.splitlines() if ln.startswith(row + " ")]
        assert produce and re.search(r"\d+\.\d+ \(\d+-\d+\)\s+[\d,]+\s+\d+\.\d", produce[0]), out
    consume = [ln for ln in out.splitlines() if "from leaders" in ln]
    assert len(consume) == 2 and all(re.search(r"\d+\.\d\s+[\d,]+\s+1: \d+ %", ln)
                                     for ln in consume), out
    assert re.search(r"^cluster RF=3, from a follower \(KIP-392\)\s+(\d+\.\d|not available)",
                     out, re.M), out
    assert re.search(r"kill 1: broker \d .* after \d+\.\d\d s, next acks=all record "
                     r"acknowledged after \d+\.\d\d s", out), out
    assert re.search(r"read back: (\d+) acknowledged, \1 read back, each once", out), out


def test_frame_assembler_bench_tiny() -> None:
    """bench/frame_assembler.py at a tiny size: the floor and this tree's row print."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "frame_assembler.py"),
                           "--frames", "32", "--rounds", "1"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in ("plain copy of the reads (the floor)", "this tree"):
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(row)), None)
        assert line is not None and re.search(r"\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+$", line), \
            proc.stdout


def test_produce_inproc_bench_tiny() -> None:
    """bench/produce_inproc.py at a tiny size: the floor and this tree's row print."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "produce_inproc.py"),
                           "--partitions", "10", "--rounds", "1", "--pairs", "1"],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in ("pwritev per partition (the floor)", "this tree"):
        line = next((ln for ln in proc.stdout.splitlines() if row in ln), None)
        assert line is not None and re.search(r"\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+$", line), \
            proc.stdout
