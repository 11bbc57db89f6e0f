"""Damaged and hostile input: only CorruptRecordError / InvalidRecordError come out."""

from __future__ import annotations

import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidegate.common.errors import CorruptRecordError, InvalidRecordError, KafkaError
from tidegate.records import Codec, build_batch, decode_records, iter_batches, validate_batch
from tidegate.records.batch import HEADER_SIZE, parse_header
from tidegate.records.record import decode_records_section
from tidegate.records.varint import encode_varint, encode_varlong

from ._support import compressible_records, recrc

GOOD = {
    codec: build_batch(compressible_records(8), compression=codec, base_offset=10)
    for codec in Codec
}


def header_with(**changes: int) -> bytes:
    """A valid uncompressed batch header whose fields are changed (CRC left to recrc)."""
    fields = list(struct.unpack(">qiibIhiqqqhii", GOOD[Codec.NONE][:HEADER_SIZE]))
    names = [
        "base_offset",
        "batch_length",
        "ple",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_ts",
        "max_ts",
        "pid",
        "epoch",
        "seq",
        "count",
    ]
    for name, value in changes.items():
        fields[names.index(name)] = value
    return struct.pack(">qiibIhiqqqhii", *fields)


def batch_of(records_section: bytes, count: int, **changes: int) -> bytes:
    head = header_with(
        batch_length=HEADER_SIZE - 12 + len(records_section),
        count=count,
        last_offset_delta=max(count - 1, 0),
        **changes,
    )
    return recrc(head + records_section)


def record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


# A well-formed record body: attributes, tsDelta, offsetDelta, key, value, headers.
def body(
    offset_delta: int = 0, key: bytes = b"k", value: bytes = b"v", tail: bytes = b"\x00"
) -> bytes:
    return (
        b"\x00"
        + encode_varlong(0)
        + encode_varint(offset_delta)
        + encode_varint(len(key))
        + key
        + encode_varint(len(value))
        + value
        + tail
    )


def test_hand_built_batch_is_valid() -> None:
    _, (rec,) = decode_records(batch_of(record(body()), 1))
    assert (rec.key, rec.value, rec.headers) == (b"k", b"v", ())


@pytest.mark.parametrize("codec", list(Codec))
def test_every_flipped_byte_is_detected(codec: Codec) -> None:
    good = GOOD[codec]
    for i in range(len(good)):
        bad = bytearray(good)
        bad[i] ^= 0x01
        if i < 8 or 12 <= i < 16:
            # baseOffset and partitionLeaderEpoch are outside the CRC by design.
            _, records = decode_records(bad)
            assert len(records) == 8
            continue
        with pytest.raises(KafkaError) as info:
            decode_records(bad)
        if i >= 17:  # crc field or covered by it
            assert isinstance(info.value, CorruptRecordError), i


@pytest.mark.parametrize("codec", list(Codec))
def test_every_truncation_is_a_clean_error_or_skipped(codec: Codec) -> None:
    good = GOOD[codec]
    two = good + good
    for cut in range(len(good)):
        with pytest.raises(CorruptRecordError):
            decode_records(good[:cut])
        with pytest.raises(CorruptRecordError):
            validate_batch(good[:cut])
        assert list(iter_batches(good[:cut])) == []
        ((_, records),) = list(iter_batches(two[: len(good) + cut]))
        assert len(records) == 8


