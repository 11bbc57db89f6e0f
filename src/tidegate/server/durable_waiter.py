"""One request's wait on the group commit (server/durability.py) over many logs.

A Produce over 1,000 partitions registers ONE `DurableWaiter` for all its partitions
(`GroupCommit.add_waiter`: a count of partitions still to become durable and one
future), where a future per partition and `gather` cost a done-callback and a loop
dispatch per partition. A failed flush fails exactly its own log's partitions of the
request (`DurableWaiter.errors`). `answer` ends one registered wait, a waiter's slot or
a plain future (the coordinators' `durable_future`).
"""

from __future__ import annotations

import asyncio

__all__ = ["DurableWaiter", "Wait", "answer"]


class DurableWaiter:
    """One request's wait on the group commit over many logs (a Produce over 1,000
    partitions): how many of its registered partitions are not durable yet, and ONE
    future, done when none is left. A partition whose flush failed counts as done, with
    its error in `errors` (keyed by the slot the caller gave it); the future itself
    never fails, so one bad log never hides the others' outcome."""

    __slots__ = ("errors", "future", "left")

    def __init__(self) -> None:
        self.left = 0
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.errors: dict[int, BaseException] = {}

    def done(self, slot: int, error: BaseException | None) -> None:
        """The partition at `slot` is durable (`error` None) or its flush failed."""
        if error is not None:
            self.errors[slot] = error
        self.left -= 1
        if self.left <= 0 and not self.future.done():  # (cancelled: the request is gone)
            self.future.set_result(None)


# a registered wait: (offset, its future, -1) or (offset, a request's waiter, its slot)
Wait = tuple[int, "asyncio.Future[None] | DurableWaiter", int]


def answer(fut: asyncio.Future[None] | DurableWaiter, slot: int,
           error: BaseException | None) -> None:
    """End one registered wait: durable (`error` None) or failed with `error`."""
    if isinstance(fut, DurableWaiter):
        fut.done(slot, error)
    elif not fut.done():
        fut.set_result(None) if error is None else fut.set_exception(error)
