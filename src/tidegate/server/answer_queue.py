"""`AnswerQueue`: the answers due on one client connection, in request order, between
the listener's reader (which puts each request's answer-to-be as it starts it) and its
write loop (which takes them in order). Single event loop, one reader, one writer.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

__all__ = ["AnswerQueue"]


class AnswerQueue:
    """The answers due on a connection, in request order: what `asyncio.Queue` did for
    the write loop, as a deque and one waiter on each side (one reader puts, one writer
    takes). A Queue's get and put go through its getter/putter deques, a future per
    wait and `_wakeup_next` scans; with three requests per one-record transaction each
    answered on its own, that was a measurable part of the listener's share of the loop.
    `limit` is `queued.max.requests`: `put` waits while that many are unanswered."""

    __slots__ = ("getter", "items", "limit", "loop", "putter")

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        self.items: collections.deque[Any] = collections.deque()
        self.limit = limit
        self.getter: asyncio.Future[None] | None = None
        self.putter: asyncio.Future[None] | None = None
        self.loop = loop

    def full(self) -> bool:
        return len(self.items) >= self.limit

    def put_nowait(self, item: Any) -> None:
        self.items.append(item)
        getter = self.getter
        if getter is not None and not getter.done():
            getter.set_result(None)

    async def put(self, item: Any) -> None:
        while len(self.items) >= self.limit:
            putter = self.putter = self.loop.create_future()
            await putter
        self.put_nowait(item)

    async def get(self) -> Any:
        items = self.items
        while not items:
            getter = self.getter = self.loop.create_future()
            await getter
        item = items.popleft()
        putter = self.putter
        if putter is not None and not putter.done():
            putter.set_result(None)  # a slot is free: the reader may read on
        return item
