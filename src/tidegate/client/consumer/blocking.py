"""Rebalance callbacks for the blocking consumer, run on the application's thread.

The blocking `sync.Consumer` runs the asyncio consumer on a private loop thread. The
rebalance listener must not run there: a callback that calls a blocking consumer
method (``consumer.commit()`` in ``on_partitions_revoked`` is the classic) would wait
on the very thread it blocks. `CallbackPump` fixes this as Kafka's consumer behaves:
callbacks run on the thread that called `poll()` (or `close()`/`unsubscribe()`).

`wrap(listener)` gives the async consumer a stand-in whose callbacks post the real
call to the pump and wait for it; `run(loop, coro)` is what the blocking methods use
instead of `LoopThread.run`: while the coroutine runs on the loop thread, the calling
thread executes the posted callbacks, so they may call the consumer's blocking methods.

`poll_timeout_ms(timeout_ms, timeout)` reads the blocking `poll`'s wait: milliseconds,
or seconds given as `timeout=` (confluent-kafka's `poll(1.0)` means one second; here
`poll(1.0)` would be one millisecond, so a float below 1 is refused with a hint and
any other float warns once).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tidegate.client.types import TopicPartition

__all__ = ["CallbackPump", "poll_timeout_ms"]

T = TypeVar("T")
_Job = tuple[Callable[[set[TopicPartition]], object], set[TopicPartition],
             "concurrent.futures.Future[object]"]


class _Done:
    pass


DEFAULT_POLL_MS = 1000


def poll_timeout_ms(timeout_ms: float | None, timeout: float | None) -> int:
    """The poll wait in milliseconds from `timeout_ms` or `timeout` (seconds)."""
    if timeout is not None:
        if timeout_ms is not None:
            raise TypeError("poll() takes timeout_ms (milliseconds) or timeout (seconds), "
                            "not both")
        if timeout < 0:
            raise ValueError(f"poll(timeout={timeout!r}): seconds must be >= 0")
        return round(timeout * 1000)
    if timeout_ms is None:
        return DEFAULT_POLL_MS
    if isinstance(timeout_ms, float):
        if 0 < timeout_ms < 1:
            raise ValueError(
                f"poll({timeout_ms!r}) asks for {timeout_ms} milliseconds; the first "
                f"argument is timeout_ms — for seconds, as confluent-kafka's poll takes "
                f"them, call poll(timeout={timeout_ms!r})")
        warnings.warn(
            f"poll({timeout_ms!r}) waits {timeout_ms:g} milliseconds (the first argument is "
            f"timeout_ms); for seconds use poll(timeout={timeout_ms!r})",
            UserWarning, stacklevel=3)
        return int(timeout_ms)
    return int(timeout_ms)


class CallbackPump:
    """See the module docstring."""

    def __init__(self) -> None:
        self._queues: list[queue.SimpleQueue[_Job | _Done]] = []

    def wrap(self, listener: object | None) -> object | None:
        return None if listener is None else _ThreadedListener(listener, self)

    async def call(self, fn: Callable[[set[TopicPartition]], object],
                   partitions: set[TopicPartition]) -> None:
        if not self._queues:  # nobody is blocked in poll/close: run it here
            fn(partitions)
            return
        fut: concurrent.futures.Future[object] = concurrent.futures.Future()
        self._queues[-1].put((fn, partitions, fut))
        await asyncio.wrap_future(fut)

    def run(self, loop: Any, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on `loop` (a `sync.LoopThread`), executing posted callbacks on
        this thread until it finishes."""
        q: queue.SimpleQueue[_Job | _Done] = queue.SimpleQueue()
        self._queues.append(q)
        try:
            fut: concurrent.futures.Future[T] = loop.submit(coro)
            fut.add_done_callback(lambda _: q.put(_Done()))
            try:
                while True:
                    item = q.get()
                    if isinstance(item, _Done):
                        return fut.result()
                    fn, partitions, done = item
                    try:
                        done.set_result(fn(partitions))
                    except BaseException as e:  # handed back to the consumer
                        done.set_exception(e)
            except BaseException:
                fut.cancel()
                raise
        finally:
            self._queues.remove(q)


class _ThreadedListener:
    """Forwards each callback to the pump; a missing ``on_partitions_lost`` falls back
    to ``on_partitions_revoked``, as Kafka's default does."""

    def __init__(self, target: object, pump: CallbackPump) -> None:
        self._target = target
        self._pump = pump

    async def _forward(self, name: str, partitions: set[TopicPartition]) -> None:
        fn = getattr(self._target, name, None)
        if fn is None and name == "on_partitions_lost":
            fn = getattr(self._target, "on_partitions_revoked", None)
        if fn is not None:
            await self._pump.call(fn, partitions)

    async def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        await self._forward("on_partitions_revoked", partitions)

    async def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        await self._forward("on_partitions_assigned", partitions)

    async def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        await self._forward("on_partitions_lost", partitions)
