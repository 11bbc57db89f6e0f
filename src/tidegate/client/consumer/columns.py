"""Fetched records as column buffers instead of record objects (`AsyncConsumer.poll_columns`).

With the optional C extension `tidegate.records._columnar`, a consumer switched to
columns (`AsyncConsumer.use_columns`) decodes each Fetch answer's partition data into
one `RecordColumns`: offsets and timestamps as int64 buffers, timestamp types as int32,
keys and values each as one data buffer with int32 offsets and a validity bitmap, and
optionally the headers — Arrow's layout, so `pyarrow.Array.from_buffers` wraps them
without a Python object per record (`spark.arrow.columns_to_batch` does).

`parse_partition_columns` walks the batches with `state.parse_partition_records`' walk
(`batch_walk.walk_batches`: header and CRC checks, decompression, control batches and —
read_committed — aborted transactions dropped, a trailing partial batch ignored), skips
records before the fetch offset and reaches the same `next_offset`, then decodes all
kept batches in one C call. Batches it drops are still decoded (and so checked) as the
row path does.

`PartitionColumns` plays `PartitionRecords`' part in the fetch buffer: `take_columns`
hands out a `ColumnSlice` (rows ``[start, stop)`` of the decoded fetch) and the new
position. `COLUMNAR` says whether the extension is there; without it `use_columns`
raises, and callers keep to `poll`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from tidegate.client.consumer.aborted import AbortedTransaction
from tidegate.client.consumer.batch_walk import walk_batches
from tidegate.client.types import ConsumerRecord, TopicPartition
from tidegate.records.record import Record

__all__ = ["COLUMNAR", "ColumnSlice", "PartitionColumns", "RecordColumns",
           "parse_partition_columns"]

_decode: Callable[..., tuple[Any, ...]] | None = None
if os.environ.get("TIDEGATE_PURE_PYTHON", "") in ("", "0"):
    try:
        from tidegate.records import _columnar
    except ImportError:  # optional extension not built
        pass
    else:
        _decode = _columnar.decode_columns

COLUMNAR = _decode is not None

# (validity bitmap | None, null count, int32 offsets, data): one binary column
BinaryColumn = tuple[bytes | None, int, bytes, bytes]


class RecordColumns(NamedTuple):
    """One fetch's records of one partition, column by column (see `_columnar.c`)."""

    n: int
    offsets: bytes  # int64 x n
    timestamps: bytes  # int64 x n, milliseconds
    timestamp_types: bytes  # int32 x n
    key: BinaryColumn
    value: BinaryColumn
    # (list offsets int32 x (n+1), header count, key offsets, key data, value column)
    headers: tuple[bytes, int, bytes, bytes, BinaryColumn] | None


class ColumnSlice(NamedTuple):
    """Rows ``[start, stop)`` of `columns`."""

    columns: RecordColumns
    start: int
    stop: int

    def offset_at(self, i: int) -> int:
        return int.from_bytes(self.columns.offsets[8 * i:8 * i + 8], "little", signed=True)


class PartitionColumns:
    """`state.PartitionRecords`' counterpart for a consumer reading columns."""

    __slots__ = ("_index", "columns", "fetch_offset", "nbytes", "next_offset", "tp")

    def __init__(self, tp: TopicPartition, fetch_offset: int, columns: RecordColumns,
                 next_offset: int, nbytes: int = 0) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        self.columns = columns
        self.next_offset = next_offset
        self.nbytes = nbytes
        self._index = 0

    @property
    def exhausted(self) -> bool:
        return self._index >= self.columns.n

    def take(self, max_records: int, out: list[ConsumerRecord]) -> int | None:
        raise TypeError("this consumer reads columns (use_columns): use poll_columns")

    def take_raw(self, max_records: int) -> tuple[list[Record], int | None]:
        raise TypeError("this consumer reads columns (use_columns): use poll_columns")

    def take_columns(self, max_records: int) -> tuple[ColumnSlice | None, int | None]:
        """Up to `max_records` rows and the new position (None if nothing was taken)."""
        start = self._index
        stop = min(self.columns.n, start + max_records)
        self._index = stop
        out = ColumnSlice(self.columns, start, stop) if stop > start else None
        if self.exhausted:
            return out, self.next_offset
        return out, (out.offset_at(stop - 1) + 1) if out is not None else None


def parse_partition_columns(
    tp: TopicPartition,
    fetch_offset: int,
    data: bytes | None,
    check_crcs: bool = True,
    aborted: Iterable[AbortedTransaction] | None = None,
    include_headers: bool = False,
) -> PartitionColumns:
    """`state.parse_partition_records`, as columns (module docstring)."""
    kept: list[tuple[bytes, int, int, int, int | None, int]] = []
    dropped: list[tuple[bytes, int, int, int, int | None, int]] = []
    next_offset = fetch_offset
    for header, section, keep, before_fetch in walk_batches(
            tp, fetch_offset, data, check_crcs, aborted):
        if not before_fetch:
            next_offset = header.next_offset
        if header.is_control:
            continue
        ts_type = header.timestamp_type
        item = (section, header.records_count, header.base_offset, header.base_timestamp,
                header.max_timestamp if ts_type else None, ts_type)
        if keep and not before_fetch:
            kept.append(item)
        else:
            dropped.append(item)
    decode = _decode
    if decode is None:
        raise RuntimeError("columns need the C extension tidegate.records._columnar")
    if dropped:  # checked like the row path checks them, then thrown away
        decode(dropped, 0, False)
    columns = RecordColumns(*decode(kept, fetch_offset, include_headers))
    return PartitionColumns(tp, fetch_offset, columns, next_offset,
                            len(data) if data else 0)
