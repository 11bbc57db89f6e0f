"""The exactly-once Spark pipeline on a 3-broker Tidegate cluster, one broker killed
(kill -9) in the middle of a micro-batch.

The cluster is `txn_cluster` (tests/integration/cluster_txn_util.py): every topic,
internal ones included, has replication factor 3 and min.insync.replicas 2, so the two
brokers left keep every partition writable. The pipeline is docs/spark.md's streaming
one (read `src` with format("tidegate"), prefix each value, write `out` with the
exactly-once sink), run with Spark local[2] in a subprocess, with the whole cluster as
its bootstrap and `maxOffsetsPerTrigger` so that it takes several micro-batches. The
test watches the query's checkpoint and, as soon as Spark has planned batch 2 (its
offsets file exists, its commit file does not), kills the chosen broker:

- `leader`: the leader of `out`'s partition 0, where tasks are writing (the sink's
  decision records are the committed offsets of that partition);
- `txn-coordinator`: the coordinator of the first task's transactional id of batch 2
  (its `__transaction_state` partition's leader), which holds that batch's prepared
  transactions;
- `group-coordinator`: the coordinator of the sink's group ``tidegate-spark-{query}``,
  where the driver writes batch 2's decision record.

The query must end normally (local mode retries no task: the clients themselves must
ride over the leader change), the killed broker is restarted, and then the output read
by confluent-kafka under read_committed holds every committed input row exactly once,
no broker lists an open transaction, and every replica is byte-identical.

About 2 minutes each on a loaded 2-core machine (cluster start, Spark's start-up and
first batch, eight batches), so they run under `make soak` (TIDEGATE_SOAK=1).

`test_sink_abort_and_commit_right_after_a_broker_kill` (make test, about 35 s, no
Spark: the tasks run directly with a stand-in TaskContext, as in test_spark_failures.py)
kills the transaction coordinator of a losing attempt's prepared transaction just
before Spark's abort of the batch, then of the next batch just before the driver's
commit: the sweep of open transactions (ListTransactions on every broker) must neither
wait out default.api.timeout.ms on the dead broker, which stays in the metadata until
its ZooKeeper session expires, nor miss the transaction once its coordinator shard has
moved to a broker already asked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
from confluent_kafka import Producer as CProducer
from tests.integration.cluster import Cluster
from tests.integration.cluster_txn_util import (
    GROUP_KEY,
    TXN_KEY,
    coordinator,
    create_topics,
    read_all,
    txn_cluster,
    wait_identical,
    wait_in_sync,
    wait_no_open_transactions,
)
from tests.integration.conftest import ROOT

pytestmark = pytest.mark.interop
soak_only = [pytest.mark.slow,
             pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                                reason="soak run: `make soak` (TIDEGATE_SOAK=1)")]

ROWS = 600           # committed input rows on 3 partitions
PER_TRIGGER = 100    # offsets per micro-batch: 8 batches (721 offsets with markers)
KILL_BATCH = 2

PIPELINE = r'''
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
import tidegate.spark

bootstrap, src, out, ckpt, per_trigger = sys.argv[1:6]
spark = (SparkSession.builder.master("local[2]").appName("tidegate-on-cluster")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.host", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
tidegate.spark.register(spark)
stream = (spark.readStream.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", per_trigger).load())
q = (stream.select("key", F.concat(F.lit(b"out:"), F.col("value")).alias("value"))
     .writeStream.format("tidegate").trigger(availableNow=True)
     .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
     .option("checkpointLocation", ckpt).start())
q.awaitTermination()
print("QUERY", q.id, "LAST BATCH", q.lastProgress["batchId"] if q.lastProgress else -1)
spark.stop()
'''


def _delivered(err: object, msg: object) -> None:
    assert err is None, err


def _make_input(c: Cluster, src: str) -> list[bytes]:
    """ROWS committed rows (and 100 aborted ones) in transactions on 3 partitions."""
    p = CProducer({"bootstrap.servers": c.bootstrap, "linger.ms": 5,
                   "transactional.id": f"input-{src}"})
    p.init_transactions(30)
    expected = []
    for txn in range(ROWS // 100 + 1):
        aborted = txn == 2
        p.begin_transaction()
        for i in range(100):
            v = f"{src}-{txn}-{i}".encode()
            p.produce(src, v, key=f"k{i % 13}".encode(), partition=i % 3,
                      on_delivery=_delivered)
            if not aborted:
                expected.append(b"out:" + v)
        p.flush(30)
        if aborted:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    return sorted(expected)


def _query_id(ckpt: Path) -> str | None:
    meta = ckpt / "metadata"
    if not meta.exists():
        return None
    try:
        return str(json.loads(meta.read_text().splitlines()[0])["id"])
    except (ValueError, KeyError, IndexError):
        return None


@pytest.mark.parametrize("victim", [pytest.param(v, marks=soak_only) for v in (
    "leader", "txn-coordinator", "group-coordinator")])
def test_spark_exactly_once_pipeline_survives_a_broker_kill(tmp_path: Path,
                                                            victim: str) -> None:
    t0 = time.monotonic()
    c = txn_cluster(tmp_path / "cluster")
    c.start()
    proc: subprocess.Popen[str] | None = None
    try:
        src, out = "spark-in", "spark-out"
        leaders = create_topics(c, src, partitions_=3)
        leaders.update(create_topics(c, out, partitions_=2))
        expected = _make_input(c, src)
        t_input = time.monotonic()

        ckpt = tmp_path / "ckpt"
        script = tmp_path / "pipeline.py"
        script.write_text(PIPELINE)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen(
            [sys.executable, str(script), c.bootstrap, src, out, str(ckpt),
             str(PER_TRIGGER)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=tmp_path, start_new_session=True)

        # mid-stream: batch KILL_BATCH planned (offsets written), not yet committed
        deadline = time.monotonic() + 180
        while not (ckpt / "offsets" / str(KILL_BATCH)).exists():
            assert proc.poll() is None, proc.communicate()[1][-4000:]
            assert time.monotonic() < deadline, "the query never reached batch 2"
            time.sleep(0.02)
        query = _query_id(ckpt)
        assert query is not None
        if victim == "leader":
            bid = leaders[(out, 0)]
        elif victim == "txn-coordinator":
            bid = coordinator(c, f"tidegate-spark-{query}-{KILL_BATCH}-0-0", TXN_KEY)
        else:
            bid = coordinator(c, f"tidegate-spark-{query}", GROUP_KEY)
        committed_before = (ckpt / "commits" / str(KILL_BATCH)).exists()
        c.kill(bid)
        t_kill = time.monotonic()
        print(f"cluster, topics and input in {t_input - t0:.1f}s; batch {KILL_BATCH} "
              f"planned {t_kill - t_input:.1f}s after the query started")

        try:
            stdout, stderr = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            raise AssertionError("pipeline timed out:\n" + stderr[-4000:]) from None
        t_done = time.monotonic()
        assert proc.returncode == 0, stderr[-6000:]
        assert "LAST BATCH" in stdout, stdout
        assert not committed_before, "the kill came after batch 2's commit: not mid-batch"

        c.restart(bid)
        wait_in_sync(c, [src, out])
        got = sorted(v for _p, _o, v in read_all(c.bootstrap, out, "read_committed"))
        dupes = len(got) - len(set(got))
        assert dupes == 0, f"{dupes} duplicates"
        assert got == expected, f"missing {len(set(expected) - set(got))}, " \
                                f"extra {len(set(got) - set(expected))}"
        summary = [wait_no_open_transactions(c), wait_identical(c, [src, out])]
        print(f"broker {bid} ({victim}) killed in batch {KILL_BATCH}; query ended "
              f"{t_done - t_kill:.1f}s later; {len(got)} rows exactly once; "
              + "; ".join(summary) + f"; {time.monotonic() - t0:.1f}s in all")
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        c.stop()


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                    reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
def test_sink_abort_and_commit_right_after_a_broker_kill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import Row
    from pyspark.sql.types import BinaryType, StructField, StructType
    from tests.integration.test_spark_failures import _Task

    from tidegate.spark import stream_writer
    from tidegate.spark.options import WriteOptions

    monkeypatch.setattr(stream_writer, "TaskContext", _Task)
    c = txn_cluster(tmp_path / "cluster")
    c.start()
    try:
        out = "sink-out"
        create_topics(c, out, partitions_=2)
        sink = stream_writer.TidegateStreamWriter(
            WriteOptions.parse({"kafka.bootstrap.servers": c.bootstrap, "topic": out}),
            StructType([StructField("value", BinaryType())]))
        query = f"q{time.time_ns()}"

        def task(batch: int, part: int, attempt: int) -> Any:
            _Task.current = _Task(query, batch, part, attempt)
            try:
                return sink.write(iter([Row(value=f"b{batch}-p{part}-{i}".encode())
                                        for i in range(50)]))
            finally:
                _Task.current = None

        def batch_with_dead_coordinator(batch: int, end: str) -> float:
            """Two winners and a loser prepared; the loser's coordinator killed; then
            Spark's abort or the driver's commit at once, within the dead broker's
            ZooKeeper session. Returns how long that took."""
            loser, winners = task(batch, 0, 0), [task(batch, 0, 1), task(batch, 1, 0)]
            assert loser.prepared and all(w.prepared for w in winners)
            bid = coordinator(c, f"tidegate-spark-{query}-{batch}-0-0", TXN_KEY)
            c.kill(bid)
            t0 = time.monotonic()
            if end == "abort":
                sink.abort([*winners, loser], batch)
            else:
                sink.commit(winners, batch)
            took = time.monotonic() - t0
            assert took < 30, f"the {end} took {took:.1f}s after broker {bid} died"
            c.restart(bid)
            wait_in_sync(c, [out])
            wait_no_open_transactions(c, timeout=20)
            return took

        aborted = batch_with_dead_coordinator(0, "abort")
        committed = batch_with_dead_coordinator(1, "commit")
        got = sorted(v for _p, _o, v in read_all(c.bootstrap, out, "read_committed"))
        assert got == sorted(f"b1-p{p}-{i}".encode() for p in (0, 1) for i in range(50))
        print(f"abort {aborted:.1f}s, commit {committed:.1f}s after the kill of the "
              "loser's coordinator")
    finally:
        c.stop()


def test_back_to_back_transactions_of_the_examples_writer(tmp_path: Path) -> None:
    """examples/spark_pipeline.py's payments writer on the cluster: one Tidegate
    producer, transactions back to back over partitions led by different brokers. The
    first batch of a transaction to a remote leader used to race the previous
    transaction's markers: the leader's KIP-890 guard went stale while the coordinator
    held the verification until those markers were written, and the producer failed
    fatally with INVALID_TXN_STATE ("starts a transaction in this partition without a
    current verification") at its second transaction, every time."""
    from tidegate.client import Producer

    c = txn_cluster(tmp_path / "cluster")
    c.start()
    try:
        leaders = create_topics(c, "payments", partitions_=3)
        assert len(set(leaders.values())) > 1, leaders  # markers must cross brokers
        expected = []
        with Producer({"bootstrap.servers": c.bootstrap,
                       "transactional.id": "payments-writer"}) as producer:
            producer.init_transactions()
            for txn in range(5):
                producer.begin_transaction()
                for i in range(40):
                    value = f"{txn}-{i}"
                    producer.send("payments", value, key=f"acct-{i % 7}")
                    if txn != 3:
                        expected.append(value.encode())
                if txn == 3:
                    producer.abort_transaction()
                else:
                    producer.commit_transaction()
        got = sorted(v for _p, _o, v in read_all(c.bootstrap, "payments", "read_committed"))
        assert got == sorted(expected)
        wait_no_open_transactions(c, timeout=20)
    finally:
        c.stop()
