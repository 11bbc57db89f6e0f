"""One broker connection's byte stream: response frames read in place, requests written.

asyncio's streams copy every received byte three times before the client decodes it:
the transport makes a `bytes` of each read, `StreamReader` appends it to one growing
buffer and copies it out again on `read()`, and the frame decoder joins or slices each
frame out of those reads. For a consumer those are megabytes of fetched records per
response, copied again into fresh (page-faulted) allocations each time.

`ResponseStream` is an `asyncio.BufferedProtocol` instead, so the transport (and
asyncio's or uvloop's TLS transport, which decrypts into the buffer it is given) reads
into memory it hands out, and it does the framing itself:

- between frames, reads land in a 64 KiB scratch buffer; a frame that lies whole in it
  (every small response) is copied out once as `bytes`;
- a frame of `BIG_FRAME` bytes or more gets a buffer of its own as soon as its size
  prefix is known (the part already in the scratch is copied into it) and the rest is
  read straight into it: the only copy of a fetch response's bytes before the decoder.
  It is handed on as a read-only memoryview (kio and the record decoder read those). A
  declared size above `UPFRONT_MAX` is collected piece by piece and joined once, as the
  frame decoder does, instead of being allocated on the size prefix's word.

A size prefix that is negative or above `max_frame_bytes` is a `ProtocolError` from
`read_frames` (after the frames before it): the stream can no longer be trusted.
Responses are bounded by the requests in flight, so reading is never paused. The
writing side (`write`, `writelines`, `drain`, `close`, `wait_closed`) is the part of
`asyncio.StreamWriter` that `net.BrokerConnection` uses, drain following the
transport's pause/resume_writing.

This mirrors the broker's server/frame_stream.py (which the client may not import, and
whose flow control a client does not need).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable
from typing import cast

from tidegate.client.errors import KafkaConnectionError, ProtocolError

__all__ = ["BIG_FRAME", "SCRATCH", "UPFRONT_MAX", "Frame", "ResponseStream"]

Frame = bytes | memoryview

SCRATCH = 64 * 1024
BIG_FRAME = 16 * 1024  # frames this large are read in place into their own buffer
UPFRONT_MAX = 64 * 1024 * 1024  # above fetch.max.bytes (50 MiB): collected as it arrives

_SIZE = struct.Struct(">i")


class ResponseStream(asyncio.BufferedProtocol):
    """See the module docstring.

    Deliberately not an `asyncio.Protocol` too: uvloop calls `data_received` on any
    class that is one, and never `get_buffer`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, peer: str,
                 max_frame_bytes: int = 2_147_483_647) -> None:
        self._loop = loop
        self._peer = peer
        self._max_frame = max_frame_bytes
        self._view: memoryview | None = None  # the scratch, allocated when needed
        self._lo = 0  # unparsed bytes of the scratch: [_lo, _hi)
        self._hi = 0
        self._big: bytearray | None = None  # a big frame being read in place
        self._big_got = 0
        self._parts: list[bytes] = []  # a frame over UPFRONT_MAX, as it arrives
        self._parts_need = 0
        self._frames: list[Frame] = []
        self._error: BaseException | None = None  # a bad size prefix: after the frames
        self._lost: BaseException | None = None  # the connection ended (and why)
        self._waiter: asyncio.Future[None] | None = None
        self._closed: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None

    # -- transport callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lost is None:
            self._lost = exc if exc is not None else KafkaConnectionError(
                f"broker {self._peer} closed the connection")
        self._wake()
        if not self._closed.done():
            self._closed.set_result(None)
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)  # drain() sees the transport closing

    def eof_received(self) -> bool | None:
        if self._lost is None:
            self._lost = KafkaConnectionError(f"broker {self._peer} closed the connection")
        self._wake()
        return None  # the transport closes itself

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_got:]
        view = self._view
        if view is None:
            view = self._view = memoryview(bytearray(SCRATCH))
        if self._error is not None:  # the stream is unusable: discard what comes
            self._lo = self._hi = 0
        elif SCRATCH - self._hi < BIG_FRAME:  # move the unparsed tail to the front
            rest = bytes(view[self._lo:self._hi])  # under BIG_FRAME bytes
            view[:len(rest)] = rest
            self._lo, self._hi = 0, len(rest)
        return view[self._hi:]

    def buffer_updated(self, nbytes: int) -> None:
        big = self._big
        if big is not None:
            self._big_got += nbytes
            if self._big_got == len(big):
                self._big = None
                self._push(memoryview(big).toreadonly())
            return
        if self._error is not None:
            return
        self._hi += nbytes
        self._parse()

    # -- framing -----------------------------------------------------------------------------

    def _parse(self) -> None:
        view, lo, hi = self._view, self._lo, self._hi
        assert view is not None  # bytes arrived in it
        if self._parts_need:  # a frame over UPFRONT_MAX: keep collecting it
            take = min(self._parts_need, hi - lo)
            self._parts.append(bytes(view[lo:lo + take]))
            self._parts_need -= take
            lo += take
            if not self._parts_need:
                self._push(b"".join(self._parts))
                self._parts.clear()
        while not self._parts_need and hi - lo >= 4:
            (size,) = _SIZE.unpack_from(view, lo)
            if size < 0 or size > self._max_frame:
                self._error = ProtocolError(
                    f"bad response frame from {self._peer}: size {size} is outside "
                    f"0..{self._max_frame}")
                lo = hi = 0
                self._wake()
                break
            end = lo + 4 + size
            if end <= hi:  # whole in the scratch: one copy
                self._push(bytes(view[lo + 4:end]))
                lo = end
                continue
            have = hi - lo - 4
            if size > UPFRONT_MAX:
                self._parts.append(bytes(view[lo + 4:hi]))
                self._parts_need = size - have
                lo = hi = 0
            elif size >= BIG_FRAME:  # the rest is read straight into its own buffer
                big = bytearray(size)
                big[:have] = view[lo + 4:hi]
                self._big, self._big_got = big, have
                lo = hi = 0
            break
        if lo == hi:
            lo = hi = 0
        self._lo, self._hi = lo, hi

    def _push(self, frame: Frame) -> None:
        self._frames.append(frame)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- reading side --------------------------------------------------------------------------

    async def read_frames(self) -> list[Frame]:
        """The complete frames received and not yet read, in order, waiting for one.
        Raises ProtocolError for a bad size prefix, KafkaConnectionError (or the
        transport's OSError) once the connection has ended, after the frames before."""
        while not self._frames and self._error is None and self._lost is None:
            if self._lo == self._hi and self._big is None:
                self._view = None  # nothing half-received: an idle connection keeps none
                self._lo = self._hi = 0
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        frames = self._frames
        if frames:
            self._frames = []
            return frames
        raise cast(BaseException, self._error or self._lost)

    # -- writing side (StreamWriter's methods BrokerConnection uses) ---------------------------

    def write(self, data: bytes) -> None:
        tr = self.transport
        if tr is not None and not tr.is_closing():
            tr.write(data)

    def writelines(self, parts: Iterable[bytes]) -> None:
        tr = self.transport
        if tr is not None and not tr.is_closing():
            tr.writelines(parts)

    async def drain(self) -> None:
        tr = self.transport
        if tr is None or tr.is_closing():
            await asyncio.sleep(0)  # as StreamWriter: let connection_lost run
            raise ConnectionResetError("connection lost")
        if self._write_paused:
            waiter = self._drain_waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                self._drain_waiter = None
            if tr.is_closing():
                raise ConnectionResetError("connection lost")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)
