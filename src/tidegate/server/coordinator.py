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
- a tick task polls every partition's due deadlines (session, join and sync timers)
  every `TICK_MS`; time itself comes from the broker's clock.
- a failed append or fsync marks the partition failed; it is reloaded from its log
  (parked requests on it get NOT_COORDINATOR, so their clients rediscover and rejoin).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Generic, TypeVar, cast

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

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

log = logging.getLogger(__name__)

S = TypeVar("S", bound=Shard)
R = TypeVar("R")

TICK_MS = 100
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
        self.started = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
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
        self._tasks.append(asyncio.create_task(self._tick_forever()))

    async def stop(self) -> None:
        for task in [*self._tasks, *self._loading]:
            task.cancel()
        for task in [*self._tasks, *self._loading]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fail_parked(None, NotCoordinatorError("the coordinator is shutting down"))

    def _spawn_load(self, partitions: Iterable[int]) -> None:
        task = asyncio.create_task(self._load(list(partitions)))
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)

    async def _load(self, partitions: list[int]) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        total = 0
        for p in partitions:
            lg = self.broker.get_log(self.topic, p)
            if lg is None:
                continue
            self.runtime.begin_load(p, lg)
            t0 = time.monotonic()
            try:
                shard, stats = await loop.run_in_executor(None, self.runtime.load, p, lg)
            except Exception:
                log.exception("cannot load %s-%d", self.topic, p)
                self.runtime.fail(p)
                continue
            self.runtime.publish(p, lg, shard)
            total += stats.records
            if stats.records:
                log.info("loaded %s-%d: %d records in %.2f s", self.topic, p, stats.records,
                         time.monotonic() - t0)
        log.info("%s: %d partitions loaded (%d records) in %.2f s", self.topic,
                 len(partitions), total, time.monotonic() - started)

    def _reload(self, partition: int, why: BaseException) -> None:
        log.error("%s-%d failed (%s); reloading it from its log", self.topic, partition, why)
        self.runtime.fail(partition)
        self._fail_parked(partition, NotCoordinatorError(f"{self.topic}-{partition} reloads"))
        self._spawn_load([partition])

    def _fail_parked(self, partition: int | None, exc: BaseException) -> None:
        for token, (p, fut) in list(self._parked.items()):
            if partition is None or p == partition:
                del self._parked[token]
                if not fut.done():
                    fut.set_exception(exc)

    # -- operations -----------------------------------------------------------------------

    async def run(self, partition: int, op: Callable[[S, int, int], Result[R]]) -> R:
        """Run `op` on `partition` (module docstring); its response once durable, or,
        for a parked request, the reply a later operation gives it."""
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
        if outcome.result.response is not PARKED:
            self._parked.pop(token, None)
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

    async def _finish(self, partition: int, outcome: Outcome[R]) -> None:
        if outcome.appended:
            self.broker.after_append(self.topic, partition, outcome.log)
        try:
            await self.broker.wait_durable(outcome.log, outcome.end_offset)
        except Exception as e:
            err = CoordinatorNotAvailableError(f"{self.topic}-{partition}: {e}")
            for token, _ in outcome.result.replies:
                entry = self._parked.pop(token, None)
                if entry is not None and not entry[1].done():
                    entry[1].set_exception(err)
            self._reload(partition, e)
            raise err from e
        for token, reply in outcome.result.replies:
            entry = self._parked.pop(token, None)
            if entry is not None and not entry[1].done():
                entry[1].set_result(reply)

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_MS / 1000)
            try:
                self.tick()
            except Exception:
                log.exception("%s: timer tick failed", self.topic)

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
                    task = asyncio.create_task(self._finish_quietly(p, outcome))
                    self._loading.add(task)
                    task.add_done_callback(self._loading.discard)

    async def _finish_quietly(self, partition: int, outcome: Outcome[None]) -> None:
        with contextlib.suppress(KafkaError):
            await self._finish(partition, outcome)

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
