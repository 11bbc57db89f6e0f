"""The sequence rules of Kafka's ProducerAppendInfo as a pure function, and the errors,
verdicts and result tuples of `ProducerStateManager` (`producer_state.py`, which
re-exports every public name here).

Job: decide, from one producer's entry and a client batch's header alone, which rule
applies (`classify`); `_RULES` maps each verdict to the Kafka error it answers, if any.
No state is kept here: `ProducerStateManager.validate` reads the entry and acts.

Sequence rules (Kafka's ProducerAppendInfo.checkProducerEpoch / checkSequence), applied to
client batches in this order; `_RULES` is the table from verdict to outcome:

  * epoch < current epoch                      -> INVALID_PRODUCER_EPOCH. Since Kafka 2.7
    (KIP-588) Produce never answers PRODUCER_FENCED; error 47 is what every Kafka version
    put on the wire for this case, transactional or not, so callers need no mapping.
  * no sequence (-1) or not from a client     -> epoch check only (Kafka's COORDINATOR
    origin, e.g. transactional offset commits).
  * unknown producer (no entry, or no epoch)  -> accepted at any sequence, as Kafka >= 2.5
    does ("possibly because all producer records have been deleted due to retention or
    the DeleteRecords API, accept writes with any sequence number"). With
    `strict_unknown_producer=True`, a non-zero sequence is UNKNOWN_PRODUCER_ID instead
    (Kafka <= 2.4); not the default because modern clients never expect it from Produce.
  * epoch > current epoch (a bump)             -> must start at sequence 0, else
    OUT_OF_ORDER_SEQUENCE_NUMBER.
  * same epoch, (first, last) equal to one of the cached batches -> DuplicateBatch with
    the original offsets; the batch is not written again.
  * same epoch, first == last_seq + 1 (after INT32_MAX comes 0) -> accepted.
  * same epoch, the whole batch lies just before the oldest cached batch (its last
    sequence is behind that batch's first by less than 2**30, modulo the wrap) -> a retry
    of a batch already written whose offsets are no longer known:
    DUPLICATE_SEQUENCE_NUMBER (Tidegate's choice, see the end).
  * anything else (gap, overlap) -> OUT_OF_ORDER_SEQUENCE_NUMBER.
  * a transactional batch that would be one of those two retries, but the batch it
    repeats (or the oldest cached one, for the second) lies outside the producer's open
    transaction here: OUT_OF_ORDER_SEQUENCE_NUMBER (REUSED_AFTER_MARKER, beyond Kafka;
    see the end).

Then, as Kafka: a non-transactional data batch while the producer has an open transaction
is INVALID_TXN_STATE; a marker with an older epoch is INVALID_PRODUCER_EPOCH and one with
an older coordinator epoch TRANSACTION_COORDINATOR_FENCED. With `check_verification`
(the Produce path, KIP-890), a transactional batch that would start a transaction needs
the producer's current guard (`verification`), else INVALID_TXN_STATE.

Why OLD_RETRY is DUPLICATE_SEQUENCE_NUMBER: after loading a snapshot only each
producer's last batch is known (Kafka's format keeps one), so after a clean restart the
retry of an older in-flight batch is not cached.
Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER, which fails the batch (or, depending on
settings, the whole producer) in librdkafka and the Java client. Sequences of one
(producer, epoch) only grow and are accepted only in order, so a batch wholly behind
the cached ones was written already: Tidegate answers DUPLICATE_SEQUENCE_NUMBER,
which every client (Java, librdkafka, kafka-python, aiokafka) treats as "delivered,
offset unknown". A batch 2**30 or more sequences behind is taken to be ahead (a gap).

Why REUSED_AFTER_MARKER: a client retries a batch only within its transaction (Java and
librdkafka send EndTxn after every in-flight batch has its answer), so a transactional
batch repeating sequences that a marker has already closed is not a retry but a reuse.
librdkafka does reuse them: when a transaction's batch was written but its answer was
lost (the broker killed), it aborts, rewinds to its last acknowledged sequence and sends
the next transaction's first batch with the same epoch and sequences. Kafka's rule (the
five cached batches, `findDuplicateBatch`) answers that batch as a duplicate of the
aborted one, so the next transaction commits records never written (found by the
history checker under kill -9). Tidegate answers OUT_OF_ORDER_SEQUENCE_NUMBER instead,
which Java and librdkafka take as an abortable error with an epoch bump: the transaction
aborts and is retried under a new epoch, nothing is lost. The check needs no state
beyond Kafka's snapshot: the open transaction's first offset is in it.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from tidegate.storage.producer_snapshot import SEQUENCE_MODULUS, ProducerStateEntry

__all__ = [
    "CompletedTxn",
    "DuplicateBatch",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "ProducerInfo",
    "TransactionCoordinatorFencedError",
    "UnknownProducerIdError",
    "Verdict",
    "classify",
]


class OutOfOrderSequenceError(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class DuplicateSequenceError(KafkaError):
    """A retry of a batch written before the cached ones: delivered, offset unknown."""

    code = ErrorCode.duplicate_sequence_number


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class ProducerFencedError(KafkaError):
    """For the transaction coordinator's APIs (InitProducerId, EndTxn ...); Produce uses
    InvalidProducerEpochError."""

    code = ErrorCode.producer_fenced


class UnknownProducerIdError(KafkaError):
    code = ErrorCode.unknown_producer_id


class InvalidTxnStateError(KafkaError):
    code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFencedError(KafkaError):
    code = ErrorCode.transaction_coordinator_fenced


class DuplicateBatch(NamedTuple):
    """A retried batch already in the log: answer with these, write nothing."""

    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker at `last_offset` (for the .txnindex / LSO)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerInfo(NamedTuple):
    """One producer's state as DescribeProducers reports it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction


