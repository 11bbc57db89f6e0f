"""Small value types shared by the producer, consumer and admin client.

Tuples (`NamedTuple`) where the client keeps many of them in dicts and sets —
hashing a tuple is far cheaper than hashing a dataclass.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from tidegate.records.record import gc_track as _gc_track

__all__ = [
    "BrokerInfo",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "LogDirDescription",
    "NewTopic",
    "OffsetAndTimestamp",
    "PartitionInfo",
    "ProducerState",
    "RecordMetadata",
    "TopicDescription",
    "TopicInfo",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
]

Header = tuple[str, bytes | None]


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written. `offset` is -1 with acks=0; `timestamp`
    is the broker's LogAppendTime if the topic uses it, else the record's CreateTime."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class ConsumerRecord:
    """One consumed record. `timestamp_type` is 0 (CreateTime) or 1 (LogAppendTime)."""

    __slots__ = ("headers", "key", "offset", "partition", "timestamp", "timestamp_type",
                 "topic", "value")
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]

    def __init__(self, topic: str, partition: int, offset: int, timestamp: int,
                 timestamp_type: int, key: bytes | None, value: bytes | None,
                 headers: tuple[Header, ...]) -> None:
        # The consumer does not call this: records.record.decode_record_objects makes
        # its records (in C, without __init__). object.__setattr__: past ours below.
        set_ = object.__setattr__
        set_(self, "topic", topic)
        set_(self, "partition", partition)
        set_(self, "offset", offset)
        set_(self, "timestamp", timestamp)
        set_(self, "timestamp_type", timestamp_type)
        set_(self, "key", key)
        set_(self, "value", value)
        set_(self, "headers", headers)

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        # The C decoder's records are untracked by the cycle collector (they cannot
        # be in a cycle as made); a new value might refer back to the record.
        if _gc_track is not None:
            _gc_track(self)

    def __repr__(self) -> str:
        return (f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, "
                f"offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    is_internal: bool = False
    error_code: int = 0

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


# -- admin ---------------------------------------------------------------------------


TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


class ConfigResource(NamedTuple):
    """A thing with configs: `type` is Kafka's ConfigResource.Type id (2 topic,
    4 broker)."""

    type: int
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(2, name)

    @classmethod
    def broker(cls, node_id: int) -> ConfigResource:
        return cls(4, str(node_id))


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config value. `source` is Kafka's ConfigSource id (1 = topic override,
    4 = static broker config, 5 = default); `is_default` is source 5."""

    name: str
    value: str | None
    read_only: bool = False
    source: int = -1
    is_sensitive: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == 5


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    is_internal: bool = False
    configs: dict[str, ConfigEntry] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerInfo, ...]


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log directory of a broker (DescribeLogDirs). `total_bytes`/`usable_bytes`
    are the volume's, -1 when the broker does not say (DescribeLogDirs < v4);
    `partition_sizes` maps each partition stored there to its size in bytes."""
    broker_id: int
    path: str
    error: str | None
    total_bytes: int
    usable_bytes: int
    partition_sizes: dict[TopicPartition, int] = field(default_factory=dict)


# -- transactions (KIP-664) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What a transactional producer needs to commit a consumer's offsets inside its
    transaction (KIP-447): the group and the member's generation, so the group
    coordinator can refuse a commit from a member that was rebalanced away. The
    consumer's `group_metadata()` returns one; the producer's
    `send_offsets_to_transaction()` takes it."""
    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transactional id a coordinator knows (ListTransactions); `state` is Kafka's
    name (Empty, Ongoing, PrepareCommit, ...); `coordinator_id` is the broker that
    answered."""
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int = -1


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """A coordinator's view of one transactional id (DescribeTransactions).
    `start_time_ms` is -1 when no transaction is running; `partitions` are those in
    the ongoing transaction (or, while preparing, those still without a marker)."""
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class ProducerState:
    """A partition's view of one producer (DescribeProducers). `coordinator_epoch` is
    -1 until a marker was written for it; `current_txn_start_offset` is the first
    offset of its open transaction in the partition, -1 when none is open."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int
