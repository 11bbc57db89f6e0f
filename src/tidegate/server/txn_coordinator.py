"""`TransactionCoordinator`: this node's transaction coordinator over `__transaction_state`.

The second shard type on the generic coordinator shell (server/coordinator.py): a
`CoordinatorRuntime` of `TxnShard`s (coordinator/txn/), one per partition of
`__transaction_state` (`transaction.state.log.num.partitions`, compacted). A
transactional id lives on partition `abs(hashCode(id)) % N`, as in Kafka. Requests run
as operations on their partition; state changes only by replaying the records an
operation appends; answers go out once those records are durable, except a client's
AddPartitionsToTxn and AddOffsetsToTxn, answered once appended: the KIP-890 verification
that lets data into a partition waits until this log is durable to its end
(docs/transactions.md, "What is durable when"; tests/unit/server/
test_txn_durability_order.py).

Finishing a transaction (writing markers, then CompleteCommit/CompleteAbort) is
`TxnFinisher`'s job (server/txn_finisher.py), driven by the log's durability; coordinator
epochs are `CoordinatorEpochs` (server/coordinator_epochs.py): each load takes a new one in
memory, and the finisher makes it durable before the first marker carrying it, so a load
writes nothing and works on a full disk. Operations are pure (they return records and
change nothing), so a write refused for a full disk leaves the partition serving
(`CoordinatorRuntime(pure_ops=True)`): reads and KIP-890 verification go on, writes
answer COORDINATOR_NOT_AVAILABLE until space returns, timeouts are retried each check.
Requests that find an id's previous transaction still being finished wait for it
(`_patiently`) instead of sending the client into backoff. A periodic check
(server/hanging.py) logs hanging transactions.

Cluster mode (docs/cluster.md): a partition's shard runs on the leader of that
`__transaction_state` partition, loaded and unloaded with its leadership
(`CoordinatorShell.on_leadership`, wired by BrokerApp), and its coordinator epoch is the
partition's leader epoch (`LeaderCoordinatorEpochs`). The topic is created on the first
FindCoordinator (`ensure_topic`) with `transaction.state.log.replication.factor` and
`min.insync.replicas` = `transaction.state.log.min.isr`. Markers for partitions led
elsewhere go through the finisher's `write` (the marker channel), and KIP-890
verification of an id coordinated elsewhere through `remote` (AddPartitionsToTxn to the
coordinator's broker). The hanging check is off: a partition's producers may be
coordinated by any broker, so no one broker sees both sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Protocol, TypeVar

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from tidegate.coordinator.runtime import (
    PARKED,
    CoordinatorRuntime,
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
)
from tidegate.coordinator.txn.shard import TxnShard
from tidegate.coordinator.txn.states import TxnState
from tidegate.server.coordinator import CoordinatorShell
from tidegate.server.coordinator_epochs import (
    EPOCHS_FILE,
    CoordinatorEpochs,
    EpochSource,
    LeaderCoordinatorEpochs,
)
from tidegate.server.hanging import HangingCheck, HangingTxn, coordinator_view
from tidegate.server.txn_finisher import TxnFinisher

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

log = logging.getLogger(__name__)

R = TypeVar("R")
TopicPartition = tuple[str, int]
Op = Callable[[TxnShard, int, int], Result[R]]

_OPEN_STATES = frozenset({TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                          TxnState.PREPARE_EPOCH_FENCE})
_CONCURRENT_WAIT_S = 2.0


class RemoteVerifier(Protocol):
    """KIP-890 verification by the coordinator on another broker (cluster mode)."""

    async def verify(self, transactional_id: str, producer_id: int, epoch: int,
                     tp: TopicPartition, *, add: bool) -> ErrorCode: ...


class TransactionCoordinator:
    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        self.broker = broker
        self.config = TxnConfig.from_broker(cfg.get_int, cfg.get_bool)
        partitions = cfg.get_int("transaction.state.log.num.partitions", 50) or 50
        self.cluster = broker.replicas.cluster
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(
            TRANSACTION_STATE,
            partitions,
            self._new_shard,
            broker.clock,
            load_buffer_bytes=cfg.get_int("transaction.state.log.load.buffer.size", 5242880)
            or 5242880,
            pure_ops=True,
            own_batches=True,  # its records skip the client path's checks (runtime.py)
        )
        self.epochs: EpochSource = (
            LeaderCoordinatorEpochs(self.runtime.leader_epochs) if self.cluster
            else CoordinatorEpochs(cfg.log_dir / EPOCHS_FILE))
        segment = cfg.get_int("transaction.state.log.segment.bytes", 104857600) or 104857600
        topic_configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(segment),
            "compression.type": "producer",
        }
        if self.cluster:  # one node has one replica: the setting would refuse every write
            topic_configs["min.insync.replicas"] = str(
                cfg.get_int("transaction.state.log.min.isr", 2) or 2)
        self.shell = CoordinatorShell(broker, self.runtime, topic_configs)
        # cluster mode: verification of ids coordinated by another broker (BrokerApp)
        self.remote: RemoteVerifier | None = None
        # tests only: after-prepare-durable | between-markers | before-complete |
        # after-complete-appended
        self.finisher = TxnFinisher(broker, self.runtime, self.shell, self.epochs,
                                    cfg.get("tidegate.test.fault.point") or "")
        self.shell.on_durable = self.finisher.on_durable
        self._jobs: set[asyncio.Task[None]] = set()
        self._hanging = HangingCheck(self.config.max_timeout_ms)

    @property
    def available(self) -> bool:
        return self.shell.started

    def partition_for(self, transactional_id: str) -> int:
        return self.runtime.partition_for(transactional_id)

    def leads(self, partition: int) -> bool:
        """This broker coordinates `partition` (always on one node; in a cluster while it
        leads that partition of `__transaction_state`)."""
        return not self.cluster or partition in self.runtime.leader_epochs

    async def ensure_topic(self) -> bool:
        """Cluster mode: create `__transaction_state` if missing (the first
        FindCoordinator for a transactional id), as Kafka does; False while it cannot
        exist yet (see `GroupCoordinator.ensure_topic`)."""
        return await self.shell.ensure_topic(
            self.broker.config.get_int("transaction.state.log.replication.factor", 3) or 3,
            "transaction.state.log.replication.factor")

    def _offsets_partition(self, group_id: str) -> int:
        return partition_for(group_id, self.broker.group_coordinator.runtime.num_partitions)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.shell.start()
        if not self.cluster:
            self._spawn(self._check_hanging_forever())

    async def stop(self) -> None:
        jobs = list(self._jobs)
        for task in jobs:
            task.cancel()
        for task in jobs:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.finisher.stop()
        await self.shell.stop()

    def _new_shard(self, partition: int) -> TxnShard:
        """Called by each load (in a worker thread): a new coordinator epoch, in memory
        (made durable before a marker carries it: `TxnFinisher`)."""
        return TxnShard(partition, self.config, self.epochs.next(partition))

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

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
                         concurrent: Callable[[R], bool], *,
                         before_durable: bool = False) -> R:
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
            result = await self._run(transactional_id, op, before_durable=before_durable)
            left = deadline - loop.time()
            if not concurrent(result) or left <= 0:
                return result
            if self.finisher.in_prepare(transactional_id):
                await self.finisher.wait_completed(transactional_id, left)
            else:
                await asyncio.sleep(0.001)  # completing right now: a moment, then again

    async def _run(self, transactional_id: str, op: Op[R], *,
                   before_durable: bool = False) -> R:
        if not self.shell.started:
            raise KafkaError("the transaction coordinator is starting",
                             code=ErrorCode.coordinator_not_available)
        return await self.shell.run(self.partition_for(transactional_id), op,
                                    before_durable=before_durable)

    async def init_producer_id(self, req: InitProducerIdRequest, fresh_producer_id: int
                               ) -> InitProducerIdResponse:
        return await self._patiently(
            req.transactional_id,
            lambda s, now, _t: ops.init_producer_id(s, req, now, fresh_producer_id),
            lambda r: r.error == ErrorCode.concurrent_transactions)

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: list[TopicPartition], *, verify_only: bool = False,
                             before_durable: bool = False
                             ) -> dict[TopicPartition, ErrorCode]:
        """`before_durable` (AddPartitionsToTxn from a client, v0-v3 only): answered once
        the record is appended, before it is fsynced (module docstring). Never for the
        implicit add of transaction version 2 (`verify_partition(add=True)`), whose
        answer lets data be appended at once."""
        if not verify_only and self._finishing(transactional_id, producer_id, epoch):
            # the usual case right after a commit (module docstring of `_patiently`):
            # wait for the finish first instead of running the operation once only to
            # be told CONCURRENT_TRANSACTIONS (about 2 % of the event loop's time under
            # the one-record transaction bench)
            await self.finisher.wait_completed(transactional_id, _CONCURRENT_WAIT_S)
        resp = await self._patiently(
            transactional_id,
            lambda s, now, _t: ops.add_partitions(
                s, transactional_id, producer_id, epoch, partitions, now,
                verify_only=verify_only),
            lambda r: ErrorCode.concurrent_transactions in r.errors.values(),
            before_durable=before_durable)
        return resp.errors

    def _finishing(self, transactional_id: str, producer_id: int, epoch: int) -> bool:
        """This producer's (same id and epoch: a fenced one is answered at once) previous
        transaction is being finished."""
        try:
            meta = self.runtime.shard(self.partition_for(transactional_id)).txns.get(
                transactional_id)
        except KafkaError:
            return False
        return (meta is not None and meta.state.is_prepare
                and meta.producer_id == producer_id and meta.producer_epoch == epoch)

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int,
                          group_id: str) -> ErrorCode:
        p = self._offsets_partition(group_id)
        return await self._patiently(  # TxnOffsetCommit verifies: answered before durable
            transactional_id,
            lambda s, now, _t: ops.add_offsets(s, transactional_id, producer_id, epoch, p, now),
            lambda code: code == ErrorCode.concurrent_transactions, before_durable=True)

    async def verify_partition(self, transactional_id: str, producer_id: int, epoch: int,
                               tp: TopicPartition, *, add: bool = False) -> ErrorCode:
        """Whether `tp` is in the producer's ongoing transaction (KIP-890); with `add`
        (transaction version 2) it is added instead. In a cluster an id coordinated by
        another broker is asked there."""
        if self.remote is not None and not self.leads(self.partition_for(transactional_id)):
            return await self.remote.verify(transactional_id, producer_id, epoch, tp, add=add)
        if not add:
            quick = self._verify_now(transactional_id, producer_id, epoch, tp)
            if quick is None:
                quick = await self._verify_when_durable(transactional_id, producer_id,
                                                        epoch, tp)
            if quick is not None and quick != ErrorCode.concurrent_transactions:
                return quick  # (concurrent: the operation below waits for the finish)
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
        if self.cluster and lg.high_watermark < lg.log_end_offset:
            return None  # not yet in every in-sync replica: a new leader might lose it
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

    async def _verify_when_durable(self, transactional_id: str, producer_id: int,
                                   epoch: int, tp: TopicPartition) -> ErrorCode | None:
        """One node: wait until the coordinator partition's log is durable to its present
        end (the usual case on the produce path: the AddPartitionsToTxn record was just
        appended, answered before its fsync), then read as `_verify_now` does — which
        checks again that the log is durable to its end, so a record appended meanwhile
        sends the request down the operation path. Saves an operation per transaction
        (about 2 % of the event loop under the one-record transaction bench). None: ask
        through the shell."""
        if self.cluster or not self.shell.started:
            return None
        lg = self.broker.get_log(TRANSACTION_STATE, self.partition_for(transactional_id))
        if lg is None:
            return None
        try:
            await self.broker.wait_durable(lg, lg.log_end_offset)
        except Exception:
            return None  # a failed fsync: the operation path reports it (and reloads)
        return self._verify_now(transactional_id, producer_id, epoch, tp)

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
        # a cluster's brokers each answer for the partitions they lead (Kafka: the admin
        # client asks every broker)
        led = sorted(self.runtime.leader_epochs) if self.cluster \
            else range(self.runtime.num_partitions)
        for p in led:
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
