"""The parts flexible message versions add: unsigned varints and tagged fields, read and
written by the hand-written codecs.

Flexible versions (KIP-482) write compact lengths, tag numbers and tag sizes as
unsigned varints and end each structure with a tagged-field section (a count, then
tag, size and bytes per field). The hand-written readers — request and response
headers (`headers.py`), the structural pre-check (`guard.py`) and the Produce request
decoder (`produce_request.py`) — read them here, each passing the exception it raises
for bad input (the listener answers each kind its own way).

The writers (`write_uvarint`, `array_length`, `string`) serve the hand-written
responses (`produce_response.py`, `txn_responses.py`), flexible or not.

An unsigned varint is at most 5 bytes, as Kafka's `ByteUtils.readUnsignedVarint`: every
value read this way is 32-bit, so a longer one is malformed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

__all__ = ["array_length", "read_uvarint", "skip_tagged_fields", "string", "write_uvarint"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Buffer = bytes | memoryview


def read_uvarint(buf: Buffer, pos: int, end: int,
                 error: type[Exception]) -> tuple[int, int]:
    """The unsigned varint at `pos` (not reading at or past `end`) and the position
    after it; `error(message)` if it is truncated or over 5 bytes."""
    result = shift = 0
    while True:
        if pos >= end:
            raise error("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise error("varint too long")


def skip_tagged_fields(buf: Buffer, pos: int, end: int, error: type[Exception],
                       visit: Callable[[int, int, int], object] | None = None) -> int:
    """The position after the tagged-field section at `pos`. Each field's bytes are
    skipped (Kafka's parsers skip unknown tags), after `visit(tag, start, stop)` if
    given (guard.py checks the tags its schema knows)."""
    count, pos = read_uvarint(buf, pos, end, error)
    if count > end - pos:  # each field takes at least 2 bytes: refuse before looping
        raise error(f"{count} tagged fields in {end - pos} bytes")
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos, end, error)
        size, pos = read_uvarint(buf, pos, end, error)
        if size > end - pos:
            raise error(f"tagged field {tag} of {size} bytes runs past the end")
        if visit is not None:
            visit(tag, pos, pos + size)
        pos += size
    return pos


def write_uvarint(v: int) -> bytes:
    """`v` (non-negative) as an unsigned varint."""
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def array_length(n: int, flexible: bool) -> bytes:
    """An array's length: compact (n + 1, a varint) when flexible, else an int32."""
    return write_uvarint(n + 1) if flexible else _I32.pack(n)


def string(s: str, flexible: bool) -> bytes:
    """A non-null string: compact length when flexible, else an int16 length."""
    raw = s.encode("utf-8")
    return (write_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw
