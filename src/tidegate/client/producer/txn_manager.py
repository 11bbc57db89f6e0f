"""The transaction manager: what `AsyncProducer`'s transactional calls do.

It owns the producer id of a transactional producer (the `IdempotenceManager` is put
in transactional mode and only sequences batches) and moves `transactions.TxnState`
as seed 000 describes:

- `init_transactions` reads the broker's `transaction.version` (KIP-890), then sends
  InitProducerId (with ``enable_2pc`` and ``keep_prepared_txn`` for KIP-939) to the
  coordinator of ``transactional.id`` until it stops answering CONCURRENT_TRANSACTIONS.
- `begin_transaction` is local. Under transaction version 1 a partition's first record
  queues it for AddPartitionsToTxn; the sender's pass (`before_drain`) sends one request
  for all queued partitions, and their batches are held (`may_send`) until it succeeds.
  Under version 2 Produce v12+ adds partitions implicitly.
- `send_offsets_to_transaction`: AddOffsetsToTxn (version 1 only), then TxnOffsetCommit
  to the group's coordinator with the member's generation (KIP-447).
- `commit_transaction` flushes, then EndTxn; `abort_transaction` fails the unsent
  batches, waits for those in flight, then EndTxn. Version 2's EndTxn returns a bumped
  epoch, which the next transaction uses (sequences restart at 0). Under version 1 an
  abort after a failed record bumps the epoch with InitProducerId (KIP-360).
- An EndTxn whose outcome is unknown (timeout, lost connection) leaves the state
  COMMITTING/ABORTING: calling the same method again retries it; it never turns a
  commit into an abort.
- `prepare_transaction` / `complete_transaction` (KIP-939): see `PreparedTxnState`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidegate.client.consumer.group_offsets import OffsetAndMetadata
from tidegate.client.errors import (
    IllegalStateError,
    KafkaTimeoutError,
    PreparedTxnMismatchError,
    TransactionAbortedError,
    fatal_error,
)
from tidegate.client.producer.accumulator import ProducerBatch
from tidegate.client.producer.transactions import (
    ErrorKind,
    PreparedTxnState,
    TransactionState,
    TxnState,
    classify,
)
from tidegate.client.producer.txn_requests import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    GROUP_KEY,
    INIT_PRODUCER_ID,
    TRANSACTION_KEY,
    TV1_MAX,
    TXN_OFFSET_COMMIT,
    CoordinatorClient,
    transaction_version,
)
from tidegate.client.types import ConsumerGroupMetadata, TopicPartition
from tidegate.common.errors import KafkaError, error_for_code

if TYPE_CHECKING:
    from tidegate.client.producer.producer import AsyncProducer
    from tidegate.client.producer.sender import Sender

__all__ = ["TransactionManager"]

log = logging.getLogger("tidegate.client.producer.txn")
# Why a two-phase-commit producer gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and what to
# do: the bare code reads like an ACL problem, but the usual cause is the broker setting.
TWO_PC_REFUSED = (
    ": the broker refused two-phase commit (KIP-939; this producer has "
    "transaction.two.phase.commit.enable=true). Start the broker with "
    "transaction.two.phase.commit.enable=true (Tidegate's default, Kafka's is false); "
    "if the broker has an authorizer, the principal also needs WRITE and TWO_PHASE_COMMIT "
    "on the transactional id")
S = TxnState
_NONE = ErrorCode.none


def _offset(value: int | OffsetAndMetadata) -> OffsetAndMetadata:
    if isinstance(value, OffsetAndMetadata):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return OffsetAndMetadata(value)
    raise TypeError(f"an offset must be an int or OffsetAndMetadata, not {value!r}")


class TransactionManager:
    """See the module docstring."""

    def __init__(self, producer: AsyncProducer) -> None:
        cfg = producer.config
        assert cfg.transactional_id is not None and producer._idem is not None
        self.config = cfg
        self.tid = cfg.transactional_id
        self.state = TransactionState(cfg.transactional_id)
        self._producer = producer
        self._idem = idem = producer._idem
        self.coordinators = CoordinatorClient(cfg, producer._net)
        idem.transactional = True
        idem.gate = self.state.may_send
        idem.on_reset_needed = self._on_reset_needed
        idem.on_fatal = self.state.fail
        self._sender: Sender | None = None
        self._adding: asyncio.Task[None] | None = None
        self.started = False  # the coordinator knows of the current transaction

    # -- hooks from the producer and the sender ----------------------------------------

    def attach(self, sender: Sender) -> None:
        self._sender = sender
        sender.transactional_id = self.tid
        sender.before_drain = self._before_drain
        sender.on_failed = self._on_failed
        sender.on_sent = self._on_sent
        sender.produce_version_max = 13 if self.state.version >= 2 else 11

    def check_send(self) -> None:
        self.state.require(S.IN_TRANSACTION, what="send")

    def _on_reset_needed(self, reason: str) -> None:
        self.state.needs_epoch_bump = True

    def _on_failed(self, batch: ProducerBatch[Any], exc: BaseException) -> None:
        if isinstance(exc, TransactionAbortedError):
            return
        err = exc if isinstance(exc, KafkaError) else KafkaError(repr(exc))
        self.state.needs_epoch_bump = True
        self.state.fail(err)

    def _on_sent(self, batches: list[ProducerBatch[Any]]) -> None:
        self.started = True

    def _before_drain(self) -> None:
        if self.state.pending and (self._adding is None or self._adding.done()):
            self._adding = asyncio.get_running_loop().create_task(self._add_partitions())

    def _deadline(self, timeout_ms: int | None) -> float:
        ms = self.config.max_block_ms if timeout_ms is None else timeout_ms
        return time.monotonic() + ms / 1000

    def _raise_error(self, code: ErrorCode, what: str) -> None:
        """Turn an error `code` of a coordinator's answer into the state it calls for,
        and raise."""
        err = error_for_code(code.value, f"{what}: {code.name.upper()}")
        if classify(code) is ErrorKind.FATAL:
            fatal = fatal_error(code, f"{what}: {code.name.upper()}; the producer cannot "
                                      "continue: close it")
            self._idem.set_fatal(fatal)  # fails what is queued; state -> FATAL_ERROR
            raise fatal
        self.state.fail(err)
        self.state.raise_if_failed()
        raise err

    # -- init --------------------------------------------------------------------------

    async def init_transactions(self, keep_prepared_txn: bool = False,
                                timeout_ms: int | None = None) -> PreparedTxnState | None:
        self.state.require(S.UNINITIALIZED, what="init_transactions()")
        if keep_prepared_txn and not self.config.transaction_two_phase_commit_enable:
            raise IllegalStateError("keep_prepared_txn=True needs "
                                    "transaction.two.phase.commit.enable=true")
        self.attach(self._producer._ensure_started())
        self.state.transition_to(S.INITIALIZING)
        deadline = self._deadline(timeout_ms)
        try:
            level = await transaction_version(self._producer._net)
            self.state.version = 2 if min(level, self.config.tidegate_transaction_version_max) \
                >= 2 else 1
            if self._sender is not None:
                self.attach(self._sender)
            resp = await self._init_producer_id(keep_prepared_txn, deadline, bump=False)
        except KafkaTimeoutError:
            self.state.transition_to(S.UNINITIALIZED)
            raise
        except KafkaError as e:
            if self.state.state is S.INITIALIZING:
                self.state.transition_to(S.UNINITIALIZED)
            raise e
        ongoing = int(getattr(resp, "ongoing_txn_producer_id", -1))
        if keep_prepared_txn and ongoing >= 0:
            self.state.transition_to(S.PREPARED_TRANSACTION)
            self.state.prepared = PreparedTxnState(
                self.tid, ongoing, int(resp.ongoing_txn_producer_epoch))
            self.started = True
            log.info("transactional id %r: found a prepared transaction %s", self.tid,
                     self.state.prepared)
        else:
            self.state.transition_to(S.READY)
        return self.state.prepared

    async def _init_producer_id(self, keep_prepared_txn: bool, deadline: float, *,
                                bump: bool) -> Any:
        """InitProducerId; `bump` sends the current id and epoch (KIP-360)."""
        idem = self._idem
        two_pc = self.config.transaction_two_phase_commit_enable
        resp = await self.coordinators.call(
            TRANSACTION_KEY, self.tid, INIT_PRODUCER_ID, {
                "transactional_id": self.tid,
                "transaction_timeout": self.config.transaction_timeout_ms,
                "producer_id": idem.producer_id if bump else -1,
                "producer_epoch": idem.epoch if bump else -1,
                "enable2_pc": two_pc, "keep_prepared_txn": keep_prepared_txn},
            deadline=deadline, what=f"InitProducerId for {self.tid!r}",
            codes=lambda r: (r.error_code,), least=6 if two_pc else (3 if bump else 0))
        if resp.error_code != _NONE:
            code = resp.error_code
            message = f"InitProducerId for {self.tid!r} failed: {code.name.upper()}"
            if two_pc and code == ErrorCode.transactional_id_authorization_failed:
                message += TWO_PC_REFUSED
            fatal = fatal_error(code, message)
            self._idem.set_fatal(fatal)
            raise fatal
        idem.set_producer_id(int(resp.producer_id), int(resp.producer_epoch), [])
        self.state.needs_epoch_bump = False
        log.debug("transactional id %r: producer id %d epoch %d (transaction version %d)",
                  self.tid, idem.producer_id, idem.epoch, self.state.version)
        return resp

    async def bump_epoch(self, timeout_ms: int | None = None) -> None:
        """READY: InitProducerId with the current id and epoch (KIP-360), so the next
        transaction has an epoch of its own even under transaction version 1 (the
        check-back helper names transactions by id and epoch)."""
        self.state.require(S.READY, what="bump the epoch")
        self.state.transition_to(S.INITIALIZING)
        try:
            await self._init_producer_id(False, self._deadline(timeout_ms), bump=True)
        except KafkaTimeoutError:
            self.state.transition_to(S.UNINITIALIZED)
            raise
        self.state.transition_to(S.READY)

    # -- the transaction ---------------------------------------------------------------

    def begin_transaction(self) -> None:
        self.state.require(S.READY, what="begin_transaction()")
        self.state.transition_to(S.IN_TRANSACTION)
        self.started = False

    async def _add_partitions(self) -> None:
        st = self.state
        lock = self._producer._acc.lock  # senders' threads add to `pending` under it
        with lock:
            todo = sorted(st.pending)
        by_topic: dict[str, list[int]] = {}
        for tp in todo:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        idem = self._idem
        try:
            resp = await self.coordinators.call(
                TRANSACTION_KEY, self.tid, ADD_PARTITIONS_TO_TXN, {
                    "v3_and_below_transactional_id": self.tid,
                    "v3_and_below_producer_id": idem.producer_id,
                    "v3_and_below_producer_epoch": idem.epoch,
                    "v3_and_below_topics": [{"name": t, "partitions": ps}
                                            for t, ps in by_topic.items()]},
                deadline=self._deadline(None), what=f"AddPartitionsToTxn for {self.tid!r}",
                codes=lambda r: (p.partition_error_code
                                 for t in r.results_by_topic_v3_and_below
                                 for p in t.results_by_partition))
            bad = [(t.name, p.partition_index, p.partition_error_code)
                   for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition
                   if p.partition_error_code not in (_NONE, ErrorCode.operation_not_attempted)]
            if bad:
                name, index, code = bad[0]
                self._raise_error(code, f"AddPartitionsToTxn of {name}-{index}")
            with lock:
                st.pending.difference_update(todo)
                st.partitions.update(todo)
            self.started = True
        except KafkaError as e:
            if st.state is not S.FATAL_ERROR:
                st.fail(e)
                if self._sender is not None:
                    self._sender.drop_unsent(st.abortable_exception())
            log.info("transactional id %r: adding partitions failed: %s", self.tid, e)
        finally:
            if self._sender is not None:
                self._sender.wakeup()

    async def send_offsets_to_transaction(
            self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
            group_metadata: ConsumerGroupMetadata, timeout_ms: int | None = None) -> None:
        st = self.state
        st.require(S.IN_TRANSACTION, what="send_offsets_to_transaction()")
        group = group_metadata.group_id
        if not group:
            raise ValueError("send_offsets_to_transaction needs the consumer's group "
                             "metadata (consumer.group_metadata()) with a group id")
        parsed = {TopicPartition(*tp): _offset(v) for tp, v in offsets.items()}
        deadline = self._deadline(timeout_ms)
        idem = self._idem
        if st.version < 2 and group not in st.groups:
            resp = await self.coordinators.call(
                TRANSACTION_KEY, self.tid, ADD_OFFSETS_TO_TXN, {
                    "transactional_id": self.tid, "producer_id": idem.producer_id,
                    "producer_epoch": idem.epoch, "group_id": group},
                deadline=deadline, what=f"AddOffsetsToTxn for group {group!r}",
                codes=lambda r: (r.error_code,))
            if resp.error_code != _NONE:
                self._raise_error(resp.error_code, f"AddOffsetsToTxn for group {group!r}")
            st.groups.add(group)
            self.started = True
        if not parsed:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, om in sorted(parsed.items()):
            topics.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch,
                "committed_metadata": om.metadata})
        resp = await self.coordinators.call(
            GROUP_KEY, group, TXN_OFFSET_COMMIT, {
                "transactional_id": self.tid, "group_id": group,
                "producer_id": idem.producer_id, "producer_epoch": idem.epoch,
                "generation_id": group_metadata.generation_id,
                "member_id": group_metadata.member_id,
                "group_instance_id": group_metadata.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            deadline=deadline, what=f"TxnOffsetCommit for group {group!r}",
            codes=lambda r: (p.error_code for t in r.topics for p in t.partitions),
            least=5 if st.version >= 2 else 0,
            most=None if st.version >= 2 else TV1_MAX[TXN_OFFSET_COMMIT])
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code != _NONE:
                    self._raise_error(p.error_code, f"TxnOffsetCommit of {t.name}-"
                                                    f"{p.partition_index} for group {group!r}")
        self.started = True

    async def _flush(self, timeout_ms: int | None) -> None:
        await self._producer.flush(self.config.max_block_ms if timeout_ms is None
                                   else timeout_ms)
        if self._adding is not None and not self._adding.done():
            await self._adding

    async def prepare_transaction(self, timeout_ms: int | None = None) -> PreparedTxnState:
        if not self.config.transaction_two_phase_commit_enable:
            raise IllegalStateError("prepare_transaction() needs "
                                    "transaction.two.phase.commit.enable=true")
        self.state.require(S.IN_TRANSACTION, what="prepare_transaction()")
        await self._flush(timeout_ms)
        self.state.raise_if_failed()
        self.state.transition_to(S.PREPARED_TRANSACTION)
        self.state.prepared = PreparedTxnState(self.tid, self._idem.producer_id,
                                               self._idem.epoch)
        return self.state.prepared

    async def commit_transaction(self, timeout_ms: int | None = None) -> None:
        st = self.state
        if st.state is not S.COMMITTING_TRANSACTION:  # else: a retry (unknown outcome)
            st.require(S.IN_TRANSACTION, S.PREPARED_TRANSACTION, what="commit_transaction()")
            st.transition_to(S.COMMITTING_TRANSACTION)
        await self._flush(timeout_ms)
        st.raise_if_failed()
        await self._end(True, timeout_ms)

    async def abort_transaction(self, timeout_ms: int | None = None) -> None:
        st = self.state
        if st.state is not S.ABORTING_TRANSACTION:
            st.require(S.IN_TRANSACTION, S.PREPARED_TRANSACTION, S.ABORTABLE_ERROR,
                       what="abort_transaction()")
            st.transition_to(S.ABORTING_TRANSACTION)
            if self._sender is not None:
                self._sender.drop_unsent(TransactionAbortedError(
                    f"the transaction of {self.tid!r} was aborted before the record was "
                    "sent"))
            await self._flush(timeout_ms)  # what is in flight
        await self._end(False, timeout_ms)

    async def complete_transaction(self, prepared: PreparedTxnState, commit: bool,
                                   timeout_ms: int | None = None) -> None:
        st = self.state
        st.require(S.PREPARED_TRANSACTION, what="complete_transaction()")
        if st.prepared != prepared:
            raise PreparedTxnMismatchError(
                f"TransactionalId {self.tid}: the prepared transaction held is "
                f"{st.prepared}, not the given {prepared}; it was completed or replaced "
                "(check which state your records point to)")
        if commit:
            await self.commit_transaction(timeout_ms)
        else:
            await self.abort_transaction(timeout_ms)

    async def _end(self, commit: bool, timeout_ms: int | None) -> None:
        st, idem = self.state, self._idem
        deadline = self._deadline(timeout_ms)
        what = f"EndTxn({'commit' if commit else 'abort'}) for {self.tid!r}"
        if self.started:
            resp = await self.coordinators.call(
                TRANSACTION_KEY, self.tid, END_TXN, {
                    "transactional_id": self.tid, "producer_id": idem.producer_id,
                    "producer_epoch": idem.epoch, "committed": commit},
                deadline=deadline, what=what, codes=lambda r: (r.error_code,),
                least=5 if st.version >= 2 else 0,
                most=None if st.version >= 2 else TV1_MAX[END_TXN])
            if resp.error_code != _NONE:
                if commit and classify(resp.error_code) is ErrorKind.ABORTABLE:
                    self._raise_error(resp.error_code, what)
                code = resp.error_code
                fatal = fatal_error(code, f"{what}: {code.name.upper()}; the producer "
                                          "cannot continue: close it")
                idem.set_fatal(fatal)
                raise fatal
            new_pid = int(getattr(resp, "producer_id", -1))
            if st.version >= 2 and new_pid >= 0:
                # KIP-890: the bumped epoch for the next transaction; sequences from 0
                idem.set_producer_id(new_pid, int(resp.producer_epoch), [])
                st.needs_epoch_bump = False
        if st.needs_epoch_bump:
            await self._init_producer_id(False, deadline, bump=True)
        st.transition_to(S.READY)
        self.started = False

    async def close(self) -> None:
        if self._adding is not None and not self._adding.done():
            self._adding.cancel()
        await self.coordinators.close()

