"""Version-free requests and responses of the transaction coordinator's operations.

Handlers translate the wire messages of every API version to and from these, so the
state machine never sees a protocol version. Error codes are Kafka's newest ones; the
handler downgrades for old request versions as Kafka's KafkaApis does (e.g.
PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH for InitProducerId < v4, AddPartitionsToTxn
and EndTxn < v2, AddOffsetsToTxn < v2; TRANSACTION_ABORTABLE -> INVALID_TXN_STATE
before KIP-890 versions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.txn.model import MarkerJob, TopicPartition

__all__ = [
    "AddPartitionsResponse",
    "DescribedTxn",
    "EndTxnResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "ListTransactionsResponse",
    "ListedTxn",
    "MarkerJob",
]


@dataclass(frozen=True)
class InitProducerIdRequest:
    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int = -1  # v3+ (KIP-360): the producer's current id, or -1
    producer_epoch: int = -1
    enable_2pc: bool = False  # KIP-939
    keep_prepared_txn: bool = False  # KIP-939


@dataclass(frozen=True)
class InitProducerIdResponse:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1
    # KIP-939: the id/epoch of a prepared transaction kept by keep_prepared_txn, else -1
    ongoing_txn_producer_id: int = -1
    ongoing_txn_producer_epoch: int = -1


@dataclass(frozen=True)
class AddPartitionsResponse:
    """One error per requested partition (Kafka's per-partition results)."""

    errors: dict[TopicPartition, ErrorCode]

    @property
    def error(self) -> ErrorCode:
        """The first non-NONE error, or NONE."""
        return next((e for e in self.errors.values() if e is not ErrorCode.none),
                    ErrorCode.none)


@dataclass(frozen=True)
class EndTxnResponse:
    error: ErrorCode
    producer_id: int = -1  # EndTxn v5+: the id/epoch to use next (KIP-890)
    producer_epoch: int = -1


@dataclass(frozen=True)
class ListedTxn:
    transactional_id: str
    producer_id: int
    state: str  # Kafka's state name


@dataclass(frozen=True)
class ListTransactionsResponse:
    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[ListedTxn, ...] = ()


@dataclass(frozen=True)
class DescribedTxn:
    transactional_id: str
    error: ErrorCode
    state: str = ""
    timeout_ms: int = 0
    start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    topics: dict[str, list[int]] = field(default_factory=dict)
