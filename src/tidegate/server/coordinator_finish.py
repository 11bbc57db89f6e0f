"""What follows a coordinator operation's append, for `CoordinatorShell`: telling the
broker about it, waiting until the log is durable up to the operation's end offset,
then resolving the replies to parked requests and reporting `on_durable` — or, if the
durability wait fails, failing those replies with COORDINATOR_NOT_AVAILABLE and
reloading the partition (`_reload`, the shell's: server/coordinator_loading.py).

`_finish` waits in the caller's task; `_finish_later` in the background, as a callback
on the group commit's future where one node fsyncs every write (no task per operation),
else as a task the shell cancels when it stops.

Threading: a mixin of the shell; everything runs on the event loop and shares the
shell's state (the attributes declared below, set by `CoordinatorShell.__init__`).
Only `_make_durable`'s fsync runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar

from tidegate.common.errors import KafkaError
from tidegate.coordinator.runtime import (
    CoordinatorNotAvailableError,
    CoordinatorRuntime,
    Outcome,
    Shard,
)
from tidegate.server.coordinator_reload import Reloads
from tidegate.storage.log import Log

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

__all__ = ["ShellFinishing"]

# the shell's logger: its lines keep the name they had before the split
log = logging.getLogger("tidegate.server.coordinator")

S = TypeVar("S", bound=Shard)
R = TypeVar("R")


class ShellFinishing(Generic[S]):
    broker: Broker
    runtime: CoordinatorRuntime[S]
    topic: str
    on_durable: Callable[[int, int], None] | None
    _parked: dict[int, tuple[int, asyncio.Future[object]]]
    _loading: set[asyncio.Task[None]]
    # durability waits `_finish_later` follows with a callback (cancelled by stop)
    _durable_waits: set[asyncio.Future[None]]
    _durable: dict[int, int]  # partition -> durable end last reported
    _reloads: Reloads

    def _reload(self, partition: int, why: BaseException, *, fail: bool = False) -> None:
        raise NotImplementedError  # server/coordinator_loading.py

    def _fail_parked(self, partition: int | None, exc: BaseException) -> None:
        for token, (p, fut) in list(self._parked.items()):
            if partition is None or p == partition:
                del self._parked[token]
                if not fut.done():
                    fut.set_exception(exc)

    async def _make_durable(self, lg: Log, offset: int) -> None:
        """fsynced up to `offset`, even under a relaxed flush policy."""
        await self.broker.wait_durable(lg, offset)
        if lg.recovery_point < offset:
            await asyncio.get_running_loop().run_in_executor(None, lg.flush)

    def _report_durable(self, partition: int, end_offset: int) -> None:
        if self.on_durable is None or end_offset <= self._durable.get(partition, -1):
            return
        self._durable[partition] = end_offset
        try:
            self.on_durable(partition, end_offset)
        except Exception:
            log.exception("%s-%d: on_durable failed", self.topic, partition)

    def _appended(self, partition: int, outcome: Outcome[R]) -> None:
        if outcome.appended:
            self.broker.after_append(self.topic, partition, outcome.log)

    async def _finish(self, partition: int, outcome: Outcome[R], *, told: bool = False
                      ) -> None:
        """`told`: `_appended` was already called for this outcome."""
        if not told:
            self._appended(partition, outcome)
        try:
            await self.broker.wait_durable(outcome.log, outcome.end_offset)
        except Exception as e:
            self._settle(partition, outcome, e)  # raises COORDINATOR_NOT_AVAILABLE
            raise
        self._settle(partition, outcome, None)

    def _settle(self, partition: int, outcome: Outcome[R], e: BaseException | None) -> None:
        """What follows an outcome's durability wait (`e`: how the wait failed; then
        this raises COORDINATOR_NOT_AVAILABLE)."""
        if e is not None:
            err = CoordinatorNotAvailableError(f"{self.topic}-{partition}: {e}")
            for token, _ in outcome.result.replies:
                entry = self._parked.pop(token, None)
                if entry is not None and not entry[1].done():
                    entry[1].set_exception(err)
            self._reload(partition, e, fail=True)
            raise err from e
        if outcome.appended:
            self.broker.logs.space.write_succeeded()
            self._reloads.succeeded(partition)
        self._report_durable(partition, outcome.end_offset)
        for token, reply in outcome.result.replies:
            entry = self._parked.pop(token, None)
            if entry is not None and not entry[1].done():
                entry[1].set_result(reply)

    def _background(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.create_task(coro)
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)

    def _finish_later(self, partition: int, outcome: Outcome[R], *,
                      told: bool = False) -> None:
        """`_finish` in the background, its errors dropped (they reload the partition
        and fail its parked replies). On one node under the fsync-per-write policy a
        callback on the group commit's future (`durable_future`), not a Task: two per
        one-record transaction (AddPartitionsToTxn, CompleteCommit)."""
        replicas = self.broker.replicas
        lg = outcome.log
        if replicas.cluster or not lg.syncs_every_write:
            self._background(self._finish_quietly(partition, outcome, told=told))
            return
        if not told:
            self._appended(partition, outcome)
        fut = replicas.durable_future(lg, outcome.end_offset)
        if fut is None:  # durable already
            with contextlib.suppress(KafkaError):
                self._settle(partition, outcome, None)
            return
        self._durable_waits.add(fut)
        fut.add_done_callback(partial(self._durable_done, partition, outcome))

    def _durable_done(self, partition: int, outcome: Outcome[R],
                      fut: asyncio.Future[None]) -> None:
        self._durable_waits.discard(fut)
        if fut.cancelled():  # the coordinator stopped
            return
        with contextlib.suppress(KafkaError):
            self._settle(partition, outcome, fut.exception())

    async def _finish_quietly(self, partition: int, outcome: Outcome[R], *,
                              told: bool = False) -> None:
        with contextlib.suppress(KafkaError):
            await self._finish(partition, outcome, told=told)
