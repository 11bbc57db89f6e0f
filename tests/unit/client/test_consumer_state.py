"""Consumer state: positions, fetched-record hand-out, control batches, seeks."""

from __future__ import annotations

import pytest

from tidegate.client.consumer.state import (
    EARLIEST,
    Assignment,
    parse_partition_records,
)
from tidegate.client.types import ConsumerRecord, TopicPartition
from tidegate.records.builder import build_batch
from tidegate.records.control import ControlType, build_control_batch

TP = TopicPartition("t", 0)


def data_batch(base: int, n: int, ts_type: int = 0) -> bytes:
    return build_batch([(1000 + base + i, b"k", b"v%d" % (base + i)) for i in range(n)],
                       base_offset=base, timestamp_type=ts_type)


def fetched() -> bytes:
    # offsets 0-4 data, 5 a COMMIT marker, 6-8 data (LogAppendTime), 9 an ABORT marker,
    # then a truncated batch (fetch responses may end mid-batch).
    return (data_batch(0, 5)
            + build_control_batch(producer_id=1, producer_epoch=0,
                                  control_type=ControlType.COMMIT, coordinator_epoch=0,
                                  timestamp=1, base_offset=5)
            + data_batch(6, 3, ts_type=1)
            + build_control_batch(producer_id=1, producer_epoch=0,
                                  control_type=ControlType.ABORT, coordinator_epoch=0,
                                  timestamp=1, base_offset=9)
            + data_batch(10, 4)[:30])


def test_control_batches_are_dropped_and_position_skips_them() -> None:
    pr = parse_partition_records(TP, 0, fetched())
    out: list[ConsumerRecord] = []
    assert pr.take(100, out) == 10  # past the trailing ABORT marker
    assert [r.offset for r in out] == [0, 1, 2, 3, 4, 6, 7, 8]
    assert [r.timestamp_type for r in out] == [0] * 5 + [1] * 3
    assert pr.exhausted and pr.next_offset == 10


def test_records_before_the_fetch_offset_are_skipped() -> None:
    pr = parse_partition_records(TP, 3, fetched())
    out: list[ConsumerRecord] = []
    pr.take(100, out)
    assert [r.offset for r in out] == [3, 4, 6, 7, 8]
    assert out[0].value == b"v3" and out[0].topic == "t"


def test_take_respects_max_records_and_reports_positions() -> None:
    pr = parse_partition_records(TP, 0, fetched())
    out: list[ConsumerRecord] = []
    assert pr.take(3, out) == 3
    assert pr.take(2, out) == 5
    assert not pr.exhausted
    assert pr.take(2, out) == 8
    assert pr.take(5, out) == 10  # the last record, then past the marker
    assert [r.offset for r in out] == [0, 1, 2, 3, 4, 6, 7, 8]


def test_take_raw_returns_the_decoded_records() -> None:
    pr = parse_partition_records(TP, 1, fetched())
    records, pos = pr.take_raw(2)
    assert [r.offset for r in records] == [1, 2] and pos == 3
    records, pos = pr.take_raw(100)
    assert [r.offset for r in records] == [3, 4, 6, 7, 8] and pos == 10


def test_only_control_data_still_advances() -> None:
    marker = build_control_batch(producer_id=1, producer_epoch=0,
                                 control_type=ControlType.COMMIT, coordinator_epoch=0,
                                 timestamp=1, base_offset=7)
    pr = parse_partition_records(TP, 7, marker)
    assert pr.take(10, []) == 8
    empty = parse_partition_records(TP, 7, b"")
    assert empty.next_offset == 7 and empty.exhausted


def test_assignment_positions_resets_and_blocking() -> None:
    a = Assignment()
    other = TopicPartition("t", 1)
    a.assign([TP, other])
    assert a.needs_reset() == [TP, other] and a.fetchable() == []
    a.seek(TP, 5)
    assert a.fetchable() == [TP]
    a.state(TP).paused = True
    assert a.fetchable() == []
    a.request_reset(other, EARLIEST)
    assert a.state(other).reset_to == EARLIEST
    a.state(other).blocked = True
    assert a.needs_reset() == []
    a.seek(other, 0)
    assert not a.state(other).blocked
    a.assign([TP])  # keeps TP's state
    assert a.state(TP).position == 5 and a.state(TP).paused
    with pytest.raises(ValueError, match="not assigned"):
        a.seek(other, 1)
    with pytest.raises(ValueError, match="negative"):
        a.seek(TP, -1)


def test_records_before_a_corrupt_batch_are_handed_out_first() -> None:
    """As Kafka's consumer: the good batches before a corrupt one are returned and the
    next fetch starts at the corrupt batch, which raises there (so the error surfaces
    when the position reaches it). Bad data at the fetch offset raises at once."""
    from tidegate.client.consumer.columns import COLUMNAR, parse_partition_columns
    from tidegate.common.errors import CorruptRecordError

    bad = bytearray(data_batch(3, 3))
    bad[-2] ^= 0x01  # CRC mismatch
    short = b"\x00" * 8 + b"\x00\x00\x00\x05" + b"\x00" * 60  # size below a header
    for tail in (bytes(bad), short):
        data = data_batch(0, 3) + tail + data_batch(6, 3)
        for fetch_offset in (0, 1):
            pr = parse_partition_records(TP, fetch_offset, data)
            out: list[ConsumerRecord] = []
            assert pr.take(100, out) == 3 and pr.next_offset == 3
            assert [r.offset for r in out] == list(range(fetch_offset, 3))
            if COLUMNAR:
                pc = parse_partition_columns(TP, fetch_offset, data)
                assert pc.next_offset == 3
        with pytest.raises(CorruptRecordError):
            parse_partition_records(TP, 3, tail + data_batch(6, 3))
        # a batch wholly before the fetch offset is no progress: still an error
        with pytest.raises(CorruptRecordError):
            parse_partition_records(TP, 3, data_batch(0, 3) + tail)


def test_corrupt_data_raises_unless_crc_checks_are_off() -> None:
    from tidegate.common.errors import CorruptRecordError

    bad = bytearray(data_batch(0, 3))
    bad[-2] ^= 0x01  # change a byte of the last value ("v2" -> "v3"): CRC mismatch
    with pytest.raises(CorruptRecordError, match="CRC"):
        parse_partition_records(TP, 0, bytes(bad))
    pr = parse_partition_records(TP, 0, bytes(bad), check_crcs=False)
    assert pr.next_offset == 3
    with pytest.raises(CorruptRecordError, match=r"too s(hort|mall)"):
        parse_partition_records(TP, 0, b"\x00" * 8 + b"\x00\x00\x00\x05" + b"\x00" * 60)
