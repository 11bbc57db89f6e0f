"""COMMIT / ABORT control records and marker batches."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.common.errors import InvalidRecordError
from tidegate.records import (
    ControlType,
    build_control_batch,
    decode_records,
    parse_control_record,
)
from tidegate.records.batch import NO_SEQUENCE


@given(
    st.sampled_from(list(ControlType)),
    st.integers(0, (1 << 63) - 1),
    st.integers(0, (1 << 15) - 1),
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.integers(0, 1 << 45),
    st.integers(0, 1 << 50),
)
def test_control_batch_round_trip(
    control_type: ControlType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int,
) -> None:
    buf = build_control_batch(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        control_type=control_type,
        coordinator_epoch=coordinator_epoch,
        timestamp=timestamp,
        base_offset=base_offset,
        partition_leader_epoch=5,
    )
    header, (record,) = decode_records(buf)
    assert header.is_control and header.is_transactional
    assert header.compression == 0
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert header.base_sequence == NO_SEQUENCE
    assert header.partition_leader_epoch == 5
    assert (record.offset, record.timestamp) == (base_offset, timestamp)
    assert header.max_timestamp == timestamp
    assert record.key == struct.pack(">hh", 0, control_type)
    assert record.value == struct.pack(">hi", 0, coordinator_epoch)
    assert parse_control_record(record.key, record.value) == (control_type, coordinator_epoch)


def test_newer_versions_are_read_by_their_leading_fields() -> None:
    key = struct.pack(">hh", 1, 1) + b"future"
    value = struct.pack(">hi", 3, 77) + b"\x00tagged"
    assert parse_control_record(key, value) == (ControlType.COMMIT, 77)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"\0" * 6, "key must be at least 4 bytes, got null"),
        (b"\0\0\0", b"\0" * 6, "key must be at least 4 bytes, got 3"),
        (struct.pack(">hh", -1, 0), b"\0" * 6, "key version -1"),
        (struct.pack(">hh", 0, 2), b"\0" * 6, "type 2 is not a transaction marker"),
        (struct.pack(">hh", 0, -1), b"\0" * 6, "type -1 is not a transaction marker"),
        (struct.pack(">hh", 0, 1), None, "at least 6 bytes, got null"),
        (struct.pack(">hh", 0, 1), b"\0\0\0\0\0", "at least 6 bytes, got 5"),
        (struct.pack(">hh", 0, 0), struct.pack(">hi", -2, 0), "value version -2"),
    ],
)
def test_junk_is_rejected_clearly(key: bytes | None, value: bytes | None, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        parse_control_record(key, value)


@given(st.none() | st.binary(max_size=10), st.none() | st.binary(max_size=10))
def test_parse_raises_only_invalid_record_error(key: bytes | None, value: bytes | None) -> None:
    try:
        control_type, _ = parse_control_record(key, value)
    except InvalidRecordError:
        return
    assert control_type in (ControlType.ABORT, ControlType.COMMIT)
