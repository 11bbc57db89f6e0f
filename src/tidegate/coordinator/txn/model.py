"""What the transaction coordinator knows about one transactional id, and marker jobs.

`TxnMetadata` is frozen: operations build the metadata a record should describe
(`dataclasses.replace`), encode it with `to_record`, and `TxnShard.replay` installs the
decoded result (the value `to_record` encoded, when it can tell: `KnownRecord`).
`from_log_value` is the single place a stored value becomes metadata,
so the live path and a load agree by construction.

Invariants: `partitions` is empty in Empty; `prepare_offset` is the offset of the
record that put the id in PrepareCommit/PrepareAbort, else -1; `txn_start_ms` is -1
until a transaction starts (Kafka's `txnStartTimestamp`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidegate.coordinator.runtime import KnownRecord, Record
from tidegate.coordinator.txn.states import TxnState
from tidegate.protocol.txn_records import TxnLogValue, encode_txn_key, encode_txn_value

__all__ = [
    "INT32_MAX",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "SHORT_MAX",
    "MarkerJob",
    "TopicPartition",
    "TxnMetadata",
    "from_log_value",
    "is_epoch_exhausted",
]

SHORT_MAX = 32767
INT32_MAX = 2_147_483_647  # the timeout of a KIP-939 (two-phase commit) transaction
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

TopicPartition = tuple[str, int]


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps Short.MAX_VALUE free so a fence can always bump once more."""
    return epoch >= SHORT_MAX - 1


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    txn_start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID  # set by a KIP-890 end that exhausts the epoch
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # what a KIP-360 retry may present
    client_txn_version: int = 0
    prepare_offset: int = -1
    # KIP-939: the epoch the ongoing transaction was prepared with, once keep_prepared_txn
    # has bumped the producer's epoch (NO_PRODUCER_EPOCH otherwise)
    prepared_epoch: int = NO_PRODUCER_EPOCH

    @property
    def supports_epoch_bump(self) -> bool:
        return self.client_txn_version >= 2

    @property
    def two_phase(self) -> bool:
        """A KIP-939 transaction: exempt from the timeout."""
        return self.timeout_ms == INT32_MAX

    def to_value(self) -> TxnLogValue:
        parts = None
        if self.state is not TxnState.EMPTY:
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(self.partitions):
                by_topic.setdefault(topic, []).append(p)
            parts = tuple((t, tuple(ps)) for t, ps in by_topic.items())
        return TxnLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            status=self.state.id,
            partitions=parts,
            last_update_ms=self.last_update_ms,
            start_ms=self.txn_start_ms,
            previous_producer_id=self.previous_producer_id,
            next_producer_id=self.next_producer_id,
            client_txn_version=self.client_txn_version,
            last_producer_epoch=self.last_producer_epoch,
            prepared_producer_epoch=(None if self.prepared_epoch == NO_PRODUCER_EPOCH
                                     else self.prepared_epoch),
        )

    def to_record(self, value_version: int) -> Record:
        """The key and value; at value version 1 a `KnownRecord` whose `known` is
        `(transactional_id, value)`, what decoding them gives (a v1 value round-trips
        exactly; tests/unit/coordinator/test_txn_known_records.py), so replay skips the
        decode. A v0 value drops the v1 tags: replay decodes it."""
        value = self.to_value()
        key = encode_txn_key(self.transactional_id)
        raw = encode_txn_value(value, value_version)
        if value_version != 1:
            return key, raw
        return KnownRecord(key, raw, (self.transactional_id, value))


def from_log_value(txn_id: str, v: TxnLogValue, prev: TxnMetadata | None,
                   offset: int) -> TxnMetadata:
    """The metadata a stored value describes. The last epoch comes from the Tidegate
    tag; without it (v0 values, logs written by Kafka) it is derived from the previous
    state: kept while the epoch is unchanged, the prior epoch after a KIP-890 end, and
    -1 otherwise — Kafka's own value after a failover."""
    state = TxnState.from_id(v.status)
    last = v.last_producer_epoch
    if last is None:
        same_pid = prev is not None and prev.producer_id == v.producer_id
        if state.is_prepare and v.client_txn_version >= 2:
            last = v.producer_epoch - 1
        elif same_pid and prev is not None and prev.producer_epoch == v.producer_epoch:
            last = prev.last_producer_epoch
        else:
            last = NO_PRODUCER_EPOCH
    partitions: frozenset[TopicPartition] = frozenset()
    if state is not TxnState.EMPTY and v.partitions:
        partitions = frozenset((t, p) for t, ps in v.partitions for p in ps)
    return TxnMetadata(
        transactional_id=txn_id,
        producer_id=v.producer_id,
        producer_epoch=v.producer_epoch,
        timeout_ms=v.timeout_ms,
        state=state,
        partitions=partitions,
        txn_start_ms=v.start_ms,
        last_update_ms=v.last_update_ms,
        previous_producer_id=v.previous_producer_id,
        next_producer_id=v.next_producer_id,
        last_producer_epoch=last,
        client_txn_version=v.client_txn_version,
        prepare_offset=offset if state.is_prepare else -1,
        prepared_epoch=(NO_PRODUCER_EPOCH if v.prepared_producer_epoch is None
                        else v.prepared_producer_epoch),
    )


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Write a COMMIT/ABORT marker to every partition of a prepared transaction, then
    call `ops.complete(shard, transactional_id, producer_id, producer_epoch, commit)`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    prepare_offset: int = -1
