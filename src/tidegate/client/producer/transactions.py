"""The transactional producer's client state: seed 000's state table and KIP-1050's
error classes. Sans-IO: no sockets, no clock; `txn_manager` does the talking.

States (Kafka's TransactionManager.State, plus KIP-939's PREPARED_TRANSACTION):

- UNINITIALIZED: a producer with a ``transactional.id`` before `init_transactions()`;
  sending raises IllegalStateError.
- INITIALIZING: InitProducerId is under way (finds the coordinator, fences older
  producers with this id, waits for their transactions to end).
- READY: has a producer id and epoch, no transaction open. `begin_transaction()`.
- IN_TRANSACTION: records may be sent; new partitions are registered (AddPartitionsToTxn,
  or implicitly under transaction version 2) and offsets may be added.
- PREPARED_TRANSACTION (KIP-939): flushed and handed to an outside decision
  (`prepare_transaction()`, or found by `init_transactions(keep_prepared_txn=True)`);
  only commit or abort may follow.
- COMMITTING_TRANSACTION / ABORTING_TRANSACTION: EndTxn is under way. A commit whose
  outcome is unknown stays here and is retried; it never turns into an abort.
- ABORTABLE_ERROR: the transaction cannot commit; only `abort_transaction()` helps.
- FATAL_ERROR: nothing helps; every call raises the fatal error. Close the producer.

Every move goes through `TransactionState.transition_to`, which raises
IllegalStateError on a move the table does not allow (FATAL_ERROR is reachable from
anywhere; nothing leaves it).
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field

from kio.schema.errors import ErrorCode

from tidegate.client.errors import (
    FatalProducerError,
    IllegalStateError,
    TransactionAbortableError,
    fatal_error,
)
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError

__all__ = [
    "TRANSITIONS",
    "ErrorKind",
    "PreparedTxnState",
    "TransactionState",
    "TxnState",
    "classify",
]


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    PREPARED_TRANSACTION = "PREPARED_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TxnState
# Where each state may go (FATAL_ERROR is added for every state but itself).
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    S.UNINITIALIZED: frozenset({S.INITIALIZING}),
    # INITIALIZING -> UNINITIALIZED: InitProducerId timed out; init may be called again.
    S.INITIALIZING: frozenset({S.READY, S.PREPARED_TRANSACTION, S.UNINITIALIZED}),
    S.READY: frozenset({S.IN_TRANSACTION, S.INITIALIZING}),
    S.IN_TRANSACTION: frozenset({S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION,
                                 S.PREPARED_TRANSACTION, S.ABORTABLE_ERROR}),
    S.PREPARED_TRANSACTION: frozenset({S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    # A commit that failed for good (a record failed while flushing): abortable.
    S.COMMITTING_TRANSACTION: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.ABORTING_TRANSACTION: frozenset({S.READY}),
    S.ABORTABLE_ERROR: frozenset({S.ABORTING_TRANSACTION, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(),
}
for _state in TxnState:
    if _state is not S.FATAL_ERROR:
        TRANSITIONS[_state] = TRANSITIONS[_state] | {S.FATAL_ERROR}


class ErrorKind(enum.Enum):
    """KIP-1050's classes of a transactional error."""

    RETRIABLE = "retriable"  # try the same request again (after a short backoff)
    REDISCOVER = "rediscover"  # the coordinator moved: look it up again, then retry
    ABORTABLE = "abortable"  # the transaction cannot commit: abort it
    FATAL = "fatal"  # the producer cannot go on: close it


_E = ErrorCode
_FATAL = frozenset({
    _E.producer_fenced, _E.invalid_producer_epoch, _E.transactional_id_authorization_failed,
    _E.cluster_authorization_failed, _E.unsupported_version, _E.unsupported_for_message_format,
    _E.invalid_transaction_timeout, _E.invalid_txn_state, _E.transaction_coordinator_fenced,
    _E.invalid_request,
})
_REDISCOVER = frozenset({_E.not_coordinator, _E.coordinator_not_available,
                         _E.coordinator_load_in_progress})
_RETRIABLE = frozenset({_E.concurrent_transactions, _E.request_timed_out,
                        _E.network_exception, _E.unknown_topic_or_partition,
                        _E.not_leader_or_follower, _E.leader_not_available,
                        _E.not_enough_replicas, _E.not_enough_replicas_after_append})


def classify(code: ErrorCode) -> ErrorKind:
    """How a transactional request's error `code` is handled. What is neither fatal
    nor retried (a failed send, authorization on a topic or group, a rebalanced
    member's offsets, TRANSACTION_ABORTABLE, UNKNOWN_PRODUCER_ID, ...) is abortable."""
    if code in _FATAL:
        return ErrorKind.FATAL
    if code in _REDISCOVER:
        return ErrorKind.REDISCOVER
    if code in _RETRIABLE:
        return ErrorKind.RETRIABLE
    return ErrorKind.ABORTABLE


