"""`format("tidegate")`'s Arrow batches against its row path, on a real broker and Spark.

The same read runs twice, ``arrowBatches=true`` (the default: tasks yield Arrow record
batches) and ``arrowBatches=false`` (tasks yield rows that Spark converts), and must
return the same rows. The data has what each column can hold: null keys and values,
empty ones, several headers with a null value, committed and aborted transactions of
confluent-kafka (read_committed drops the aborted ones and skips the markers), and a
compacted topic whose cleaner has removed offsets (gaps inside a range). The expected
visible values come from what the writers did, not from a Tidegate read. The same
holds for split (`minPartitions`, `maxRecordsPerPartition`) and packed (`maxPartitions`)
reads, and the sink writes the same records from Arrow batches as from rows. Serial lane
(its own broker, the run's shared SparkSession); under `make soak` only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")
from confluent_kafka import Producer as CProducer
from pyspark.sql import SparkSession
from tests.integration.conftest import BrokerProcess

from tidegate.client import Admin, Consumer, NewTopic, TopicPartition

# ~30-55 s (a SparkSession, a broker, waiting for the cleaner): `make soak` runs it;
# tests/unit/spark/test_arrow.py checks the same conversion in make test.
pytestmark = [pytest.mark.interop, pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                                 reason="soak run: `make soak` (TIDEGATE_SOAK=1)")]

MIXED, COMPACTED = "ar-mixed", "ar-compacted"


@pytest.fixture(scope="module")
def abroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # a cleaner that runs often, so the compacted topic has gaps within seconds
    b = BrokerProcess(tmp_path_factory.mktemp("spark-arrow") / "data",
                      overrides={"log.cleaner.backoff.ms": "200"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def spark(spark_session: SparkSession) -> SparkSession:
    """The run's shared SparkSession (conftest.py): one of its own would be the same
    session (`getOrCreate`) and stopping it would stop the shared one for the modules
    after this one (test_spark_failures' soak kill points)."""
    return spark_session


def _ok(err: object, msg: object) -> None:
    assert err is None, err


def _write_mixed(bootstrap: str) -> list[bytes | None]:
    """Plain records with nulls and headers, and committed/aborted transactions; the
    values read_committed must return."""
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 1}
    plain = CProducer(conf)
    txn = CProducer({**conf, "transactional.id": "spark-arrow-txn"})
    txn.init_transactions(30)
    visible: list[bytes | None] = []
    for rnd in range(4):
        for i in range(5):
            plain.produce(MIXED, partition=i % 2, key=None if i % 2 else b"k%d" % i,
                          value=None if i == 3 else b"p-%d-%d" % (rnd, i),
                          headers=[("a", b"1"), ("b", None), ("a", b"")] if i % 2 else None,
                          on_delivery=_ok)
            visible.append(None if i == 3 else b"p-%d-%d" % (rnd, i))
        plain.produce(MIXED, partition=0, key=b"", value=b"", on_delivery=_ok)
        visible.append(b"")
        plain.flush(30)
        txn.begin_transaction()
        for i in range(6):
            txn.produce(MIXED, partition=i % 2, key=b"t", value=b"t-%d-%d" % (rnd, i),
                        headers=[("h", b"x")], on_delivery=_ok)
        txn.flush(30)  # written, so read_committed has aborted records to drop
        if rnd % 2:
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
            visible.extend(b"t-%d-%d" % (rnd, i) for i in range(6))
    return visible


def _write_compacted(bootstrap: str) -> None:
    """Ten keys written over and over in small segments; the cleaner keeps the last."""
    p = CProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(600):
        p.produce(COMPACTED, key=b"k%d" % (i % 10), value=b"c-%04d" % i + b"." * 80,
                  on_delivery=_ok)
        if i % 50 == 0:
            p.flush(30)
    p.flush(30)


def _offsets(bootstrap: str) -> list[int]:
    tp = TopicPartition(COMPACTED, 0)
    with Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False}) as c:
        c.assign([tp])
        c.seek(tp, 0)
        got: list[int] = []
        end = c.end_offsets([tp])[tp]
        while c.position(tp) < end:
            got.extend(r.offset for r in c.poll(500))
        return got


