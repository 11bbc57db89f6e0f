"""The listener's answer queue (`server/answer_queue.py`): answers written in request order
as soon as the head is ready, `queued.max.requests` as the bound at which the reader's
`put` waits, a failed handler closing the connection, and a paused transport's drain."""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any

import pytest

from tidegate.protocol.headers import API_VERSIONS_KEY
from tidegate.protocol.messages import build, encode, response_class
from tidegate.server.answer_queue import AnswerQueue, Failed


class _Writer:
    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.closing = False
        self.paused = False
        self.resumed: asyncio.Event | None = None

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def write_paused(self) -> bool:
        return self.paused

    async def drain(self) -> None:
        assert self.resumed is not None
        await self.resumed.wait()
        self.paused = False


class _Conn:
    def __init__(self) -> None:
        self.writer = _Writer()
        self.session: Any = None
        self.peer = "peer:1"
        self.closed = False

    def _close_now(self) -> None:
        self.closed = True
        self.writer.close()

    def tokens(self) -> list[bytes]:
        """The bare frames written (correlation id None items): their payloads."""
        return [d[4:] for d in self.writer.out]


def test_answers_are_written_in_order_when_the_head_is_ready() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        conn = _Conn()
        answers = AnswerQueue(10, loop, conn)
        first: asyncio.Future[bytes] = loop.create_future()

        async def wait_first() -> bytes:
            return await first

        task = loop.create_task(wait_first())
        task.add_done_callback(answers.task_done)
        answers.put_nowait((None, False, task))
        answers.put_nowait((None, False, b"second"))  # ready, but behind the first
        await asyncio.sleep(0)
        assert conn.tokens() == []
        first.set_result(b"first")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert conn.tokens() == [b"first", b"second"]
        answers.put_nowait((None, False, b"third"))  # the head and ready: written at once
        assert conn.tokens() == [b"first", b"second", b"third"]
        await asyncio.wait_for(answers.close(), 1)

    asyncio.run(go())


def test_a_response_is_framed_with_its_header_and_none_is_not_sent() -> None:
    body = build(response_class(API_VERSIONS_KEY, 0), {"error_code": 35, "api_keys": []})
    raw = encode(body)

    async def go() -> None:
        conn = _Conn()
        answers = AnswerQueue(10, asyncio.get_running_loop(), conn)
        answers.put_nowait((7, True, None))  # nothing to send (acks=0)
        answers.put_nowait((8, True, body))  # response header v1: a tagged-field byte
        answers.put_nowait((9, False, body))
        assert conn.writer.out == [
            struct.pack(">ii", len(raw) + 5, 8) + b"\x00" + raw,
            struct.pack(">ii", len(raw) + 4, 9) + raw,
        ]

    asyncio.run(go())


def test_put_waits_while_the_limit_is_unanswered() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        conn = _Conn()
        answers = AnswerQueue(2, loop, conn)
        gate: asyncio.Future[bytes] = loop.create_future()

        async def slow() -> bytes:
            return await gate

        task = loop.create_task(slow())
        task.add_done_callback(answers.task_done)
        await answers.put((None, False, task))
        await answers.put((None, False, b"2"))
        assert answers.full()
        third = asyncio.ensure_future(answers.put((None, False, b"3")))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not third.done()  # queued.max.requests reached: reading waits
        gate.set_result(b"1")
        await asyncio.wait_for(third, 1)
        assert conn.tokens() == [b"1", b"2", b"3"]

    asyncio.run(go())


def test_a_task_done_while_put_waited_is_still_written() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        conn = _Conn()
        answers = AnswerQueue(10, loop, conn)

        async def quick() -> bytes:
            return b"q"

        task = loop.create_task(quick())
        task.add_done_callback(answers.task_done)  # finds the queue empty
        await task
        await asyncio.sleep(0)
        answers.put_nowait((None, False, task))
        assert conn.tokens() == [b"q"]

    asyncio.run(go())


@pytest.mark.parametrize("eager", [False, True])
def test_a_failed_handler_closes_the_connection_and_nothing_behind_it_is_written(
        eager: bool, caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        conn = _Conn()
        answers = AnswerQueue(10, loop, conn)
        answers.put_nowait((None, False, b"before"))
        if eager:
            answers.put_nowait((None, False, Failed(RuntimeError("boom"))))
        else:
            async def bad() -> bytes:
                raise RuntimeError("boom")

            task = loop.create_task(bad())
            task.add_done_callback(answers.task_done)
            answers.put_nowait((None, False, task))
        answers.put_nowait((None, False, b"after"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert conn.tokens() == [b"before"]
        assert conn.closed and conn.writer.closing and answers.stopped
        await asyncio.wait_for(answers.close(), 1)  # does not wait for "after"

    with caplog.at_level(logging.ERROR, "tidegate.server.listener"):
        asyncio.run(go())
    failed = [r for r in caplog.records if "failed; closing the connection" in r.message]
    assert len(failed) == 1 and failed[0].exc_info is not None  # with the traceback


def test_a_paused_transport_is_drained_before_more_is_written() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        conn = _Conn()
        conn.writer.resumed = asyncio.Event()
        answers = AnswerQueue(10, loop, conn)
        conn.writer.paused = True
        answers.put_nowait((None, False, b"a"))  # written; then the buffer is full
        answers.put_nowait((None, False, b"b"))
        await asyncio.sleep(0)
        assert conn.tokens() == [b"a"]
        closing = asyncio.ensure_future(answers.close())
        await asyncio.sleep(0)
        assert not closing.done()
        conn.writer.resumed.set()
        await asyncio.wait_for(closing, 1)
        assert conn.tokens() == [b"a", b"b"]

    asyncio.run(go())


def test_the_answer_ending_a_failed_sasl_exchange_is_the_last() -> None:
    class _Session:
        close_after_answer = True

    async def go() -> None:
        conn = _Conn()
        conn.session = _Session()
        answers = AnswerQueue(10, asyncio.get_running_loop(), conn)
        answers.put_nowait((None, False, b"error"))
        answers.put_nowait((None, False, b"more"))
        assert conn.tokens() == [b"error"] and conn.closed and answers.stopped

    asyncio.run(go())
