"""Record-level validation of produced batches (`storage.record_checks`), through
`Log.append` and directly."""

from __future__ import annotations

import dataclasses
import struct
import tracemalloc
from pathlib import Path

import pytest
from tests.unit.storage._support import BASE_TS, open_log

from tidegate.common.clock import ManualClock
from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records.batch import HEADER_SIZE, compute_crc, parse_header
from tidegate.records.builder import build_batch
from tidegate.records.compression import Codec, DecompressedSizeError, compress
from tidegate.storage.config import LogConfig
from tidegate.storage.errors import InvalidTimestampError
from tidegate.storage.record_checks import (
    KeylessRecordError,
    RecordTimestampError,
    decompressed_limit,
    validate_records,
)

COMPACT = LogConfig(cleanup_policy=("compact",))
DEFAULT = LogConfig()


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def _with_section(batch: bytes, section: bytes, *, count: int | None = None,
                  codec: int | None = None) -> bytes:  # fmt: skip
    """`batch` with its records section replaced (lengths, count, CRC fixed up)."""
    out = bytearray(batch[:HEADER_SIZE] + section)
    struct.pack_into(">i", out, 8, len(out) - 12)
    if count is not None:
        struct.pack_into(">i", out, 57, count)
        struct.pack_into(">i", out, 23, count - 1)
    if codec is not None:
        attrs = struct.unpack_from(">h", out, 21)[0]
        struct.pack_into(">h", out, 21, (attrs & ~7) | codec)
    return _recrc(out)


def _records(n: int = 3, key: bytes | None = b"k") -> bytes:
    return build_batch([(BASE_TS + i, key, b"v%d" % i, ()) for i in range(n)])


def _check(data: bytes, config: LogConfig = DEFAULT, **kw: int) -> None:
    validate_records(data, [(0, parse_header(data, 0))], config, **kw)


def test_valid_batches_pass_and_report_timestamps() -> None:
    data = _records(3)
    (info,) = validate_records(data, [(0, parse_header(data, 0))], LogConfig())
    assert info.timestamps == [BASE_TS, BASE_TS + 1, BASE_TS + 2]
    assert (info.min_timestamp, info.max_timestamp) == (BASE_TS, BASE_TS + 2)
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD):
        _check(build_batch([(BASE_TS, b"k", b"v" * 100, ())] * 5, compression=codec))


def test_bad_varint_and_overrunning_length() -> None:
    data = bytearray(_records(2))
    data[HEADER_SIZE] = 0x7E  # first record's length: 63, past the section's end
    with pytest.raises(CorruptRecordError):
        _check(_recrc(data))
    data = bytearray(_records(2))
    section = b"\xff" * 12  # a varint that never ends
    with pytest.raises((CorruptRecordError, InvalidRecordError)):
        _check(_with_section(bytes(data), section, count=1))


def test_record_count_mismatch_and_trailing_bytes() -> None:
    data = _records(3)
    section = data[HEADER_SIZE:]
    # header says 4 records, the section holds 3
    with pytest.raises((CorruptRecordError, InvalidRecordError)):
        _check(_with_section(data, section, count=4))
    # header says 2 records, a third one is left over
    with pytest.raises(InvalidRecordError, match="left after"):
        _check(_with_section(data, section, count=2))
    with pytest.raises(InvalidRecordError, match="left after"):
        _check(_with_section(data, section + b"\x00\x00"))


def test_offset_deltas_must_be_consecutive_from_zero() -> None:
    data = bytearray(_records(3))
    # record layout: length, attributes, timestampDelta, offsetDelta (zigzag: 2*d)
    pos = HEADER_SIZE
    offsets = []
    for _ in range(3):
        length = data[pos] >> 1
        offsets.append(pos + 3)  # length(1) attrs(1) tsDelta(1) -> offsetDelta
        pos += 1 + length
    data[offsets[1]], data[offsets[2]] = data[offsets[2]], data[offsets[1]]  # 0, 2, 1
    with pytest.raises(InvalidRecordError, match="Invalid record offset"):
        _check(_recrc(data))


def test_compacted_topic_refuses_null_keys_with_record_errors() -> None:
    data = build_batch([(BASE_TS, b"a", b"1", ()), (BASE_TS, None, b"2", ()),
                        (BASE_TS, None, None, ())])  # fmt: skip
    _check(data)  # fine on a delete topic
    with pytest.raises(KeylessRecordError) as exc:
        _check(data, COMPACT)
    assert exc.value.code == 87
    assert isinstance(exc.value, InvalidRecordError)
    assert [i for i, _ in exc.value.record_errors] == [1, 2]
    assert "Compacted topic cannot accept message without key" in exc.value.record_errors[0][1]


def test_compacted_log_append_rejects_and_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, dataclasses.replace(COMPACT, segment_bytes=1 << 20))
    with pytest.raises(KeylessRecordError):
        log.append(_records(2, key=None))
    assert log.log_end_offset == 0
    log.append(_records(2))
    assert log.log_end_offset == 2


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.ZSTD, Codec.LZ4, Codec.SNAPPY])
def test_compression_bomb_is_refused_without_inflating_it(codec: Codec) -> None:
    records = _records(1)
    big = compress(codec, bytes(64 << 20))  # 64 MiB of zeros: a few KB to 3 MB compressed
    data = _with_section(records, big, codec=codec)
    tracemalloc.start()
    try:
        with pytest.raises(DecompressedSizeError) as exc:
            _check(data, max_decompressed=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert exc.value.code == 87  # INVALID_RECORD: not retriable
    assert peak < 4 << 20, peak  # never more than ~the 1 MiB cap


def test_corrupt_compressed_section_is_corrupt_message() -> None:
    data = _with_section(_records(1), b"\x1f\x8b" + b"\x00" * 30, codec=Codec.GZIP)
    with pytest.raises(CorruptRecordError):
        _check(data)


def test_the_default_limit() -> None:
    assert decompressed_limit(LogConfig()) == 64 * 1_048_588  # ~64 MiB
    assert decompressed_limit(LogConfig(max_message_bytes=1000)) == 64 << 20  # the floor
    assert decompressed_limit(LogConfig(max_message_bytes=10 << 20)) == 640 << 20


def test_every_record_timestamp_is_checked(tmp_path: Path) -> None:
    cfg = LogConfig.from_props(
        {"message.timestamp.before.max.ms": "1000", "message.timestamp.after.max.ms": "1000"}
    )
    log = open_log(tmp_path, cfg, ManualClock(BASE_TS))
    # first and max (header) timestamps are in range, the middle record is not
    data = build_batch([(BASE_TS, b"k", b"1", ()), (BASE_TS - 5000, b"k", b"2", ()),
                        (BASE_TS + 1, b"k", b"3", ())])  # fmt: skip
    with pytest.raises(RecordTimestampError) as exc:
        log.append(data)
    assert isinstance(exc.value, InvalidTimestampError) and exc.value.code == 32
    assert [i for i, _ in exc.value.record_errors] == [1]
    assert log.log_end_offset == 0
    log.append(build_batch([(BASE_TS, b"k", b"1", ()), (-1, b"k", b"2", ())]))
    assert log.log_end_offset == 2
