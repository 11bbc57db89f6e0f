"""The idempotent producer's state: producer id and epoch, per-partition sequences.

Sans-IO: the sender asks it whether a batch may be drained, tells it when batches are
drained, acknowledged, retried or failed, and does the InitProducerId round trip when
`needs_producer_id` says so.

Rules (Kafka's TransactionManager for a non-transactional producer; KIP-360):

- Nothing is sent before a producer id is known (InitProducerId, lazily at the first
  send). A batch gets its sequence when it is drained, not when records are appended:
  ``base_sequence`` = the partition's next sequence, which then grows by the record
  count, wrapping after INT32_MAX to 0. The producer id, epoch and base sequence are
  written into the batch's header then (`stamp`), and stay with it: a retry re-sends
  the same bytes with the same sequence.
- A partition has at most `MAX_IN_FLIGHT_PER_PARTITION` unfinished batches with
  sequences (the broker de-duplicates against its last 5). A batch that has a sequence
  and comes back for a retry may be sent again only when it is the partition's oldest
  unfinished batch, so retries go out in sequence order before anything newer, one at
  a time, and the accumulator puts them back in their queue in sequence order.
- DUPLICATE_SEQUENCE_NUMBER is success with an unknown offset (as the Java client).
- OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that is not the oldest unfinished one of its
  partition is fallout from an earlier batch's failure: retry it as it is.
  For the oldest one (a real gap), UNKNOWN_PRODUCER_ID, and any batch with a sequence
  that fails for good or expires (its outcome may be unknown, and later sequences would
  now meet a gap): the producer needs a new id. Nothing new is sent; once no request
  is in flight the sender asks InitProducerId again (with the current id and epoch, as
  KIP-360 says; a broker answers an idempotent producer with a new id, epoch 0), and
  every partition starts again at sequence 0: batches waiting for a retry lose their
  sequence and are stamped afresh when drained. (Kafka's Java client bumps the epoch
  locally instead; librdkafka asks the broker, as we do.)
- INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING and the
  authorization errors are fatal: `fatal` is set, every unfinished record fails with
  it, and further sends raise it. Close the producer and create a new one.
- A transactional producer (`transactional`): the transaction manager
  (`transactions`/`txn_manager`) owns the producer id: this manager never asks for
  one, nothing is sent while there is none, `gate` decides whether a partition may
  be sent to (added to the transaction), batches are stamped with the transactional
  bit, and a sequence gap is not repaired here (the transaction is aborted instead,
  and the next epoch starts every partition at 0: `on_reset_needed` says so).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.errors import FatalProducerError
from tidegate.client.producer.accumulator import ProducerBatch
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError
from tidegate.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
    compute_crc,
)

__all__ = [
    "MAX_IN_FLIGHT_PER_PARTITION",
    "SEQUENCE_MODULUS",
    "FatalProducerError",
    "IdempotenceManager",
    "Verdict",
    "stamp",
]

SEQUENCE_MODULUS = 1 << 31  # sequences wrap after INT32_MAX, as Kafka's
MAX_IN_FLIGHT_PER_PARTITION = 5

FATAL_CODES = frozenset(
    {
        ErrorCode.invalid_producer_epoch,
        ErrorCode.producer_fenced,
        ErrorCode.invalid_producer_id_mapping,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.transactional_id_authorization_failed,
    }
)

# producerId (int64), producerEpoch (int16), baseSequence (int32) at byte 43 of a v2 batch.
_PRODUCER_FIELDS = struct.Struct(">qhi")
_PRODUCER_OFFSET = 43
_CRC = struct.Struct(">I")
_ATTRS = struct.Struct(">h")


class Verdict:
    """What to do with a batch after an error response."""

    RETRY = "retry"
    FAIL = "fail"
    FATAL = "fatal"


def stamp(payload: bytes, producer_id: int, epoch: int, base_sequence: int,
          transactional: bool = False) -> bytes:
    """`payload` (one built v2 batch) with the producer fields (and, if `transactional`,
    the transactional attribute bit) set and the CRC redone."""
    buf = bytearray(payload)
    _PRODUCER_FIELDS.pack_into(buf, _PRODUCER_OFFSET, producer_id, epoch, base_sequence)
    if transactional:
        (attrs,) = _ATTRS.unpack_from(buf, ATTRIBUTES_OFFSET)
        _ATTRS.pack_into(buf, ATTRIBUTES_OFFSET, attrs | TRANSACTIONAL_MASK)
    _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


class _Partition:
    __slots__ = ("in_flight", "last_acked", "next_sequence")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.last_acked = -1
        # Batches with a sequence that are not finished, in sequence order (queued for
        # a retry or in a request).
        self.in_flight: list[ProducerBatch[Any]] = []


class IdempotenceManager:
    """See the module docstring."""

    def __init__(self) -> None:
        self.producer_id = NO_PRODUCER_ID
        self.epoch = NO_PRODUCER_EPOCH
        self.fatal: KafkaError | None = None
        self.reset_reason: str | None = None  # why a new producer id is needed
        self.resets = 0  # new producer ids after the first (for tests and logs)
        self._parts: dict[TopicPartition, _Partition] = {}
        self._order = 0
        # Transactional mode (see the module docstring).
        self.transactional = False
        self.gate: Callable[[TopicPartition], bool] | None = None
        self.on_reset_needed: Callable[[str], None] | None = None
        self.on_fatal: Callable[[KafkaError], None] | None = None

    # -- producer id -------------------------------------------------------------------

    @property
    def needs_producer_id(self) -> bool:
        return self.fatal is None and not self.transactional and (
            self.producer_id == NO_PRODUCER_ID or self.reset_reason is not None
        )

    def request_reset(self, reason: str) -> None:
        """Ask for a new producer id (KIP-360); nothing is sent until it arrives. A
        transactional producer is told instead (`on_reset_needed`)."""
        if self.transactional:
            if self.on_reset_needed is not None:
                self.on_reset_needed(reason)
            return
        if self.reset_reason is None and self.producer_id != NO_PRODUCER_ID:
            self.reset_reason = reason

    def set_producer_id(
        self, producer_id: int, epoch: int, queued: list[ProducerBatch[Any]]
    ) -> None:
        """A new id from InitProducerId: every partition starts again at sequence 0,
        and batches waiting for a retry (`queued`) will get new sequences. Call only
        while no request is in flight."""
        if self.producer_id != NO_PRODUCER_ID:
            self.resets += 1
        self.producer_id, self.epoch = producer_id, epoch
        self.reset_reason = None
        self._parts.clear()
        for batch in queued:
            batch.base_sequence = NO_SEQUENCE
            batch.seq_order = -1

    def set_fatal(self, exc: KafkaError) -> None:
        if self.fatal is None:
            self.fatal = exc
            if self.on_fatal is not None:
                self.on_fatal(exc)

    # -- sequences ---------------------------------------------------------------------

    def _part(self, tp: TopicPartition) -> _Partition:
        part = self._parts.get(tp)
        if part is None:
            part = self._parts[tp] = _Partition()
        return part

    def can_send(self, batch: ProducerBatch[Any]) -> bool:
        """Whether the accumulator may drain `batch` (the first of its queue) now."""
        if self.fatal is not None or self.needs_producer_id:
            return False
        if self.transactional and (self.producer_id == NO_PRODUCER_ID or (
                self.gate is not None and not self.gate(batch.tp))):
            return False
        part = self._parts.get(batch.tp)
        if batch.base_sequence != NO_SEQUENCE:
            # A retry: only as the oldest unfinished batch, so sequences stay in order.
            return part is not None and bool(part.in_flight) and part.in_flight[0] is batch
        return part is None or len(part.in_flight) < MAX_IN_FLIGHT_PER_PARTITION

    def on_drain(self, batch: ProducerBatch[Any]) -> None:
        """`batch` is being sent: give it a sequence if it has none (its payload is
        built), and stamp it."""
        if batch.base_sequence != NO_SEQUENCE:
            return
        part = self._part(batch.tp)
        seq = part.next_sequence
        part.next_sequence = (seq + len(batch)) % SEQUENCE_MODULUS
        batch.producer_id, batch.producer_epoch = self.producer_id, self.epoch
        batch.base_sequence = seq
        batch.seq_order = self._order
        self._order += 1
        assert batch.payload is not None
        batch.payload = stamp(batch.payload, self.producer_id, self.epoch, seq,
                              self.transactional)
        part.in_flight.append(batch)

    def _is_current(self, batch: ProducerBatch[Any]) -> bool:
        return batch.base_sequence != NO_SEQUENCE and (batch.producer_id, batch.producer_epoch) == (
            self.producer_id,
            self.epoch,
        )

    def _forget(self, batch: ProducerBatch[Any]) -> _Partition | None:
        part = self._parts.get(batch.tp)
        if part is not None and self._is_current(batch):
            try:
                part.in_flight.remove(batch)
            except ValueError:
                pass
            return part
        return None

    def on_complete(self, batch: ProducerBatch[Any]) -> None:
        part = self._forget(batch)
        if part is not None:
            part.last_acked = (batch.base_sequence + len(batch) - 1) % SEQUENCE_MODULUS

    def on_fail(self, batch: ProducerBatch[Any]) -> None:
        """`batch` failed for good. If it had a sequence, later ones meet a gap (or, if
        its outcome is unknown, maybe not): start afresh with a new producer id."""
        if self._forget(batch) is not None and self.fatal is None:
            self.request_reset(
                f"batch {batch.tp.topic}-{batch.tp.partition} with "
                f"sequence {batch.base_sequence} failed"
            )

    def on_retry(self, batch: ProducerBatch[Any]) -> None:
        """`batch` goes back to its queue. One stamped under an older producer id (or
        never stamped) is drained again as a new batch."""
        if batch.base_sequence != NO_SEQUENCE and not self._is_current(batch):
            batch.base_sequence = NO_SEQUENCE
            batch.seq_order = -1

    def on_error(self, batch: ProducerBatch[Any], code: ErrorCode) -> str:
        """The broker refused `batch` with an idempotence error `code`: a `Verdict`.
        Other codes are the caller's (plain retriable / non-retriable handling)."""
        if code in FATAL_CODES:
            return Verdict.FATAL
        if not self._is_current(batch):
            return Verdict.RETRY  # stamped before a reset: gets a new sequence
        if code == ErrorCode.unknown_producer_id:
            self.request_reset(f"UNKNOWN_PRODUCER_ID from {batch.tp.topic}-{batch.tp.partition}")
            return Verdict.RETRY
        if code == ErrorCode.out_of_order_sequence_number:
            part = self._parts.get(batch.tp)
            if part is not None and part.in_flight and part.in_flight[0] is batch:
                self.request_reset(
                    f"OUT_OF_ORDER_SEQUENCE_NUMBER for {batch.tp.topic}-{batch.tp.partition} "
                    f"at sequence {batch.base_sequence} (expected after {part.last_acked})"
                )
            return Verdict.RETRY
        return Verdict.FAIL

    # -- introspection -----------------------------------------------------------------

    def next_sequence(self, tp: TopicPartition) -> int:
        part = self._parts.get(tp)
        return 0 if part is None else part.next_sequence

    def unfinished(self, tp: TopicPartition) -> list[ProducerBatch[Any]]:
        part = self._parts.get(tp)
        return [] if part is None else list(part.in_flight)
