"""`format("tidegate")` on a real SparkSession (local[2]) against a real broker process.

The data is written by confluent-kafka with interleaved committed and aborted
transactions (and plain records), so read_committed has something to drop; the
expected rows are computed from what the writers committed, not from a Tidegate read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
from confluent_kafka import Producer as CProducer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from tests.integration.conftest import BrokerProcess

from tidegate.client import Admin, NewTopic, Producer
from tidegate.spark.stream_writer import TidegateStreamWriter, TwoPhaseCommitRefusedError

pytestmark = pytest.mark.interop

TOPICS = {"sp-a": 3, "sp-b": 2}


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # default settings, as `make run`: the exactly-once sink needs nothing more
    b = BrokerProcess(tmp_path_factory.mktemp("spark") / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def spark(spark_session: SparkSession) -> SparkSession:
    # the run's one SparkSession (conftest.py): test_spark_failures restarts its killed
    # drivers' queries in it
    return spark_session


def _delivered(err: object, msg: object) -> None:
    assert err is None, err


@pytest.fixture(scope="module")
def committed(sbroker: BrokerProcess) -> set[tuple[str, int, bytes]]:
    """Interleaved transactions of two confluent-kafka producers, some aborted, plus
    plain records; returns the (topic, partition, value) that must be visible."""
    with Admin(bootstrap_servers=sbroker.bootstrap) as admin:
        admin.create_topics([NewTopic(t, n) for t, n in TOPICS.items()])
    conf = {"bootstrap.servers": sbroker.bootstrap, "linger.ms": 1}
    txa = CProducer({**conf, "transactional.id": "spark-test-a"})
    txb = CProducer({**conf, "transactional.id": "spark-test-b"})
    plain = CProducer(conf)
    for p in (txa, txb):
        p.init_transactions(30)
    visible: set[tuple[str, int, bytes]] = set()
    for rnd in range(6):
        txa.begin_transaction()
        txb.begin_transaction()
        for i in range(20):
            for name, p in (("a", txa), ("b", txb)):
                for topic, parts in TOPICS.items():
                    part = (i + rnd) % parts
                    v = f"{name}-{rnd}-{i}-{topic}".encode()
                    p.produce(topic, v, key=f"k{i}".encode(), partition=part,
                              headers=[("h", b"x")], on_delivery=_delivered)
            if i % 7 == 0:
                v = f"plain-{rnd}-{i}".encode()
                plain.produce("sp-a", v, partition=i % 3, on_delivery=_delivered)
                plain.flush(30)
                visible.add(("sp-a", i % 3, v))
        commit_a = rnd % 2 == 0
        commit_b = rnd % 3 != 0
        for name, p, ok in (("a", txa, commit_a), ("b", txb, commit_b)):
            p.flush(30)
            if ok:
                p.commit_transaction(30)
                visible |= {(t, (i + rnd) % n, f"{name}-{rnd}-{i}-{t}".encode())
                            for i in range(20) for t, n in TOPICS.items()}
            else:
                p.abort_transaction(30)
    plain.flush(30)
    return visible


def _reader(spark: SparkSession, broker: BrokerProcess, **opts: str):  # type: ignore[no-untyped-def]
    r = spark.read.format("tidegate").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_returns_exactly_the_committed_records(
        spark: SparkSession, sbroker: BrokerProcess,
        committed: set[tuple[str, int, bytes]]) -> None:
    df = _reader(spark, sbroker, subscribe="sp-a,sp-b", includeHeaders="true")
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType", "headers"]
    rows = df.collect()
    got = [(r.topic, r.partition, bytes(r.value)) for r in rows]
    assert len(got) == len(set(got)), "duplicates"
    assert set(got) == committed
    assert not any(v.startswith(b"b-0-") or v.startswith(b"a-1-") for _, _, v in got)
    tx = [r for r in rows if not bytes(r.value).startswith(b"plain")]
    assert all(list(r.headers) == [("h", b"x")] or [tuple(h) for h in r.headers] == [("h", b"x")]
               for r in tx)
    assert all(r.timestampType == 0 and r.timestamp.year >= 2024 for r in rows)
    # offsets strictly increase inside a partition
    by_part: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        by_part.setdefault((r.topic, r.partition), []).append(r.offset)
    assert all(offs == sorted(set(offs)) for offs in by_part.values())


def test_min_partitions_splits_ranges_without_changing_the_result(
        spark: SparkSession, sbroker: BrokerProcess,
        committed: set[tuple[str, int, bytes]]) -> None:
    df = _reader(spark, sbroker, subscribePattern="sp-.*", minPartitions="12")
    assert df.rdd.getNumPartitions() >= 12
    got = [(r.topic, r.partition, bytes(r.value)) for r in df.collect()]
    assert len(got) == len(set(got)) and set(got) == committed


def test_read_uncommitted_option_also_returns_aborted_records(
        spark: SparkSession, sbroker: BrokerProcess,
        committed: set[tuple[str, int, bytes]]) -> None:
    df = _reader(spark, sbroker, assign='{"sp-b":[0,1]}',
                 **{"kafka.isolation.level": "read_uncommitted"})
    got = {(r.topic, r.partition, bytes(r.value)) for r in df.collect()}
    assert got > {c for c in committed if c[0] == "sp-b"}
    assert any(v.startswith(b"b-0-") for _, _, v in got)


def test_offsets_json_bounds_the_read(spark: SparkSession, sbroker: BrokerProcess,
                                      committed: set[tuple[str, int, bytes]]) -> None:
    df = _reader(spark, sbroker, assign='{"sp-b":[1]}',
                 startingOffsets='{"sp-b":{"1":5}}', endingOffsets='{"sp-b":{"1":40}}',
                 **{"kafka.isolation.level": "read_uncommitted"})
    offs = sorted(r.offset for r in df.collect())
    assert offs and offs[0] >= 5 and offs[-1] < 40
    # with read_uncommitted only markers are missing in [5, 40)
    assert len(offs) > 25


def test_bad_options_fail_with_a_clear_message(spark: SparkSession,
                                               sbroker: BrokerProcess) -> None:
    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        _reader(spark, sbroker).collect()
    with pytest.raises(Exception, match=r"kafka\.group\.id is not supported"):
        _reader(spark, sbroker, subscribe="sp-a", **{"kafka.group.id": "g"}).collect()
    with pytest.raises(Exception, match=r"kafka\.bootstrap\.servers is required"):
        spark.read.format("tidegate").option("subscribe", "sp-a").load().collect()


SUBSET = "offset long, headers array<struct<key:string,value:binary>>, value binary"


@pytest.mark.parametrize("path", [{}, {"columnarDecode": "false"}, {"arrowBatches": "false"}],
                         ids=["columns", "objects", "rows"])
def test_a_subset_schema_reads_only_those_columns(
        spark: SparkSession, sbroker: BrokerProcess,
        committed: set[tuple[str, int, bytes]], path: dict[str, str]) -> None:
    """.schema(...) with some of the source's columns, reordered (headers without
    includeHeaders): those columns, with the values of a full read, on every task path."""
    full = _reader(spark, sbroker, subscribe="sp-a,sp-b", includeHeaders="true")
    want = sorted((r.offset, [tuple(h) for h in r.headers], bytes(r.value))
                  for r in full.collect())
    df = (spark.read.format("tidegate").schema(SUBSET).options(**path)
          .option("kafka.bootstrap.servers", sbroker.bootstrap)
          .option("subscribe", "sp-a,sp-b").load())
    assert df.columns == ["offset", "headers", "value"]
    got = sorted((r.offset, [tuple(h) for h in r.headers], bytes(r.value))
                 for r in df.collect())
    assert got == want and len(got) == len(committed)


def test_a_schema_with_an_unknown_column_or_type_names_the_allowed_ones(
        spark: SparkSession, sbroker: BrokerProcess) -> None:
    def read(schema: str) -> None:
        (spark.read.format("tidegate").schema(schema)
         .option("kafka.bootstrap.servers", sbroker.bootstrap).option("subscribe", "sp-a")
         .load().collect())

    with pytest.raises(Exception, match=r"no column 'size'.*may only pick from key, value, "
                                        r"topic, partition, offset, timestamp, timestampType, "
                                        r"headers"):
        read("value binary, size int")
    with pytest.raises(Exception, match=r"column 'value' is binary, not string"):
        read("value string")


def test_batch_write_round_trips(spark: SparkSession, sbroker: BrokerProcess) -> None:
    with Admin(bootstrap_servers=sbroker.bootstrap) as admin:
        admin.create_topics([NewTopic("sp-out", 2), NewTopic("sp-out2", 1)])
    rows = [(f"k{i}".encode(), f"v{i}", "sp-out" if i % 3 else "sp-out2",
             [("n", str(i).encode())]) for i in range(300)]
    df = spark.createDataFrame(rows, "key binary, value string, topic string, "
                                     "headers array<struct<key string, value binary>>")
    df.repartition(3).write.format("tidegate").mode("append") \
        .option("kafka.bootstrap.servers", sbroker.bootstrap).save()
    back = _reader(spark, sbroker, subscribe="sp-out,sp-out2", includeHeaders="true").collect()
    got = sorted((bytes(r.key), bytes(r.value).decode(), r.topic,
                  [(h[0], bytes(h[1])) for h in r.headers]) for r in back)
    assert got == sorted((k, v, t, h) for k, v, t, h in rows)

    # topic option + explicit partition column
    df2 = spark.createDataFrame([(b"x%d" % i, 1) for i in range(10)], "value binary, partition int")
    df2.write.format("tidegate").mode("append").option("topic", "sp-out") \
        .option("kafka.bootstrap.servers", sbroker.bootstrap).save()
    back2 = _reader(spark, sbroker, assign='{"sp-out":[1]}') \
        .where(F.col("value").cast("string").startswith("x")).collect()
    assert sorted(bytes(r.value) for r in back2) == sorted(b"x%d" % i for i in range(10))


def test_stream_read_available_now_with_max_offsets(
        spark: SparkSession, sbroker: BrokerProcess,
        committed: set[tuple[str, int, bytes]], tmp_path: Path) -> None:
    batches: list[int] = []
    seen: list[tuple[str, int, bytes]] = []

    def collect(df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        rows = df.collect()
        batches.append(len(rows))
        seen.extend((r.topic, r.partition, bytes(r.value)) for r in rows)

    stream = (spark.readStream.format("tidegate")
              .option("kafka.bootstrap.servers", sbroker.bootstrap)
              .option("subscribe", "sp-a,sp-b").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "200").load())
    started = time.monotonic()
    q = (stream.writeStream.foreachBatch(collect).trigger(availableNow=True)
         .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    q.awaitTermination(120)
    assert time.monotonic() - started < 120
    assert len(seen) == len(set(seen)) and set(seen) == committed
    assert len([b for b in batches if b]) >= 3  # the limit split the backlog


def _run_pipeline(spark: SparkSession, broker: BrokerProcess, ckpt: Path, out: str) -> None:
    src = (spark.readStream.format("tidegate")
           .option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", "sp-a").option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", "150").load())
    q = (src.select(F.col("key"), F.concat(F.lit(b"out:"), F.col("value")).alias("value"))
         .writeStream.format("tidegate").trigger(availableNow=True)
         .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", out)
         .option("checkpointLocation", str(ckpt)).start())
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()


def test_exactly_once_stream_write_survives_a_replayed_batch(
        spark: SparkSession, sbroker: BrokerProcess,
        committed: set[tuple[str, int, bytes]], tmp_path: Path) -> None:
    with Admin(bootstrap_servers=sbroker.bootstrap) as admin:
        admin.create_topics([NewTopic("sp-eos-out", 2)])
    ckpt = tmp_path / "ckpt"
    _run_pipeline(spark, sbroker, ckpt, "sp-eos-out")
    # The driver "crashed" after the broker commit of the last batch and before Spark
    # logged it: drop the commit log entry, restart from the checkpoint.
    commits = sorted((ckpt / "commits").iterdir(), key=lambda p: int(p.name)
                     if p.name.isdigit() else -1)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    assert int(last.name) >= 1  # more than one batch: maxOffsetsPerTrigger split it
    _run_pipeline(spark, sbroker, ckpt, "sp-eos-out")

    expected = sorted(b"out:" + v for t, _, v in committed if t == "sp-a")
    got = sorted(bytes(r.value) for r in _reader(spark, sbroker, subscribe="sp-eos-out")
                 .collect())
    assert got == expected
    with Admin(bootstrap_servers=sbroker.bootstrap) as admin:
        open_txns = [t for t in admin.list_transactions(states=["Ongoing"])
                     if t.transactional_id.startswith("tidegate-spark-")]
    assert open_txns == []


def test_exactly_once_sink_refused_two_phase_commit_says_what_to_do(tmp_path: Path) -> None:
    """A broker with transaction.two.phase.commit.enable=false: the sink's task producer
    fails at once with an error naming the setting and exactlyOnce=false (the text Spark
    shows first in the query's exception)."""
    b = BrokerProcess(tmp_path / "data",
                      overrides={"transaction.two.phase.commit.enable": "false"})
    b.start()
    try:
        producer = Producer({"bootstrap.servers": b.bootstrap,
                             "transactional.id": "tidegate-spark-refused",
                             "transaction.two.phase.commit.enable": True})
        started = time.monotonic()
        try:
            with pytest.raises(TwoPhaseCommitRefusedError) as e:
                TidegateStreamWriter._init(producer)
        finally:
            producer.close()
        assert time.monotonic() - started < 10
        text = str(e.value)
        assert "transaction.two.phase.commit.enable=true" in text
        assert '.option("exactlyOnce", "false")' in text
        assert "'tidegate-spark-refused'" in text
    finally:
        b.stop()



@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                    reason="soak run: `make soak` (TIDEGATE_SOAK=1); ~25 s of Spark")
def test_source_and_exactly_once_sink_over_sasl_ssl(spark: SparkSession,
                                                    tmp_path: Path) -> None:
    """The streaming source and the exactly-once sink against a SASL_SSL listener
    (SCRAM-SHA-512), with Kafka's settings as `kafka.`-prefixed options: one Spark query
    (Spark's jobs are what cost time here); the data goes in and is checked over
    PLAINTEXT by confluent-kafka (read_committed)."""
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    from tests.integration.security_util import make_pki, secure_broker

    pki = make_pki(tmp_path / "pki")
    sb = secure_broker(tmp_path / "data", pki)
    sb.broker.start()
    try:
        plain = sb.bootstrap("PLAINTEXT")
        admin = AdminClient({"bootstrap.servers": plain})
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "spark", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"spark-secret")]
        )["spark"].result(10)
        with Admin(bootstrap_servers=plain) as tadmin:
            tadmin.create_topics([NewTopic("sec-in", 2), NewTopic("sec-out", 1)])
        p = CProducer({"bootstrap.servers": plain})
        values = [f"v{i}".encode() for i in range(50)]
        for i, v in enumerate(values):
            p.produce("sec-in", v, partition=i % 2)
        assert p.flush(30) == 0
        sec = {"kafka.bootstrap.servers": sb.bootstrap("SASL_SSL"),
               "kafka.security.protocol": "SASL_SSL",
               "kafka.ssl.ca.location": pki.path("ca.crt"),
               "kafka.sasl.mechanism": "SCRAM-SHA-512",
               "kafka.sasl.username": "spark", "kafka.sasl.password": "spark-secret"}
        src = (spark.readStream.format("tidegate").options(**sec)
               .option("subscribe", "sec-in").option("startingOffsets", "earliest").load())
        q = (src.select(F.col("key"), F.concat(F.lit(b"out:"), F.col("value")).alias("value"))
             .writeStream.format("tidegate").trigger(availableNow=True).options(**sec)
             .option("topic", "sec-out").option("checkpointLocation", str(tmp_path / "ckpt"))
             .start())
        q.awaitTermination(120)
        assert q.exception() is None, q.exception()
        c = CConsumer({"bootstrap.servers": plain, "group.id": "sec-check",
                       "isolation.level": "read_committed", "enable.auto.commit": False})
        c.assign([CTopicPartition("sec-out", 0, 0)])
        got: list[bytes] = []
        try:
            while len(got) < len(values):
                m = c.poll(10)
                assert m is not None, f"only {len(got)} records in sec-out"
                assert m.error() is None, m.error()
                got.append(m.value())
        finally:
            c.close()
        assert sorted(got) == sorted(b"out:" + v for v in values)
        assert any("authenticated as User:spark" in line for line in sb.broker.log_lines)
    finally:
        sb.broker.stop()