@dataclass(frozen=True)
class PreparedTxnState:
    """A prepared transaction (KIP-939): what another process needs to finish it.
    JSON-able: `to_json()` / `from_json()`."""

    transactional_id: str
    producer_id: int
    epoch: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> PreparedTxnState:
        d = json.loads(text)
        return cls(str(d["transactional_id"]), int(d["producer_id"]), int(d["epoch"]))


@dataclass
class TransactionState:
    """The transaction manager's state; see the module docstring."""

    transactional_id: str
    state: TxnState = TxnState.UNINITIALIZED
    # The error that put us in ABORTABLE_ERROR / FATAL_ERROR.
    error: KafkaError | None = None
    # Partitions in the current transaction (registered with the coordinator), and
    # those waiting for registration (AddPartitionsToTxn).
    partitions: set[TopicPartition] = field(default_factory=set)
    pending: set[TopicPartition] = field(default_factory=set)
    # Consumer groups whose offsets are in the transaction (AddOffsetsToTxn done).
    groups: set[str] = field(default_factory=set)
    # The transaction version in use (KIP-890): 1 or 2, decided at init.
    version: int = 1
    # KIP-939: the prepared transaction this producer holds, if any.
    prepared: PreparedTxnState | None = None
    # The epoch must be bumped (InitProducerId with the current id) before the next
    # transaction: a record failed, so sequences may have a gap (KIP-360).
    needs_epoch_bump: bool = False

    def transition_to(self, target: TxnState, error: KafkaError | None = None) -> None:
        if target not in TRANSITIONS[self.state]:
            self.raise_if_failed()
            raise IllegalStateError(
                f"TransactionalId {self.transactional_id}: invalid transition attempted "
                f"from state {self.state.value} to state {target.value}")
        if target is TxnState.FATAL_ERROR or target is TxnState.ABORTABLE_ERROR:
            self.error = error
        elif target is TxnState.READY or target is TxnState.IN_TRANSACTION:
            self.error = None
        if target is TxnState.READY:
            self.partitions.clear()
            self.pending.clear()
            self.groups.clear()
            self.prepared = None
        self.state = target

    # -- errors ------------------------------------------------------------------------

    def raise_if_failed(self) -> None:
        """Raise the stored error if the state is FATAL_ERROR or ABORTABLE_ERROR."""
        if self.state is TxnState.FATAL_ERROR:
            raise self.fatal_exception()
        if self.state is TxnState.ABORTABLE_ERROR:
            raise self.abortable_exception()

    def fatal_exception(self) -> FatalProducerError:
        err = self.error
        if isinstance(err, FatalProducerError):
            return err
        code = err.code if err is not None else ErrorCode.unknown_server_error
        return fatal_error(code, f"the transactional producer {self.transactional_id!r} "
                                 f"failed fatally: {err}; close it")

    def abortable_exception(self) -> TransactionAbortableError:
        exc = TransactionAbortableError(
            f"the transaction of {self.transactional_id!r} cannot commit: {self.error}; "
            "call abort_transaction() and begin a new one")
        exc.__cause__ = self.error
        return exc

    def fail(self, error: KafkaError) -> None:
        """Record `error` in the state it calls for (fatal, else abortable while a
        transaction is open). A fatal state stays fatal."""
        if self.state is TxnState.FATAL_ERROR:
            return
        if isinstance(error, FatalProducerError) or classify(error.code) is ErrorKind.FATAL:
            self.transition_to(TxnState.FATAL_ERROR, error)
        elif self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION,
                            TxnState.ABORTABLE_ERROR):
            self.transition_to(TxnState.ABORTABLE_ERROR, error)

    # -- checks for the public calls ---------------------------------------------------

    def require(self, *states: TxnState, what: str) -> None:
        """Raise unless in one of `states`: the stored error if failed, else
        IllegalStateError naming the call and the state."""
        if self.state in states:
            return
        self.raise_if_failed()
        hint = {
            TxnState.UNINITIALIZED: "call init_transactions() first",
            TxnState.READY: "call begin_transaction() first",
            TxnState.IN_TRANSACTION: "a transaction is already open: commit or abort it",
            TxnState.PREPARED_TRANSACTION: "a prepared transaction is waiting: call "
                                           "commit_transaction(), abort_transaction() or "
                                           "complete_transaction()",
        }.get(self.state, "")
        raise IllegalStateError(
            f"TransactionalId {self.transactional_id}: cannot {what} in state "
            f"{self.state.value}" + (f"; {hint}" if hint else ""))

    def may_send(self, tp: TopicPartition) -> bool:
        """Whether a batch for `tp` may be sent now (its partition is registered)."""
        return self.version >= 2 or tp in self.partitions

    def on_new_partition(self, tp: TopicPartition) -> None:
        """A record for `tp` was appended: register the partition if it is new."""
        if tp not in self.partitions:
            if self.version >= 2:
                self.partitions.add(tp)  # the broker adds it with the first batch
            else:
                self.pending.add(tp)
