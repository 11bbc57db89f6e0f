"""The `tidegate` DataSource: schema, and the reader/writer for each kind of query.

Options are parsed here, on the driver, before any task starts (`options.py`), so a
wrong option fails the query at once with a message naming it. The read schema is the
one of Spark's Kafka source, with ``headers`` only when ``includeHeaders=true``.

A schema given with ``.schema(...)`` that is a subset of those columns (any order, the
same types; ``headers`` allowed whatever ``includeHeaders`` says) is a projection
(`project`): tasks build and ship only those columns. Spark's Python data sources get no
column pruning from the query itself (pyspark 4.x), and Spark's intake of a Python
task's Arrow batches costs about in proportion to their columns (2.4x less time for
``value`` alone than for all seven, docs/benchmarks.md). Any other column or type is a
`ValueError` naming the allowed ones.
"""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidegate.spark.options import ReadOptions, WriteOptions, lower

__all__ = ["HEADERS_TYPE", "TidegateDataSource", "project", "read_schema"]

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))


def read_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def project(schema: StructType, include_headers: bool) -> tuple[str, ...] | None:
    """The columns a read must produce for `schema` (the one Spark hands `reader`): None
    when it is the source's own schema (every column, as Spark's Kafka source), else the
    names of a user-given subset, in its order. Raises `ValueError` for a column the
    source does not have or a type other than the source's."""
    if schema == read_schema(include_headers):
        return None
    every = read_schema(True)
    allowed = {f.name: f.dataType for f in every.fields}
    names: list[str] = []
    for field in schema.fields:
        if field.name not in allowed:
            raise ValueError(
                f"format(\"tidegate\") has no column {field.name!r}: a schema given with "
                f".schema(...) may only pick from {', '.join(every.fieldNames())}")
        if field.dataType != allowed[field.name]:
            raise ValueError(
                f"format(\"tidegate\") column {field.name!r} is "
                f"{allowed[field.name].simpleString()}, not {field.dataType.simpleString()}")
        if not field.nullable:  # Spark would refuse the batches' (nullable) Arrow schema
            raise ValueError(f"format(\"tidegate\") column {field.name!r} must be nullable "
                             "in the schema (drop NOT NULL)")
        if field.name in names:
            raise ValueError(f"column {field.name!r} is named twice in the schema")
        names.append(field.name)
    if not names:
        raise ValueError("the schema given with .schema(...) has no columns")
    return tuple(names)


def _projected(opts: ReadOptions, schema: StructType) -> ReadOptions:
    select = project(schema, opts.include_headers)
    if select is None:
        return opts
    return replace(opts, select=select, include_headers="headers" in select)


class TidegateDataSource(DataSource):
    """``spark.read.format("tidegate")``: Spark's Kafka connector, over Tidegate's client."""

    @classmethod
    def name(cls) -> str:
        return "tidegate"

    def schema(self) -> StructType:
        return read_schema(lower(self.options).get("includeheaders", "false").lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        from tidegate.spark.reader import TidegateBatchReader

        return TidegateBatchReader(_projected(ReadOptions.parse(self.options, streaming=False),
                                              schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from tidegate.spark.stream_reader import TidegateStreamReader

        return TidegateStreamReader(_projected(ReadOptions.parse(self.options, streaming=True),
                                               schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from tidegate.spark.writer import TidegateBatchArrowWriter, TidegateBatchWriter

        opts = WriteOptions.parse(self.options)
        cls = TidegateBatchArrowWriter if opts.arrow_batches else TidegateBatchWriter
        return cls(opts, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from tidegate.spark.stream_writer import TidegateStreamArrowWriter, TidegateStreamWriter

        opts = WriteOptions.parse(self.options)
        cls = TidegateStreamArrowWriter if opts.arrow_batches else TidegateStreamWriter
        return cls(opts, schema)
