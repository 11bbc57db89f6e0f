"""The listener's answer queue (`server/answer_queue.py`): request order, and `queued.max.requests`
as the bound at which the reader's `put` waits for the writer."""

from __future__ import annotations

import asyncio

from tidegate.server.answer_queue import AnswerQueue


def test_answers_keep_order_and_wake_the_waiting_writer() -> None:
    async def go() -> None:
        answers = AnswerQueue(10, asyncio.get_running_loop())
        got = asyncio.ensure_future(answers.get())
        await asyncio.sleep(0)
        assert not got.done()  # nothing queued: the writer waits
        answers.put_nowait("a")
        answers.put_nowait("b")
        assert await got == "a"
        assert await answers.get() == "b"

    asyncio.run(go())


def test_put_waits_while_the_limit_is_unanswered() -> None:
    async def go() -> None:
        answers = AnswerQueue(2, asyncio.get_running_loop())
        await answers.put(1)
        await answers.put(2)
        assert answers.full()
        third = asyncio.ensure_future(answers.put(3))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not third.done()  # queued.max.requests reached: reading waits
        assert await answers.get() == 1
        await asyncio.wait_for(third, 1)
        assert [await answers.get() for _ in range(2)] == [2, 3]

    asyncio.run(go())
