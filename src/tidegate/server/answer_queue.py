"""`AnswerQueue`: the answers due on one client connection, in request order, and their
writing. The listener's reader puts each request's answer-to-be as it starts it (the
handler's Task, or the answer itself when it is known at once); whatever is ready at the
head of the queue is encoded and written by `pump`, called where an answer becomes
ready: when it is put, and when the Task at the head finishes. No writer task: each
answer used to wake one (a Task step and a future per answer) just to write it.
Single event loop, one reader.

Writing stops (`stopped`) at a handler that raised — logged with its traceback, the
connection closed, no answer behind it written — at a lost connection, and after the
answer that ends a failed SASL exchange. While the transport's buffer is above its high
water mark (`pause_writing`), one short-lived task waits for it to drain and pumps on.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
from typing import Any, Protocol

from tidegate.protocol.messages import encode

__all__ = ["AnswerQueue", "Failed"]

log = logging.getLogger("tidegate.server.listener")  # its messages are the listener's

_I32 = struct.Struct(">i")


class Failed:
    """The answer of a handler that raised without suspending (no Task to hold it)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Connection(Protocol):
    """What the queue needs of the listener's `Connection`."""

    writer: Any  # server/frame_stream.py's FrameProtocol
    session: Any
    peer: str
    closed: bool

    def _close_now(self) -> None: ...


class AnswerQueue:
    """The answers due on a connection, in request order: items are
    `(correlation_id, flexible, answer)`, the answer a Task (pending or done), a
    `Failed`, a response body, bytes (a bare SASL token, correlation id None) or None
    (nothing to send). `limit` is `queued.max.requests`: `put` waits while that many are
    unanswered."""

    __slots__ = ("conn", "draining", "idle", "items", "limit", "loop", "putter", "stopped")

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop,
                 conn: _Connection) -> None:
        self.items: collections.deque[tuple[int | None, bool, Any]] = collections.deque()
        self.limit = limit
        self.putter: asyncio.Future[None] | None = None
        self.loop = loop
        self.conn = conn
        self.stopped = False  # nothing more is written (module docstring)
        self.draining: asyncio.Task[None] | None = None  # waits for the transport to drain
        self.idle: asyncio.Future[None] | None = None  # `close` waits on it

    def full(self) -> bool:
        return len(self.items) >= self.limit

    def put_nowait(self, item: tuple[int | None, bool, Any]) -> None:
        items = self.items
        items.append(item)
        if len(items) == 1:  # nothing before it unwritten
            body = item[2]
            if not isinstance(body, asyncio.Task) or body.done():  # (done while `put` waited)
                self.pump()

    async def put(self, item: tuple[int | None, bool, Any]) -> None:
        while len(self.items) >= self.limit and not self.stopped:
            putter = self.putter = self.loop.create_future()
            await putter
        self.put_nowait(item)

    def task_done(self, task: asyncio.Task[Any]) -> None:
        """A Task's done callback: write its answer if it is the head of the queue (and
        whatever ready answers follow it)."""
        items = self.items
        if items and items[0][2] is task:
            self.pump()

    async def close(self) -> None:
        """Wait until every answer queued is written, or writing has stopped."""
        if self.items and not self.stopped:
            self.idle = self.loop.create_future()
            await self.idle

    def pump(self) -> None:
        """Write the ready answers at the head of the queue, in order, up to the first
        not ready; stop writing where the module docstring says."""
        if self.stopped or self.draining is not None:
            return
        conn = self.conn
        writer = conn.writer
        items = self.items
        while items:
            correlation_id, flexible, body = items[0]
            if isinstance(body, asyncio.Task):
                if not body.done():
                    return
                if body.cancelled():
                    self._fail(None)
                    return
                exc = body.exception()
                if exc is not None:
                    self._fail(exc)
                    return
                body = body.result()
            elif isinstance(body, Failed):
                self._fail(body.exc)
                return
            items.popleft()
            putter = self.putter
            if putter is not None and not putter.done():
                putter.set_result(None)  # a slot is free: the reader may read on
            session = conn.session
            if body is None:
                if session is not None and session.close_after_answer:
                    self._stop()
                    conn._close_now()
                    return
                continue
            if conn.closed and writer.is_closing():
                continue
            if correlation_id is None:  # a bare SASL token (KIP-43, handshake v0)
                raw = bytes(body)
                data = _I32.pack(len(raw)) + raw
            else:
                # size, response header (v1 adds an empty tagged-field section), body:
                # one join instead of two concatenations
                try:
                    raw = encode(body)
                except Exception as e:
                    self._fail(e)
                    return
                data = b"".join((_I32.pack(len(raw) + 4 + flexible),
                                 _I32.pack(correlation_id), b"\x00" if flexible else b"",
                                 raw))
            writer.write(data)
            if session is not None and session.close_after_answer:
                self._stop()
                conn._close_now()
                return
            if writer.is_closing():  # the peer is gone
                conn.closed = True
                self._stop()
                return
            if writer.write_paused():
                self.draining = self.loop.create_task(self._drain())
                return
        idle = self.idle
        if idle is not None and not idle.done():
            idle.set_result(None)

    async def _drain(self) -> None:
        try:
            await self.conn.writer.drain()
        except (ConnectionError, OSError):
            self.conn.closed = True
            self._stop()
            return
        finally:
            self.draining = None
        self.pump()

    def _fail(self, exc: BaseException | None) -> None:
        """The head's handler raised (or was cancelled, `exc` None): close the connection."""
        conn = self.conn
        if exc is None:
            log.warning("request from %s cancelled; closing the connection", conn.peer)
        else:
            log.error("request from %s failed; closing the connection", conn.peer,
                      exc_info=exc)
        conn.closed = True
        conn.writer.close()
        self._stop()

    def _stop(self) -> None:
        self.stopped = True
        for waiter in (self.putter, self.idle):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
