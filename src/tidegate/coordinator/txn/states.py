"""The transaction state machine: Kafka's `TransactionState`s and its transition table.

Every state change of a live transactional id is checked by `transition_to` (replay
calls it for each record of a live operation); an illegal move raises
`IllegalTxnTransition`, a coordinator bug, never a client error. Loading a partition
sets the states its records describe without checks: compaction may have removed the
records in between. Each state's docstring says what the coordinator does with each
request in that state. Values are Kafka's ids (the status byte of
`TransactionLogValue`); `wire_name` is what DescribeTransactions/ListTransactions show.

Two states are never written to the log: Dead is a tombstone (the id is removed) and
PrepareEpochFence is passed through within one operation (fencing writes the
PrepareAbort record with the bumped epoch directly, as Kafka does).
"""

from __future__ import annotations

import enum

__all__ = ["PREVIOUS_STATES", "IllegalTxnTransition", "TxnState", "transition_to"]


class TxnState(enum.Enum):
    _wire_name: str
    _doc: str

    def __new__(cls, state_id: int, wire_name: str, doc: str) -> TxnState:
        obj = object.__new__(cls)
        obj._value_ = state_id
        obj._wire_name = wire_name
        obj._doc = doc
        return obj

    @property
    def id(self) -> int:
        return int(self.value)

    @property
    def wire_name(self) -> str:
        return self._wire_name

    @property
    def doc(self) -> str:
        return self._doc

    @property
    def expiration_allowed(self) -> bool:
        """May the id be removed after transactional.id.expiration.ms idle?"""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_idle(self) -> bool:
        """No transaction open: Empty, CompleteCommit or CompleteAbort."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        return _BY_ID[state_id]

    EMPTY = (
        0,
        "Empty",
        """No transaction. InitProducerId: bumps the epoch (a new producer id once the
        epoch is exhausted); stays Empty. AddPartitions/AddOffsets: starts a
        transaction (Ongoing, start time = now). EndTxn: INVALID_TXN_STATE, but an abort
        from a version-2 client (EndTxn v5+) -> PrepareAbort with no partitions, epoch
        bumped (KIP-890). Expires after transactional.id.expiration.ms without updates.""",
    )
    ONGOING = (
        1,
        "Ongoing",
        """A transaction is open. InitProducerId: fences the producer — bumps the epoch
        and aborts (PrepareAbort), answering CONCURRENT_TRANSACTIONS so the client
        retries; with keep_prepared_txn (KIP-939) keeps the transaction, bumps the
        epoch and returns the transaction's producer id/epoch. AddPartitions/
        AddOffsets: adds partitions (no record if all are present). EndTxn: commit ->
        PrepareCommit, abort -> PrepareAbort. Aborted (fenced) when older than its
        transaction.timeout.ms.""",
    )
    PREPARE_COMMIT = (
        2,
        "PrepareCommit",
        """The outcome is decided; COMMIT markers are being written once this record
        is durable. InitProducerId, AddPartitions, AddOffsets: CONCURRENT_TRANSACTIONS.
        EndTxn (any epoch, either outcome; Kafka 4): CONCURRENT_TRANSACTIONS.
        All markers written -> CompleteCommit.""",
    )
    PREPARE_ABORT = (
        3,
        "PrepareAbort",
        """The transaction is being aborted; ABORT markers are being written once this
        record is durable. InitProducerId, AddPartitions, AddOffsets:
        CONCURRENT_TRANSACTIONS. EndTxn (any epoch, either outcome; Kafka 4):
        CONCURRENT_TRANSACTIONS. All markers written -> CompleteAbort.""",
    )
    COMPLETE_COMMIT = (
        4,
        "CompleteCommit",
        """The last transaction committed. InitProducerId: as Empty. AddPartitions/
        AddOffsets: a new transaction (Ongoing). EndTxn: commit (a retry) -> NONE,
        abort -> INVALID_TXN_STATE (version 2: as from Empty). Expires like Empty.""",
    )
    COMPLETE_ABORT = (
        5,
        "CompleteAbort",
        """The last transaction aborted. InitProducerId: as Empty. AddPartitions/
        AddOffsets: a new transaction (Ongoing). EndTxn: abort (a retry) -> NONE, a new
        version-2 abort as from Empty, commit -> INVALID_TXN_STATE. Expires like Empty.""",
    )
    DEAD = (
        6,
        "Dead",
        """The id expired; written as a tombstone and dropped from memory, so requests
        see an unknown id (InitProducerId starts afresh, others
        INVALID_PRODUCER_ID_MAPPING).""",
    )
    PREPARE_EPOCH_FENCE = (
        7,
        "PrepareEpochFence",
        """Passed through while fencing an Ongoing transaction (InitProducerId or the
        timeout): the epoch is bumped and the transaction moves on to PrepareAbort in
        the same record. Never stored.""",
    )


_BY_NAME = {s.wire_name: s for s in TxnState}
_BY_ID = {s.id: s for s in TxnState}

_E, _O, _PC, _PA, _CC, _CA, _D, _F = (
    TxnState.EMPTY,
    TxnState.ONGOING,
    TxnState.PREPARE_COMMIT,
    TxnState.PREPARE_ABORT,
    TxnState.COMPLETE_COMMIT,
    TxnState.COMPLETE_ABORT,
    TxnState.DEAD,
    TxnState.PREPARE_EPOCH_FENCE,
)

PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _E: frozenset({_E, _CC, _CA}),
    _O: frozenset({_O, _E, _CC, _CA}),
    _PC: frozenset({_O}),
    _PA: frozenset({_O, _F, _E, _CC, _CA}),  # from idle: a version-2 abort (KIP-890)
    _CC: frozenset({_PC}),
    _CA: frozenset({_PA}),
    _D: frozenset({_E, _CC, _CA}),
    _F: frozenset({_O}),
}
"""to-state -> the states it may be reached from (Kafka's validPreviousStates)."""


class IllegalTxnTransition(RuntimeError):
    pass


def transition_to(current: TxnState, target: TxnState) -> TxnState:
    """`target`, if the table allows moving there from `current`."""
    if current not in PREVIOUS_STATES[target]:
        raise IllegalTxnTransition(
            f"transaction cannot move from {current.wire_name} to {target.wire_name}"
        )
    return target
