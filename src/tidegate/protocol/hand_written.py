"""Messages kio does not ship, encoded by hand, and the registry that makes them look
like kio entities to the rest of the code.

kio 0.6.5 lacks the broker-to-controller APIs of ZooKeeper-mode Kafka (ControlledShutdown
among them). A hand-written message is a frozen dataclass deriving from
`HandWrittenMessage`, one class per API version (as kio's are), with the class
attributes kio entities carry (`__api_key__`, `__version__`, `__flexible__`,
`__type__`) and two methods: `encode_body()` and `decode_body(buf, pos)`.
`protocol/messages.py` consults `REQUESTS`/`RESPONSES` before kio, so the listener, the
dispatcher and the inter-broker connection handle these messages with no special case.

`Reader`/`Writer` are the few primitives these bodies need (Kafka's big-endian ints,
legacy and compact strings and arrays, unsigned varints, empty tagged-field sections).
A truncated or malformed body raises `ValueError`; `messages.decode` turns it into the
`DecodeError` the listener answers by closing the connection.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import ClassVar, TypeVar

from kio.static.constants import EntityType
from kio.static.primitive import i16

__all__ = ["REQUESTS", "RESPONSES", "HandWrittenMessage", "Reader", "Writer", "register"]

M = TypeVar("M", bound="HandWrittenMessage")

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class HandWrittenMessage:
    """Base of every hand-written request and response body (see the module docstring)."""

    __slots__ = ()
    __type__: ClassVar[EntityType]
    __api_key__: ClassVar[i16]
    __version__: ClassVar[i16]
    __flexible__: ClassVar[bool]

    def encode_body(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def decode_body(cls: type[M], buf: bytes, pos: int) -> tuple[M, int]:
        """The message at `pos` and the offset after it; ValueError if malformed."""
        raise NotImplementedError


REQUESTS: dict[tuple[int, int], type[HandWrittenMessage]] = {}
RESPONSES: dict[tuple[int, int], type[HandWrittenMessage]] = {}
NAMES: dict[int, str] = {}


def register(name: str, requests: Sequence[type[HandWrittenMessage]],
             responses: Sequence[type[HandWrittenMessage]]) -> None:
    """Make the classes the request and response bodies of their (api key, version)."""
    for cls in requests:
        REQUESTS[(int(cls.__api_key__), int(cls.__version__))] = cls
        NAMES[int(cls.__api_key__)] = name
    for cls in responses:
        RESPONSES[(int(cls.__api_key__), int(cls.__version__))] = cls


def version_range(api_key: int) -> tuple[int, int] | None:
    """The versions of a hand-written API, or None if `api_key` is not one."""
    versions = sorted(v for k, v in REQUESTS if k == api_key)
    return (versions[0], versions[-1]) if versions else None


class Reader:
    """Reads Kafka primitives from `buf` starting at `pos`."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def _take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > len(self.buf):
            raise ValueError(f"truncated body: {n} bytes wanted at offset {start}")
        self.pos += n
        return start

    def int16(self) -> int:
        return int(_I16.unpack_from(self.buf, self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self.buf, self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self.buf, self._take(8))[0])

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            b = self.buf[self._take(1)]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise ValueError("unsigned varint longer than 5 bytes")

    def string(self, compact: bool) -> str:
        n = self.uvarint() - 1 if compact else self.int16()
        if n < 0:
            raise ValueError("null where a string is required")
        start = self._take(n)
        try:
            return self.buf[start:start + n].decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"string is not UTF-8: {e}") from None

    def array_length(self, compact: bool) -> int:
        n = self.uvarint() - 1 if compact else self.int32()
        if n < 0:
            raise ValueError("null where an array is required")
        if n > len(self.buf) - self.pos:  # every element takes at least one byte
            raise ValueError(f"array of {n} elements longer than the body")
        return n

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


class Writer:
    """Accumulates Kafka primitives."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, v: int) -> None:
        self.parts.append(_I16.pack(v))

    def int32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def int64(self, v: int) -> None:
        self.parts.append(_I64.pack(v))

    def uvarint(self, v: int) -> None:
        out = bytearray()
        while True:
            b = v & 0x7F
            v >>= 7
            if v:
                out.append(b | 0x80)
            else:
                out.append(b)
                break
        self.parts.append(bytes(out))

    def string(self, s: str, compact: bool) -> None:
        raw = s.encode("utf-8")
        if compact:
            self.uvarint(len(raw) + 1)
        else:
            self.int16(len(raw))
        self.parts.append(raw)

    def array_length(self, n: int, compact: bool) -> None:
        if compact:
            self.uvarint(n + 1)
        else:
            self.int32(n)

    def no_tags(self) -> None:
        self.uvarint(0)

    def bytes(self) -> bytes:
        return b"".join(self.parts)
