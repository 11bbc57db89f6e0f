"""`Consumer.poll_columns` on a real broker: the rows `poll()` gives, as Spark read tasks see them.

confluent-kafka writes records with null keys and values and headers, a transaction
it aborts and one it commits; a read_committed Consumer switched to columns
(`use_columns`) and one reading record objects must yield the same Arrow rows
(`spark.arrow.columns_to_batch` vs `records_to_batch`) and end at the same position,
and a Spark task's range read (`ranges.read_range`) must too, with and without
``columnarDecode``. No SparkSession: a few seconds.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("tidegate.records._columnar")
import pyarrow as pa
from confluent_kafka import Producer as CProducer
from tests.integration.conftest import BrokerProcess

from tidegate.client import Admin, Consumer, NewTopic, TopicPartition
from tidegate.spark.arrow import columns_to_batch, records_to_batch
from tidegate.spark.options import ReadOptions
from tidegate.spark.ranges import OffsetRange, RangePartition, read_range

TOPIC = "cols"
TP = TopicPartition(TOPIC, 0)


def _produce(bootstrap: str) -> None:
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 1)])
    plain = CProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(300):
        plain.produce(TOPIC, partition=0, key=None if i % 7 == 0 else b"k%d" % i,
                      value=None if i % 11 == 0 else b"v" * (i % 50),
                      headers=[("h", b"%d" % i), ("n", None)] if i % 5 == 0 else None)
    assert plain.flush(30) == 0
    txn = CProducer({"bootstrap.servers": bootstrap, "transactional.id": "cols-txn"})
    txn.init_transactions(30)
    for commit in (False, True, False):
        txn.begin_transaction()
        for i in range(40):
            txn.produce(TOPIC, partition=0, key=b"t", value=b"%s-%d" % (b"c" if commit
                                                                          else b"a", i))
        txn.flush(30)
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    plain.produce(TOPIC, partition=0, value=b"last")
    assert plain.flush(30) == 0


def _config(bootstrap: str) -> dict[str, object]:
    return ReadOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC},
                             streaming=False).consumer_config


def _table(batches: list[pa.RecordBatch]) -> list[dict[str, object]]:
    return pa.Table.from_batches(batches, records_to_batch(TOPIC, 0, [], True).schema) \
        .to_pylist()


def test_columns_give_the_rows_poll_gives(broker: BrokerProcess) -> None:
    _produce(broker.bootstrap)
    config = _config(broker.bootstrap)
    with Consumer(config) as c:
        end = c.end_offsets([TP])[TP]  # the LSO: all transactions are decided
        c.assign([TP])
        c.seek(TP, 0)
        objects = []
        while c.position(TP) < end:
            records = c.poll(timeout_ms=500)
            if records:
                objects.append(records_to_batch(TOPIC, 0, records, True))
        objects_end = c.position(TP)
    with Consumer(config) as c:
        c.use_columns(include_headers=True)
        c.assign([TP])
        c.seek(TP, 0)
        columns = []
        while c.position(TP) < end:
            for chunk in c.poll_columns(timeout_ms=500).get(TP, []):
                columns.append(columns_to_batch(TOPIC, 0, chunk, True))
        with pytest.raises(TypeError):
            c.poll(timeout_ms=10)
        columns_end = c.position(TP)
    rows = _table(objects)
    assert _table(columns) == rows and columns_end == objects_end == end
    values = [r["value"] for r in rows]
    assert len(rows) == 300 + 40 + 1 and b"a-0" not in values and b"c-0" in values
    assert any(r["key"] is None for r in rows) and any(r["value"] is None for r in rows)
    assert [{"key": "h", "value": b"0"}, {"key": "n", "value": None}] in \
        [r["headers"] for r in rows]

    rng = OffsetRange(TOPIC, 0, 5, end - 1)  # ends inside the last batch's records
    reads = [_table(list(read_range(RangePartition(rng, config, True, True, 30_000, True,
                                                   columns))))
             for columns in (True, False)]
    assert reads[0] == reads[1] == [r for r in rows if 5 <= r["offset"] < end - 1]
