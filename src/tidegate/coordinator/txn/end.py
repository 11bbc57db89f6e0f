"""Ending transactions: EndTxn, marker completion, timeout aborts and id expiry.

Two phases, as in Kafka: `end_txn` writes PrepareCommit/PrepareAbort (the client's
answer goes once that record is durable); the marker writer then takes the job from
`TxnShard.pending_markers`, writes a COMMIT/ABORT marker to every partition, and calls
`complete`, which writes CompleteCommit/CompleteAbort. Timeouts (`abort_timed_out`)
and InitProducerId's fencing reach the same PrepareAbort, so one marker mechanism
serves them all.

KIP-890 part 2 (client transaction version 2, EndTxn v5+): every EndTxn bumps the
epoch, markers carry the bumped epoch, and the response returns it; when the bump
exhausts the epoch, the Prepare record names the next producer id and Complete
switches to it with epoch 0. A retried EndTxn is recognised by the bumped epoch. An
abort with no transaction open (Empty, CompleteCommit, CompleteAbort) is allowed too:
PrepareAbort with no partitions, so no markers, then CompleteAbort, bumping the epoch
(a client recovering from TRANSACTION_ABORTABLE before its coordinator saw a partition).
While a Prepare state's markers are being written, every EndTxn of the producer id
answers CONCURRENT_TRANSACTIONS whatever its epoch and outcome (Kafka 4, KAFKA-18464):
the client retries and is judged against the completed state.
"""

from __future__ import annotations

import dataclasses

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.runtime import Record, Result
from tidegate.coordinator.txn.messages import EndTxnResponse
from tidegate.coordinator.txn.model import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SHORT_MAX,
    TxnMetadata,
    is_epoch_exhausted,
)
from tidegate.coordinator.txn.shard import TxnShard
from tidegate.coordinator.txn.states import TxnState, transition_to
from tidegate.protocol.txn_records import encode_txn_key

__all__ = ["abort_timed_out", "complete", "end_txn", "expire_ids", "fence"]

_E = ErrorCode
_PREPARE = {True: TxnState.PREPARE_COMMIT, False: TxnState.PREPARE_ABORT}
_COMPLETE = {True: TxnState.COMPLETE_COMMIT, False: TxnState.COMPLETE_ABORT}


def fence(shard: TxnShard, meta: TxnMetadata, now: int) -> TxnMetadata:
    """Ongoing -> PrepareEpochFence -> PrepareAbort with the epoch bumped once and the
    last epoch cleared, so neither the fenced producer nor its KIP-360/KIP-890 retries
    can use the transaction again (InitProducerId on an Ongoing id, and timeouts)."""
    transition_to(transition_to(meta.state, TxnState.PREPARE_EPOCH_FENCE),
                  TxnState.PREPARE_ABORT)
    if meta.producer_epoch >= SHORT_MAX:
        raise ValueError(f"{meta.transactional_id}: cannot fence epoch {meta.producer_epoch}")
    return dataclasses.replace(
        meta,
        state=TxnState.PREPARE_ABORT,
        producer_epoch=meta.producer_epoch + 1,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        next_producer_id=NO_PRODUCER_ID,
        last_update_ms=now,
        client_txn_version=min(meta.client_txn_version, shard.config.transaction_version),
    )


