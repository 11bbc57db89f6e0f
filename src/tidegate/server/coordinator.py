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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.runtime import (
    PARKED,
    CoordinatorNotAvailableError,
    CoordinatorRuntime,
    NotCoordinatorError,
    Outcome,
    PartitionState,
    Result,
    Shard,
)
from tidegate.server.coordinator_reload import Reloads
from tidegate.storage.disk_space import disk_full_error
from tidegate.storage.log import Log

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

log = logging.getLogger(__name__)

S = TypeVar("S", bound=Shard)
R = TypeVar("R")

MAX_TIMER_SLEEP_MS = 1000
_MAX_POLLS_PER_TICK = 1000


class CoordinatorShell(Generic[S]):
    def __init__(self, broker: Broker, runtime: CoordinatorRuntime[S],
                 topic_configs: dict[str, str]) -> None:
        self.broker = broker
        self.runtime = runtime
        self.topic = runtime.topic
        self.topic_configs = topic_configs
        self._tokens = itertools.count(1)
        self._parked: dict[int, tuple[int, asyncio.Future[object]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._loading: set[asyncio.Task[None]] = set()
        # durability waits `_finish_later` follows with a callback (cancelled by stop)
        self._durable_waits: set[asyncio.Future[None]] = set()
        self._wake: asyncio.Event | None = None  # made in start(), on the running loop
        self._timer_due: int | None = None  # when the timer task wakes up (clock ms)
        self._durable: dict[int, int] = {}  # partition -> durable end last reported
        self.on_durable: Callable[[int, int], None] | None = None
        self._reloads = Reloads(broker.logs.space, self._reload_now, self._loading)
        self._load_errors: set[int] = set()  # partitions whose load failure was logged
        self._said_cannot_create = False
        self.started = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self.broker.replicas.cluster:
            # Cluster: shards load and unload with the leadership of the topic's
            # partitions (`on_leadership`); the topic is created in ZooKeeper on the
            # first FindCoordinator (`ensure_topic`), as Kafka does.
            self.started = True
            self._wake = asyncio.Event()
            self._tasks.append(asyncio.create_task(self._timer_forever(self._wake)))
            return
        meta = self.broker.logs.topics.get(self.topic)
        if meta is None:
            self.broker.create_topic(self.topic, self.runtime.num_partitions, self.topic_configs)
        else:
            self.runtime.num_partitions = meta.partitions  # fixed once created, as in Kafka
        for p in range(self.runtime.num_partitions):
            lg = self.broker.get_log(self.topic, p)
            assert lg is not None
            self.runtime.begin_load(p, lg)
        # The first load completes before the broker listens (an embedded node would
        # otherwise answer COORDINATOR_LOAD_IN_PROGRESS, which some tools do not retry);
        # it runs in a worker thread, partition by partition.
        await self._load(list(range(self.runtime.num_partitions)))
        self.started = True
        self._wake = asyncio.Event()
        self._tasks.append(asyncio.create_task(self._timer_forever(self._wake)))

    # -- cluster mode: shards follow the leadership of the topic's partitions -----------

    def on_leadership(self, partition: int, leader_epoch: int | None) -> None:
        """This broker now leads `partition` at `leader_epoch` (load its shard, writes
        stamped with that epoch), or no longer does (None: unload it; its requests get
        NOT_COORDINATOR and clients find the new coordinator)."""
        if leader_epoch is None:
            if self.runtime.state(partition) is not None:
                log.info("%s-%d: no longer leader; unloading its coordinator shard",
                         self.topic, partition)
            self.runtime.leader_epochs.pop(partition, None)
            self.runtime.unload(partition)
            self._durable.pop(partition, None)
            self._fail_parked(partition, NotCoordinatorError(
                f"{self.topic}-{partition} moved to another broker"))
            return
        if self.runtime.leader_epochs.get(partition) == leader_epoch:
            return
        if (partition in self.runtime.leader_epochs
                and self.runtime.state(partition) is PartitionState.ACTIVE):
            # still leader, at a newer epoch (never unloaded in between): the shard is
            # current; only its writes' stamp changes
            self.runtime.leader_epochs[partition] = leader_epoch
            return
        self.runtime.leader_epochs[partition] = leader_epoch
        log.info("%s-%d: leader at epoch %d; loading its coordinator shard", self.topic,
                 partition, leader_epoch)
        self._spawn_load([partition])

    async def ensure_topic(self, factor: int, factor_key: str) -> bool:
        """Cluster mode: create the internal topic through the broker's topic admin if it
        is missing, with `factor` replicas (Kafka creates it on the first FindCoordinator);
        keep the runtime's partition count equal to the topic's. False while it does not
        exist yet (being created; or fewer live brokers than `factor`: logged once, naming
        `factor_key`)."""
        view = self.broker.metadata.topic(self.topic)
        if view is not None:
            self.runtime.num_partitions = len(view.partitions)  # fixed once created
            return True
        try:
            await self.broker.topic_admin.create_topic(
                self.topic, self.runtime.num_partitions, factor, None, self.topic_configs,
                validate_only=False)
            log.info("created %s (%d partitions, replication factor %d)", self.topic,
                     self.runtime.num_partitions, factor)
        except KafkaError as e:
            if e.code != ErrorCode.topic_already_exists and not self._said_cannot_create:
                self._said_cannot_create = True  # being created: shown in a moment
                log.warning("cannot create %s yet: %s (set %s to at most the number of "
                            "brokers, or start more brokers)", self.topic, e, factor_key)
        return False

    def _still_leading(self, partition: int, epoch: int | None) -> bool:
        """Cluster: the load began under `epoch` and the partition is still led under it
        (a load that outlived its leadership must not publish)."""
        if not self.broker.replicas.cluster:
            return True
        return epoch is not None and self.runtime.leader_epochs.get(partition) == epoch

    async def stop(self) -> None:
        for task in [*self._tasks, *self._loading]:
            task.cancel()
        for fut in list(self._durable_waits):
            fut.cancel()
        for task in [*self._tasks, *self._loading]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fail_parked(None, NotCoordinatorError("the coordinator is shutting down"))

    def _spawn_load(self, partitions: Iterable[int]) -> None:
        task = asyncio.create_task(self._load(list(partitions)))
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)

    async def _load(self, partitions: list[int], *, reload: bool = False) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        total = 0
        # reloads while the disk is full may repeat: the directory's one line says it
        quiet = reload and self.broker.logs.space.full
        for p in partitions:
            lg = self.broker.get_log(self.topic, p)
            if lg is None:
                continue
            epoch = self.runtime.leader_epochs.get(p)
            if self.broker.replicas.cluster and epoch is None:
                continue  # not led here (any more): e.g. a reload scheduled before a move
            self.runtime.begin_load(p, lg)
            t0 = time.monotonic()
            try:
                shard, stats = await loop.run_in_executor(None, self.runtime.load, p, lg)
            except Exception as e:
                self.runtime.fail(p)
                full = disk_full_error(e) is not None
                if full:
                    self.broker.logs.space.write_failed(e, f"loading {self.topic}-{p}")
                elif p not in self._load_errors:
                    self._load_errors.add(p)
                    log.exception("cannot load %s-%d; retrying", self.topic, p)
                self._reloads.schedule(p, wait_for_space=full)
                continue
            self._load_errors.discard(p)
            if not self._still_leading(p, epoch):
                # leadership moved while loading: the new leader loads it. If it left
                # this broker, the partition must not stay LOADING here: clients retry
                # COORDINATOR_LOAD_IN_PROGRESS on the same broker, NOT_COORDINATOR sends
                # them to the new one.
                if p not in self.runtime.leader_epochs:
                    self.runtime.unload(p)
                continue
            self.runtime.publish(p, lg, shard)
            self._durable.pop(p, None)
            self._after_load(p, lg, stats.end_offset)
            total += stats.records
            if reload:
                log.log(logging.DEBUG if quiet else logging.INFO,
                        "reloaded %s-%d: %d records in %.2f s", self.topic, p,
                        stats.records, time.monotonic() - t0)
            elif stats.records:
                log.info("loaded %s-%d: %d records in %.2f s", self.topic, p, stats.records,
                         time.monotonic() - t0)
        if not reload:
            log.info("%s: %d partitions loaded (%d records) in %.2f s", self.topic,
                     len(partitions), total, time.monotonic() - started)

    def _after_load(self, partition: int, lg: Log, end_offset: int) -> None:
        """Loaded timers may be due earlier than the timer task's wake-up; and what was
        loaded is reported to `on_durable` once durable (retried while the flush fails,
        e.g. on a full disk, as long as this load is the partition's)."""
        self._maybe_wake(partition)
        if self.on_durable is None:
            return
        shard = self.runtime.shard(partition)

        async def report() -> None:
            delay = 0.05
            while True:
                try:
                    await self._make_durable(lg, end_offset)
                    break
                except Exception as e:
                    if not self._is_loaded(partition, shard):
                        return
                    if disk_full_error(e) is not None:
                        self.broker.logs.space.write_failed(
                            e, f"flushing {self.topic}-{partition}")
                    elif delay == 0.05:
                        log.warning("%s-%d: loaded records not durable yet: %s", self.topic,
                                    partition, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            if self._is_loaded(partition, shard):
                self._report_durable(partition, end_offset)

        self._background(report())

    def _is_loaded(self, partition: int, shard: S) -> bool:
        """`shard` is still the partition's active shard (no reload since)."""
        if self.runtime.state(partition) is not PartitionState.ACTIVE:
            return False
        try:
            return self.runtime.shard(partition) is shard
        except KafkaError:
            return False

    def _reload(self, partition: int, why: BaseException, *, fail: bool = False) -> None:
        """A write to `partition` failed (`why`). A full disk is reported to the log
        directory (logged once there). If the runtime marked the partition failed, or
        `fail` (records were appended but could not be made durable), it is reloaded
        from its log, once: failures while a reload is pending add nothing (see
        `Reloads` for when); requests meanwhile get COORDINATOR_NOT_AVAILABLE.
        Otherwise (nothing was written, nothing changed) it keeps serving."""
        full = disk_full_error(why) is not None
        if full:
            self.broker.logs.space.write_failed(why, f"writing to {self.topic}-{partition}")
        if fail:
            self.runtime.fail(partition)
        if self.runtime.state(partition) is not PartitionState.FAILED:
            return
        self._fail_parked(partition, NotCoordinatorError(f"{self.topic}-{partition} reloads"))
        if partition in self._reloads.pending:
            return
        if not full and not self._reloads.failing(partition):
            log.error("%s-%d failed (%s); reloading it from its log", self.topic, partition,
                      why)
        self._reloads.schedule(partition, wait_for_space=full)

    async def _reload_now(self, partition: int) -> None:
        await self._load([partition], reload=True)

    def _fail_parked(self, partition: int | None, exc: BaseException) -> None:
        for token, (p, fut) in list(self._parked.items()):
            if partition is None or p == partition:
                del self._parked[token]
                if not fut.done():
                    fut.set_exception(exc)

    # -- operations -----------------------------------------------------------------------

    async def run(self, partition: int, op: Callable[[S, int, int], Result[R]], *,
                  before_durable: bool = False) -> R:
        """Run `op` on `partition` (module docstring); its response once durable, or,
        for a parked request, the reply a later operation gives it.

        `before_durable`: the response as soon as the records are appended and replayed;
        the durability wait (and what follows it: replies to parked requests,
        `on_durable`, a reload if the fsync fails) goes on in the background. Only for an
        answer nothing durable depends on until a later operation's own durability wait
        covers it (every operation waits for the log end, and a later one's end is past
        these records): the transaction coordinator's AddPartitionsToTxn (client
        versions), AddOffsetsToTxn and CompleteCommit/CompleteAbort."""
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
        self._maybe_wake(partition)
        if outcome.result.response is not PARKED:
            self._parked.pop(token, None)
            if before_durable:
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
        self._maybe_wake(partition)
        await self._finish(partition, outcome)
        try:
            await self._make_durable(outcome.log, outcome.end_offset)
        except Exception as e:
            self._reload(partition, e, fail=True)
            raise CoordinatorNotAvailableError(f"{self.topic}-{partition}: {e}") from e

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

    # -- timers ---------------------------------------------------------------------------

    def _next_deadline(self) -> int | None:
        deadlines = [d for _, s in self.runtime.active_shards()
                     if (d := s.next_deadline()) is not None]
        return min(deadlines, default=None)

    def _maybe_wake(self, partition: int) -> None:
        """Wake the timer task if `partition` now has a deadline before its wake-up."""
        try:
            deadline = self.runtime.shard(partition).next_deadline()
        except KafkaError:
            return
        if self._wake is not None and deadline is not None and (
                self._timer_due is None or deadline < self._timer_due):
            self._wake.set()

    async def _timer_forever(self, wake: asyncio.Event) -> None:
        clock = self.runtime.clock
        while True:
            wake.clear()
            least = 0
            try:
                self.tick()
            except Exception:
                log.exception("%s: timers failed", self.topic)
                least = 10  # no busy loop on a deadline that keeps failing
            now = clock.now_ms()
            deadline = self._next_deadline()
            delay = MAX_TIMER_SLEEP_MS if deadline is None else \
                min(max(deadline - now, least), MAX_TIMER_SLEEP_MS)
            self._timer_due = now + delay
            if delay == 0:
                await asyncio.sleep(0)  # more is due at once: let others run between
                continue
            # asyncio.wait, not wait_for: on Python 3.11 wait_for can swallow the cancel
            # that stops this task, which then kept the broker's shutdown waiting
            sleeper = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({sleeper}, timeout=delay / 1000)
            finally:
                sleeper.cancel()

    def tick(self) -> None:
        """Run every due deadline; durability waits continue in background tasks."""
        for p, _shard in self.runtime.active_shards():
            for _ in range(_MAX_POLLS_PER_TICK):
                try:
                    outcome = self.runtime.poll(p)
                except CoordinatorNotAvailableError as e:
                    self._reload(p, e)
                    break
                if outcome is None:
                    break
                if outcome.appended or outcome.result.replies:
                    self._finish_later(p, outcome)

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
        if replicas.cluster or not replicas.syncs_every_write(lg):
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
