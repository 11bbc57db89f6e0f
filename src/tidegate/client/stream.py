"""One broker connection's byte stream: response frames read in place, requests written.

asyncio's streams copy every received byte three times before the client decodes it:
the transport makes a `bytes` of each read, `StreamReader` appends it to one growing
buffer and copies it out again on `read()`, and the frame decoder joins or slices each
frame out of those reads. For a consumer those are megabytes of fetched records per
response, copied again into fresh (page-faulted) allocations each time.

`ResponseStream` is an `asyncio.BufferedProtocol` instead, so the transport (and
asyncio's or uvloop's TLS transport, which decrypts into the buffer it is given) reads
into memory handed out by a `protocol.frame_buffer.FrameAssembler`, the framing the
broker's server/frame_stream.py uses too: a small response is copied out of a 64 KiB
scratch once; a frame of 16 KiB or more (a fetch response) is read straight into a
buffer of its own, the only copy of its bytes before the decoder, and handed on as a
read-only memoryview; a declared size above `UPFRONT_MAX` is collected piece by piece
and joined once instead of being allocated on the size prefix's word.

A size prefix that is negative or above `max_frame_bytes` is a `ProtocolError` from
`read_frames` (after the frames before it): the stream can no longer be trusted.
Responses are bounded by the requests in flight, so reading is never paused. The
writing side (`write`, `writelines`, `drain`, `close`, `wait_closed`) is the part of
`asyncio.StreamWriter` that `net.BrokerConnection` uses, drain following the
transport's pause/resume_writing.

The broker's server/frame_stream.py adds flow control, which a client does not need.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import cast

from tidegate.client.errors import KafkaConnectionError, ProtocolError
from tidegate.protocol.frame_buffer import BIG_FRAME, SCRATCH, Frame, FrameAssembler

__all__ = ["BIG_FRAME", "SCRATCH", "UPFRONT_MAX", "Frame", "ResponseStream"]

UPFRONT_MAX = 64 * 1024 * 1024  # above fetch.max.bytes (50 MiB): collected as it arrives


class ResponseStream(asyncio.BufferedProtocol):
    """See the module docstring.

    Deliberately not an `asyncio.Protocol` too: uvloop calls `data_received` on any
    class that is one, and never `get_buffer`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, peer: str,
                 max_frame_bytes: int = 2_147_483_647) -> None:
        self._loop = loop
        self._peer = peer
        self._max_frame = max_frame_bytes
        self._buf = FrameAssembler(max_frame_bytes, UPFRONT_MAX, self._push, self._bad_size)
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
        return self._buf.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._buf.buffer_updated(nbytes)

    # -- framing -----------------------------------------------------------------------------

    def _bad_size(self, size: int) -> None:
        self._error = ProtocolError(
            f"bad response frame from {self._peer}: size {size} is outside "
            f"0..{self._max_frame}")
        self._wake()

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
            self._buf.release_if_idle()  # an idle connection keeps no buffer
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
