"""Zigzag varint / varlong encoding, checked against known vectors and kafka-python."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.util import decode_varint as kp_decode_varint
from kafka.record.util import encode_varint as kp_encode_varint

from tidegate.common.errors import CorruptRecordError
from tidegate.records.varint import (
    decode_varint,
    decode_varint_from,
    decode_varlong,
    decode_varlong_from,
    encode_varint,
    encode_varlong,
    size_of_varint,
)

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)

# Vectors from Kafka's ByteUtilsTest (zigzag varints).
VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    ((1 << 31) - 1, "feffffff0f"),
    (-(1 << 31), "ffffffff0f"),
]


def kp_encode(n: int) -> bytes:
    out = bytearray()
    kp_encode_varint(n, out.append)
    return bytes(out)


@pytest.mark.parametrize(("value", "hexed"), VECTORS)
def test_known_vectors(value: int, hexed: str) -> None:
    assert encode_varint(value).hex() == hexed
    assert encode_varlong(value).hex() == hexed
    assert decode_varint(bytes.fromhex(hexed)) == (value, len(hexed) // 2)
    assert decode_varlong(bytes.fromhex(hexed)) == (value, len(hexed) // 2)


def test_int64_extremes() -> None:
    assert encode_varlong((1 << 63) - 1).hex() == "feffffffffffffffff01"
    assert encode_varlong(-(1 << 63)).hex() == "ffffffffffffffffff01"


@given(INT32, st.binary(max_size=4))
def test_varint_round_trip_matches_kafka_python(n: int, prefix: bytes) -> None:
    encoded = encode_varint(n)
    assert encoded == kp_encode(n)
    assert len(encoded) == size_of_varint(n)
    buf = prefix + encoded + b"\xff"
    assert decode_varint(buf, len(prefix)) == (n, len(prefix) + len(encoded))
    assert decode_varint_from(buf, len(prefix)) == (n, len(prefix) + len(encoded))
    assert kp_decode_varint(buf, len(prefix)) == (n, len(prefix) + len(encoded))


@given(INT64)
def test_varlong_round_trip_matches_kafka_python(n: int) -> None:
    encoded = encode_varlong(n)
    assert encoded == kp_encode(n)
    assert len(encoded) == size_of_varint(n)
    assert decode_varlong(encoded) == (n, len(encoded))
    assert decode_varlong_from(memoryview(bytearray(encoded)), 0) == (n, len(encoded))


@pytest.mark.parametrize("n", [1 << 31, -(1 << 31) - 1])
def test_encode_varint_rejects_out_of_range(n: int) -> None:
    with pytest.raises(ValueError, match="int32"):
        encode_varint(n)


@pytest.mark.parametrize("n", [1 << 63, -(1 << 63) - 1])
def test_encode_varlong_rejects_out_of_range(n: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(n)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "truncated"),
        (b"\x80", "truncated"),
        (b"\xff\xff\xff\xff", "truncated"),
        (b"\xff\xff\xff\xff\xff\x01", "longer than 5"),  # 6 bytes
        (b"\x80\x80\x80\x80\x20", "int32"),  # 5 bytes but beyond int32
    ],
)
def test_decode_varint_rejects_malformed(data: bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode_varint(data)


def test_decode_varlong_rejects_malformed() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(b"\xff" * 11)
    with pytest.raises(CorruptRecordError, match="int64"):
        decode_varlong(b"\xff" * 9 + b"\x7f")
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varlong(b"\xff" * 3, 1)


@given(st.binary(max_size=12), st.integers(0, 12))
def test_decode_never_raises_anything_but_corrupt(data: bytes, pos: int) -> None:
    for decode in (decode_varint, decode_varlong):
        try:
            value, end = decode(data, pos)
        except CorruptRecordError:
            continue
        assert pos < end <= len(data)
        assert encode_varlong(value) == data[pos:end] or data[end - 1] == 0  # non-minimal
