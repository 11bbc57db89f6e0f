"""Per-partition producer state: the idempotence checks of Kafka's ProducerStateManager.

Job: for every producer id seen in one partition, remember its epoch, its last (up to 5)
batches' sequence and offset ranges, when it last wrote, and its open transaction; use
that to accept, de-duplicate or reject each new producer batch before it is appended.

How the log uses it (all calls under the partition's append lock, never concurrently):

    dup = psm.validate(header)                 # before append; may raise a KafkaError
    if dup: answer with dup.first_offset ...   # do not write again
    ...assign offsets, append...
    psm.update(header_with_offsets, now_ms)    # after every append (any batch)
    psm.replay(header)                         # rebuilding from the log tail
    psm.take_snapshot(dir)                     # at segment roll / clean shutdown

The sequence rules (Kafka's ProducerAppendInfo.checkProducerEpoch / checkSequence) are
`classify` in `producer_rules.py`, with the errors and result tuples (re-exported here);
`validate` applies them, then, as Kafka: a non-transactional data batch while the
producer has an open transaction is INVALID_TXN_STATE; a marker with an older epoch is
INVALID_PRODUCER_EPOCH and one with an older coordinator epoch
TRANSACTION_COORDINATOR_FENCED. With `check_verification` (the Produce path, KIP-890), a
transactional batch that would start a transaction needs the producer's current guard
(`verification`), else INVALID_TXN_STATE.

Transactions (Kafka's ongoing / unreplicated split): the first transactional batch of a
producer opens its transaction (`_ongoing`: producer id -> first offset). A marker
(`update`/`replay` with its `control_type`) closes it and returns a `CompletedTxn`
(commit or abort); the transaction then stays "unreplicated" (still unstable) until
`on_high_watermark_updated` passes its marker. `first_unstable_offset` is the LSO bound;
`index_stable_offset` is the lastStableOffset Kafka stores with an aborted transaction
in the .txnindex. A marker for a producer with no open transaction completes nothing.

Expiry, truncation and snapshots (and where they differ from Kafka) are the base class
`ProducerSnapshots` in `producer_state_snapshots.py`.

Invariants: `map_end_offset` is the offset after the last batch applied; `update` refuses a
batch below it (catches headers passed before offset assignment). Each entry keeps at most
`max_batches` batches, all of its current epoch, in offset order.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidegate.records.batch import BatchHeader
from tidegate.records.control import ControlType
from tidegate.storage.producer_rules import (
    _RULES,
    CompletedTxn,
    DuplicateBatch,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    ProducerInfo,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
    Verdict,
    classify,
)
from tidegate.storage.producer_snapshot import BatchMetadata, ProducerStateEntry
from tidegate.storage.producer_state_snapshots import ProducerSnapshots
from tidegate.storage.verification import VerificationGuards

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "BatchMetadata",
    "CompletedTxn",
    "DuplicateBatch",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "ProducerInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TransactionCoordinatorFencedError",
    "UnknownProducerIdError",
    "Verdict",
    "classify",
]

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms (KIP-854)


class ProducerStateManager(ProducerSnapshots):
    """Producer state of one partition. Not thread-safe: the log serialises calls."""

    def __init__(
        self,
        max_batches: int = 5,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        *,
        strict_unknown_producer: bool = False,
    ) -> None:
        self.max_batches = max_batches
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.strict_unknown_producer = strict_unknown_producer
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open txn
        # Transactions ended by a marker at or above the high watermark: still unstable
        # (first offset, marker offset) until the high watermark passes the marker.
        self._unreplicated: list[tuple[int, int]] = []
        self._high_watermark = 0
        self.guards = VerificationGuards()
        self._map_end_offset = 0
        self._last_snapshot_offset: int | None = None

    # -- queries ---------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        """The state reflects every batch below this offset (exclusive)."""
        return self._map_end_offset

    @property
    def last_snapshot_offset(self) -> int | None:
        return self._last_snapshot_offset

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        return self._producers

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def first_undecided_offset(self) -> int | None:
        """First offset of the oldest open transaction, if any."""
        return min(self._ongoing.values()) if self._ongoing else None

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest transaction that is open, or ended by a marker the
        high watermark has not passed yet (Kafka's ongoing + unreplicated): the LSO bound."""
        if not self._unreplicated and not self._ongoing:  # no transactions: every append
            return None
        firsts = [first for first, _ in self._unreplicated]
        if self._ongoing:
            firsts.append(min(self._ongoing.values()))
        return min(firsts) if firsts else None

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction in this partition."""
        return dict(self._ongoing)

    def index_stable_offset(self, completed: CompletedTxn) -> int:
        """The lastStableOffset recorded with `completed` in the .txnindex (call right
        after the marker was applied): the first offset of the oldest other open
        transaction, else the offset after the marker."""
        return min(self._ongoing.values(), default=completed.last_offset + 1)

    def on_high_watermark_updated(self, high_watermark: int) -> bool:
        """Transactions whose marker is below `high_watermark` become stable. True if a
        transaction is still unstable (`first_unstable_offset` is not None): without
        one the log's LSO is its high watermark, decided without asking."""
        self._high_watermark = high_watermark
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated if t[1] >= high_watermark]
        return bool(self._unreplicated or self._ongoing)

    def describe(self) -> list[ProducerInfo]:
        """DescribeProducers: every producer this partition remembers, by producer id.
        Its last timestamp is Kafka's: of its last data batch or marker, whichever came
        last (a commit's or an abort's marker time, not the last record's)."""
        out = []
        for pid in sorted(self._producers):
            e = self._producers[pid]
            out.append(
                ProducerInfo(
                    pid,
                    e.producer_epoch,
                    e.last_seq,
                    e.last_record_timestamp,
                    e.coordinator_epoch,
                    -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
                )
            )
        return out

    def memory_estimate(self) -> int:
        """Approximate bytes held (tracemalloc, CPython 3.11, 100,000 producers): ~250 B per
        producer (dict slot, entry, list, timestamp) + ~160 B per cached batch, i.e. ~410 B
        for an idle producer with one batch, ~1 KB with five."""
        batches = sum(len(e.batches) for e in self._producers.values())
        return 250 * len(self._producers) + 160 * batches

    # -- the append path -------------------------------------------------------------

    def needs_verification(self, producer_id: int, producer_epoch: int | None = None) -> bool:
        """A transactional batch of this producer would start a transaction here, so the
        Produce path must hold a verification guard (KIP-890). A batch with a newer epoch
        than the producer's open transaction here starts a new one too (transaction
        version 2 bumps the epoch at every end): while the previous transaction's marker
        has not landed, it must not slip into that transaction unverified."""
        if producer_id not in self._ongoing:
            return True
        if producer_epoch is None:
            return False
        entry = self._producers.get(producer_id)
        return entry is None or producer_epoch > entry.producer_epoch

    def begin_verification(self, producer_id: int, producer_epoch: int, now_ms: int) -> object:
        """The guard to pass back with the append once the coordinator confirmed that
        this partition is in the producer's transaction (see `verification`)."""
        return self.guards.begin(producer_id, producer_epoch, now_ms)

    def validate(
        self,
        header: BatchHeader,
        *,
        is_from_client: bool = True,
        coordinator_epoch: int | None = None,
        verification_guard: object = None,
        check_verification: bool = False,
    ) -> DuplicateBatch | None:
        """Check a batch before it is appended. Returns the original batch for a retried
        duplicate, None to go ahead, or raises the Kafka error to answer with.

        `coordinator_epoch` is the marker's, for control batches (WriteTxnMarkers). With
        `check_verification`, a transactional batch that would start a transaction must
        come with the producer's current `verification_guard` (KIP-890)."""
        if header.producer_id < 0:
            return None
        entry = self._producers.get(header.producer_id)
        if header.is_control:
            self._validate_marker(entry, header, coordinator_epoch)
            return None
        verdict = classify(
            entry,
            header,
            is_from_client=is_from_client,
            strict_unknown_producer=self.strict_unknown_producer,
        )
        error = _RULES[verdict]
        if error is not None:
            h, state = (
                header,
                "none" if entry is None else f"{entry.producer_epoch}/{entry.last_seq}",
            )
            raise error(
                f"{verdict.value}: producer {h.producer_id} epoch {h.producer_epoch} sequences "
                f"{h.base_sequence}..{h.last_sequence}, current epoch/last sequence {state}"
            )
        if verdict is Verdict.DUPLICATE:
            assert entry is not None
            dup = entry.find_duplicate(
                header.producer_epoch, header.base_sequence, header.last_sequence
            )
            assert dup is not None
            return DuplicateBatch(dup.first_offset, dup.last_offset, dup.timestamp)
        txn_first = None if entry is None else entry.current_txn_first_offset
        if txn_first is not None and not header.is_transactional:
            raise InvalidTxnStateError(
                f"producer {header.producer_id} sent a non-transactional batch while "
                f"its transaction from offset {txn_first} is open"
            )
        if (
            check_verification
            and header.is_transactional
            and txn_first is None
            and not self.guards.is_current(header.producer_id, verification_guard)
        ):
            raise InvalidTxnStateError(
                f"producer {header.producer_id} epoch {header.producer_epoch} starts a "
                "transaction in this partition without a current verification (the "
                "partition was not verified in its transaction, or a marker ended it)"
            )
        return None

    @staticmethod
    def _validate_marker(
        entry: ProducerStateEntry | None, header: BatchHeader, coordinator_epoch: int | None
    ) -> None:
        if entry is None:
            return
        if header.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker epoch {header.producer_epoch} of producer {header.producer_id} "
                f"is older than {entry.producer_epoch}"
            )
        if coordinator_epoch is not None and coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"coordinator epoch {coordinator_epoch} for producer {header.producer_id} "
                f"is older than {entry.coordinator_epoch}"
            )

    def update(
        self,
        header: BatchHeader,
        now_ms: int,
        *,
        coordinator_epoch: int | None = None,
        control_type: ControlType | None = None,
    ) -> CompletedTxn | None:
        """Record a batch just appended (offsets assigned). Call for every batch, with or
        without a producer id, so `map_end_offset` follows the log end. Returns the
        transaction a marker closed, if any; a marker's `control_type` is required."""
        if header.base_offset < self._map_end_offset:
            raise ValueError(
                f"batch at {header.base_offset} is below the producer state end "
                f"{self._map_end_offset}: offsets not assigned, or appended out of order"
            )
        if header.producer_id >= 0 and control_type is None and header.is_control:
            raise ValueError(f"marker at {header.base_offset} appended without its type")
        return self._apply(header, now_ms, coordinator_epoch, control_type)

    def replay(
        self,
        header: BatchHeader,
        now_ms: int | None = None,
        *,
        coordinator_epoch: int | None = None,
        control_type: ControlType | None = None,
    ) -> CompletedTxn | None:
        """Apply a batch read back from the log, without validation (Kafka's loading from
        the log). Batches below `map_end_offset` are already reflected and skipped. The
        idle clock starts at `now_ms` if given (recommended: the load time), else at the
        batch's max timestamp. A control batch without `control_type` (not a marker)
        changes no transaction."""
        if header.next_offset <= self._map_end_offset:
            return None
        ts = header.max_timestamp if now_ms is None else now_ms
        return self._apply(header, ts, coordinator_epoch, control_type)

    def _apply(
        self,
        header: BatchHeader,
        now_ms: int,
        coordinator_epoch: int | None,
        control_type: ControlType | None,
    ) -> CompletedTxn | None:
        self._map_end_offset = header.next_offset
        pid = header.producer_id
        if pid < 0:
            return None
        is_control = header.is_control
        if is_control and header.records_count == 0:
            return None  # an empty control batch: the cleaner removed its transaction
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = ProducerStateEntry(pid)
        self.guards.on_epoch(pid, header.producer_epoch)
        entry.set_epoch(header.producer_epoch)
        entry.last_timestamp = now_ms
        entry.last_record_timestamp = header.max_timestamp  # a marker's is its own
        if is_control:
            if control_type is None:
                return None  # not a transaction marker (logged by the reader)
            self.guards.clear(pid)
            completed = None
            first = entry.current_txn_first_offset
            if first is not None:
                completed = CompletedTxn(
                    pid, first, header.base_offset, control_type is ControlType.ABORT
                )
                if header.base_offset >= self._high_watermark:
                    self._unreplicated.append((first, header.base_offset))
            entry.current_txn_first_offset = None
            self._ongoing.pop(pid, None)
            if coordinator_epoch is not None:
                entry.coordinator_epoch = coordinator_epoch
            return completed
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            )
        )
        if len(entry.batches) > self.max_batches:
            del entry.batches[0]
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = header.base_offset
            self._ongoing[pid] = header.base_offset
            self.guards.clear(pid)  # started: its later batches need no guard
        return None
