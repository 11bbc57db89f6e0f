"""The exactly-once Spark sink under failure: the driver killed with SIGKILL at each point
of the commit protocol and restarted from its checkpoint, tasks failing mid-write
(retries), and speculative duplicate attempts (run directly: see the test).

Each scenario runs the streaming pipeline (read `src` with format("tidegate"), prefix
each value with ``out:``, write `out` with the exactly-once sink, AvailableNow,
maxOffsetsPerTrigger so there are several batches) in a *subprocess* with its own
process group, so that the sink's test-only hook (stream_writer.py,
``TIDEGATE_SPARK_TEST_KILL_AT``) can SIGKILL the whole driver: its Python process, the
JVM and the Python workers. The restarted driver runs the same query from the same
checkpoint in the run's SparkSession (conftest.py's `spark_session`): what a driver
carries over a restart is its checkpoint and the broker's state, and a second process
would only add a JVM start and the first batch's warm-up (~40 s of a ~100 s test). The
output is then read by confluent-kafka with read_committed and must hold every committed
input row exactly once; ListTransactions must show no open transaction of the sink.

`make test` runs one kill point (between the broker commit and Spark's commit log) and
the duplicate-attempt test (speculation); the other kill points and the task faults run
under `make soak` (TIDEGATE_SOAK=1).
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
from confluent_kafka import Consumer as CConsumer
from confluent_kafka import Producer as CProducer
from confluent_kafka import TopicPartition as CTopicPartition
from pyspark.sql.types import BinaryType, StructField, StructType
from tests.integration.conftest import ROOT, SPARK_TEST_JVM_OPTIONS, BrokerProcess

from tidegate.client import Admin, NewTopic
from tidegate.spark.stream_writer import BATCH_ID_KEY, QUERY_ID_KEY

pytestmark = pytest.mark.interop

SOAK = os.environ.get("TIDEGATE_SOAK") == "1"
soak_only = [pytest.mark.slow,
             pytest.mark.skipif(not SOAK, reason="soak only: TIDEGATE_SOAK=1 (make soak)")]
ROWS = 600  # committed input rows, 3 partitions, 200 offsets per trigger: >= 3 batches

def start_query(spark: Any, bootstrap: str, src: str, out: str, ckpt: str) -> Any:
    """The pipeline's streaming query, started: the subprocess driver runs this function's
    source (PIPELINE), a restart calls it in the run's SparkSession."""
    from pyspark.sql import functions as F
    stream = (spark.readStream.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", src).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "200").load())
    return (stream.select("key", F.concat(F.lit(b"out:"), F.col("value")).alias("value"))
            .writeStream.format("tidegate").trigger(availableNow=True)
            .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
            .option("checkpointLocation", ckpt).start())


PIPELINE = r'''
import json, os, sys
from typing import Any
os.environ["TIDEGATE_SPARK_TEST_KILL_PGID"] = str(os.getpgid(0))
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
import tidegate.spark

bootstrap, src, out, ckpt, master, confs = sys.argv[1:7]
b = (SparkSession.builder.master(master).appName("tidegate-failures")
     .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
     .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1"))
for k, v in json.loads(confs).items():
    b = b.config(k, v)
spark = b.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
tidegate.spark.register(spark)
''' + inspect.getsource(start_query) + r'''
q = start_query(spark, bootstrap, src, out, ckpt)
q.awaitTermination()
print("QUERY", q.id, "BATCHES", q.lastProgress["batchId"] if q.lastProgress else -1)
spark.stop()
'''


@pytest.fixture(scope="module")
def fbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("spark-fail") / "data",
                      overrides={"transaction.two.phase.commit.enable": "true"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _delivered(err: object, msg: object) -> None:
    assert err is None, err


def _make_input(bootstrap: str, src: str, out: str) -> list[bytes]:
    """ROWS committed rows in transactions (and an aborted one in between) on 3
    partitions of `src`; returns the values the output must hold."""
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(src, 3), NewTopic(out, 2)])
    p = CProducer({"bootstrap.servers": bootstrap, "linger.ms": 5,
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
    assert len(expected) == ROWS
    return sorted(expected)


def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    c = CConsumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}",
                   "isolation.level": "read_committed", "enable.auto.commit": False,
                   "auto.offset.reset": "earliest"})
    parts = [CTopicPartition(topic, p, 0) for p in range(2)]
    c.assign(parts)
    ends = {p.partition: c.get_watermark_offsets(p, timeout=10)[1] for p in parts}
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(bytes(m.value() or b""))
        pos = {tp.partition: tp.offset for tp in c.position(parts)}
        if m is None and all(pos[p] >= ends[p] for p in ends):
            break
    c.close()
    return sorted(got)


