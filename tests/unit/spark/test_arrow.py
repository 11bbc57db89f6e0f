"""`spark.arrow.records_to_batch` against the row path, through Spark's own converter.

The row path yields tuples that PySpark's worker turns into Arrow with
`LocalDataToArrowConversion` (what `plan_data_source_read` runs for a reader that
yields rows); the Arrow path builds the batch itself. Both must give the same table,
schema included (Spark refuses a batch whose schema differs from the read schema's).
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
import pyarrow as pa
from pyspark.sql.conversion import LocalDataToArrowConversion

from tidegate.client import ConsumerRecord
from tidegate.spark.arrow import arrow_schema, records_to_batch
from tidegate.spark.ranges import _timestamp
from tidegate.spark.source import read_schema

RECORDS = [
    ConsumerRecord("t", 3, 10, 1_700_000_000_123, 0, b"k", b"v", ()),
    ConsumerRecord("t", 3, 11, 1_700_000_000_124, 0, None, None, ()),  # nulls
    ConsumerRecord("t", 3, 14, -1, 1, b"", b"", (("a", b"1"), ("b", None), ("a", b""))),
    ConsumerRecord("t", 3, 20, 0, 1, b"\x00\xff", b"x" * 5000, (("h", b"x"),)),
]
# No offset gap and one timestamp type: the offset and timestampType columns take their
# shortcuts (an arange, a repeat); RECORDS above (gaps, both types) takes the general way.
CONTIGUOUS = [ConsumerRecord("t", 3, 7 + i, 1_700_000_000_000 + i, 1, b"k%d" % i,
                             None if i == 2 else b"v", ()) for i in range(5)]


def _via_rows(include_headers: bool, records: list[ConsumerRecord] = RECORDS
              ) -> pa.RecordBatch:
    schema = read_schema(include_headers)
    convert = [LocalDataToArrowConversion._create_converter(f.dataType)  # what Spark runs
               for f in schema.fields]
    rows = []
    for r in records:  # as ranges.read_range yields them with arrowBatches=false
        row = (r.key, r.value, r.topic, r.partition, r.offset, _timestamp(r.timestamp),
               r.timestamp_type)
        rows.append((*row, list(r.headers)) if include_headers else row)
    columns = [[convert[i](row[i]) for row in rows] for i in range(len(schema.fields))]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


@pytest.mark.parametrize("include_headers", [False, True])
def test_the_arrow_batch_equals_what_spark_builds_from_the_rows(include_headers: bool) -> None:
    got = records_to_batch("t", 3, RECORDS, include_headers)
    want = _via_rows(include_headers)
    assert got.schema.equals(want.schema)
    assert got.to_pylist() == want.to_pylist()
    assert got.equals(want)


def test_contiguous_offsets_and_one_timestamp_type_take_the_same_values() -> None:
    got = records_to_batch("t", 3, CONTIGUOUS, False)
    assert got.column("offset").to_pylist() == [7, 8, 9, 10, 11]
    assert got.column("timestampType").to_pylist() == [1] * 5
    assert got.equals(_via_rows(False, CONTIGUOUS))


def test_headers_keep_order_duplicates_and_null_values() -> None:
    got = records_to_batch("t", 3, RECORDS, True).column("headers").to_pylist()
    assert got == [[], [], [{"key": "a", "value": b"1"}, {"key": "b", "value": None},
                           {"key": "a", "value": b""}], [{"key": "h", "value": b"x"}]]


def test_an_empty_batch_has_the_schema() -> None:
    got = records_to_batch("t", 0, [], True)
    assert got.num_rows == 0
    assert got.schema.equals(arrow_schema(True))


def test_a_selected_batch_is_the_full_batch_with_those_columns() -> None:
    select = ("timestamp", "headers", "value")
    got = records_to_batch("t", 3, RECORDS, True, select)
    assert got.schema.names == list(select)
    assert got.equals(records_to_batch("t", 3, RECORDS, True).select(list(select)))


def test_project_keeps_the_full_schema_and_refuses_what_the_source_lacks() -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    from tidegate.spark.source import project

    assert project(read_schema(False), False) is None
    assert project(read_schema(True), True) is None
    assert project(StructType([read_schema(True)["headers"], read_schema(False)["key"]]),
                   False) == ("headers", "key")
    with pytest.raises(ValueError, match=r"no column 'size'.*pick from key, value"):
        project(StructType([StructField("size", StringType())]), False)
    with pytest.raises(ValueError, match="column 'topic' is string, not binary"):
        project(StructType([StructField("topic", read_schema(False)["key"].dataType)]), False)
    with pytest.raises(ValueError, match="'offset' must be nullable"):
        project(StructType([StructField("offset", read_schema(False)["offset"].dataType,
                                        nullable=False)]), False)
    with pytest.raises(ValueError, match="named twice"):
        project(StructType([read_schema(False)["key"]] * 2), False)


def test_readers_get_the_projection_of_the_schema_spark_hands_them() -> None:
    from pyspark.sql.types import StructType

    from tidegate.spark.source import TidegateDataSource

    source = TidegateDataSource({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"})
    full = source.reader(read_schema(False))
    assert full.opts.select is None and not full.opts.include_headers  # type: ignore[attr-defined]
    subset = StructType([read_schema(True)["headers"], read_schema(False)["value"]])
    for reader in (source.reader(subset), source.streamReader(subset)):
        opts = reader.opts  # type: ignore[union-attr]
        assert opts.select == ("headers", "value") and opts.include_headers
