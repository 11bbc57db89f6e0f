"""Decode the records inside RecordBatch v2 batches.

Record v2 layout (all varints zigzag; see `varint.py`)::

    length: varint                 # bytes after this field
    attributes: int8               # unused, written as 0
    timestampDelta: varlong        # from the batch's baseTimestamp
    offsetDelta: varint            # from the batch's baseOffset
    keyLength: varint, key         # -1 = null key
    valueLength: varint, value     # -1 = null value
    headerCount: varint
    headers: [keyLength: varint, key: utf-8, valueLength: varint (-1 = null), value]

Invariants:
- `decode_records` checks the batch (framing, magic, CRC via `batch.validate_batch`)
  before touching its records, and returns records with ABSOLUTE offsets and timestamps
  (LogAppendTime batches: every record gets the batch's maxTimestamp).
- Malformed input raises `CorruptRecordError` (bytes that cannot be parsed: truncation,
  bad varints, undecodable compression) or `InvalidRecordError` (parseable but
  inconsistent: record sizes, counts or lengths that disagree). Never IndexError,
  struct.error or UnicodeDecodeError.
- Header keys are decoded as UTF-8 with ``surrogateescape``: a key that is not valid
  UTF-8 (which the Java broker accepts) still decodes, and `builder.py` re-encodes it to
  the same bytes, so decode + rebuild is lossless.

`decode_record_tuples` runs the C extension's `decode_records` when it is available
(`SPEEDUPS`, see `_accel.py`) and `data` is bytes; `_decode_record_tuples_py` is the
reference it must match exactly (results, exception classes and messages).
`decode_record_objects` does the same straight into the consumer's record class (the
extension's `decode_records_as`: no tuple and no `__init__` call per record).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import starmap
from typing import TypeVar

from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records import _accel
from tidegate.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    peek_size,
    validate_batch,
)
from tidegate.records.compression import decompress
from tidegate.records.varint import (
    UNZIGZAG_1,
    decode_varint,
    decode_varint_from,
    decode_varlong_from,
)

__all__ = [
    "SPEEDUPS",
    "Header",
    "Record",
    "RecordTuple",
    "decode_batch_tuples",
    "decode_record_objects",
    "decode_record_tuples",
    "decode_records",
    "decode_records_section",
    "gc_track",
    "iter_batches",
    "read_batch",
]

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]
# (offset, timestamp, key, value, headers): a `Record`'s fields, see `decode_record_tuples`
RecordTuple = tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]
_T = TypeVar("_T")
# cls(topic, partition, offset, timestamp, timestamp_type, key, value, headers)
RecordFactory = Callable[[str, int, int, int, int, bytes | None, bytes | None,
                          tuple[Header, ...]], _T]

# Smallest possible record: length(1) + attributes(1) + timestampDelta(1) +
# offsetDelta(1) + keyLength(1) + valueLength(1) + headerCount(1).
MIN_RECORD_SIZE = 7
_MIN_RECORD_BODY = MIN_RECORD_SIZE - 1
_NO_HEADERS: tuple[Header, ...] = ()

#: True when the C extension decodes records (see `_accel.py`).
SPEEDUPS = _accel.SPEEDUPS
_decode_records_c = _accel.decode_records
_decode_records_as_c = _accel.decode_records_as
#: Makes the cycle collector track a record from `decode_record_objects` again (None
#: without the C extension, whose records are tracked as usual).
gc_track = _accel.gc_track


@dataclass(slots=True)
class Record:
    """One record with absolute offset and timestamp (milliseconds)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def decode_records(
    buf: Buffer, pos: int = 0, *, check_crc: bool = True
) -> tuple[BatchHeader, list[Record]]:
    """Validate the batch at `pos` and decode all of its records."""
    header, records = decode_batch_tuples(buf, pos, check_crc=check_crc)
    return header, list(starmap(Record, records))