def _sink_transactions(bootstrap: str) -> list[tuple[str, str]]:
    with Admin(bootstrap_servers=bootstrap) as admin:
        return [(t.transactional_id, t.state) for t in admin.list_transactions()
                if t.transactional_id.startswith("tidegate-spark-")]


def _run(bootstrap: str, src: str, out: str, ckpt: Path, *, master: str = "local[2]",
         confs: dict[str, str] | None = None, env: dict[str, str] | None = None,
         timeout: float = 240) -> subprocess.CompletedProcess[str]:
    script = ckpt.parent / "pipeline.py"
    script.write_text(PIPELINE)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGATE_SPARK_TEST")}
    full_env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, str(script), bootstrap, src, out, str(ckpt), master,
         # the driver JVM as in the other Spark tests (a short job warms its JIT up)
         json.dumps({"spark.driver.extraJavaOptions": SPARK_TEST_JVM_OPTIONS, **(confs or {})})],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=full_env, cwd=ROOT, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError("pipeline timed out:\n" + stderr[-3000:]) from None
    finally:
        try:  # the JVM and the workers of a killed driver go with it
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _check_output(bootstrap: str, out: str, expected: list[bytes]) -> None:
    got = _read_committed(bootstrap, out)
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} duplicates"
    assert got == expected, f"missing {len(set(expected) - set(got))}, " \
                            f"extra {len(set(got) - set(expected))}"
    open_txns = [t for t in _sink_transactions(bootstrap)
                 if t[1] not in ("CompleteCommit", "CompleteAbort", "Empty", "Dead")]
    assert open_txns == [], open_txns


def _driver_kill_scenario(fbroker: BrokerProcess, tmp_path: Path, point: str,
                          batch: int, spark: Any) -> None:
    name = f"kill-{point.replace('_', '-')}-{batch}"
    src, out = f"{name}-in", f"{name}-out"
    expected = _make_input(fbroker.bootstrap, src, out)
    ckpt = tmp_path / "ckpt"
    first = _run(fbroker.bootstrap, src, out, ckpt,
                 env={"TIDEGATE_SPARK_TEST_KILL_AT": f"{point}:{batch}"})
    assert first.returncode == -signal.SIGKILL, \
        f"the kill point was not reached (rc {first.returncode}):\n{first.stderr[-3000:]}"
    offsets = {p.name for p in (ckpt / "offsets").iterdir() if p.name.isdigit()}
    commits = {p.name for p in (ckpt / "commits").iterdir() if p.name.isdigit()}
    assert str(batch) in offsets
    if point == "task_write":  # batch-1 was committed and logged before the kill
        assert str(batch - 1) in commits and str(batch) not in commits
    else:
        assert str(batch) not in commits
    # the driver restarted: the same query from the checkpoint (the run's SparkSession)
    restarted = start_query(spark, fbroker.bootstrap, src, out, str(ckpt))
    try:
        assert restarted.awaitTermination(240), "the restarted query did not finish"
    finally:
        restarted.stop()
    assert restarted.exception() is None, restarted.exception()
    _check_output(fbroker.bootstrap, out, expected)


def test_driver_killed_between_broker_commit_and_spark_commit_log(
        fbroker: BrokerProcess, tmp_path: Path, spark_session: Any) -> None:
    _driver_kill_scenario(fbroker, tmp_path, "after_broker_commit", 1, spark_session)


@pytest.mark.parametrize(("point", "batch"), [
    ("before_decision", 1),   # tasks prepared, nothing decided: the replay redoes batch 1
    ("after_decision", 1),    # decided, not committed at the broker: the replay completes
    ("after_broker_commit", 0),
    ("task_write", 2),        # after Spark's commit log of batch 1, batch 2 mid-write
])
@pytest.mark.parametrize("_soak", [pytest.param(0, marks=soak_only)])
def test_driver_killed_at_each_point(fbroker: BrokerProcess, tmp_path: Path, point: str,
                                     batch: int, _soak: int, spark_session: Any) -> None:
    _driver_kill_scenario(fbroker, tmp_path, point, batch, spark_session)


@pytest.mark.parametrize("mode", ["raise", "exit"])
@pytest.mark.parametrize("_soak", [pytest.param(0, marks=soak_only)])
def test_task_fails_mid_write_and_is_retried(fbroker: BrokerProcess, tmp_path: Path,
                                             mode: str, _soak: int) -> None:
    """Every task of batch 1 fails on attempt 0 after sending its rows (an exception, or
    its Python worker exits leaving the transaction open); attempt 1 succeeds."""
    src, out = f"task-{mode}-in", f"task-{mode}-out"
    expected = _make_input(fbroker.bootstrap, src, out)
    r = _run(fbroker.bootstrap, src, out, tmp_path / "ckpt", master="local[2,4]",
             env={"TIDEGATE_SPARK_TEST_TASK_FAULT": f"{mode}:1"})
    assert r.returncode == 0, r.stderr[-3000:]
    _check_output(fbroker.bootstrap, out, expected)
    ids = [t for t, _ in _sink_transactions(fbroker.bootstrap)]
    assert any(t.endswith("-1-0-1") for t in ids), ids  # attempt 1 of batch 1 ran


