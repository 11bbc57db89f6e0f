"""Finishing transactions: the second phase of the transaction coordinator.

Driven by durability, not by the request that asked for it: whenever a partition of
`__transaction_state` becomes durable up to an offset (`CoordinatorShell.on_durable`),
its shard hands out a *marker job* for each transaction whose PrepareCommit/PrepareAbort
record now lies below that offset. One mechanism therefore serves EndTxn, aborts of
timed-out transactions, fencing by a new producer and recovery after a restart (loading
yields a job for every transaction left in Prepare*), and no marker is ever written for a
Prepare record a crash could still lose.

A job first makes its coordinator epoch durable (`CoordinatorEpochs.persist`: a load
takes its epoch in memory, and a marker may carry it only once a restart is sure to
continue above it), then writes the COMMIT/ABORT marker into every partition of the
transaction (server/markers.py), retrying with backoff until each is written (a deleted
partition needs none; a newer coordinator epoch stops the job), then appends
CompleteCommit/CompleteAbort, retried until written (its fsync waits up to
`COMPLETE_FLUSH_DELAY_S` to share the next add's). A job stops when its partition is
reloaded: the new shard hands it out again. `wait_completed(id)` lets a request that
found the id still finishing wait for it. Retries are quiet while the disk is full (the log
directory says so once); otherwise each job warns once.

`tidegate.test.fault.point` (tests only) kills the broker at a named point of this
phase: after-prepare-durable, between-markers, before-complete, after-complete-appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.topics import TRANSACTION_STATE
from tidegate.coordinator.runtime import CoordinatorRuntime, PartitionState
from tidegate.coordinator.txn import ops
from tidegate.coordinator.txn.messages import MarkerJob
from tidegate.coordinator.txn.shard import TxnShard
from tidegate.server.coordinator import CoordinatorShell
from tidegate.server.coordinator_epochs import EpochSource
from tidegate.server.markers import Marker, write_markers
from tidegate.storage.disk_space import disk_full_error

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

log = logging.getLogger(__name__)

_MAX_BACKOFF_S = 1.0
# CompleteCommit/CompleteAbort: how long the group commit is not told of the record
# (`CoordinatorShell.run`'s `defer_flush_s`). The producer's next AddPartitionsToTxn
# arrives a client round trip later; told at once, the record got an fsync of its own
# that the add then found under way and had to follow (5 fsyncs per one-record
# transaction of one producer, 4 with the wait). Nothing waits for the record: a crash
# before its fsync leaves PrepareCommit, and the restarted coordinator finishes again.
COMPLETE_FLUSH_DELAY_S = 0.01
TopicPartition = tuple[str, int]
MarkerWriter = Callable[[Marker, Iterable[TopicPartition]],
                        Awaitable[dict[TopicPartition, ErrorCode]]]


class TxnFinisher:
    def __init__(self, broker: Broker, runtime: CoordinatorRuntime[TxnShard],
                 shell: CoordinatorShell[TxnShard], epochs: EpochSource,
                 fault_point: str = "") -> None:
        self.broker = broker
        self.runtime = runtime
        self.shell = shell
        self.epochs = epochs
        self._fault_point = fault_point
        self._jobs: set[asyncio.Task[None]] = set()
        self._completions: dict[str, list[asyncio.Future[None]]] = {}
        # how markers reach their partitions: this node's logs; in cluster mode the
        # marker channel (server/cluster/marker_channel.py) sends the others' to their
        # leaders
        self.write: MarkerWriter = lambda marker, tps: write_markers(broker, marker, tps)

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    async def stop(self) -> None:
        jobs = list(self._jobs)
        for task in jobs:
            task.cancel()
        for task in jobs:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def wait_completed(self, transactional_id: str, timeout: float) -> None:
        """Return when the id's transaction now being finished is complete, or after
        `timeout` seconds. The waiter's own future, awaited directly: it resumes in the
        loop iteration right after `completed`, so its next operation (the next
        transaction's AddPartitionsToTxn) is appended before the fsync that makes
        CompleteCommit durable starts, and one fsync covers both."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiters = self._completions.setdefault(transactional_id, [])
        waiters.append(fut)
        timer = loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            timer.cancel()
            if fut in waiters:
                waiters.remove(fut)
                if not waiters and self._completions.get(transactional_id) is waiters:
                    del self._completions[transactional_id]

    def on_durable(self, partition: int, durable_offset: int) -> None:
        if self.runtime.state(partition) is not PartitionState.ACTIVE:
            return
        try:
            shard = self.runtime.shard(partition)
        except KafkaError:
            return
        for job in shard.pending_markers(durable_offset):
            self._spawn(self._finish(partition, shard, job))

    def _current(self, partition: int, shard: TxnShard, job: MarkerJob) -> bool:
        """The partition is still loaded with the shard (and so the coordinator epoch) the
        job was handed out by: a reload, or in a cluster a move of leadership, stops it."""
        if self.runtime.state(partition) is not PartitionState.ACTIVE:
            return False
        try:
            current = self.runtime.shard(partition)
        except KafkaError:
            return False
        return current is shard and current.coordinator_epoch == job.coordinator_epoch

    async def _finish(self, partition: int, shard: TxnShard, job: MarkerJob) -> None:
        """Write the job's markers, then complete the transaction; retried until done or
        until the partition is reloaded (the new shard hands the job out again)."""
        self._fault("after-prepare-durable")
        if not await self._persist_epoch(partition, shard, job):
            return
        marker = Marker(job.producer_id, job.producer_epoch, job.coordinator_epoch, job.commit)
        todo = set(job.partitions)
        delay, warned = 0.02, False
        while todo:
            if not self._current(partition, shard, job):
                return
            batch = sorted(todo)
            if self._fault_point == "between-markers" and len(batch) > 1:
                batch = batch[:1]  # one marker, then the fault below
            results = await self.write(marker, batch)
            for tp, code in results.items():
                if code in (ErrorCode.none, ErrorCode.unknown_topic_or_partition):
                    todo.discard(tp)  # written, or the partition is gone: nothing to end
                elif code == ErrorCode.transaction_coordinator_fenced:
                    log.warning("transaction %r: a newer coordinator owns it; stopping",
                                job.transactional_id)
                    return
                elif code == ErrorCode.invalid_producer_epoch:
                    # the partition has seen a newer epoch of this producer, whose own
                    # markers end whatever this one would have
                    log.warning("transaction %r: %s-%d has a newer producer epoch than %d; "
                                "no marker needed", job.transactional_id, tp[0], tp[1],
                                job.producer_epoch)
                    todo.discard(tp)
            if todo and len(batch) < len(job.partitions):
                self._fault("between-markers")
            if any(tp in todo for tp in batch):  # some of this round failed: back off
                if not warned and not self.broker.logs.space.full:
                    warned = True
                    log.warning("transaction %r: markers not yet written to %s; retrying",
                                job.transactional_id, sorted(todo))
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_BACKOFF_S)
        self._fault("before-complete")
        delay, warned = 0.02, False
        while self._current(partition, shard, job):
            try:
                # answered once appended: the id's next operation waits for a log end
                # past this record, so nothing acts on the completion before it is durable
                await self.shell.run(partition, lambda s, now, _t: ops.complete(
                    s, job.transactional_id, job.producer_id, job.producer_epoch, job.commit,
                    now, job.prepare_offset), before_durable=True,
                    defer_flush_s=COMPLETE_FLUSH_DELAY_S)
                # appended, not yet durable (cluster: not yet replicated), and nobody
                # told: a new leader must find PrepareCommit and finish again
                self._fault("after-complete-appended")
                self.completed(job.transactional_id)
                return
            except KafkaError as e:
                if not warned and disk_full_error(e) is None \
                        and not self.broker.logs.space.full:
                    warned = True
                    log.warning("transaction %r: cannot complete yet (%s); retrying",
                                job.transactional_id, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_BACKOFF_S)

    async def _persist_epoch(self, partition: int, shard: TxnShard, job: MarkerJob) -> bool:
        """Make the job's coordinator epoch durable before a marker carries it, retrying
        while the disk is full; False if the partition was reloaded meanwhile."""
        if self.epochs.persisted(partition, job.coordinator_epoch):
            return True
        loop = asyncio.get_running_loop()
        delay, reported = 0.02, False
        while self._current(partition, shard, job):
            try:
                await loop.run_in_executor(None, self.epochs.persist, partition,
                                           job.coordinator_epoch)
                return True
            except OSError as e:
                if not reported or disk_full_error(e) is not None:  # the latter: counted
                    reported = True
                    self.broker.logs.space.write_failed(
                        e, f"recording the coordinator epoch of {TRANSACTION_STATE}-"
                        f"{partition}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_BACKOFF_S)
        return False

    def _fault(self, point: str) -> None:
        """Test-only fault injection (`tidegate.test.fault.point`, unset in production):
        die like kill -9 at a named point of finishing a transaction."""
        if self._fault_point == point:
            log.critical("test fault point %s reached: killing this broker", point)
            os.kill(os.getpid(), signal.SIGKILL)

    def in_prepare(self, transactional_id: str) -> bool:
        try:
            meta = self.runtime.shard(self.runtime.partition_for(transactional_id)).txns.get(
                transactional_id)
        except KafkaError:
            return False
        return meta is not None and meta.state.is_prepare

    def completed(self, transactional_id: str) -> None:
        for fut in self._completions.pop(transactional_id, []):
            if not fut.done():
                fut.set_result(None)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
