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
    """Splits a byte stream into frames, copying each frame's bytes exactly once.

    A frame that arrives whole inside one chunk is one slice of it. A frame spread over
    several chunks is kept as references to those chunks (a copy of a chunk only when
    the caller passed a mutable buffer) and joined once when its last byte arrives:
    no buffer that grows and shifts, which for multi-megabyte fetch responses cost
    more than decoding them (every fresh large allocation is page-faulted in again).
    """

    __slots__ = ("_got", "_head", "_max", "_need", "_parts")

    def __init__(self, max_frame_bytes: int = 104_857_600) -> None:
        self._max = max_frame_bytes
        self._head = b""  # an incomplete size prefix (fewer than 4 bytes)
        self._parts: list[bytes | memoryview] = []  # the frame being received
        self._need = -1  # its size, or -1 when no frame is in progress
        self._got = 0  # bytes of it received

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return the complete frames now available (in order)."""
        frames: list[bytes] = []
        view = memoryview(data)
        keep = type(data) is bytes  # immutable: safe to reference until the frame ends
        n = len(view)
        pos = 0
        while pos < n:
            need = self._need
            if need < 0:  # between frames: read a size prefix
                if self._head or n - pos < 4:
                    take = min(4 - len(self._head), n - pos)
                    self._head += bytes(view[pos : pos + take])
                    pos += take
                    if len(self._head) < 4:
                        break
                    (size,) = _SIZE.unpack(self._head)
                    self._head = b""
                else:
                    (size,) = _SIZE.unpack_from(view, pos)
                    pos += 4
                if size < 0 or size > self._max:
                    raise FrameTooLargeError(
                        f"frame size {size} is outside 0..{self._max} "
                        "(socket.request.max.bytes)"
                    )
                if n - pos >= size:  # the whole frame is here: one slice
                    frames.append(bytes(view[pos : pos + size]))
                    pos += size
                    continue
                self._need = need = size
                self._got = 0
            take = min(need - self._got, n - pos)
            piece = view[pos : pos + take]
            self._parts.append(piece if keep else bytes(piece))
            self._got += take
            pos += take
            if self._got == need:
                frames.append(b"".join(self._parts))
                self._parts.clear()
                self._need = -1
        return frames

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._head) + (self._got + 4 if self._need >= 0 else 0)

    def pending_frame_size(self) -> int | None:
        """Size of the frame being received, if its prefix has arrived."""
        return self._need if self._need >= 0 else None


def encode_frame(payload: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(payload)) + payload
