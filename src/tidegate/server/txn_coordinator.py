"""`TransactionCoordinator`: this node's transaction coordinator over `__transaction_state`.

The second shard type on the generic coordinator shell (server/coordinator.py): a
`CoordinatorRuntime` of `TxnShard`s (coordinator/txn/), one per partition of
`__transaction_state` (`transaction.state.log.num.partitions`, compacted). A
transactional id lives on partition `abs(hashCode(id)) % N`, as in Kafka. Requests run
as operations on their partition; state changes only by replaying the records an
operation appends; answers go out once those records are durable.

Finishing a transaction (seed 000's second phase) is driven by durability, not by the
request that asked for it: whenever a partition of `__transaction_state` becomes durable
up to an offset, the shard hands out a *marker job* for each transaction whose
PrepareCommit/PrepareAbort record now lies below that offset. One mechanism therefore
serves EndTxn, aborts of timed-out transactions, fencing by a new producer and recovery
after a restart (loading yields a job for every transaction left in Prepare*), and no
marker is ever written for a Prepare record a crash could still lose. A job writes the
COMMIT/ABORT marker into every partition of the transaction (server/markers.py), retries
until each is written (a deleted partition needs none), then appends
CompleteCommit/CompleteAbort.

Coordinator epochs: each load of a partition gets a new, larger coordinator epoch,
persisted in `<log.dirs>/tidegate-txn-coordinator-epochs` before the load. Markers carry
it, and a partition refuses a marker older than the newest it has seen
(TRANSACTION_COORDINATOR_FENCED), so a job left over from before a reload cannot write
after its successor. (The cluster mode will use the partition's leader epoch instead.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from tidegate.coordinator.runtime import (
    PARKED,
    CoordinatorRuntime,
    PartitionState,
    Result,
    partition_for,
)
from tidegate.coordinator.txn import admin, ops
from tidegate.coordinator.txn.config import TxnConfig
from tidegate.coordinator.txn.messages import (
    DescribedTxn,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListedTxn,
    MarkerJob,
)
from tidegate.coordinator.txn.shard import TxnShard
from tidegate.coordinator.txn.states import TxnState
from tidegate.server.coordinator import CoordinatorShell
from tidegate.server.hanging import HangingCheck, HangingTxn, coordinator_view
from tidegate.server.markers import Marker, write_markers
from tidegate.storage.files import atomic_write

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

log = logging.getLogger(__name__)

R = TypeVar("R")
TopicPartition = tuple[str, int]
Op = Callable[[TxnShard, int, int], Result[R]]

EPOCHS_FILE = "tidegate-txn-coordinator-epochs"
_OPEN_STATES = frozenset({TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                          TxnState.PREPARE_EPOCH_FENCE})
_MAX_BACKOFF_S = 1.0
_CONCURRENT_WAIT_S = 2.0


class CoordinatorEpochs:
    """The coordinator epoch of each `__transaction_state` partition, durable in one small
    JSON file; `bump` raises an epoch and persists it before returning it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            data = json.loads(path.read_text())
            self._epochs = {int(k): int(v) for k, v in dict(data).items()}
        except FileNotFoundError:
            self._epochs = {}
        except (OSError, ValueError) as e:
            raise KafkaError(f"cannot read {path}: {e}",
                             code=ErrorCode.kafka_storage_error) from e

    def get(self, partition: int) -> int:
        with self._lock:
            return self._epochs.get(partition, 0)

    def bump(self, partitions: list[int]) -> None:
        with self._lock:
            for p in partitions:
                self._epochs[p] = self._epochs.get(p, -1) + 1
            atomic_write(self.path, json.dumps(
                {str(k): v for k, v in sorted(self._epochs.items())}).encode())


