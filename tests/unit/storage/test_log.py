"""Log: append/read round trips across rolls, read semantics, validation, timestamps."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.common.clock import ManualClock
from tidegate.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    PolicyViolationError,
)
from tidegate.records.batch import CRC_OFFSET, compute_crc, iter_headers
from tidegate.records.builder import build_batch
from tidegate.records.record import decode_records
from tidegate.storage.config import LogConfig
from tidegate.storage.errors import InvalidTimestampError, RecordListTooLargeError
from tidegate.storage.log import Log

from ._support import BASE_TS, SMALL, all_batches, batch, fill, headers_of, open_log


def test_append_assigns_consecutive_offsets_and_reports(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = log.append(batch(3) + batch(2, ts=BASE_TS + 50))
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 4, 5)
    assert [h.base_offset for h in info.batches] == [0, 3]
    assert info.log_append_time == -1 and info.log_start_offset == 0
    assert info.max_timestamp == BASE_TS + 51
    assert log.log_end_offset == 5
    info = log.append(batch(1))
    assert (info.first_offset, info.last_offset) == (5, 5)
    # Stored bytes are the producer's bytes with offsets patched (CRC untouched).
    header, records = decode_records(log.read(5, 10_000))
    assert header.base_offset == 5 and records[0].offset == 5
    assert log.append(b"").first_offset == -1


def test_round_trip_across_rolls(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    stored = fill(log, 60)
    assert len(log.segments) > 5
    assert all(s.size <= SMALL.segment_bytes for s in log.segments)
    # Reading from each batch's base offset and following returns every batch once.
    got = b""
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 700)
        assert data
        got += data
        offset = headers_of(data)[-1].next_offset
    assert got == b"".join(stored)
    for i, raw in enumerate(stored):
        records = decode_records(raw)[1]
        assert records[0].value is not None and records[0].value.startswith(b"%d:0:" % i)


def test_read_at_every_offset_returns_the_batch_holding_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40, records=4)
    for offset in range(log.log_end_offset):
        first = headers_of(log.read(offset, 1))[0]  # min_one_batch: whole first batch
        assert first.base_offset <= offset <= first.last_offset
    assert log.read(log.log_end_offset, 1000) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)


def test_max_bytes_min_one_batch_and_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig())
    for i in range(10):
        log.append(batch(2, value_size=100, tag=i))
    size = all_batches(log)[0][0].size
    assert len(headers_of(log.read(0, size * 3))) == 3
    assert len(headers_of(log.read(0, size * 3 + size // 2))) == 3  # whole batches only
    assert len(log.read(0, size // 2)) == size  # KIP-74: first batch even if too big
    assert log.read(0, size // 2, min_one_batch=False) == b""
    assert [h.base_offset for h in headers_of(log.read(0, 10**6, max_offset=6))] == [0, 2, 4]
    assert [h.base_offset for h in headers_of(log.read(0, 10**6, max_offset=5))] == [0, 2, 4]
    assert log.read(6, 10**6, max_offset=6) == b""  # fetch at the high watermark
    assert log.read(3, 0, max_offset=3) == b""
    assert headers_of(log.read(3, 0))[0].base_offset == 2


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 300)), min_size=1, max_size=40),
    interval=st.sampled_from([0, 64, 500, 4096]),
    probe=st.data(),
)
def test_lookups_match_a_linear_scan(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[tuple[int, int]],
    interval: int,
    probe: st.DataObject,
) -> None:
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=interval)
    log = Log.open(tmp_path_factory.mktemp("h") / "t-0", cfg, ManualClock(BASE_TS))
    for i, (n, vs) in enumerate(sizes):
        log.append(batch(n, value_size=vs, ts=BASE_TS + i * 7 % 23, tag=i))
    reference = all_batches(log)
    for offset in probe.draw(st.lists(st.integers(0, log.log_end_offset - 1), max_size=15)):
        expected = next(raw for h, raw in reference if h.last_offset >= offset)
        assert log.read(offset, 1) == expected
        seg = next(s for s in reversed(log.segments) if s.base_offset <= offset)
        found = seg.find_position(offset)
        assert found is not None and found[1].base_offset <= offset <= found[1].last_offset
    # Timestamp query against brute force over decoded records.
    records = [r for _, raw in reference for r in decode_records(raw)[1]]
    for ts in probe.draw(st.lists(st.integers(BASE_TS - 2, BASE_TS + 30), max_size=5)):
        want = next(((r.offset, r.timestamp) for r in records if r.timestamp >= ts), None)
        assert log.offset_for_timestamp(ts) == want
    top = max(r.timestamp for r in records)
    assert log.max_timestamp_and_offset() == (
        top,
        next(r.offset for r in records if r.timestamp == top),
    )
    log.close()


def _corrupt_crc(data: bytes) -> bytes:
    out = bytearray(data)
    out[-1] ^= 0xFF
    return bytes(out)


def test_append_rejects_bad_input_without_writing(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(max_message_bytes=500, segment_bytes=4000))
    good = batch(1)
    with pytest.raises(CorruptRecordError):
        log.append(good + _corrupt_crc(batch(1)))
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError):
        log.append(bytes(bad_magic))
    with pytest.raises(CorruptRecordError):
        log.append(good + good[:30])  # trailing partial batch
    with pytest.raises(MessageTooLargeError):
        log.append(batch(1, value_size=600))
    with pytest.raises(RecordListTooLargeError):
        log.append(b"".join(batch(1, value_size=400) for _ in range(9)))
    control = bytearray(build_batch([(BASE_TS, b"\x00\x00\x00\x00", b"")], is_control=True))
    with pytest.raises(InvalidRecordError):
        log.append(bytes(control))
    assert log.log_end_offset == 0 and log.size_bytes == 0
    log.append(good)
    assert log.log_end_offset == 1


def test_log_append_time_is_stamped(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS + 10_000)
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock)
    info = log.append(batch(3, ts=5))
    assert info.log_append_time == BASE_TS + 10_000 == info.max_timestamp
    header, records = decode_records(log.read(0, 10_000))  # CRC recomputed
    assert header.timestamp_type == 1
    assert {r.timestamp for r in records} == {BASE_TS + 10_000}


def test_timestamp_bounds(tmp_path: Path) -> None:
    cfg = LogConfig.from_props(
        {"message.timestamp.before.max.ms": "1000", "message.timestamp.after.max.ms": "10"}
    )
    log = open_log(tmp_path, cfg, ManualClock(BASE_TS))
    log.append(batch(1, ts=BASE_TS - 1000))
    with pytest.raises(InvalidTimestampError):
        log.append(batch(1, ts=BASE_TS - 1001))
    with pytest.raises(InvalidTimestampError):
        log.append(batch(2, ts=BASE_TS + 10))  # second record at +11
    log.append(batch(1, ts=-1))  # no timestamp: not checked


def test_future_timestamps_limited_to_an_hour_by_default(tmp_path: Path) -> None:
    """Kafka 4's default (KIP-1030): a CreateTime timestamp at most an hour ahead; the
    past is not limited."""
    log = open_log(tmp_path, LogConfig(), ManualClock(BASE_TS))
    log.append(batch(1, ts=BASE_TS + 3_600_000))
    log.append(batch(1, ts=BASE_TS - 10 * 365 * 86_400_000))
    with pytest.raises(InvalidTimestampError):
        log.append(batch(1, ts=BASE_TS + 3_600_001))
    assert LogConfig.from_props({"message.timestamp.after.max.ms": str(2**63 - 1)}
                                ).timestamp_after_max_ms == 2**63 - 1


def test_roll_by_time_and_by_index_size(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS)
    log = open_log(tmp_path, LogConfig(segment_ms=1000), clock)
    log.append(batch(1, ts=BASE_TS))
    log.append(batch(1, ts=BASE_TS + 1000))
    assert len(log.segments) == 1
    log.append(batch(1, ts=BASE_TS + 1001))  # message time says the segment is old
    assert [s.base_offset for s in log.segments] == [0, 2]
    log2 = Log.open(
        tmp_path / "small-0",
        LogConfig(segment_index_bytes=16, index_interval_bytes=0),
        clock,
    )
    for _ in range(8):
        log2.append(batch(1))
    assert len(log2.segments) > 2  # two index entries fill an index


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    stored = fill(log, 30, records=2)
    log.flush()
    assert log.truncate_to(31) == 30  # mid-batch: the whole batch goes
    assert log.recovery_point == 30 and log.high_watermark == 30
    assert b"".join(raw for _, raw in all_batches(log)) == b"".join(stored[:15])
    log.append(batch(2))
    assert log.log_end_offset == 32
    assert len(log.segments) >= 2
    boundary = log.segments[1].base_offset
    count = len(log.segments)
    assert log.truncate_to(boundary) == boundary
    # The segment starting at the cut goes: the one before it is active again.
    assert len(log.segments) == 1 < count and log.segments[-1].base_offset < boundary
    assert log.truncate_to(10**6) == boundary  # beyond the end: nothing happens
    log.close()
    log = open_log(tmp_path)
    assert log.log_end_offset == boundary
    assert log.truncate_to(0) == 0 and log.size_bytes == 0
    log.append(batch(1))
    assert log.read(0, 100)


def test_truncate_below_log_start_restarts_there(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    log.apply_retention(BASE_TS + 10**12)
    start = log.log_start_offset
    assert start > 0
    assert log.truncate_to(start - 5) == start - 5
    assert log.log_start_offset == start - 5 and len(log.segments) == 1
    assert log.append(batch(1)).first_offset == start - 5


def test_delete_records_before(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 30, hw=False)
    assert log.update_high_watermark(50) and not log.update_high_watermark(49)
    assert log.high_watermark == 50
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(51)
    before = len(log.segments)
    assert log.delete_records_before(40) == 40
    assert log.log_start_offset == 40
    assert len(log.segments) < before
    assert all(s.base_offset <= 40 for s in log.segments[:1])
    assert log.delete_records_before(10) == 40  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        log.read(39, 100)
    first = headers_of(log.read(40, 1))[0]
    assert first.base_offset <= 40 <= first.last_offset
    log.close()
    log = open_log(tmp_path)  # persisted
    assert log.log_start_offset == 40


def test_delete_records_refused_on_a_compact_only_topic(tmp_path: Path) -> None:
    # Kafka's leader checks the policy first: POLICY_VIOLATION even for an offset out of
    # range; compact,delete allows it
    log = open_log(tmp_path, dataclasses.replace(SMALL, cleanup_policy=("compact",)))
    fill(log, 10)
    for offset in (5, 500):
        with pytest.raises(PolicyViolationError):
            log.delete_records_before(offset)
    assert log.log_start_offset == 0
    log.update_config(dataclasses.replace(SMALL, cleanup_policy=("compact", "delete")))
    assert log.delete_records_before(5) == 5
    log.close()


def test_retention_by_time(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS)
    cfg = LogConfig(segment_bytes=2048, retention_ms=60_000)
    log = open_log(tmp_path, cfg, clock)
    for i in range(40):
        log.append(batch(3, ts=BASE_TS + i * 1000, value_size=40))
    log.update_high_watermark(log.log_end_offset)
    n = len(log.segments)
    assert log.apply_retention(BASE_TS + 60_000) == 0
    deleted = log.apply_retention(BASE_TS + 100_000)
    assert deleted > 0 and len(log.segments) == n - deleted
    assert log.log_start_offset == log.segments[0].base_offset
    # Every remaining segment but the active one has data newer than the cutoff.
    assert all(BASE_TS + 100_000 - s.max_timestamp <= 60_000 for s in log.segments[:-1])
    assert log.apply_retention(BASE_TS + 10**9) == len(log.segments) - 1  # never the active
    assert len(log.segments) == 1
    assert log.apply_retention(BASE_TS + 10**9) == 0


def test_retention_by_size_and_high_watermark(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=2048, retention_bytes=5000)
    log = open_log(tmp_path, cfg)
    fill(log, 40, hw=False)
    log.update_high_watermark(log.segments[2].base_offset)  # only segments below it may go
    assert log.apply_retention(BASE_TS) == 1
    log.update_high_watermark(log.log_end_offset)
    log.apply_retention(BASE_TS)
    assert log.size_bytes >= 5000
    assert log.size_bytes - log.segments[0].size < 5000
    compact = open_log(tmp_path / "c", LogConfig(cleanup_policy=("compact",), retention_bytes=0))
    fill(compact, 5)
    assert compact.apply_retention(BASE_TS + 10**12) == 0


def test_closed_log_refuses_work(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(1))
    log.close()
    log.close()
    with pytest.raises(KafkaStorageError):
        log.append(batch(1))
    with pytest.raises(KafkaStorageError):
        log.read(0, 100)


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 10)
    log.delete()
    assert list(tmp_path.iterdir()) == []


def test_memoryview_input(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    data = batch(2) + batch(1)
    info = log.append(memoryview(bytearray(data)))
    assert info.last_offset == 2
    raw = log.read(0, 1000)
    assert [h.base_offset for h in iter_headers(raw)] == [0, 2]
    # Bytes other than offsets are the producer's.
    assert raw[8:] == data[8:] or struct.unpack_from(">I", raw, CRC_OFFSET)[0] == compute_crc(
        raw, 0, headers_of(raw)[0].size
    )
