"""Size-prefixed Kafka frames: a sans-IO decoder and an encoder.

Every Kafka request and response is `int32 size` followed by `size` bytes. The decoder
buffers whatever bytes arrive and yields complete frames. A size prefix that is negative
or above `max_frame_bytes` (the broker's `socket.request.max.bytes`) raises
`FrameTooLargeError`: like the Java broker, the caller then closes the connection,
because the byte stream can no longer be trusted.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The byte stream is unusable; the connection must be closed."""


class FrameTooLargeError(FrameError):
    pass


class FrameDecoder:
    """Accumulates bytes and splits them into frames without copying more than once."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame_bytes: int = 104_857_600) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return the complete frames now available (in order)."""
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self._max:
                raise FrameTooLargeError(
                    f"frame size {size} is outside 0..{self._max} (socket.request.max.bytes)"
                )
            if n - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def pending_frame_size(self) -> int | None:
        """Size of the frame being received, if its prefix has arrived."""
        if len(self._buf) < 4:
            return None
        return int(_SIZE.unpack_from(self._buf, 0)[0])


def encode_frame(payload: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(payload)) + payload
