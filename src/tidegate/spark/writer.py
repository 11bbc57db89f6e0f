"""Batch write: rows to records, one idempotent producer per task.

The input columns are Spark's Kafka sink's: ``value`` (binary or string, required),
``key`` (binary or string), ``topic`` (string; else the ``topic`` option), ``partition``
(int; else Kafka's partitioner) and ``headers`` (array of struct<key string, value
binary>); other columns are ignored. `RowEncoder` checks the schema once on the driver.

A batch write is at least once, as Spark's Kafka sink: idempotence keeps a task's own
retries of a request from duplicating records, but a retried *task* writes its rows
again. Exactly-once is the streaming sink's job (`stream_writer.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
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

__all__ = ["RowEncoder", "TidegateBatchWriter", "WriteResult", "send_rows"]


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

    def encode(self, row: Any) -> tuple[str, object, object, int | None,
                                        list[tuple[str, bytes | None]] | None]:
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
    errors = _Errors()
    n = 0
    for row in rows:
        topic, value, key, partition, headers = encoder.encode(row)
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
            return WriteResult(send_rows(producer, self.encoder, iterator))
