"""Zigzag varints and varlongs as Kafka's record v2 format uses them (protobuf style).

A signed value ``n`` is zigzag-mapped to ``(n << 1) ^ (n >> 63)`` and written 7 bits per
byte, least significant group first, high bit set on every byte but the last.

Invariants:
- a varint holds an int32 and takes at most 5 bytes; a varlong holds an int64 and takes
  at most 10 bytes. Decoding rejects longer encodings and out-of-range values with
  `CorruptRecordError`, and a varint cut off by the end of the buffer likewise; decoding
  never raises IndexError.
- Encoding returns `bytes`; one- and two-byte encodings come from precomputed tables.

These helpers are for general use. The record decoder in `record.py` inlines the
one-byte fast path (using `UNZIGZAG_1`) and falls back to `decode_varint_from` only for
longer encodings, because a function call per field dominates per-record cost.
"""

from __future__ import annotations

from tidegate.common.errors import CorruptRecordError

__all__ = [
    "ENCODED_1",
    "ENCODED_SMALL",
    "ENCODED_SMALL_LIMIT",
    "UNZIGZAG_1",
    "decode_varint",
    "decode_varint_from",
    "decode_varlong",
    "decode_varlong_from",
    "encode_uvarint",
    "encode_varint",
    "encode_varlong",
    "size_of_varint",
]

Buffer = bytes | bytearray | memoryview

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

#: Signed value of each one-byte encoding (index = the byte, 0..127).
UNZIGZAG_1: tuple[int, ...] = tuple((b >> 1) ^ -(b & 1) for b in range(128))
#: Encoded bytes of each zigzag value below 128, i.e. signed values in [-64, 63].
ENCODED_1: tuple[bytes, ...] = tuple(bytes((z,)) for z in range(128))
#: Encoded bytes of each zigzag value below 2**14 (one or two bytes): lengths and
#: offset deltas up to 8191 and timestamp deltas within +-4096 ms. About 0.7 MB, built
#: once, it saves the record builder a function call per field.
ENCODED_SMALL: tuple[bytes, ...] = ENCODED_1 + tuple(
    bytes(((z & 0x7F) | 0x80, z >> 7)) for z in range(128, 1 << 14)
)
ENCODED_SMALL_LIMIT = 1 << 14


def encode_uvarint(z: int) -> bytes:
    """Encode an unsigned (already zigzag-mapped) value; `z` must be >= 0."""
    if z < 0x80:
        return ENCODED_1[z]
    if z < 0x4000:
        return bytes(((z & 0x7F) | 0x80, z >> 7))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Zigzag-encode an int32. Raises ValueError outside the int32 range."""
    if not _INT32_MIN <= n <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {n}")
    return encode_uvarint((n << 1) ^ (n >> 63))


def encode_varlong(n: int) -> bytes:
    """Zigzag-encode an int64. Raises ValueError outside the int64 range."""
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {n}")
    return encode_uvarint((n << 1) ^ (n >> 63))


def size_of_varint(n: int) -> int:
    """Encoded size in bytes of the zigzag varint/varlong `n`."""
    z = (n << 1) ^ (n >> 63)
    return max(1, (z.bit_length() + 6) // 7)


def _decode(buf: Buffer, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    start = pos
    limit = 7 * max_bytes
    z = 0
    shift = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            z |= (b & 0x7F) << shift
            if b < 0x80:
                return (z >> 1) ^ -(z & 1), pos
            shift += 7
            if shift >= limit:
                raise CorruptRecordError(f"{what} at byte {start} is longer than {max_bytes} bytes")
    except IndexError:
        raise CorruptRecordError(
            f"{what} at byte {start} is truncated by the end of the data"
        ) from None


def decode_varint_from(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode an int32 zigzag varint at `pos`; return (value, next position)."""
    value, pos = _decode(buf, pos, 5, "varint")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise CorruptRecordError(f"varint value {value} does not fit in an int32")
    return value, pos


def decode_varlong_from(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode an int64 zigzag varlong at `pos`; return (value, next position)."""
    value, pos = _decode(buf, pos, 10, "varlong")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise CorruptRecordError(f"varlong value {value} does not fit in an int64")
    return value, pos


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Like `decode_varint_from` with a one-byte fast path."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return UNZIGZAG_1[b], pos + 1
    return decode_varint_from(buf, pos)


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Like `decode_varlong_from` with a one-byte fast path."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return UNZIGZAG_1[b], pos + 1
    return decode_varlong_from(buf, pos)
