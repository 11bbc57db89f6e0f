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
- `done()` reads the state without taking the lock (a single attribute read);
- making one runs no Python code (`FutureGroup.future`): the per-instance state starts
  as class-level defaults, and the waiter and callback lists are made on first use;
- the shared condition is an RLock, so the base class's methods (`done`, `result`,
  which callers may use unbound) take it without a Python call;
- `set_results` finishes many futures of a group under one hold of the lock (the
  producer completes a whole batch of records at once).

Everything else is the base class's behaviour: callbacks run in the completing thread
(or at once in the caller's, if already done), `set_result` on a finished or cancelled
future raises `InvalidStateError`.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

__all__ = ["DeliveryFuture", "FutureGroup"]

T = TypeVar("T")
log = logging.getLogger("concurrent.futures")

# The base class's state names (module constants of concurrent.futures._base).
_PENDING = "PENDING"
_FINISHED = "FINISHED"
_CANCELLED = ("CANCELLED", "CANCELLED_AND_NOTIFIED")
_DONE = frozenset({"FINISHED", "CANCELLED", "CANCELLED_AND_NOTIFIED"})


class _GroupCondition(_thread.RLock):  # type: ignore[misc]  # final in typeshed only
    """A re-entrant lock with `threading.Condition`'s wait/notify. As an RLock, a
    ``with`` on it calls no Python code — the base class's `done()` and `result()`,
    which callers may use unbound, take it on every call."""

    def __init__(self) -> None:
        self._cond = threading.Condition(self)

    def wait(self, timeout: float | None = None) -> bool:
        return self._cond.wait(timeout)

    def notify(self, n: int = 1) -> None:
        self._cond.notify(n)

    def notify_all(self) -> None:
        self._cond.notify_all()


class FutureGroup:
    """The condition shared by a producer's futures and a count of waiting threads.

    `future()` makes a `DeliveryFuture` of the group: an instance of a subclass made for
    the group, which holds the group and its condition as class attributes, so that
    making one runs no Python code."""

    __slots__ = ("condition", "future", "waiting")

    def __init__(self) -> None:
        self.condition = _GroupCondition()  # re-entrant: wait() may hold it per future
        self.waiting = 0
        self.future: Callable[[], DeliveryFuture[Any]] = type(
            "DeliveryFuture", (DeliveryFuture,),
            {"__init__": _init_pending, "__slots__": (), "_group": self,
             "_condition": self.condition, "__module__": __name__})


def _init_pending(self: DeliveryFuture[Any]) -> None:
    self._state = _PENDING
    self._result = None


class _PerInstanceList:
    """A list attribute made on first use (most futures never get a waiter or a
    callback). It is stored in the instance, which then also has ``_listened`` set;
    the base class makes and reads these lists holding the condition."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        value: list[Any] = []
        obj.__dict__[self.name] = value
        obj._listened = True
        return value


class DeliveryFuture(concurrent.futures.Future[T]):
    """See the module docstring."""

    # The state read and written per record, in slots (in the object itself, not its
    # dict); the rest as class-level defaults until set.
    __slots__ = ("_result", "_state")
    _exception: BaseException | None = None
    _listened = False  # whether _waiters or _done_callbacks were made
    _waiters = _PerInstanceList()
    _done_callbacks = _PerInstanceList()
    _group: FutureGroup
    _condition: Any

    def __init__(self, group: FutureGroup) -> None:  # no super().__init__: no Condition
        self._state = _PENDING
        self._result = None
        self._group = group
        self._condition = group.condition

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
            listened = self._listened
            if listened:
                for waiter in self._waiters:
                    if exc is None:
                        waiter.add_result(self)
                    else:
                        waiter.add_exception(self)
            if self._group.waiting:
                cond.notify_all()
        if listened:
            for callback in self._done_callbacks:  # as the base class's _invoke_callbacks
                try:
                    callback(self)
                except Exception:
                    log.exception("exception calling callback for %r", self)

    def set_result(self, result: T) -> None:
        self._finish(result, None)

    def set_exception(self, exception: BaseException | None) -> None:
        self._finish(None, exception)

    @staticmethod
    def set_results(futures: Sequence[Any], results: Iterable[Any]) -> None:
        """Finish each of `futures` with its result, as `set_result` would, but under
        one hold of the group's lock with at most one notify (the producer completes a
        batch of records at once). Futures already done (cancelled) are skipped, not an
        error; any future not of the first one's group is finished on its own."""
        if not futures:
            return
        group = futures[0]._group
        cond = group.condition
        listened: list[DeliveryFuture[Any]] = []
        others: list[tuple[Any, Any]] = []
        pending, finished = _PENDING, _FINISHED
        with cond:
            if set(map(type, futures)) == {group.future}:  # the usual case: no check each
                for f, r in zip(futures, results):
                    state = f._state
                    if state is pending or state not in _DONE:
                        f._result = r
                        f._state = finished
                        if f._listened:
                            listened.append(f)
            else:
                for f, r in zip(futures, results):
                    if not isinstance(f, DeliveryFuture) or f._group is not group:
                        others.append((f, r))
                    elif f._state not in _DONE:
                        f._result = r
                        f._state = finished
                        if f._listened:
                            listened.append(f)
            for f in listened:
                for waiter in f._waiters:
                    waiter.add_result(f)
            if group.waiting:
                cond.notify_all()
        for f in listened:
            for callback in f._done_callbacks:
                try:
                    callback(f)
                except Exception:
                    log.exception("exception calling callback for %r", f)
        for f, r in others:
            if not f.done():
                f.set_result(r)
