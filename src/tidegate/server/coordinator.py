"""`CoordinatorShell`: the asyncio shell around a `CoordinatorRuntime` (generic; the group
coordinator uses it, the transaction coordinator will):

- `start()` creates the internal topic if missing (compacted) and replays every
  partition in a worker thread, one by one, publishing each shard back on the event
  loop; the broker starts listening after that. A partition reloaded later (after a
  write failure) answers COORDINATOR_LOAD_IN_PROGRESS meanwhile.
- `run(partition, op)` executes `op(shard, now_ms, token)` through the runtime (so all
  operations of a partition are serialised: the synchronous part of each runs
  atomically on the loop), tells the broker about the append (high watermark, group
  commit), waits until the log is durable up to the operation's end offset, then
  resolves the response and the replies to parked requests. A parked request's
  handler awaits the future for its token.
- `write_marker(...)` appends a transaction's COMMIT/ABORT marker to a partition
  (`CoordinatorRuntime.execute_marker`: the shard replays it) and waits until it is
  fsynced, whatever the flush policy: a transaction coordinator completes the
  transaction only after that.
- `on_durable(partition, end_offset)`, if set, is called whenever the partition's log
  has become durable up to a higher offset than last reported: after each operation's
  durability wait (fsynced when the topic syncs every write, else as acknowledged by
  its flush policy), and once a loaded partition's log is fsynced to its end. The
  transaction coordinator starts marker jobs from it. It runs on the event loop and
  must not block; its errors are logged.
- a timer task runs the due deadlines (session, join and sync timers) at their due
  time: it sleeps until the earliest `next_deadline()` of the active shards (at most
  `MAX_TIMER_SLEEP_MS`), and an operation that leaves an earlier deadline wakes it.
  Time itself comes from the broker's clock.
- a failed append or fsync marks the partition failed; it is reloaded from its log
  (parked requests on it get NOT_COORDINATOR, so their clients rediscover and rejoin).
  An append the log rejects (a fenced producer epoch) fails only that operation, and so
  does one refused for a full disk when the runtime says nothing changed (a marker, a
  pure operation: see `CoordinatorRuntime`): the partition keeps serving.
- reloads do not storm, and one parked on a full disk happens as soon as space returns
  (server/coordinator_reload.py). Loading writes nothing, so it works on a full disk. A
  full disk is logged once for the directory (`LogDirSpace`), not per partition or per
  reload.

The shell is split by job: this module holds its state, `run`, `write_marker` and
`stop`; loading and reloading partitions are server/coordinator_loading.py, what follows
an operation's append (durability waits, parked replies, `on_durable`) is
server/coordinator_finish.py, and the deadline timer is server/coordinator_timer.py.
Everything runs on the event loop; only a partition's replay and an explicit fsync run
in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

from tidegate.common.errors import KafkaError
from tidegate.coordinator.runtime import (
    PARKED,
    CoordinatorNotAvailableError,
    CoordinatorRuntime,
    NotCoordinatorError,
    Outcome,
    Result,
    Shard,
)
from tidegate.server.coordinator_loading import ShellLoading
from tidegate.server.coordinator_reload import Reloads
from tidegate.server.coordinator_timer import MAX_TIMER_SLEEP_MS, DeadlineTimer

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

__all__ = ["MAX_TIMER_SLEEP_MS", "CoordinatorShell"]

log = logging.getLogger(__name__)

S = TypeVar("S", bound=Shard)
R = TypeVar("R")


class CoordinatorShell(ShellLoading[S]):
    def __init__(self, broker: Broker, runtime: CoordinatorRuntime[S],
                 topic_configs: dict[str, str]) -> None:
        self.broker = broker
        self.runtime = runtime
        self.topic = runtime.topic
        self.topic_configs = topic_configs
        self._tokens = itertools.count(1)
        self._parked = {}
        self._tasks = []
        self._loading = set()
        self._durable_waits = set()
        # `run(..., defer_flush_s=...)`: appends whose durability wait starts later
        self._deferred: dict[int, tuple[asyncio.TimerHandle, int, Outcome[object]]] = {}
        self._timer = DeadlineTimer(runtime, self._finish_later, self._reload)
        self._durable = {}
        self.on_durable = None
        self._reloads = Reloads(broker.logs.space, self._reload_now, self._loading)
        self._load_errors = set()
        self._said_cannot_create = False
        self.started = False

    def tick(self) -> None:
        """Run every due deadline now (the timer task does it at their due time)."""
        self._timer.tick()

    async def stop(self) -> None:
        for task in [*self._tasks, *self._loading]:
            task.cancel()
        for fut in list(self._durable_waits):
            fut.cancel()
        for handle, partition, outcome in self._deferred.values():
            handle.cancel()
            self._appended(partition, outcome)  # flushed with the rest at shutdown
        self._deferred.clear()
        for task in [*self._tasks, *self._loading]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fail_parked(None, NotCoordinatorError("the coordinator is shutting down"))

    # -- operations -----------------------------------------------------------------------

    async def run(self, partition: int, op: Callable[[S, int, int], Result[R]], *,
                  before_durable: bool = False, defer_flush_s: float = 0.0) -> R:
        """Run `op` on `partition` (module docstring); its response once durable, or,
        for a parked request, the reply a later operation gives it.

        `before_durable`: the response as soon as the records are appended and replayed;
        the durability wait (and what follows it: replies to parked requests,
        `on_durable`, a reload if the fsync fails) goes on in the background. Only for an
        answer nothing durable depends on until a later operation's own durability wait
        covers it (every operation waits for the log end, and a later one's end is past
        these records): the transaction coordinator's AddPartitionsToTxn (client
        versions), AddOffsetsToTxn and CompleteCommit/CompleteAbort.

        `defer_flush_s` (with `before_durable`; one node under the fsync-per-write
        policy, and no parked replies): the group commit is not told of the append for
        that long, so the partition's next append (the producer's next
        AddPartitionsToTxn after a CompleteCommit) shares its fsync instead of finding
        this one under way and needing another. Nothing may wait for these records
        meanwhile: a crash in that window loses them as it could before their fsync."""
        token = next(self._tokens)
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._parked[token] = (partition, fut)
        try:
            outcome = self.runtime.execute(partition, lambda s, now: op(s, now, token))
        except BaseException as e:
            self._parked.pop(token, None)
            if isinstance(e, CoordinatorNotAvailableError):
                self._reload(partition, e)
            raise
        self._timer.maybe_wake(partition)
        if outcome.result.response is not PARKED:
            self._parked.pop(token, None)
            if before_durable:
                if defer_flush_s > 0 and self._may_defer(outcome):
                    handle = asyncio.get_running_loop().call_later(
                        defer_flush_s, self._deferred_finish, token)
                    self._deferred[token] = (handle, partition, cast(Outcome[object], outcome))
                    return outcome.result.response
                # told now, not in the background task: a flush another operation starts
                # meanwhile then covers these records instead of being followed by one
                # that finds nothing new
                self._appended(partition, outcome)
                self._finish_later(partition, outcome, told=True)
                return outcome.result.response
        try:
            await self._finish(partition, outcome)
        except BaseException:
            self._parked.pop(token, None)
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: the error is raised below instead
            raise
        if outcome.result.response is PARKED:
            return cast(R, await fut)
        return outcome.result.response

    def _may_defer(self, outcome: Outcome[R]) -> bool:
        replicas = self.broker.replicas
        return (not outcome.result.replies and not replicas.cluster
                and outcome.log.syncs_every_write)

    def _deferred_finish(self, token: int) -> None:
        """`defer_flush_s` has passed: the durability wait of `run(..., before_durable)`.
        A flush that an append after these records started covered them already; then
        the group commit need not hear of them (its flush moved the high watermark)."""
        entry = self._deferred.pop(token, None)
        if entry is None:
            return
        _, partition, outcome = entry
        self._finish_later(partition, outcome,
                           told=outcome.log.recovery_point >= outcome.end_offset)

    async def write_marker(self, partition: int, producer_id: int, producer_epoch: int,
                           coordinator_epoch: int, commit: bool) -> None:
        """Append a transaction marker to `partition`, replay it, and return once it is
        fsynced. Raises NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
        COORDINATOR_NOT_AVAILABLE (retriable: try again, or later), or the log's
        INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED for a stale marker."""
        try:
            outcome = self.runtime.execute_marker(
                partition, producer_id, producer_epoch, coordinator_epoch, commit)
        except CoordinatorNotAvailableError as e:
            self._reload(partition, e)
            raise
        self._timer.maybe_wake(partition)
        await self._finish(partition, outcome)
        try:
            await self._make_durable(outcome.log, outcome.end_offset)
        except Exception as e:
            self._reload(partition, e, fail=True)
            raise CoordinatorNotAvailableError(f"{self.topic}-{partition}: {e}") from e

    async def each_partition(self, op: Callable[[S, int, int], Result[R]]) -> list[R]:
        """Run `op` on every active partition (e.g. expiry); partitions that fail are
        skipped and logged."""
        out = []
        for p, _ in self.runtime.active_shards():
            try:
                out.append(await self.run(p, op))
            except KafkaError as e:
                log.warning("%s-%d: %s", self.topic, p, e)
        return out