class TransactionCoordinator:
    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        self.broker = broker
        self.config = TxnConfig.from_broker(cfg.get_int, cfg.get_bool)
        partitions = cfg.get_int("transaction.state.log.num.partitions", 50) or 50
        self.epochs = CoordinatorEpochs(cfg.log_dir / EPOCHS_FILE)
        self._loaded_once: set[int] = set()
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(
            TRANSACTION_STATE,
            partitions,
            self._new_shard,
            broker.clock,
            load_buffer_bytes=cfg.get_int("transaction.state.log.load.buffer.size", 5242880)
            or 5242880,
        )
        segment = cfg.get_int("transaction.state.log.segment.bytes", 104857600) or 104857600
        self.shell = CoordinatorShell(broker, self.runtime, {
            "cleanup.policy": "compact",
            "segment.bytes": str(segment),
            "compression.type": "producer",
        })
        self.shell.on_durable = self._on_durable
        self._jobs: set[asyncio.Task[None]] = set()
        self._completions: dict[str, asyncio.Future[None]] = {}
        self._hanging = HangingCheck(self.config.max_timeout_ms)
        # tests only: after-prepare-durable | between-markers | before-complete
        self._fault_point = cfg.get("tidegate.test.fault.point") or ""

    @property
    def available(self) -> bool:
        return self.shell.started

    def partition_for(self, transactional_id: str) -> int:
        return self.runtime.partition_for(transactional_id)

    def _offsets_partition(self, group_id: str) -> int:
        return partition_for(group_id, self.broker.group_coordinator.runtime.num_partitions)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        meta = self.broker.logs.topics.get(TRANSACTION_STATE)
        n = meta.partitions if meta is not None else self.runtime.num_partitions
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.epochs.bump, list(range(n)))
        await self.shell.start()
        self._spawn(self._check_hanging_forever())

    async def stop(self) -> None:
        jobs = list(self._jobs)
        for task in jobs:
            task.cancel()
        for task in jobs:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.shell.stop()

    def _new_shard(self, partition: int) -> TxnShard:
        """Called by each load (in a worker thread): the first load of a partition uses the
        epoch `start` bumped; a reload bumps it again first."""
        if partition in self._loaded_once:
            self.epochs.bump([partition])
        self._loaded_once.add(partition)
        return TxnShard(partition, self.config, self.epochs.get(partition))

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    # -- finishing transactions: marker jobs ------------------------------------------------

    def _on_durable(self, partition: int, durable_offset: int) -> None:
        if self.runtime.state(partition) is not PartitionState.ACTIVE:
            return
        try:
            shard = self.runtime.shard(partition)
        except KafkaError:
            return
        for job in shard.pending_markers(durable_offset):
            self._spawn(self._finish(partition, job))

    def _current(self, partition: int, job: MarkerJob) -> bool:
        """The partition is still loaded with the epoch the job was handed out under."""
        if self.runtime.state(partition) is not PartitionState.ACTIVE:
            return False
        try:
            return self.runtime.shard(partition).coordinator_epoch == job.coordinator_epoch
        except KafkaError:
            return False

    async def _finish(self, partition: int, job: MarkerJob) -> None:
        """Write the job's markers, then complete the transaction; retried until done or
        until the partition is reloaded (the new shard hands the job out again)."""
        self._fault("after-prepare-durable")
        marker = Marker(job.producer_id, job.producer_epoch, job.coordinator_epoch, job.commit)
        todo = set(job.partitions)
        delay, warned = 0.02, False
        while todo:
            if not self._current(partition, job):
                return
            batch = sorted(todo)
            if self._fault_point == "between-markers" and len(batch) > 1:
                batch = batch[:1]  # one marker, then the fault below
            results = await write_markers(self.broker, marker, batch)
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
                if not warned:
                    warned = True
                    log.warning("transaction %r: markers not yet written to %s; retrying",
                                job.transactional_id, sorted(todo))
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_BACKOFF_S)
        self._fault("before-complete")
        delay = 0.02
        while self._current(partition, job):
            try:
                await self.shell.run(partition, lambda s, now, _t: ops.complete(
                    s, job.transactional_id, job.producer_id, job.producer_epoch, job.commit,
                    now, job.prepare_offset))
                self._completed(job.transactional_id)
                return
            except KafkaError as e:
                log.warning("transaction %r: cannot complete yet (%s); retrying",
                            job.transactional_id, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_BACKOFF_S)

    def _fault(self, point: str) -> None:
        """Test-only fault injection (`tidegate.test.fault.point`, unset in production):
        die like kill -9 at a named point of finishing a transaction."""
        if self._fault_point == point:
            log.critical("test fault point %s reached: killing this broker", point)
            os.kill(os.getpid(), signal.SIGKILL)

    # -- hanging transactions (server/hanging.py) -----------------------------------------

    async def _check_hanging_forever(self) -> None:
        interval = self.broker.config.get_int("transaction.hanging.check.interval.ms", 60000)
        while True:
            await asyncio.sleep(max(interval or 60000, 100) / 1000)
            try:
                self.check_hanging()
            except Exception:
                log.exception("hanging-transaction check failed")

    def check_hanging(self) -> list[HangingTxn]:
        """Compare the partitions' open transactions with the coordinator's (logs each
        hanging one once); also what `hanging` reports."""
        partitions = {
            (topic, p): open_txns
            for topic, p, lg in self.broker.logs.logs()
            if topic not in (TRANSACTION_STATE,)
            and (open_txns := lg.ongoing_transactions())
        }
        known = coordinator_view(
            (meta.producer_id, meta.partitions)
            for _, shard in self.runtime.active_shards()
            for meta in shard.txns.values()
            if meta.state in _OPEN_STATES
        )
        return self._hanging.run(partitions, known, self.broker.clock.now_ms())

    @property
    def hanging(self) -> list[HangingTxn]:
        return list(self._hanging.hanging)

    # -- one transactional id ---------------------------------------------------------------

    async def _patiently(self, transactional_id: str, op: Op[R],
                         concurrent: Callable[[R], bool]) -> R:
        """Run `op`; while it answers CONCURRENT_TRANSACTIONS because the id's previous
        transaction is still being finished (Prepare*, markers in flight), wait for that
        to complete and run it again, up to `_CONCURRENT_WAIT_S`.

        Kafka answers at once and lets the client back off (librdkafka, the Java client:
        tens of milliseconds or more) — the usual case right after a commit, when the next
        transaction's first AddPartitionsToTxn overtakes the markers. Waiting here turns
        that backoff into the few milliseconds the markers take."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _CONCURRENT_WAIT_S
        while True:
            result = await self._run(transactional_id, op)
            left = deadline - loop.time()
            if not concurrent(result) or left <= 0:
                return result
            if self._in_prepare(transactional_id):
                done = self._completions.setdefault(transactional_id, loop.create_future())
                await asyncio.wait({done}, timeout=left)
            else:
                await asyncio.sleep(0.001)  # completing right now: a moment, then again

    def _in_prepare(self, transactional_id: str) -> bool:
        try:
            meta = self.runtime.shard(self.partition_for(transactional_id)).txns.get(
                transactional_id)
        except KafkaError:
            return False
        return meta is not None and meta.state.is_prepare

    def _completed(self, transactional_id: str) -> None:
        fut = self._completions.pop(transactional_id, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def _run(self, transactional_id: str, op: Op[R]) -> R:
        if not self.shell.started:
            raise KafkaError("the transaction coordinator is starting",
                             code=ErrorCode.coordinator_not_available)
        return await self.shell.run(self.partition_for(transactional_id), op)

    async def init_producer_id(self, req: InitProducerIdRequest, fresh_producer_id: int
                               ) -> InitProducerIdResponse:
        return await self._patiently(
            req.transactional_id,
            lambda s, now, _t: ops.init_producer_id(s, req, now, fresh_producer_id),
            lambda r: r.error == ErrorCode.concurrent_transactions)

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: list[TopicPartition], *, verify_only: bool = False
                             ) -> dict[TopicPartition, ErrorCode]:
        resp = await self._patiently(
            transactional_id,
            lambda s, now, _t: ops.add_partitions(
                s, transactional_id, producer_id, epoch, partitions, now,
                verify_only=verify_only),
            lambda r: ErrorCode.concurrent_transactions in r.errors.values())
        return resp.errors

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int,
                          group_id: str) -> ErrorCode:
        p = self._offsets_partition(group_id)
        return await self._patiently(
            transactional_id,
            lambda s, now, _t: ops.add_offsets(s, transactional_id, producer_id, epoch, p, now),
            lambda code: code == ErrorCode.concurrent_transactions)

    async def verify_partition(self, transactional_id: str, producer_id: int, epoch: int,
                               tp: TopicPartition, *, add: bool = False) -> ErrorCode:
        """Whether `tp` is in the producer's ongoing transaction (KIP-890); with `add`
        (transaction version 2) it is added instead."""
        if not add:
            quick = self._verify_now(transactional_id, producer_id, epoch, tp)
            if quick is not None:
                return quick
        results = await self.add_partitions(transactional_id, producer_id, epoch, [tp],
                                            verify_only=not add)
        return results.get(tp, ErrorCode.unknown_server_error)

    def _verify_now(self, transactional_id: str, producer_id: int, epoch: int,
                    tp: TopicPartition) -> ErrorCode | None:
        """Verification is a read: when the coordinator partition's log is durable to its
        end, the shard's state is exactly what is durable, so it can be read at once
        without queueing an operation (one per partition per transaction on the produce
        path). None: ask through the shell (loading, failed, or not yet durable)."""
        if not self.shell.started:
            return None
        p = self.partition_for(transactional_id)
        lg = self.broker.get_log(TRANSACTION_STATE, p)
        if lg is None or lg.recovery_point < lg.log_end_offset:
            return None
        try:
            shard = self.runtime.shard(p)
        except KafkaError:
            return None
        res = ops.add_partitions(shard, transactional_id, producer_id, epoch, [tp],
                                 self.broker.clock.now_ms(), verify_only=True)
        if res.records:
            return None  # never for verify_only; keep the rule that ops only read here
        response = res.response
        if response is PARKED:
            return None
        return response.errors.get(tp, ErrorCode.unknown_server_error)

    async def verify_offsets(self, transactional_id: str, producer_id: int, epoch: int,
                             group_id: str, *, add: bool = False) -> ErrorCode:
        tp = (CONSUMER_OFFSETS, self._offsets_partition(group_id))
        return await self.verify_partition(transactional_id, producer_id, epoch, tp, add=add)

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int,
                      commit: bool, api_version: int) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch); the id and epoch matter to transaction version 2
        (EndTxn v5+), whose epoch is bumped at every end."""
        version = 2 if api_version >= 5 else 0
        fresh = -1
        partition = self.partition_for(transactional_id)
        if version == 2 and self.available:
            try:
                needs = ops.needs_new_producer_id(self.runtime.shard(partition), transactional_id)
            except KafkaError:
                needs = False
            if needs:  # the bump may exhaust the epoch: have a fresh id ready (fsync)
                fresh = await asyncio.get_running_loop().run_in_executor(
                    None, self.broker.producer_ids.next_id)
        resp = await self._patiently(
            transactional_id,
            lambda s, now, _t: ops.end_txn(
                s, transactional_id, producer_id, epoch, commit, now, version, fresh),
            lambda r: r.error == ErrorCode.concurrent_transactions)
        return resp.error, resp.producer_id, resp.producer_epoch

    # -- admin (KIP-664) --------------------------------------------------------------------

    async def list_transactions(self, states: list[str], producer_ids: set[int],
                                min_duration_ms: int) -> tuple[ErrorCode, list[ListedTxn]]:
        """Every partition's matching transactions; the error of a partition that cannot
        answer (loading, failed) is reported with the others' transactions."""
        if not self.shell.started:
            return ErrorCode.coordinator_not_available, []
        code = ErrorCode.none
        out: list[ListedTxn] = []
        for p in range(self.runtime.num_partitions):
            try:
                resp = await self.shell.run(p, lambda s, now, _t: admin.list_transactions(
                    s, states, producer_ids, min_duration_ms, now))
            except KafkaError as e:
                code = e.code
                continue
            out += resp.transactions
        return code, out

    async def describe_transactions(self, ids: list[str]) -> list[DescribedTxn]:
        out = []
        for tid in ids:
            if not tid:
                out.append(DescribedTxn(tid, ErrorCode.invalid_request))
                continue
            try:
                described: list[DescribedTxn] = await self._run(tid, _describe_op(tid))
                out += described
            except KafkaError as e:
                out.append(DescribedTxn(tid, e.code))
        return out


def _describe_op(transactional_id: str) -> Op[list[DescribedTxn]]:
    return lambda s, _now, _t: admin.describe_transactions(s, [transactional_id])
