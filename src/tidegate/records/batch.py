"""RecordBatch v2 headers: parse, validate and patch them without decoding records.

Layout (61-byte header, big-endian; see Kafka's DefaultRecordBatch):

    0  baseOffset: int64
    8  batchLength: int32          # bytes after this field
    12 partitionLeaderEpoch: int32
    16 magic: int8 (= 2)
    17 crc: uint32                  # CRC-32C of bytes [21, end)
    21 attributes: int16           # bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
    23 lastOffsetDelta: int32
    27 baseTimestamp: int64
    35 maxTimestamp: int64
    43 producerId: int64
    51 producerEpoch: int16
    53 baseSequence: int32
    57 recordsCount: int32
    61 records...

Invariant: the CRC does not cover baseOffset, batchLength or partitionLeaderEpoch, so
the broker assigns offsets by patching bytes 0-8 without recomputing it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records import _accel

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC_V2 = 2
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
PARTITION_LEADER_EPOCH_OFFSET = 12

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_Q = struct.Struct(">q")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
# C: the header's slots set directly, ~10x less than the frozen dataclass's __init__
_parse_header_c = _accel.parse_header
_stamp_header_c = _accel.stamp_header


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire / on disk."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at int32 max, as Kafka's do.
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at `pos`. Raises CorruptRecordError if too short."""
    if _parse_header_c is not None and pos >= 0:
        header: BatchHeader = _parse_header_c(buf, pos, BatchHeader)
        return header
    return parse_header_py(buf, pos)


def parse_header_py(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The pure-Python `parse_header`: the reference the C one must match."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch header truncated: {len(buf) - pos} bytes, need {HEADER_SIZE}"
        )
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def peek_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Total size of the batch at `pos` from its length prefix, or None if < 12 bytes."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    _, length = _PREFIX.unpack_from(buf, pos)
    return int(length) + LOG_OVERHEAD


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    return int(crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]))


def validate_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    check_crc: bool = True,
    strict_counts: bool = True,
) -> BatchHeader:
    """Check one batch's framing, magic, counts and CRC; return its header.

    Raises CorruptRecordError for anything the Java broker reports as CORRUPT_MESSAGE
    (bad length, magic, CRC) and InvalidRecordError for semantic problems.

    `strict_counts` (the produce path) requires lastOffsetDelta == count - 1 and at least
    one record. Readers of stored logs turn it off: compaction removes records from a
    batch but keeps its offset span, and may keep an empty batch to preserve producer
    state, exactly as Kafka's cleaner does.
    """
    header = parse_header(buf, pos)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"record batch length {header.batch_length} is too small")
    if header.size > len(buf) - pos:
        raise CorruptRecordError(
            f"record batch length {header.batch_length} exceeds the {len(buf) - pos - LOG_OVERHEAD}"
            " bytes available"
        )
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(f"unsupported record batch magic {header.magic}")
    if check_crc:
        actual = compute_crc(buf, pos, header.size)
        if actual != header.crc:
            raise CorruptRecordError(
                f"record batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}"
            )
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise InvalidRecordError("negative record count or offset delta")
    if not strict_counts:
        return header
    if header.records_count == 0 and not header.is_control:
        raise InvalidRecordError("record batch contains no records")
    if header.records_count and header.last_offset_delta != header.records_count - 1:
        raise InvalidRecordError(
            f"lastOffsetDelta {header.last_offset_delta} does not match "
            f"record count {header.records_count}"
        )
    return header


def iter_headers(buf: bytes | bytearray | memoryview, pos: int = 0) -> Iterator[BatchHeader]:
    """Yield the header of each complete batch in `buf` (stops at a partial tail)."""
    end = len(buf)
    while pos + HEADER_SIZE <= end:
        header = parse_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
            return
        yield header
        pos += header.size


def stamp_header(
    buf: bytes | bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int | None
) -> tuple[bytearray, BatchHeader]:
    """A copy of the header at `pos` with `base_offset` (and, unless None, the leader
    epoch) written in, and that copy parsed: what the log writes before the rest of a
    produced batch (`storage.validation.stamp_offsets`). One C call when built."""
    if _stamp_header_c is not None and pos >= 0:
        stamped: tuple[bytearray, BatchHeader] = _stamp_header_c(
            buf, pos, base_offset, leader_epoch, BatchHeader
        )
        return stamped
    return stamp_header_py(buf, pos, base_offset, leader_epoch)


def stamp_header_py(
    buf: bytes | bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int | None
) -> tuple[bytearray, BatchHeader]:
    """The pure-Python `stamp_header`: the reference the C one must match."""
    if not -(1 << 63) <= base_offset < (1 << 63):
        raise OverflowError("base_offset out of int64 range")
    if leader_epoch is not None and not -(1 << 31) <= leader_epoch < (1 << 31):
        raise OverflowError("leader_epoch out of int32 range")
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch header truncated: {len(buf) - pos} bytes, need {HEADER_SIZE}"
        )
    head = bytearray(buf[pos : pos + HEADER_SIZE])
    set_base_offset(head, 0, base_offset)
    if leader_epoch is not None:
        set_partition_leader_epoch(head, 0, leader_epoch)
    return head, parse_header_py(head)


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign an offset in place; the CRC does not cover it."""
    _Q.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _i.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, size: int, ts: int) -> None:
    """Stamp LogAppendTime: set the attribute bit and maxTimestamp, then re-CRC."""
    (attrs,) = struct.unpack_from(">h", buf, pos + ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buf, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    _Q.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, ts)
    _I.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))