class Verdict(enum.Enum):
    """How a client batch relates to its producer's state; `_RULES` says what follows."""

    IN_SEQUENCE = "next sequence of the current epoch"
    NEW_EPOCH_AT_ZERO = "first batch of a bumped epoch"
    FIRST_WRITE = "no state for this producer"
    UNCHECKED = "no sequence, or not from a client: epoch checked only"
    DUPLICATE = "a retry of one of the cached batches"
    OLD_RETRY = "a retry of a batch older than the cached ones"
    OLD_EPOCH = "epoch older than the current one"
    NEW_EPOCH_NOT_AT_ZERO = "bumped epoch not starting at sequence 0"
    GAP = "sequence is not last + 1"
    UNKNOWN_PRODUCER = "no state and a non-zero sequence (strict mode)"
    REUSED_AFTER_MARKER = "sequences of a batch whose transaction a marker already ended"


_RULES: dict[Verdict, type[KafkaError] | None] = {
    Verdict.IN_SEQUENCE: None,
    Verdict.NEW_EPOCH_AT_ZERO: None,
    Verdict.FIRST_WRITE: None,
    Verdict.UNCHECKED: None,
    Verdict.DUPLICATE: None,  # accepted, but answered from the cache
    Verdict.OLD_RETRY: DuplicateSequenceError,
    Verdict.OLD_EPOCH: InvalidProducerEpochError,
    Verdict.NEW_EPOCH_NOT_AT_ZERO: OutOfOrderSequenceError,
    Verdict.GAP: OutOfOrderSequenceError,
    Verdict.UNKNOWN_PRODUCER: UnknownProducerIdError,
    Verdict.REUSED_AFTER_MARKER: OutOfOrderSequenceError,
}


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == (last_seq + 1) % SEQUENCE_MODULUS


_BEHIND_LIMIT = 1 << 30  # half the sequence space: farther "behind" is read as ahead


def _behind_cache(entry: ProducerStateEntry, header: BatchHeader) -> bool:
    """The batch ends before the oldest cached batch starts (modulo the wrap)."""
    if not entry.batches:
        return False
    back = (entry.batches[0].first_seq - header.last_sequence) % SEQUENCE_MODULUS
    return 0 < back < _BEHIND_LIMIT


def classify(
    entry: ProducerStateEntry | None,
    header: BatchHeader,
    *,
    is_from_client: bool = True,
    strict_unknown_producer: bool = False,
) -> Verdict:
    """The rule that applies to data batch `header` given the producer's `entry` (pure)."""
    epoch, seq = header.producer_epoch, header.base_sequence
    if entry is not None and epoch < entry.producer_epoch:
        return Verdict.OLD_EPOCH
    if not is_from_client or seq == NO_SEQUENCE:
        return Verdict.UNCHECKED
    if entry is None or entry.producer_epoch == NO_PRODUCER_EPOCH:
        if seq == 0 or not strict_unknown_producer:
            return Verdict.FIRST_WRITE
        return Verdict.UNKNOWN_PRODUCER
    if epoch != entry.producer_epoch:
        return Verdict.NEW_EPOCH_AT_ZERO if seq == 0 else Verdict.NEW_EPOCH_NOT_AT_ZERO
    # In sequence first (the common case): a cached batch ends at or before last_seq, so
    # it can never start at last_seq + 1, and the order of the two checks does not matter.
    if _in_sequence(entry.last_seq, seq):
        return Verdict.IN_SEQUENCE
    dup = entry.find_duplicate(epoch, seq, header.last_sequence)
    if dup is not None:
        if header.is_transactional and not _in_open_txn(entry, dup.first_offset):
            return Verdict.REUSED_AFTER_MARKER
        return Verdict.DUPLICATE
    if not _behind_cache(entry, header):
        return Verdict.GAP
    if header.is_transactional and not _in_open_txn(entry, entry.batches[0].first_offset - 1):
        return Verdict.REUSED_AFTER_MARKER
    return Verdict.OLD_RETRY


def _in_open_txn(entry: ProducerStateEntry, offset: int) -> bool:
    """Could a batch written at `offset` belong to the producer's open transaction?"""
    first = entry.current_txn_first_offset
    return first is not None and offset >= first
