"""One client connection's transport side: Kafka frames read in place, responses written.

asyncio's streams copy received bytes several times before a request is decoded: the
transport makes a `bytes` of each read, `StreamReader` appends it to one growing buffer
and copies it out again on `read()`, and the frame decoder joins a frame's pieces. On
TLS, the SSL transport also allocates a 256 KiB object per TLS record it decrypts and
joins the records. At 1 KiB produce over 1 MB requests those copies and allocations
were the largest single cost of the broker's CPU after the fsyncs.

`FrameProtocol` is an `asyncio.BufferedProtocol` instead: the transport (uvloop's TCP,
and its SSL transport, which decrypts straight into the buffer it is given) reads into
memory handed out by a `protocol.frame_buffer.FrameAssembler`, which does the framing
(small frames copied out of a 64 KiB scratch once, frames of 16 KiB or more read in
place into buffers of their own, reused through a `BufferPool` the listener's
connections share; sizes above `UPFRONT_MAX` collected as they arrive; the client's
`client/stream.py` uses the same assembler). The scratch is dropped
whenever the connection waits with nothing half-received, so idle connections hold no
buffer.

A size prefix that is negative or above `max_frame_bytes` (socket.request.max.bytes)
is a `FrameTooLargeError`, raised by `take` after the frames before it, as
`protocol.framing.FrameDecoder` does (the caller closes the connection).

Flow control as StreamReader's: frames not yet taken above `max_buffered` bytes pause
reading; `take` resumes it. The writing side (`write`, `drain`, `close`, `is_closing`,
`get_extra_info`) is the part of `asyncio.StreamWriter` the listener uses, with drain
following the transport's pause/resume_writing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, cast

from tidegate.protocol.frame_buffer import BIG_FRAME, SCRATCH, BufferPool, Frame, FrameAssembler
from tidegate.protocol.framing import FrameTooLargeError

__all__ = ["BIG_FRAME", "SCRATCH", "UPFRONT_MAX", "BufferPool", "Frame", "FrameProtocol"]

UPFRONT_MAX = 16 * 1024 * 1024  # larger declared sizes are collected as they arrive


class FrameProtocol(asyncio.BufferedProtocol):
    """See the module docstring. `on_connect(self)` runs as a task once connected.

    Deliberately not an `asyncio.Protocol` too (nor a StreamReaderProtocol): uvloop
    calls `data_received` on any class that is one, and never `get_buffer`."""

    def __init__(
        self,
        on_connect: Callable[[FrameProtocol], Coroutine[Any, Any, None]],
        loop: asyncio.AbstractEventLoop,
        *,
        max_frame_bytes: int = 104_857_600,
        max_buffered: int = 2 << 20,
        pool: BufferPool | None = None,
    ) -> None:
        self._on_connect = on_connect
        self._loop = loop
        self._max_frame = max_frame_bytes
        self._max_buffered = max_buffered
        self._buf = FrameAssembler(max_frame_bytes, UPFRONT_MAX, self._push, self._bad_size,
                                   pool)
        self._frames: list[Frame] = []
        self._queued = 0
        self._frame_error: FrameTooLargeError | None = None
        self._conn_error: Exception | None = None
        self._eof = False
        self._waiter: asyncio.Future[None] | None = None
        self._transport: asyncio.Transport | None = None
        self._read_paused = False
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._out: list[bytes] = []  # written, not yet handed to the transport
        self.task: asyncio.Task[None] | None = None

    # -- transport callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self.task = self._loop.create_task(self._on_connect(self))

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self._conn_error is None:
            self._conn_error = exc
        self._eof = True
        self._wake()
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)  # drain() sees the transport closing

    def eof_received(self) -> bool | None:
        self._eof = True
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
        self._frame_error = FrameTooLargeError(
            f"frame size {size} is outside 0..{self._max_frame} (socket.request.max.bytes)"
        )
        self._wake()

    def _push(self, frame: Frame) -> None:
        self._frames.append(frame)
        self._queued += len(frame)
        self._wake()
        if self._queued > self._max_buffered and not self._read_paused:
            tr = self._transport
            if tr is not None and not tr.is_closing():
                tr.pause_reading()
                self._read_paused = True

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- reading side (the connection) --------------------------------------------------------

    def ready(self) -> bool:
        """Whether `take` has something to give: frames, an error or the end."""
        return bool(self._frames) or self._eof or self._frame_error is not None

    async def wait(self) -> None:
        """Until `ready()`."""
        if self.ready():
            return
        self._buf.release_if_idle()  # an idle connection keeps no buffer
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def interrupt(self) -> None:
        """End a `wait` without data (the listener's idle timer); `ready()` says which."""
        self._wake()

    def take(self) -> list[Frame]:
        """The complete frames received and not yet taken, in order; [] at the end of
        the stream. Raises FrameTooLargeError, or the connection's error, once the frames
        before it are taken."""
        frames = self._frames
        if frames:
            self._frames = []
            self._queued = 0
            if self._read_paused:
                self._read_paused = False
                tr = self._transport
                if tr is not None and not tr.is_closing():
                    tr.resume_reading()
            return frames
        if self._frame_error is not None:
            raise self._frame_error
        if self._conn_error is not None:
            raise self._conn_error
        return frames

    # -- writing side (StreamWriter's methods the listener uses) -------------------------------

    def write(self, data: bytes) -> None:
        """Queue `data`; what is written in one pass of the event loop goes out in one
        `writelines` at its end. Pipelined produce requests are answered together when
        their group commit's fsync completes: one send instead of one per answer (on
        loopback each send also runs the receiver's TCP stack, ~15 % of the broker's CPU
        under the produce bench)."""
        tr = self._transport
        if tr is None or tr.is_closing():
            return  # the peer is gone (uvloop raises on a closed transport); drain() says so
        out = self._out
        out.append(data)
        if len(out) == 1:
            self._loop.call_soon(self._flush_out)

    def _flush_out(self) -> None:
        out = self._out
        if not out:
            return
        self._out = []
        tr = self._transport
        if tr is None or tr.is_closing():
            return
        if len(out) == 1:
            tr.write(out[0])
        else:
            tr.writelines(out)

    def write_paused(self) -> bool:
        """The transport's buffer is above its high-water mark: `drain` would wait."""
        return self._write_paused

    async def drain(self) -> None:
        """As StreamWriter's; answers queued by `write` reach the transport at the end
        of this pass of the loop, so a pause they cause is seen by the next drain."""
        tr = self._transport
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
        if self._transport is not None:
            self._flush_out()  # queued answers first (a SASL failure's error, say)
            self._transport.close()

    def is_closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if self._transport is None:
            return default
        return self._transport.get_extra_info(name, default)