class _Task:
    """The TaskContext of a task run outside Spark: what the sink reads from it."""

    current: _Task | None = None

    def __init__(self, query: str, batch: int, part: int, attempt: int) -> None:
        self.props = {QUERY_ID_KEY: query, BATCH_ID_KEY: str(batch)}
        self.part, self.attempt = part, attempt

    @classmethod
    def get(cls) -> _Task | None:
        return cls.current

    def getLocalProperty(self, key: str) -> str | None:
        return self.props.get(key)

    def partitionId(self) -> int:
        return self.part

    def attemptNumber(self) -> int:
        return self.attempt


def test_speculative_duplicate_attempts(fbroker: BrokerProcess,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two attempts of the same partition, as speculation makes them (Spark never
    speculates in local mode, and in local-cluster mode it launches no copy on a host that
    runs the original, so every attempt would share one host): the sink's tasks run here
    directly, with a stand-in for Spark's TaskContext, against the real broker.

    Batch 0: partition 0 attempts 0 and 1 both write and prepare, the driver gets attempt
    1's message (and partition 1's): only attempt 1's rows become visible, attempt 0's
    prepared transaction is aborted. Batch 1: a copy still writing when the driver commits
    is fenced by the sweep and fails; a copy that starts after the decision writes nothing.
    Batch 2: a copy that opens its transaction after the driver's sweep aborts it itself.
    """
    from pyspark.sql import Row

    from tidegate.spark import stream_writer
    from tidegate.spark.options import WriteOptions

    monkeypatch.setattr(stream_writer, "TaskContext", _Task)
    bootstrap, out = fbroker.bootstrap, "spec-out"
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(out, 2)])
    sink = stream_writer.TidegateStreamWriter(
        WriteOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": out}),
        StructType([StructField("value", BinaryType())]))
    query = f"q{time.time_ns()}"

    def rows(batch: int, part: int) -> list[Row]:
        return [Row(value=f"b{batch}-p{part}-{i}".encode()) for i in range(50)]

    def task(batch: int, part: int, attempt: int, data: Iterator[Row]) -> Any:
        _Task.current = _Task(query, batch, part, attempt)
        try:
            return sink.write(data)
        finally:
            _Task.current = None

    first = task(0, 0, 0, iter(rows(0, 0)))
    second = task(0, 0, 1, iter(rows(0, 0)))
    other = task(0, 1, 0, iter(rows(0, 1)))
    assert first.prepared and second.prepared and other.prepared
    sink.commit([second, other], 0)
    states = dict(_sink_transactions(bootstrap))
    assert states[f"tidegate-spark-{query}-0-0-1"] == "CompleteCommit"
    assert states[f"tidegate-spark-{query}-0-0-0"] in ("CompleteAbort", "Empty")  # aborted

    # batch 1: attempt 0 wins; attempt 1 is mid-write when the driver commits
    winner = task(1, 0, 0, iter(rows(1, 0)))

    def racing() -> Iterator[Row]:
        for i, row in enumerate(rows(1, 0)):
            if i == 25:
                sink.commit([winner], 1)
            yield row

    with pytest.raises(Exception):  # noqa: B017 - fenced by the driver's sweep
        task(1, 0, 1, racing())
    late = task(1, 0, 2, iter(rows(1, 0)))
    assert late.skipped and late.prepared is None and late.rows == 0

    # batch 2: a copy passes the "decided?" check, then the driver decides and sweeps
    # before the copy opens its transaction: the copy prepares after the sweep, finds the
    # decision on its second look and aborts (else it would stay prepared for good)
    winner = task(2, 0, 0, iter(rows(2, 0)))
    check = sink._decided

    def decided_then_commit(query_id: str) -> tuple[int, str]:
        found = check(query_id)
        monkeypatch.setattr(sink, "_decided", check)
        sink.commit([winner], 2)
        return found

    monkeypatch.setattr(sink, "_decided", decided_then_commit)
    zombie = task(2, 0, 1, iter(rows(2, 0)))
    assert zombie.skipped and zombie.prepared is None
    assert dict(_sink_transactions(bootstrap))[f"tidegate-spark-{query}-2-0-1"] != "Ongoing"
    expected = sorted(b"out:" + r.value for b, p in ((0, 0), (0, 1), (1, 0), (2, 0))
                      for r in rows(b, p))
    _check_output(bootstrap, out, [v[len(b"out:"):] for v in expected])
