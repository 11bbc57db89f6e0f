"""Build RecordBatch v2 batches from records.

`BatchBuilder` encodes each appended record straight into one bytearray (the records
section); `build()` compresses that section if asked, writes the 61-byte header and the
CRC-32C. No object is kept per record.

Invariants of every built batch:
- offset deltas are 0..n-1 in append order, so lastOffsetDelta = n - 1 and
  baseOffset + delta is each record's offset;
- baseTimestamp is the first record's timestamp (as the Java producer does: deltas may
  be negative) and maxTimestamp the largest record timestamp;
- it passes `batch.validate_batch` and decodes with `record.decode_records` to the
  appended records; an empty batch cannot be built.

`append` either appends the whole record or raises with the builder unchanged.

When the C extension is available (`SPEEDUPS`, see `_accel.py`), `BatchBuilder`'s base
class is its `RecordBuffer`: `append` (range checks, encoding, timestamp bookkeeping)
runs in C as one call. Otherwise it is `_PyRecordBuffer`, whose `append` and
`_encode_record_py` are the reference the C code must match byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import crc32c

from tidegate.records import _accel
from tidegate.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from tidegate.records.compression import Codec, compress
from tidegate.records.varint import (
    ENCODED_SMALL,
    ENCODED_SMALL_LIMIT,
    encode_uvarint,
    encode_varlong,
)

__all__ = ["SPEEDUPS", "BatchBuilder", "RecordTuple", "build_batch"]

Header = tuple[str, bytes | None]
RecordTuple = (
    tuple[int, bytes | None, bytes | None]
    | tuple[int, bytes | None, bytes | None, Sequence[Header]]
)

# Same layout as batch.py's header struct (see its module docstring).
_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1
_NULL = b"\x01"  # zigzag varint -1: null key / value / header value
_ZERO = b"\x00"  # attributes 0, or headerCount 0
_EMPTY = b""
_SMALL = ENCODED_SMALL_LIMIT


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} out of range [{lo}, {hi}]")


def _encode_record_py(
    buf: bytearray,
    offset_delta: int,
    ts_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> None:
    """Append one record (length, attributes 0, deltas, key, value, headers) to `buf`:
    the pure-Python encoder, the reference the C extension's `encode_record` matches."""
    enc = ENCODED_SMALL
    z = (ts_delta << 1) ^ (ts_delta >> 63)
    ts_bytes = enc[z] if z < _SMALL else encode_varlong(ts_delta)
    z = offset_delta << 1
    offset_bytes = enc[z] if z < _SMALL else encode_uvarint(z)
    if key is None:
        key_len_bytes = _NULL
        key = _EMPTY
    else:
        z = len(key) << 1
        key_len_bytes = enc[z] if z < _SMALL else encode_uvarint(z)
    if value is None:
        value_len_bytes = _NULL
        value = _EMPTY
    else:
        z = len(value) << 1
        value_len_bytes = enc[z] if z < _SMALL else encode_uvarint(z)
    # The body first, then its length: one len() instead of one per field. A bad
    # argument (e.g. a str value) raises from join before anything changes.
    body = _EMPTY.join(
        (
            _ZERO,
            ts_bytes,
            offset_bytes,
            key_len_bytes,
            key,
            value_len_bytes,
            value,
            _encode_headers(headers) if headers else _ZERO,
        )
    )
    z = len(body) << 1
    buf += enc[z] if z < _SMALL else encode_uvarint(z)
    buf += body


def _encode_headers(headers: Sequence[Header]) -> bytes:
    out = bytearray(encode_uvarint(len(headers) << 1))
    for name, value in headers:
        try:
            raw = name.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise ValueError(f"record header key {name!r} cannot be encoded as UTF-8") from exc
        out += encode_uvarint(len(raw) << 1)
        out += raw
        if value is None:
            out += _NULL
        else:
            out += encode_uvarint(len(value) << 1)
            out += value
    return bytes(out)


