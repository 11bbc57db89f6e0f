"""Batch write: rows to records, one idempotent producer per task.

The input columns are Spark's Kafka sink's: ``value`` (binary or string, required),
``key`` (binary or string), ``topic`` (string; else the ``topic`` option), ``partition``
(int; else Kafka's partitioner) and ``headers`` (array of struct<key string, value
binary>); other columns are ignored. `RowEncoder` checks the schema once on the driver.

Tasks take the input as Arrow record batches (`TidegateBatchArrowWriter`, PySpark's
`DataSourceArrowWriter`; `RowEncoder.encode_batch` turns each column into a Python list
once) unless the write sets ``arrowBatches=false``, which takes Spark's rows (slower:
Spark's Python worker builds a Row, and converts each value, per record).

A batch write is at least once, as Spark's Kafka sink: idempotence keeps a task's own
retries of a request from duplicating records, but a retried *task* writes its rows
again. Exactly-once is the streaming sink's job (`stream_writer.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from tidegate.client import Producer, RecordMetadata
from tidegate.spark.options import WriteOptions

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["RowEncoder", "TidegateBatchArrowWriter", "TidegateBatchWriter", "WriteResult",
           "send_batches", "send_rows"]

# (topic, value, key, partition, headers): `Producer.send`'s arguments for one record
Encoded = tuple[str, object, object, int | None, list[tuple[str, bytes | None]] | None]


def _check(schema: StructType, name: str, allowed: tuple[type[DataType], ...]) -> bool:
    if name not in schema.fieldNames():
        return False
    dt = schema[name].dataType
    if not isinstance(dt, allowed):
        want = " or ".join(t.__name__.replace("Type", "").lower() for t in allowed)
        raise ValueError(f"column {name} must be {want}, not {dt.simpleString()}")
    return True


@dataclass(frozen=True)
class RowEncoder:
    """Which optional columns the input has; `encode` gives `Producer.send`'s arguments."""

    default_topic: str | None
    has_key: bool
    has_topic: bool
    has_partition: bool
    has_headers: bool

    @classmethod
    def for_schema(cls, schema: StructType, topic: str | None) -> RowEncoder:
        if not _check(schema, "value", (BinaryType, StringType)):
            raise ValueError("the data to write needs a value column (binary or string)")
        has_topic = _check(schema, "topic", (StringType,))
        if not has_topic and topic is None:
            raise ValueError("give the topic option or a topic column")
        has_headers = _check(schema, "headers", (ArrayType,))
        if has_headers:
            htype = schema["headers"].dataType
            assert isinstance(htype, ArrayType)
            elem = htype.elementType
            if not (isinstance(elem, StructType) and elem.fieldNames()[:2] == ["key", "value"]):
                raise ValueError("column headers must be array<struct<key string, value binary>>")
        return cls(topic, _check(schema, "key", (BinaryType, StringType)), has_topic,
                   _check(schema, "partition", (IntegerType,)), has_headers)

    def encode(self, row: Any) -> Encoded:
        """(topic, value, key, partition, headers) of one Row. The option topic wins over
        a null topic column only (Spark's rule: the column wins when set)."""
        topic = row["topic"] if self.has_topic else None
        topic = topic if topic is not None else self.default_topic
        if topic is None:
            raise ValueError("a row has a null topic and no topic option is set")
        value = row["value"]
        key = row["key"] if self.has_key else None
        headers = None
        if self.has_headers and row["headers"]:
            headers = [(h[0], None if h[1] is None else bytes(h[1])) for h in row["headers"]]
        return (topic, _bytes(value), _bytes(key),
                row["partition"] if self.has_partition else None, headers)


    def encode_batch(self, batch: pa.RecordBatch) -> Iterator[Encoded]:
        """`encode` for every row of an Arrow batch, with the same rules: each column
        becomes a Python list once (binary -> bytes, string -> str, list<struct> ->
        dicts), then the rows are zipped together."""
        n = batch.num_rows

        def column(name: str, present: bool) -> Iterable[Any]:
            return batch.column(name).to_pylist() if present else repeat(None, n)

        default = self.default_topic
        for topic, value, key, partition, headers in zip(
                column("topic", self.has_topic), column("value", True),
                column("key", self.has_key), column("partition", self.has_partition),
                column("headers", self.has_headers), strict=False):
            if topic is None:
                topic = default
                if topic is None:
                    raise ValueError("a row has a null topic and no topic option is set")
            hs = [(h["key"], h["value"]) for h in headers] if headers else None
            yield topic, value, key, partition, hs


def _bytes(v: object) -> object:
    return bytes(v) if isinstance(v, bytearray | memoryview) else v


@dataclass
class WriteResult(WriterCommitMessage):
    """A task's outcome: rows written (and, for the streaming sink, its transaction)."""

    rows: int
    partition_id: int = 0
    attempt: int = 0
    prepared: str | None = None  # PreparedTxnState JSON (exactly-once sink)


class _Errors:
    """The first delivery failure, recorded from the producer's loop thread."""

    def __init__(self) -> None:
        self.first: BaseException | None = None
        self._lock = threading.Lock()

    def __call__(self, meta: RecordMetadata | None, error: BaseException | None) -> None:
        if error is not None:
            with self._lock:
                if self.first is None:
                    self.first = error


def send_rows(producer: Producer, encoder: RowEncoder, rows: Iterable[Any]) -> int:
    """Send every row, flush, raise the first failure; return the number of rows."""
    return _send(producer, map(encoder.encode, rows))


def send_batches(producer: Producer, encoder: RowEncoder,
                 batches: Iterable[pa.RecordBatch]) -> int:
    """`send_rows` for Arrow record batches."""
    return _send(producer, chain.from_iterable(map(encoder.encode_batch, batches)))


def _send(producer: Producer, records: Iterable[Encoded]) -> int:
    errors = _Errors()
    n = 0
    for topic, value, key, partition, headers in records:
        producer.send(topic, value, key, partition=partition, headers=headers,
                      on_delivery=errors)
        n += 1
        if errors.first is not None:
            break
    producer.flush()
    if errors.first is not None:
        raise errors.first
    return n


class TidegateBatchWriter(DataSourceWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.encoder = RowEncoder.for_schema(schema, opts.topic)

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        with Producer(self.opts.producer_config) as producer:
            return WriteResult(self._send(producer, iterator))

    def _send(self, producer: Producer, iterator: Iterator[Any]) -> int:
        return send_rows(producer, self.encoder, iterator)


class TidegateBatchArrowWriter(TidegateBatchWriter, DataSourceArrowWriter):
    """The batch writer fed Arrow record batches (the default, ``arrowBatches=true``)."""

    def _send(self, producer: Producer, iterator: Iterator[Any]) -> int:
        return send_batches(producer, self.encoder, iterator)
