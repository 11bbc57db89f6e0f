"""InitProducerId, AddPartitionsToTxn and AddOffsetsToTxn over one `TxnShard`; the
entry point for every operation (EndTxn, completion, timeouts and expiry live in
`end.py` and are re-exported here).

Each operation reads the shard and returns `Result(response, records)`; the runtime
appends and replays the records and the shell answers once they are durable. Nothing
here changes the shard. Semantics are Kafka's TransactionCoordinator (4.0, KIP-360,
KIP-890) with one Tidegate addition, KIP-939's prepared transactions.

Producer ids: allocating one is durable I/O, so the caller takes a fresh id off the
event loop first and passes it (`new_producer_id`); it is used only when needed — a
new transactional id, or an exhausted epoch (`needs_new_producer_id` tells which).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.runtime import Result
from tidegate.coordinator.txn.end import abort_timed_out, complete, end_txn, expire_ids, fence
from tidegate.coordinator.txn.messages import (
    AddPartitionsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from tidegate.coordinator.txn.model import (
    INT32_MAX,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SHORT_MAX,
    TopicPartition,
    TxnMetadata,
    is_epoch_exhausted,
)
from tidegate.coordinator.txn.shard import TxnShard
from tidegate.coordinator.txn.states import TxnState, transition_to

__all__ = [
    "OFFSETS_TOPIC",
    "abort_timed_out",
    "add_offsets",
    "add_partitions",
    "complete",
    "end_txn",
    "expire_ids",
    "fence",
    "init_producer_id",
    "needs_new_producer_id",
]

OFFSETS_TOPIC = "__consumer_offsets"
_E = ErrorCode


def _err(code: ErrorCode) -> Result[InitProducerIdResponse]:
    return Result(InitProducerIdResponse(code))


def needs_new_producer_id(shard: TxnShard, transactional_id: str) -> bool:
    """Whether InitProducerId or a KIP-890 EndTxn for this id may need a fresh id."""
    meta = shard.txns.get(transactional_id)
    return meta is None or is_epoch_exhausted(meta.producer_epoch)


def init_producer_id(shard: TxnShard, req: InitProducerIdRequest, now: int,
                     new_producer_id: int) -> Result[InitProducerIdResponse]:
    cfg = shard.config
    txn_id = req.transactional_id
    if not txn_id:
        return _err(_E.invalid_request)
    if req.enable_2pc and not cfg.two_phase_commit_enable:
        return _err(_E.transactional_id_authorization_failed)
    if req.keep_prepared_txn and not req.enable_2pc:
        return _err(_E.invalid_request)
    if not req.enable_2pc and not 0 < req.transaction_timeout_ms <= cfg.max_timeout_ms:
        return _err(_E.invalid_transaction_timeout)
    timeout = INT32_MAX if req.enable_2pc else req.transaction_timeout_ms
    expected: tuple[int, int] | None = None
    if req.producer_id != NO_PRODUCER_ID or req.producer_epoch != NO_PRODUCER_EPOCH:
        if req.producer_id == NO_PRODUCER_ID or req.producer_epoch == NO_PRODUCER_EPOCH:
            return _err(_E.invalid_request)
        expected = (req.producer_id, req.producer_epoch)

    meta = shard.txns.get(txn_id)
    if meta is None:
        if new_producer_id < 0:
            return _err(_E.coordinator_not_available)
        meta = TxnMetadata(txn_id, new_producer_id, NO_PRODUCER_EPOCH, timeout,
                           TxnState.EMPTY, last_update_ms=now)
    if expected is not None and not (
        meta.producer_epoch == NO_PRODUCER_EPOCH
        or expected[0] == meta.producer_id
        or (expected[0] == meta.previous_producer_id and is_epoch_exhausted(expected[1]))
    ):
        return _err(_E.producer_fenced)

    state = meta.state
    if state.is_prepare:
        return _err(_E.concurrent_transactions)
    if state is TxnState.ONGOING:
        if req.keep_prepared_txn:
            return _keep_prepared(shard, meta, now)
        if meta.producer_epoch >= SHORT_MAX:  # never handed out, so never Ongoing
            return _err(_E.invalid_producer_epoch)
        fenced = fence(shard, meta, now)
        return Result(InitProducerIdResponse(_E.concurrent_transactions),
                      [fenced.to_record(cfg.log_value_version)])
    if state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        raise ValueError(f"{txn_id} is stored in state {state.wire_name}")

    epoch, pid, last = meta.producer_epoch, meta.producer_id, NO_PRODUCER_EPOCH
    if is_epoch_exhausted(epoch) and (expected is None or expected[1] == epoch):
        if new_producer_id < 0:
            return _err(_E.coordinator_not_available)
        pid, epoch = new_producer_id, 0
        last = meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
    elif expected is None:
        epoch += 1
    elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
        epoch, last = epoch + 1, meta.producer_epoch
    elif expected[1] == meta.last_producer_epoch:
        last = meta.last_producer_epoch  # a retry of a bump that succeeded: same answer
    else:
        return _err(_E.producer_fenced)
    new = dataclasses.replace(
        meta,
        state=transition_to(state, TxnState.EMPTY),
        producer_id=pid,
        producer_epoch=epoch,
        last_producer_epoch=last,
        previous_producer_id=meta.producer_id,
        next_producer_id=NO_PRODUCER_ID,
        timeout_ms=timeout,
        partitions=frozenset(),
        txn_start_ms=-1,
        last_update_ms=now,
        client_txn_version=0,
        prepare_offset=-1,
        prepared_epoch=NO_PRODUCER_EPOCH,
    )
    return Result(InitProducerIdResponse(_E.none, pid, epoch),
                  [new.to_record(cfg.log_value_version)])


def _keep_prepared(shard: TxnShard, meta: TxnMetadata,
                   now: int) -> Result[InitProducerIdResponse]:
    """KIP-939: a new incarnation takes over a prepared (Ongoing) transaction instead of
    aborting it. The epoch is bumped, fencing the old incarnation, and the transaction
    stays Ongoing with its partitions; the response carries both the new epoch and the
    id/epoch the transaction was prepared with, so the application can decide to
    commit or abort it with EndTxn."""
    if meta.producer_epoch >= SHORT_MAX - 1:
        return _err(_E.invalid_producer_epoch)
    # a takeover of a takeover still reports the epoch the transaction was prepared with
    prepared = (meta.prepared_epoch if meta.prepared_epoch != NO_PRODUCER_EPOCH
                else meta.producer_epoch)
    new = dataclasses.replace(
        meta,
        state=transition_to(meta.state, TxnState.ONGOING),
        producer_epoch=meta.producer_epoch + 1,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        timeout_ms=INT32_MAX,
        last_update_ms=now,
        prepared_epoch=prepared,
    )
    return Result(
        InitProducerIdResponse(_E.none, new.producer_id, new.producer_epoch,
                               meta.producer_id, prepared),
        [new.to_record(shard.config.log_value_version)],
    )


def add_partitions(shard: TxnShard, transactional_id: str, producer_id: int,
                   producer_epoch: int, partitions: Iterable[TopicPartition], now: int,
                   verify_only: bool = False) -> Result[AddPartitionsResponse]:
    """AddPartitionsToTxn for one transaction. Errors apply to every partition, as in
    Kafka; `verify_only` (KIP-890 v4+) writes nothing and answers NONE for partitions
    in the ongoing transaction, TRANSACTION_ABORTABLE for the others."""
    tps = list(dict.fromkeys(partitions))

    def every(code: ErrorCode) -> Result[AddPartitionsResponse]:
        return Result(AddPartitionsResponse({tp: code for tp in tps}))

    if not transactional_id:
        return every(_E.invalid_request)
    meta = shard.txns.get(transactional_id)
    if meta is None or meta.producer_id != producer_id:
        return every(_E.invalid_producer_id_mapping)
    if meta.producer_epoch != producer_epoch:
        return every(_E.producer_fenced)
    if meta.state.is_prepare:
        return every(_E.concurrent_transactions)
    if meta.state not in (TxnState.EMPTY, TxnState.ONGOING, TxnState.COMPLETE_COMMIT,
                          TxnState.COMPLETE_ABORT):
        return every(_E.invalid_txn_state)
    if verify_only:
        return Result(AddPartitionsResponse({
            tp: _E.none if tp in meta.partitions else _E.transaction_abortable for tp in tps
        }))
    if meta.state is TxnState.ONGOING and meta.partitions.issuperset(tps):
        return every(_E.none)
    new = dataclasses.replace(
        meta,
        state=transition_to(meta.state, TxnState.ONGOING),
        partitions=meta.partitions | frozenset(tps),
        txn_start_ms=meta.txn_start_ms if meta.state is TxnState.ONGOING else now,
        last_update_ms=now,
        next_producer_id=NO_PRODUCER_ID,
        client_txn_version=0,
        prepare_offset=-1,
        prepared_epoch=(meta.prepared_epoch if meta.state is TxnState.ONGOING
                        else NO_PRODUCER_EPOCH),
    )
    return Result(AddPartitionsResponse({tp: _E.none for tp in tps}),
                  [new.to_record(shard.config.log_value_version)])


def add_offsets(shard: TxnShard, transactional_id: str, producer_id: int,
                producer_epoch: int, offsets_partition: int, now: int,
                offsets_topic: str = OFFSETS_TOPIC) -> Result[ErrorCode]:
    """AddOffsetsToTxn: adds the group's `__consumer_offsets` partition (the caller
    computes it with `partition_for(group_id, offsets.topic.num.partitions)`)."""
    res = add_partitions(shard, transactional_id, producer_id, producer_epoch,
                         [(offsets_topic, offsets_partition)], now)
    response = res.response
    return Result(response.error if isinstance(response, AddPartitionsResponse)
                  else _E.unknown_server_error, res.records)
