"""examples/spark_pipeline.py on a Spark standalone cluster: a master and two workers
started from the pip-installed pyspark (spark_cluster.py), the example run as a
subprocess with --master spark://127.0.0.1:PORT against a real broker process.

The per-account totals are computed here from the example's payment plan (batch 3 is
aborted and must never count) and compared with the output topic read by
confluent-kafka with read_committed, not with the example's own check. Both workers
must have run an executor of the application, and ListTransactions must show no open
transaction afterwards.

About 40 s (JVM start of a master, two workers, two executors and the driver), so it
runs under `make soak` (TIDEGATE_SOAK=1), not `make test`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
from confluent_kafka import Consumer as CConsumer
from tests.integration.conftest import ROOT, BrokerProcess
from tests.integration.spark_cluster import SparkCluster, cluster_env

from tidegate.client import Admin

pytestmark = pytest.mark.interop

DONE = ("CompleteCommit", "CompleteAbort", "Empty", "Dead")


def _expected_totals() -> dict[str, int]:
    """The example's payments: 5 transactions of 40, the 4th (batch 3) aborted."""
    totals: dict[str, int] = {}
    for batch in (0, 1, 2, 4):
        for i in range(40):
            account = f"acct-{i % 7}"
            totals[account] = totals.get(account, 0) + batch * 10 + i
    return totals


def _read_committed(bootstrap: str, topic: str, count: int) -> list[bytes]:
    c = CConsumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                   "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                   "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(bytes(m.value()))
            elif m is None and len(got) >= count:
                break
    finally:
        c.close()
    return got


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                    reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
def test_spark_pipeline_example_on_a_standalone_cluster(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data",
                           overrides={"transaction.two.phase.commit.enable": "true"})
    cluster = SparkCluster(tmp_path / "spark", workers=2)
    broker.start()
    daemons = []
    try:
        cluster.start()
        daemons = [p for p, _ in cluster.procs]
        env = cluster_env()
        r = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "spark_pipeline.py"), broker.bootstrap,
             "--master", cluster.master_url],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
        assert r.returncode == 0, r.stderr[-4000:]
        assert "totals match the committed payments: True" in r.stdout, r.stdout

        # each worker ran an executor of the application (standalone spreads them out)
        for i in range(2):
            apps = list((tmp_path / "spark" / f"worker-{i}").glob("app-*/*/stderr"))
            assert apps, f"worker-{i} ran no executor:\n" + \
                cluster.tail(tmp_path / "spark" / "logs" / f"worker-{i}.log")

        with Admin(bootstrap_servers=broker.bootstrap) as admin:
            [totals] = [t for t in admin.list_topics() if t.startswith("account-totals-")]
        expected = _expected_totals()
        values = _read_committed(broker.bootstrap, totals, len(expected))
        got = [json.loads(v) for v in values]
        assert len(got) == len(expected), got
        assert {g["account"]: g["total"] for g in got} == expected

        with Admin(bootstrap_servers=broker.bootstrap) as admin:
            open_txns = [(t.transactional_id, t.state) for t in admin.list_transactions()
                         if t.state not in DONE]
        assert open_txns == []
    finally:
        cluster.stop()
        broker.stop()
    assert len(daemons) == 3 and all(p.poll() is not None for p in daemons)
