"""`ranges.pack_ranges` (``maxPartitions``) and `RowEncoder.encode_batch` (the Arrow sink).

Packing must keep every range exactly once, make at most the asked number of tasks,
balance them by size, and be a pure function of its input (a replayed micro-batch gets
the same tasks). The Arrow sink must hand the producer the same records as the row
path for the same input: nulls, string and binary columns, headers, the topic rules.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from tidegate.spark.ranges import OffsetRange, RangeGroup, RangePartition, pack_ranges
from tidegate.spark.writer import RowEncoder


def _parts(sizes: list[int]) -> list[RangePartition]:
    return [RangePartition(OffsetRange("t", i, 100, 100 + n), {}, False, True, 1000)
            for i, n in enumerate(sizes)]


def _groups(parts: list[RangePartition], n: int) -> list[RangeGroup]:
    out = pack_ranges(parts, n)
    assert all(isinstance(g, RangeGroup) for g in out)
    return [g for g in out if isinstance(g, RangeGroup)]


def test_pack_keeps_every_range_once_and_balances_by_size() -> None:
    parts = _parts([50, 10, 40, 30, 20, 25])
    groups = _groups(parts, 2)
    assert len(groups) == 2
    packed = [p for g in groups for p in g.parts]
    assert sorted(id(p) for p in packed) == sorted(id(p) for p in parts)
    loads = [sum(p.rng.size for p in g.parts) for g in groups]
    assert loads in ([85, 90], [90, 85])
    for g in groups:  # in (topic, partition, start) order within a task
        keys = [(p.rng.topic, p.rng.partition, p.rng.start) for p in g.parts]
        assert keys == sorted(keys)
    again = _groups(_parts([50, 10, 40, 30, 20, 25]), 2)
    assert [[p.rng for p in g.parts] for g in again] == [[p.rng for p in g.parts]
                                                         for g in groups]


def test_pack_leaves_few_ranges_alone() -> None:
    parts = _parts([5, 6])
    assert pack_ranges(parts, 2) is parts
    assert pack_ranges(parts, None) is parts
    assert len(pack_ranges(_parts([1] * 10), 3)) == 3


HEADERS = ArrayType(StructType([StructField("key", StringType()),
                                StructField("value", BinaryType())]))
SCHEMA = StructType([StructField("key", StringType()), StructField("value", BinaryType()),
                     StructField("topic", StringType()), StructField("partition", IntegerType()),
                     StructField("headers", HEADERS), StructField("other", IntegerType())])
ROWS = [
    Row(key="k1", value=b"v1", topic="a", partition=1, headers=[Row(key="h", value=b"x")],
        other=7),
    Row(key=None, value=None, topic=None, partition=None, headers=None, other=None),
    Row(key="", value=b"", topic="b", partition=0,
        headers=[Row(key="h1", value=None), Row(key="h2", value=b"")], other=1),
    Row(key="k4", value=b"\x00\xff", topic=None, partition=2, headers=[], other=2),
]


def _batch(rows: list[Row]) -> pa.RecordBatch:
    schema = to_arrow_schema(SCHEMA)
    cols = []
    for f in SCHEMA.fields:
        vals = [r[f.name] for r in rows]
        if f.name == "headers":
            vals = [None if v is None else [{"key": h.key, "value": h.value} for h in v]
                    for v in vals]
        cols.append(pa.array(vals, schema.field(f.name).type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def test_encode_batch_matches_the_row_path() -> None:
    enc = RowEncoder.for_schema(SCHEMA, "default")
    assert list(enc.encode_batch(_batch(ROWS))) == [enc.encode(r) for r in ROWS]
    # the topic rule: a null topic column with no topic option is an error on both paths
    strict = RowEncoder.for_schema(SCHEMA, None)
    with pytest.raises(ValueError, match="null topic"):
        list(strict.encode_batch(_batch(ROWS)))
    with pytest.raises(ValueError, match="null topic"):
        [strict.encode(r) for r in ROWS]


def test_encode_batch_without_optional_columns() -> None:
    schema = StructType([StructField("value", StringType())])
    enc = RowEncoder.for_schema(schema, "t")
    batch = pa.RecordBatch.from_arrays([pa.array(["a", None])], names=["value"])
    assert list(enc.encode_batch(batch)) == [("t", "a", None, None, None),
                                             ("t", None, None, None, None)]


def test_read_options_max_partitions_and_task_fetch_wait() -> None:
    from tidegate.spark.options import ReadOptions

    base = {"kafka.bootstrap.servers": "b:9092", "subscribe": "t"}
    opts = ReadOptions.parse({**base, "maxPartitions": "3"}, streaming=False)
    assert opts.max_partitions == 3
    # a packed task's next range must not wait behind a fetch parked at the previous end
    assert opts.consumer_config["fetch.max.wait.ms"] == "10"
    mine = ReadOptions.parse({**base, "kafka.fetch.max.wait.ms": "200"}, streaming=True)
    assert mine.max_partitions is None and mine.consumer_config["fetch.max.wait.ms"] == "200"
    with pytest.raises(ValueError, match="maxpartitions"):
        ReadOptions.parse({**base, "maxPartitions": "0"}, streaming=False)
