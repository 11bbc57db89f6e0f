"""The `tidegate` DataSource: schema, and the reader/writer for each kind of query.

Options are parsed here, on the driver, before any task starts (`options.py`), so a
wrong option fails the query at once with a message naming it. The read schema is the
one of Spark's Kafka source, with ``headers`` only when ``includeHeaders=true``.
"""

from __future__ import annotations

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

__all__ = ["HEADERS_TYPE", "TidegateDataSource", "read_schema"]

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


class TidegateDataSource(DataSource):
    """``spark.read.format("tidegate")``: Spark's Kafka connector, over Tidegate's client."""

    @classmethod
    def name(cls) -> str:
        return "tidegate"

    def schema(self) -> StructType:
        return read_schema(lower(self.options).get("includeheaders", "false").lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        from tidegate.spark.reader import TidegateBatchReader

        return TidegateBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from tidegate.spark.stream_reader import TidegateStreamReader

        return TidegateStreamReader(ReadOptions.parse(self.options, streaming=True))

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