def end_txn(shard: TxnShard, transactional_id: str, producer_id: int, producer_epoch: int,
            commit: bool, now: int, txn_version: int = 0,
            new_producer_id: int = -1) -> Result[EndTxnResponse]:
    """EndTxn. `txn_version` is the client's transaction version (2 for EndTxn v5+);
    `new_producer_id` is needed only by a version-2 end that exhausts the epoch
    (`ops.needs_new_producer_id`); without it that end answers
    COORDINATOR_NOT_AVAILABLE so the client retries."""
    if not transactional_id:
        return Result(EndTxnResponse(_E.invalid_request))
    meta = shard.txns.get(transactional_id)
    if meta is None:
        return Result(EndTxnResponse(_E.invalid_producer_id_mapping))
    state = meta.state
    tv2 = meta.supports_epoch_bump
    # A retry of a version-2 end: the stored epoch is the request's plus one, bumped by
    # that very end (a fence clears the last epoch, so a fenced producer never matches).
    retry_on_bump = (tv2 and meta.producer_epoch == producer_epoch + 1
                     and meta.last_producer_epoch == producer_epoch)
    retry_on_overflow = (tv2 and meta.previous_producer_id == producer_id
                         and producer_epoch == SHORT_MAX - 1 and meta.producer_epoch == 0
                         and state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT))
    # KIP-890 part 2: a version-2 client aborts with no transaction open (nothing was
    # added yet, or the last one has ended) to recover from an abortable error; as on
    # Kafka 4, that abort goes through PrepareAbort with no partitions and bumps the epoch
    version = min(txn_version, shard.config.transaction_version)
    empty_abort = (not commit and version >= 2 and state.is_idle
                   and producer_epoch == meta.producer_epoch)
    if tv2 and state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        valid_epoch = retry_on_bump or retry_on_overflow or empty_abort
    else:
        valid_epoch = producer_epoch == meta.producer_epoch
    if meta.producer_id != producer_id and not retry_on_overflow:
        return Result(EndTxnResponse(_E.invalid_producer_id_mapping))
    if state.is_prepare:
        # markers are in flight (Kafka: a pending transition to Complete*): answer
        # CONCURRENT_TRANSACTIONS before judging the epoch, as Kafka 4 does
        # (KAFKA-18464). A version-2 client that committed at epoch e holds e + 1 and
        # may send an empty abort at e + 1 before the markers land; judged now, that
        # abort would look fenced, and the producer would fence itself.
        return Result(EndTxnResponse(_E.concurrent_transactions))
    if not valid_epoch:
        return Result(EndTxnResponse(_E.producer_fenced))

    if state is TxnState.ONGOING or empty_abort:
        new = dataclasses.replace(meta, state=transition_to(state, _PREPARE[commit]),
                                  last_update_ms=now, client_txn_version=version)
        if empty_abort:
            new = dataclasses.replace(new, partitions=frozenset(), txn_start_ms=now,
                                      prepare_offset=-1)
        if version >= 2:
            next_pid = NO_PRODUCER_ID
            if is_epoch_exhausted(meta.producer_epoch):
                if new_producer_id < 0:
                    return Result(EndTxnResponse(_E.coordinator_not_available))
                next_pid = new_producer_id
            new = dataclasses.replace(new, producer_epoch=meta.producer_epoch + 1,
                                      last_producer_epoch=meta.producer_epoch,
                                      next_producer_id=next_pid)
        pid, epoch = ((new.next_producer_id, 0) if new.next_producer_id != NO_PRODUCER_ID
                      else (new.producer_id, new.producer_epoch))
        return Result(EndTxnResponse(_E.none, pid, epoch),
                      [new.to_record(shard.config.log_value_version)])
    if state is _COMPLETE[commit]:
        return Result(EndTxnResponse(_E.none, meta.producer_id, meta.producer_epoch))
    return Result(EndTxnResponse(_E.invalid_txn_state))


def complete(shard: TxnShard, transactional_id: str, producer_id: int, producer_epoch: int,
             commit: bool, now: int, prepare_offset: int | None = None) -> Result[bool]:
    """Every marker of the prepared transaction is written: CompleteCommit/
    CompleteAbort. False (and no record) if the id has moved on — another Prepare,
    epoch or outcome than the job's."""
    meta = shard.txns.get(transactional_id)
    if (meta is None or meta.state is not _PREPARE[commit]
            or meta.producer_id != producer_id or meta.producer_epoch != producer_epoch
            or (prepare_offset is not None and meta.prepare_offset != prepare_offset)):
        return Result(False)
    new = dataclasses.replace(meta, state=transition_to(meta.state, _COMPLETE[commit]),
                              partitions=frozenset(), last_update_ms=now, prepare_offset=-1)
    if meta.supports_epoch_bump:
        new = dataclasses.replace(new, previous_producer_id=meta.producer_id,
                                  next_producer_id=NO_PRODUCER_ID)
        if meta.next_producer_id != NO_PRODUCER_ID:
            new = dataclasses.replace(new, producer_id=meta.next_producer_id, producer_epoch=0)
    return Result(True, [new.to_record(shard.config.log_value_version)])


def abort_timed_out(shard: TxnShard, now: int, limit: int | None = None) -> Result[None]:
    """Fence and abort every Ongoing transaction older than its timeout (Kafka's
    `txnStartTimestamp + txnTimeoutMs < now`); KIP-939 prepared ones never time out."""
    version = shard.config.log_value_version
    records: list[Record] = []
    for meta in shard.txns.values():
        if (meta.state is TxnState.ONGOING and not meta.two_phase
                and meta.txn_start_ms + meta.timeout_ms < now
                and meta.producer_epoch < SHORT_MAX):
            records.append(fence(shard, meta, now).to_record(version))
            if limit is not None and len(records) >= limit:
                break
    return Result(None, records)


def expire_ids(shard: TxnShard, now: int, limit: int | None = None) -> Result[None]:
    """Tombstones for ids idle for transactional.id.expiration.ms with no transaction
    in progress (Empty, CompleteCommit, CompleteAbort)."""
    cutoff = now - shard.config.transactional_id_expiration_ms
    records: list[Record] = []
    for txn_id, meta in shard.txns.items():
        if meta.state.expiration_allowed and meta.last_update_ms <= cutoff:
            records.append((encode_txn_key(txn_id), None))
            if limit is not None and len(records) >= limit:
                break
    return Result(None, records)
