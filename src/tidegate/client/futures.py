"""`DeliveryFuture`: a `concurrent.futures.Future` cheap enough to make one per record.

The blocking `Producer.send` returns a future per record. The standard
`concurrent.futures.Future` builds a `threading.Condition` (with its lock and waiter
deque) per instance, which costs more than the rest of a send and loads the garbage
collector. A `DeliveryFuture` shares one condition among all the futures of a
`FutureGroup` (one per producer) instead:

- it *is* a `concurrent.futures.Future` (a subclass), so `isinstance` checks,
  `concurrent.futures.wait` and `as_completed` work: they only lock `_condition`
  (re-entrant, so holding it for several futures of one group is fine) and register
  in `_waiters`, which this class keeps per future as the base class does;
- `result()` and `exception()` wait on the shared condition in a loop, since a wakeup
  may be for another future of the group; completions notify only when a thread is
  actually waiting;
- `done()` reads the state without taking the lock (a single attribute read).

Everything else is the base class's behaviour: callbacks run in the completing thread
(or at once in the caller's, if already done), `set_result` on a finished or cancelled
future raises `InvalidStateError`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from typing import Any, TypeVar

__all__ = ["DeliveryFuture", "FutureGroup"]

T = TypeVar("T")
log = logging.getLogger("concurrent.futures")

# The base class's state names (module constants of concurrent.futures._base).
_PENDING = "PENDING"
_FINISHED = "FINISHED"
_CANCELLED = ("CANCELLED", "CANCELLED_AND_NOTIFIED")
_DONE = frozenset({"FINISHED", "CANCELLED", "CANCELLED_AND_NOTIFIED"})


class FutureGroup:
    """The condition shared by a producer's futures and a count of waiting threads."""

    __slots__ = ("condition", "waiting")

    def __init__(self) -> None:
        self.condition = threading.Condition()  # RLock: wait() may hold it per future
        self.waiting = 0

    def future(self) -> DeliveryFuture[Any]:
        return DeliveryFuture(self)


class DeliveryFuture(concurrent.futures.Future[T]):
    """See the module docstring."""

    def __init__(self, group: FutureGroup) -> None:  # no super().__init__: no Condition
        self._group = group
        self._condition = group.condition
        self._state = _PENDING
        self._result: T | None = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []

    def done(self) -> bool:
        return self._state in _DONE

    def _wait(self, timeout: float | None) -> None:
        """Wait until done or `timeout` seconds passed; call with the condition held."""
        if self._state in _DONE:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        group = self._group
        group.waiting += 1
        try:
            while self._state not in _DONE:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._condition.wait(left)
        finally:
            group.waiting -= 1

    def result(self, timeout: float | None = None) -> T:
        with self._condition:
            self._wait(timeout)
            if self._state in _CANCELLED:
                raise concurrent.futures.CancelledError()
            if self._state != _FINISHED:
                raise TimeoutError()
            if self._exception is not None:
                raise self._exception
            return self._result  # type: ignore[return-value]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        with self._condition:
            self._wait(timeout)
            if self._state in _CANCELLED:
                raise concurrent.futures.CancelledError()
            if self._state != _FINISHED:
                raise TimeoutError()
            return self._exception

    def _finish(self, result: T | None, exc: BaseException | None) -> None:
        cond = self._condition
        with cond:
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._result = result
            self._exception = exc
            self._state = _FINISHED
            for waiter in self._waiters:
                if exc is None:
                    waiter.add_result(self)
                else:
                    waiter.add_exception(self)
            if self._group.waiting:
                cond.notify_all()
        for callback in self._done_callbacks:  # as the base class's _invoke_callbacks
            try:
                callback(self)
            except Exception:
                log.exception("exception calling callback for %r", self)

    def set_result(self, result: T) -> None:
        self._finish(result, None)

    def set_exception(self, exception: BaseException | None) -> None:
        self._finish(None, exception)
