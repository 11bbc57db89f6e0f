"""`LoopThread`: a private event loop in a daemon thread, on which the blocking
facades (`sync.Consumer`, `sync.Admin`, `producer.blocking.Producer`) run the asyncio
clients' code. `run` executes a coroutine there and waits; calling it from the loop
thread itself (e.g. from a delivery callback) raises RuntimeError instead of
deadlocking.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tidegate.client.errors import ClientClosedError

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """An event loop in a daemon thread; `run` executes a coroutine there."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._what = name.removeprefix("tidegate-")  # "producer", "consumer", "admin"
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.loop.is_closed() or not self._thread.is_alive():
            coro.close()
            raise ClientClosedError(f"the {self._what} is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop thread and wait for its result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking client method was called from the client's own "
                               "loop thread (e.g. from a delivery callback)")
        fut = self._submit(coro)
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()
            raise

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coro` on the loop thread; ClientClosedError once the client closed."""
        return self._submit(coro)

    def call(self, fn: Callable[[], T]) -> T:
        """Run a plain function on the loop thread (for state the loop owns)."""
        async def wrapper() -> T:
            return fn()
        return self.run(wrapper())

    def stop(self) -> None:
        """Cancel and finish every task still on the loop, then stop and close it.

        Background tasks a client leaves behind (a metadata refresh retrying an
        unreachable broker, a connection reader) are cancelled and awaited here, and
        the default executor is shut down, so nothing is destroyed pending or calls
        back into a closed loop ("Task was destroyed but it is pending!", "Event loop
        is closed").
        """
        if not self._thread.is_alive():
            return
        if threading.current_thread() is self._thread:
            self.loop.stop()
            return
        try:
            asyncio.run_coroutine_threadsafe(_drain(), self.loop).result(_DRAIN_TIMEOUT_S)
        except Exception:  # best effort: stop the loop regardless
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


_DRAIN_TIMEOUT_S = 10.0


async def _drain() -> None:
    """Cancel every other task on this loop and wait for them; retrieve their outcomes
    so none is reported as never retrieved."""
    me = asyncio.current_task()
    for _ in range(3):  # a cancelled task may start another one while finishing
        tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if not tasks:
            break
        for t in tasks:
            t.cancel()
        done, _pending = await asyncio.wait(tasks, timeout=2.0)
        for t in done:
            if not t.cancelled():
                t.exception()
    loop = asyncio.get_running_loop()
    await loop.shutdown_asyncgens()
    await asyncio.wait_for(loop.shutdown_default_executor(), 5.0)