def iter_batches(buf: Buffer, pos: int = 0) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Decode every batch in `buf`; a truncated batch at the very end is skipped.

    Kafka fetch responses may end with a partial batch (the broker cuts at the fetch
    size), so a tail shorter than its own length prefix is not an error. A batch whose
    length prefix is smaller than a header is corrupt, not partial, and raises.
    """
    end = len(buf)
    while pos < end:
        size = peek_size(buf, pos)
        if size is None:
            return
        if size < HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch at byte {pos} has length {size - LOG_OVERHEAD}, "
                "smaller than a batch header"
            )
        if size > end - pos:
            return
        yield decode_records(buf, pos)
        pos += size


def decode_records_section(header: BatchHeader, data: bytes) -> list[Record]:
    """Decode the (uncompressed) records section of a batch, given its header."""
    return list(starmap(Record, decode_record_tuples(header, data)))


def decode_batch_tuples(
    buf: Buffer, pos: int = 0, *, check_crc: bool = True
) -> tuple[BatchHeader, list[RecordTuple]]:
    """Like `decode_records`, with each record as a plain `RecordTuple`."""
    header, data = read_batch(buf, pos, check_crc=check_crc)
    return header, decode_record_tuples(header, data)


def read_batch(buf: Buffer, pos: int = 0, *, check_crc: bool = True
               ) -> tuple[BatchHeader, bytes]:
    """Validate the batch at `pos`; its header and its (decompressed) records section,
    for `decode_record_tuples` / `decode_record_objects`."""
    header = validate_batch(buf, pos, check_crc=check_crc, strict_counts=False)
    start = pos + HEADER_SIZE
    end = pos + header.size
    codec = header.compression
    section = memoryview(buf)[start:end]
    return header, decompress(codec, section) if codec else bytes(section)  # one copy


def decode_record_objects(header: BatchHeader, data: bytes, cls: RecordFactory[_T],
                          topic: str, partition: int) -> list[_T]:
    """Like `decode_record_tuples`, each record as ``cls(topic, partition, offset,
    timestamp, header.timestamp_type, key, value, headers)``.

    With the C extension the instances are made without calling `cls`: allocated, then
    the slots of those eight names set (see `_speedups.c`). So `cls` must be a
    ``__slots__`` class whose ``__init__`` only stores its arguments in the slots of the
    same names — `client.types.ConsumerRecord`, which this exists for. Those instances
    are not tracked by the cycle collector (they hold only bytes, ints, str and tuples
    of those), so `cls.__setattr__` must pass the instance to `gc_track`."""
    ts_type = header.timestamp_type
    if _decode_records_as_c is not None and isinstance(data, bytes):
        return _decode_records_as_c(
            data,
            header.records_count,
            header.base_offset,
            header.base_timestamp,
            header.max_timestamp if ts_type else None,
            cls,
            topic,
            partition,
            ts_type,
        )
    return [cls(topic, partition, offset, timestamp, ts_type, key, value, headers)
            for offset, timestamp, key, value, headers in _decode_record_tuples_py(header, data)]


def decode_record_tuples(header: BatchHeader, data: bytes) -> list[RecordTuple]:
    """Decode the (uncompressed) records section of a batch into plain
    ``(offset, timestamp, key, value, headers)`` tuples (absolute offsets and
    timestamps, as `Record`): the cheapest thing to build per record, for callers
    (the consumer) that turn each record into an object of their own anyway."""
    if _decode_records_c is not None and isinstance(data, bytes):
        return _decode_records_c(
            data,
            header.records_count,
            header.base_offset,
            header.base_timestamp,
            header.max_timestamp if header.timestamp_type else None,
        )
    return _decode_record_tuples_py(header, data)


def _decode_record_tuples_py(header: BatchHeader, data: bytes) -> list[RecordTuple]:
    """The pure-Python `decode_record_tuples`: the reference the C extension matches."""
    count = header.records_count
    n = len(data)
    if count > n // MIN_RECORD_SIZE:
        raise InvalidRecordError(
            f"batch declares {count} records but has only {n} bytes of record data"
        )
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    log_append_ts = header.max_timestamp if header.timestamp_type else None
    zz = UNZIGZAG_1
    records: list[RecordTuple] = []
    append = records.append
    pos = 0
    # Each varint is read inline with one- and two-byte fast paths: a function call per
    # field would dominate the cost of a record. Reads past the end raise IndexError, which is
    # turned into CorruptRecordError below; slices are bounds-checked explicitly.
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (b & 0x7F) | (data[pos + 1] << 7)
                length = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                length, pos = decode_varint_from(data, pos)
            rec_start = pos
            rec_end = pos + length
            if length < _MIN_RECORD_BODY:
                raise InvalidRecordError(f"invalid record length {length} at byte {rec_start}")
            if rec_end > n:
                raise CorruptRecordError(
                    f"record at byte {rec_start} of length {length} runs past the end of "
                    f"the record data ({n} bytes)"
                )
            pos += 1  # attributes: unused by record v2

            b = data[pos]
            if b < 0x80:
                ts_delta = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (b & 0x7F) | (data[pos + 1] << 7)
                ts_delta = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                ts_delta, pos = decode_varlong_from(data, pos)

            b = data[pos]
            if b < 0x80:
                offset_delta = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (b & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                offset_delta, pos = decode_varint_from(data, pos)

            b = data[pos]
            if b < 0x80:
                key_len = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (b & 0x7F) | (data[pos + 1] << 7)
                key_len = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                key_len, pos = decode_varint_from(data, pos)
            if key_len >= 0:
                if key_len > rec_end - pos:
                    raise InvalidRecordError(f"key length {key_len} overruns its record")
                key: bytes | None = data[pos : pos + key_len]
                pos += key_len
            elif key_len == -1:
                key = None
            else:
                raise InvalidRecordError(f"invalid key length {key_len}")

            b = data[pos]
            if b < 0x80:
                value_len = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (b & 0x7F) | (data[pos + 1] << 7)
                value_len = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                value_len, pos = decode_varint_from(data, pos)
            if value_len >= 0:
                if value_len > rec_end - pos:
                    raise InvalidRecordError(f"value length {value_len} overruns its record")
                value: bytes | None = data[pos : pos + value_len]
                pos += value_len
            elif value_len == -1:
                value = None
            else:
                raise InvalidRecordError(f"invalid value length {value_len}")

            if data[pos] == 0:  # headerCount 0: the common case
                headers = _NO_HEADERS
                pos += 1
            else:
                headers, pos = _decode_headers(data, pos, rec_end)

            if pos != rec_end:
                raise InvalidRecordError(
                    f"invalid record size: expected {length} bytes in record payload, "
                    f"read {pos - rec_start}"
                )
            append(
                (
                    base_offset + offset_delta,
                    base_ts + ts_delta if log_append_ts is None else log_append_ts,
                    key,
                    value,
                    headers,
                )
            )
    except IndexError:
        raise CorruptRecordError(f"record data truncated at byte {pos}") from None
    if pos != n:
        raise InvalidRecordError(
            f"{n - pos} bytes of record data left after the declared {count} records"
        )
    return records


def _decode_headers(data: bytes, pos: int, rec_end: int) -> tuple[tuple[Header, ...], int]:
    count, pos = decode_varint(data, pos)
    # Each header takes at least 2 bytes (empty key, null value).
    if count < 0 or count * 2 > rec_end - pos:
        raise InvalidRecordError(f"invalid record header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        key_len, pos = decode_varint(data, pos)
        if key_len < 0 or key_len > rec_end - pos:
            raise InvalidRecordError(f"invalid record header key length {key_len}")
        key = data[pos : pos + key_len].decode("utf-8", "surrogateescape")
        pos += key_len
        value_len, pos = decode_varint(data, pos)
        if value_len >= 0:
            if value_len > rec_end - pos:
                raise InvalidRecordError(f"record header value length {value_len} overruns")
            value: bytes | None = data[pos : pos + value_len]
            pos += value_len
        elif value_len == -1:
            value = None
        else:
            raise InvalidRecordError(f"invalid record header value length {value_len}")
        headers.append((key, value))
    return tuple(headers), pos