# Each case: records section, declared count, expected error type and message.
MALFORMED = [
    ("count higher than records", record(body()), 2, InvalidRecordError, "declares 2 records"),
    ("count lower than records", record(body()) * 2, 1, InvalidRecordError, "left after"),
    (
        "record length too short",
        encode_varint(3) + body()[:3] + b"\0" * 10,
        1,
        InvalidRecordError,
        "record length 3",
    ),
    (
        "record length negative",
        encode_varint(-20) + body() + b"\0" * 20,
        1,
        InvalidRecordError,
        "record length -20",
    ),
    ("record past the end", encode_varint(50) + body(), 1, CorruptRecordError, "runs past the end"),
    (
        "record longer than its fields",
        record(body() + b"\0"),
        1,
        InvalidRecordError,
        "invalid record size",
    ),
    (
        "key length -2",
        record(b"\x00\x00\x00" + encode_varint(-2) + b"\x01\x00\x00"),
        1,
        InvalidRecordError,
        "key length -2",
    ),
    (
        "key past record",
        record(b"\x00\x00\x00" + encode_varint(60) + b"\x01\x00\x00"),
        1,
        InvalidRecordError,
        "key length 60",
    ),
    (
        "value length -5",
        record(b"\x00\x00\x00\x01" + encode_varint(-5) + b"\x00\x00"),
        1,
        InvalidRecordError,
        "value length -5",
    ),
    (
        "value past record",
        record(b"\x00\x00\x00\x01" + encode_varint(9) + b"\x00\x00"),
        1,
        InvalidRecordError,
        "value length 9",
    ),
    (
        "varint too long",
        record(b"\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x01\x01\x00"),
        1,
        CorruptRecordError,
        "longer than 10",
    ),
    (
        "offset delta varint too long",
        record(b"\x00\x00\xff\xff\xff\xff\xff\x01\x01\x01\x00\x00"),
        1,
        CorruptRecordError,
        "longer than 5",
    ),
    (
        "header count negative",
        record(body(tail=encode_varint(-1))),
        1,
        InvalidRecordError,
        "header count -1",
    ),
    (
        "header count too large",
        record(body(tail=encode_varint(1000) + b"\0\0")),
        1,
        InvalidRecordError,
        "header count 1000",
    ),
    (
        "header key negative",
        record(body(tail=b"\x02" + encode_varint(-3) + b"\x01")),
        1,
        InvalidRecordError,
        "header key length -3",
    ),
    (
        "header value past record",
        record(body(tail=b"\x02\x00" + encode_varint(20))),
        1,
        InvalidRecordError,
        "header value length 20",
    ),
    (
        "header value -4",
        record(body(tail=b"\x02\x00" + encode_varint(-4))),
        1,
        InvalidRecordError,
        "header value length -4",
    ),
    ("truncated varint at end", b"\x0c\x00\x00\x00\x02k\x02v\x02\x00\x80", 1, KafkaError, ""),
]


@pytest.mark.parametrize(
    ("section", "count", "error", "message"),
    [m[1:] for m in MALFORMED],
    ids=[m[0] for m in MALFORMED],
)
def test_malformed_records_raise_typed_errors(
    section: bytes, count: int, error: type[KafkaError], message: str
) -> None:
    with pytest.raises(error, match=message):
        decode_records(batch_of(section, count))


def test_corrupt_compressed_payload_with_valid_crc() -> None:
    good = GOOD[Codec.LZ4]
    bad = bytearray(good)
    bad[HEADER_SIZE + 10] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="lz4"):
        decode_records(recrc(bad))


def test_legacy_magic_and_tiny_lengths_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="magic 1"):
        decode_records(recrc(header_with(magic=1) + GOOD[Codec.NONE][HEADER_SIZE:]))
    tiny = header_with(batch_length=10)
    with pytest.raises(CorruptRecordError, match="too small"):
        decode_records(tiny)
    with pytest.raises(CorruptRecordError, match="smaller than a batch header"):
        list(iter_batches(tiny[:30]))


def test_empty_non_control_batch_is_invalid_on_produce_but_readable() -> None:
    # The produce path is strict; a stored log may hold batches compaction emptied.
    with pytest.raises(InvalidRecordError, match="no records"):
        validate_batch(batch_of(b"", 0))
    assert decode_records(batch_of(b"", 0))[1] == []
    header, records = decode_records(batch_of(b"", 0, attributes=0x30))
    assert header.is_control and records == []


def _decode_everything(buf: bytes) -> None:
    try:
        validate_batch(buf)
    except KafkaError:
        pass
    try:
        decode_records(buf)
    except KafkaError:
        pass
    try:
        for _ in iter_batches(buf):
            pass
    except KafkaError:
        pass


@given(st.binary(max_size=300))
@example(b"\x00" * 8 + b"\x7f\xff\xff\xff")
@settings(max_examples=300)
def test_random_bytes_raise_only_kafka_errors(data: bytes) -> None:
    _decode_everything(data)


@given(st.sampled_from(list(Codec)), st.data())
@settings(max_examples=400, deadline=None)
def test_mutated_batches_with_fixed_crc_raise_only_kafka_errors(
    codec: Codec, data: st.DataObject
) -> None:
    # Recomputing the CRC after mutating gets the damage past the checksum and into
    # the record parser and the codecs.
    buf = bytearray(GOOD[codec])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(21, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(HEADER_SIZE, len(buf)))
        del buf[cut:]
        struct.pack_into(">i", buf, 8, len(buf) - 12)
    _decode_everything(recrc(buf))


@given(st.binary(max_size=200), st.integers(0, 40), st.sampled_from([0, 1]))
@settings(max_examples=300)
def test_random_record_sections_raise_only_kafka_errors(
    section: bytes, count: int, timestamp_type: int
) -> None:
    header = parse_header(header_with(count=count, attributes=timestamp_type << 3))
    try:
        records = decode_records_section(header, section)
    except (CorruptRecordError, InvalidRecordError):
        return
    assert len(records) == count
    for r in records:
        assert isinstance(r.headers, tuple)
        if timestamp_type:
            assert r.timestamp == header.max_timestamp