class _PyRecordBuffer:
    """A batch's records section and per-record bookkeeping, in pure Python: the
    reference for the C extension's `RecordBuffer`, and `BatchBuilder`'s base class
    when that is not available."""

    __slots__ = ("_base_ts", "_buf", "_count", "_max_ts")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._count = 0
        self._base_ts = 0
        self._max_ts = 0

    def __len__(self) -> int:
        return self._count

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
    ) -> int:
        """Add one record; return its offset delta (0 for the first)."""
        delta = self._count
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise ValueError(f"timestamp {timestamp} out of int64 range")
        if delta == 0:
            base_ts = timestamp
        else:
            base_ts = self._base_ts
            if delta >= _INT32_MAX:
                raise ValueError("a batch holds at most 2**31 - 1 records")
        _encode_record_py(self._buf, delta, timestamp - base_ts, key, value, headers)
        if delta == 0:
            self._base_ts = self._max_ts = timestamp
        elif timestamp > self._max_ts:
            self._max_ts = timestamp
        self._count = delta + 1
        return delta

    def estimated_size(self) -> int:
        """Size of the batch if built now without compression (an upper bound, bar a
        few bytes of codec framing on incompressible data)."""
        return HEADER_SIZE + len(self._buf)


#: True when the C extension encodes records (see `_accel.py`).
SPEEDUPS = _accel.SPEEDUPS
if TYPE_CHECKING or _accel.RecordBuffer is None:
    _RecordBufferBase = _PyRecordBuffer
else:
    _RecordBufferBase = _accel.RecordBuffer


class BatchBuilder(_RecordBufferBase):
    """Accumulates records for one batch. Not thread-safe; `build()` may be repeated.

    `append`, `estimated_size` and len() come from the records buffer base class (the C
    `_speedups.RecordBuffer` or `_PyRecordBuffer`, see the module docstring).
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_codec",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
    )

    def __init__(
        self,
        *,
        base_offset: int = 0,
        compression: Codec | int = Codec.NONE,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        timestamp_type: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    ) -> None:
        self._codec = Codec(compression)
        if timestamp_type not in (0, 1):
            raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1, not {timestamp_type}")
        _check_range("base_offset", base_offset, _INT64_MIN, _INT64_MAX)
        _check_range("producer_id", producer_id, _INT64_MIN, _INT64_MAX)
        _check_range("producer_epoch", producer_epoch, -(1 << 15), (1 << 15) - 1)
        _check_range("base_sequence", base_sequence, -(1 << 31), _INT32_MAX)
        _check_range("partition_leader_epoch", partition_leader_epoch, -(1 << 31), _INT32_MAX)
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._attributes = (
            int(self._codec)
            | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
            | (TRANSACTIONAL_MASK if is_transactional else 0)
            | (CONTROL_MASK if is_control else 0)
        )
        super().__init__()

    def build(self) -> bytes:
        """The complete batch: header, CRC-32C and the (compressed) records section."""
        if not self._count:
            raise ValueError("cannot build a record batch with no records")
        records = (
            bytes(self._buf) if self._codec == Codec.NONE else compress(self._codec, self._buf)
        )
        fields = [
            self._base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(records),
            self._partition_leader_epoch,
            MAGIC_V2,
            0,  # crc, computed below over bytes [21, end)
            self._attributes,
            self._count - 1,
            self._base_ts,
            self._max_ts,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            self._count,
        ]
        unsigned = _HEADER.pack(*fields)
        fields[4] = crc32c.crc32c(records, crc32c.crc32c(unsigned[ATTRIBUTES_OFFSET:]))
        return _HEADER.pack(*fields) + records


def build_batch(
    records: Iterable[RecordTuple],
    *,
    base_offset: int = 0,
    compression: Codec | int = Codec.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Build one batch from (timestamp, key, value[, headers]) tuples."""
    builder = BatchBuilder(
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        timestamp_type=timestamp_type,
        partition_leader_epoch=partition_leader_epoch,
    )
    append = builder.append
    for record in records:
        if len(record) == 3:
            append(record[0], record[1], record[2])
        else:
            append(record[0], record[1], record[2], record[3])
    return builder.build()
