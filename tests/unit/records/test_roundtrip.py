"""BatchBuilder -> decode_records / iter_batches round trips and batch semantics."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.records import (
    BatchBuilder,
    Codec,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    validate_batch,
)
from tidegate.records.batch import (
    HEADER_SIZE,
    compute_crc,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

from ._support import BASE_TS, RecordTuple, records_st, recrc


def expected(records: list[RecordTuple], base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, ts, key, value, tuple(headers))
        for i, (ts, key, value, headers) in enumerate(records)
    ]


@given(records_st, st.sampled_from(list(Codec)), st.integers(0, 1 << 40))
@settings(max_examples=200, deadline=None)
def test_build_then_decode_gives_the_records(
    records: list[RecordTuple], codec: Codec, base_offset: int
) -> None:
    buf = build_batch(records, compression=codec, base_offset=base_offset)
    header, decoded = decode_records(buf)
    assert decoded == expected(records, base_offset)
    assert header.crc == compute_crc(buf, 0, len(buf))
    assert header.size == len(buf)
    assert header.compression == codec
    assert header.records_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.base_timestamp == records[0][0]
    assert header.max_timestamp == max(r[0] for r in records)


@given(records_st)
@settings(max_examples=50, deadline=None)
def test_builder_matches_build_batch_and_reports_size(records: list[RecordTuple]) -> None:
    builder = BatchBuilder()
    for i, (ts, key, value, headers) in enumerate(records):
        assert builder.append(ts, key, value, headers) == i
        assert len(builder) == i + 1
    built = builder.build()
    assert builder.estimated_size() == len(built)  # exact when uncompressed
    assert builder.build() == built  # build() does not consume the builder
    assert built == build_batch(records)


def test_header_fields_are_written() -> None:
    buf = build_batch(
        [(BASE_TS, b"k", b"v", [])],
        base_offset=42,
        compression=Codec.ZSTD,
        producer_id=1234,
        producer_epoch=7,
        base_sequence=99,
        is_transactional=True,
        partition_leader_epoch=3,
    )
    header = validate_batch(buf)
    assert (header.base_offset, header.partition_leader_epoch) == (42, 3)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1234, 7, 99)
    assert header.is_transactional and not header.is_control
    assert header.compression == Codec.ZSTD
    assert header.timestamp_type == 0
    assert header.attributes == 0x10 | 4


def test_empty_builder_cannot_build() -> None:
    with pytest.raises(ValueError, match="no records"):
        BatchBuilder().build()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timestamp_type": 2},
        {"compression": 7},
        {"producer_epoch": 1 << 15},
        {"base_sequence": 1 << 31},
        {"base_offset": 1 << 63},
    ],
)
def test_builder_rejects_bad_arguments(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        BatchBuilder(**kwargs)  # type: ignore[arg-type]


def test_failed_append_leaves_builder_unchanged() -> None:
    builder = BatchBuilder()
    builder.append(BASE_TS, b"k", b"v")
    before = builder.build()
    with pytest.raises(TypeError):
        builder.append(BASE_TS + 1, b"k", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="int64"):
        builder.append(1 << 63, b"k", b"v")
    with pytest.raises(ValueError, match="int64"):
        builder.append(-(1 << 63), b"k", b"v")  # delta out of range
    with pytest.raises(ValueError, match="header key"):
        builder.append(BASE_TS, b"k", b"v", [("\ud800", None)])
    assert len(builder) == 1
    assert builder.build() == before


def test_timestamps_may_go_backwards() -> None:
    records: list[RecordTuple] = [
        (BASE_TS, None, b"a", []),
        (BASE_TS - 5000, None, b"b", []),
        (BASE_TS + 1, None, b"c", []),
    ]
    header, decoded = decode_records(build_batch(records))
    assert [r.timestamp for r in decoded] == [BASE_TS, BASE_TS - 5000, BASE_TS + 1]
    assert (header.base_timestamp, header.max_timestamp) == (BASE_TS, BASE_TS + 1)


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    records: list[RecordTuple] = [(BASE_TS + i, None, b"v", []) for i in range(5)]
    header, decoded = decode_records(build_batch(records, timestamp_type=1))
    assert header.timestamp_type == 1
    assert [r.timestamp for r in decoded] == [BASE_TS + 4] * 5

    # And as the broker stamps it, in place, on a CreateTime batch.
    buf = bytearray(build_batch(records, compression=Codec.LZ4))
    set_log_append_time(buf, 0, len(buf), 1_800_000_000_000)
    header, decoded = decode_records(buf)
    assert header.timestamp_type == 1
    assert {r.timestamp for r in decoded} == {1_800_000_000_000}


def test_offsets_follow_an_in_place_base_offset() -> None:
    buf = bytearray(build_batch([(BASE_TS, None, b"v", [])] * 3, compression=Codec.GZIP))
    set_base_offset(buf, 0, 1000)
    set_partition_leader_epoch(buf, 0, 9)
    header, decoded = decode_records(memoryview(buf))  # CRC still valid
    assert header.partition_leader_epoch == 9
    assert [r.offset for r in decoded] == [1000, 1001, 1002]


def test_null_empty_and_unicode_fields_are_distinct() -> None:
    records: list[RecordTuple] = [
        (BASE_TS, None, None, []),
        (BASE_TS, b"", b"", [("", b""), ("", None)]),
        (BASE_TS, b"\x00", b"\xff" * 70_000, [("ключ ✓", b"\x01" * 9000)]),
    ]
    _, decoded = decode_records(build_batch(records))
    assert decoded == expected(records)


def test_non_utf8_header_key_round_trips_losslessly() -> None:
    # A header key that is not UTF-8 (the Java broker accepts it) decodes with
    # surrogateescape and re-encodes to the same bytes.
    raw = build_batch([(BASE_TS, None, b"v", [("h", b"x")])])
    patched = bytearray(raw)
    at = raw.index(b"\x02h") + 1
    patched[at] = 0xFF
    patched_bytes = recrc(patched)
    _, decoded = decode_records(patched_bytes)
    ((name, value),) = decoded[0].headers
    assert name == "\udcff" and value == b"x"
    assert build_batch([(BASE_TS, None, b"v", list(decoded[0].headers))]) == patched_bytes


def test_large_offset_deltas_and_many_records() -> None:
    records: list[RecordTuple] = [(BASE_TS + i * 1000, None, b"%d" % i, []) for i in range(20_000)]
    for codec in (Codec.NONE, Codec.SNAPPY):
        _, decoded = decode_records(build_batch(records, compression=codec))
        assert decoded == expected(records)


@given(st.lists(records_st, min_size=1, max_size=4), st.sampled_from(list(Codec)))
@settings(max_examples=50, deadline=None)
def test_iter_batches_decodes_concatenated_batches(
    batches: list[list[RecordTuple]], codec: Codec
) -> None:
    bufs, offset = [], 0
    for records in batches:
        bufs.append(build_batch(records, compression=codec, base_offset=offset))
        offset += len(records)
    stream = b"".join(bufs)
    decoded = list(iter_batches(stream))
    assert [h.base_offset for h, _ in decoded] == [decode_records(b)[0].base_offset for b in bufs]
    flat = [r for _, recs in decoded for r in recs]
    want = expected([r for records in batches for r in records])
    assert flat == want
    # A partial last batch is skipped, at any cut point.
    for cut in {len(stream) - 1, len(stream) - len(bufs[-1]) + HEADER_SIZE, len(stream) - 5}:
        partial = list(iter_batches(stream[:cut]))
        assert [r for _, recs in partial for r in recs] == want[: len(want) - len(batches[-1])]