@pytest.fixture(scope="module")
def data(abroker: BrokerProcess) -> list[bytes | None]:
    with Admin(bootstrap_servers=abroker.bootstrap) as admin:
        admin.create_topics([
            NewTopic(MIXED, 2),
            NewTopic(COMPACTED, 1, configs={
                "cleanup.policy": "compact", "segment.bytes": "8192",
                "min.cleanable.dirty.ratio": "0.01"})])
    visible = _write_mixed(abroker.bootstrap)
    _write_compacted(abroker.bootstrap)
    deadline = time.monotonic() + 60
    while len(_offsets(abroker.bootstrap)) >= 600:  # wait for the cleaner's gaps
        assert time.monotonic() < deadline, "the cleaner removed nothing in 60 s"
        time.sleep(0.5)
    return visible


def _read(spark: SparkSession, bootstrap: str, arrow: bool, pattern: str = "ar-.*",
          **options: str) -> list[tuple[object, ...]]:
    reader = (spark.read.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribePattern", pattern).option("includeHeaders", "true")
              .option("arrowBatches", str(arrow).lower()))
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load()
    return sorted((tuple(r) for r in df.collect()), key=lambda t: (t[2], t[3], t[4]))


def test_arrow_batches_return_the_rows_of_the_row_path(
        spark: SparkSession, abroker: BrokerProcess, data: list[bytes | None]) -> None:
    arrow = _read(spark, abroker.bootstrap, True)
    rows = _read(spark, abroker.bootstrap, False)
    assert arrow == rows
    mixed = [r for r in arrow if r[2] == MIXED]
    values = [None if r[1] is None else bytes(r[1]) for r in mixed]  # type: ignore[arg-type]
    assert sorted(values, key=repr) == sorted(data, key=repr)  # aborted ones are gone
    assert any(r[0] is None for r in mixed) and any(r[1] is None for r in mixed)
    assert {tuple((h[0], None if h[1] is None else bytes(h[1])) for h in r[7])  # type: ignore[attr-defined]
            for r in mixed} == {(), (("a", b"1"), ("b", None), ("a", b"")), (("h", b"x"),)}
    offsets = [r[4] for r in arrow if r[2] == COMPACTED]
    assert offsets == _offsets(abroker.bootstrap)
    assert len(offsets) < 600 and offsets[-1] == 599  # gaps inside the range, end kept


@pytest.mark.parametrize(("options", "tasks"), [
    ({"maxPartitions": "1"}, 1),  # every range in one task, one consumer
    ({"maxPartitions": "2", "maxRecordsPerPartition": "7"}, 2),  # pieces packed
    ({"minPartitions": "5"}, None),  # at least 5 (split in proportion to size)
], ids=["one-task", "split-then-packed", "split"])
def test_split_and_packed_reads_return_the_rows_of_the_row_path(
        spark: SparkSession, abroker: BrokerProcess, data: list[bytes | None],
        options: dict[str, str], tasks: int | None) -> None:
    rows = _read(spark, abroker.bootstrap, False)
    assert _read(spark, abroker.bootstrap, True, **options) == rows
    assert _read(spark, abroker.bootstrap, False, **options) == rows
    parts = (spark.read.format("tidegate").option("kafka.bootstrap.servers", abroker.bootstrap)
             .option("subscribePattern", "ar-.*").options(**options).load()
             .rdd.getNumPartitions())
    assert parts == tasks if tasks is not None else parts >= 5


def test_arrow_sink_writes_what_the_row_sink_writes(
        spark: SparkSession, abroker: BrokerProcess, data: list[bytes | None]) -> None:
    """The mixed records (null keys and values, headers with a null value) written back
    by the batch sink with Arrow batches and with rows: the same records land."""
    src = (spark.read.format("tidegate").option("kafka.bootstrap.servers", abroker.bootstrap)
           .option("subscribe", MIXED).option("includeHeaders", "true").load()
           .select("key", "value", "partition", "headers"))
    with Admin(bootstrap_servers=abroker.bootstrap) as admin:
        admin.create_topics([NewTopic("ar-out-arrow", 2), NewTopic("ar-out-rows", 2)])
    for arrow in (True, False):
        (src.write.format("tidegate").mode("append")
         .option("kafka.bootstrap.servers", abroker.bootstrap)
         .option("topic", f"ar-out-{'arrow' if arrow else 'rows'}")
         .option("arrowBatches", str(arrow).lower()).save())

    def written(topic: str) -> list[tuple[object, ...]]:
        got = _read(spark, abroker.bootstrap, True, pattern=topic)
        return sorted(((r[0], r[1], r[3], r[7]) for r in got), key=repr)

    expected = sorted(((r[0], r[1], r[3], r[7]) for r in _read(
        spark, abroker.bootstrap, True, pattern=MIXED)), key=repr)
    assert written("ar-out-arrow") == written("ar-out-rows") == expected
