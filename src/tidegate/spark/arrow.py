"""Consumed records as Arrow record batches, in the read schema (`source.read_schema`).

PySpark (4.x) lets a data source reader yield ``pyarrow.RecordBatch`` objects instead of
rows. For rows, Spark's Python worker runs a converter per value (a datetime per
timestamp, a list per headers cell) and builds the Arrow batch itself; here each column
is built once per poll from the records, in C loops where pyarrow has them:

- ``key`` / ``value``: one ``pa.array`` over the records' bytes (None -> null), which
  copies every value into one data buffer with an offsets buffer, no per-value converter;
- ``topic`` / ``partition``: constant within a range, so `pa.repeat`;
- ``offset``: offsets ascend strictly within a poll, so when the last minus the first is
  ``n - 1`` they are exactly ``first .. last`` (no marker or compacted gap): a numpy
  ``arange`` instead of reading and converting each record's offset;
- ``timestamp``: Kafka milliseconds as int64, times 1,000 (Spark wants microseconds,
  UTC), cast without an intermediate datetime;
- ``timestampType``: one list of the records' types; when they are all the first one's
  (the usual case: a topic has one timestamp type) `pa.repeat`, which skips converting
  each Python int;
- ``headers`` (only with includeHeaders): the headers of all records flattened into one
  struct array of (key, value) and cut per record by an offsets array.

`columns_to_batch` builds the same batch from a consumer's column buffers
(`client.consumer.columns`, decoded in C by `records._columnar`): each column wraps the
buffers as they are (`pa.Array.from_buffers`), so no Python object per record is made
at all; only the timestamp column is computed (times 1,000).

The schema must be exactly the one Spark derives from `read_schema`
(`pyspark.sql.pandas.types.to_arrow_schema`, checked on the first batch by Spark):
`arrow_schema` builds it the same way, so the two cannot drift. With `select` (a read
given a subset schema, `source.project`) only those columns are built, in that order:
each column is a function called only when selected.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from itertools import accumulate

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tidegate.client import ConsumerRecord
from tidegate.client.consumer.columns import BinaryColumn, ColumnSlice

__all__ = ["arrow_schema", "columns_to_batch", "records_to_batch"]

_US_PER_MS = 1000


@cache
def arrow_schema(include_headers: bool, select: tuple[str, ...] | None = None) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from tidegate.spark.source import read_schema

    schema = read_schema(include_headers)
    if select is not None:
        schema = StructType([schema[name] for name in select])
    return to_arrow_schema(schema, timezone="UTC")


def _batch(build: dict[str, Callable[[], pa.Array]], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([build[name]() for name in schema.names], schema=schema)


def _headers(records: Sequence[ConsumerRecord], list_type: pa.DataType) -> pa.Array:
    keys: list[str] = []
    values: list[bytes | None] = []
    counts: list[int] = []
    for r in records:
        hs = r.headers
        counts.append(len(hs))
        for k, v in hs:
            keys.append(k)
            values.append(v)
    struct_type = list_type.value_type
    items = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())],
        fields=list(struct_type))
    offsets = pa.array([0, *accumulate(counts)], pa.int32())
    return pa.ListArray.from_arrays(offsets, items, type=list_type)


def _offsets(records: Sequence[ConsumerRecord]) -> pa.Array:
    n = len(records)
    if n:
        first = records[0].offset
        if records[-1].offset - first == n - 1:  # strictly ascending, so contiguous
            return pa.array(np.arange(first, first + n, dtype=np.int64))
    return pa.array([r.offset for r in records], pa.int64())


def _timestamp_types(records: Sequence[ConsumerRecord]) -> pa.Array:
    types = [r.timestamp_type for r in records]
    if types and types.count(types[0]) == len(types):
        return pa.repeat(pa.scalar(types[0], pa.int32()), len(types))
    return pa.array(types, pa.int32())


def _micros(millis: pa.Array) -> pa.Array:
    return pc.multiply(millis, _US_PER_MS).cast(arrow_schema(False).field("timestamp").type)


def records_to_batch(topic: str, partition: int, records: Sequence[ConsumerRecord],
                     include_headers: bool, select: tuple[str, ...] | None = None
                     ) -> pa.RecordBatch:
    """One batch of `records` (all of `topic`-`partition`), in the read schema (only
    the `select` columns, in that order, when given)."""
    schema = arrow_schema(include_headers, select)
    n = len(records)
    return _batch({
        "key": lambda: pa.array([r.key for r in records], pa.binary()),
        "value": lambda: pa.array([r.value for r in records], pa.binary()),
        "topic": lambda: pa.repeat(pa.scalar(topic, pa.string()), n),
        "partition": lambda: pa.repeat(pa.scalar(partition, pa.int32()), n),
        "offset": lambda: _offsets(records),
        "timestamp": lambda: _micros(pa.array([r.timestamp for r in records], pa.int64())),
        "timestampType": lambda: _timestamp_types(records),
        "headers": lambda: _headers(records, schema.field("headers").type),
    }, schema)


def _binary(col: BinaryColumn, n: int) -> pa.Array:
    validity, nulls, offsets, data = col
    return pa.Array.from_buffers(
        pa.binary(), n, [None if validity is None else pa.py_buffer(validity),
                   pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _fixed(type_: pa.DataType, n: int, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(data)], null_count=0)


def _column_headers(chunk: ColumnSlice, list_type: pa.DataType) -> pa.Array:
    cols = chunk.columns
    assert cols.headers is not None, "the consumer decoded no headers"
    list_offsets, count, key_offsets, key_data, values = cols.headers
    keys = pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(key_offsets),
                                                       pa.py_buffer(key_data)],
                                 null_count=0)
    keys.validate(full=True)  # header keys must be UTF-8 to be Arrow strings
    items = pa.StructArray.from_arrays([keys, _binary(values, count)],
                                       fields=list(list_type.value_type))
    return pa.ListArray.from_arrays(_fixed(pa.int32(), cols.n + 1, list_offsets), items,
                                    type=list_type)


def columns_to_batch(topic: str, partition: int, chunk: ColumnSlice,
                     include_headers: bool, select: tuple[str, ...] | None = None
                     ) -> pa.RecordBatch:
    """`records_to_batch` of rows ``[chunk.start, chunk.stop)`` of a consumer's column
    buffers: the whole decoded fetch is wrapped, then sliced (no copy)."""
    schema = arrow_schema(include_headers, select)
    cols = chunk.columns
    n = cols.n
    batch = _batch({
        "key": lambda: _binary(cols.key, n),
        "value": lambda: _binary(cols.value, n),
        "topic": lambda: pa.repeat(pa.scalar(topic, pa.string()), n),
        "partition": lambda: pa.repeat(pa.scalar(partition, pa.int32()), n),
        "offset": lambda: _fixed(pa.int64(), n, cols.offsets),
        "timestamp": lambda: _micros(_fixed(pa.int64(), n, cols.timestamps)),
        "timestampType": lambda: _fixed(pa.int32(), n, cols.timestamp_types),
        "headers": lambda: _column_headers(chunk, schema.field("headers").type),
    }, schema)
    if chunk.start == 0 and chunk.stop == n:
        return batch
    return batch.slice(chunk.start, chunk.stop - chunk.start)
