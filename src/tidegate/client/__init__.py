"""Tidegate's Python client: producer, consumer and admin, asyncio and blocking.

The asyncio classes (`AsyncProducer`, `AsyncConsumer`, `AsyncAdmin`) are the
implementation; `Producer`, `Consumer` and `Admin` run the same code on a private
event-loop thread for blocking use. Configuration uses Kafka's keys and defaults
(`client.config`). Layers inside: `connection` (sans-IO framing and correlation) ->
`net` (asyncio connections, version negotiation, reconnects) -> `metadata` ->
`producer` / `consumer` / `admin`. The client never imports the broker.
"""

from tidegate.client.admin import AsyncAdmin
from tidegate.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from tidegate.client.consumer import AsyncConsumer
from tidegate.client.errors import (
    ClientClosedError,
    ConfigError,
    FatalProducerError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    PreparedTxnMismatchError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from tidegate.client.producer import AsyncProducer
from tidegate.client.producer.transactions import PreparedTxnState, TxnState
from tidegate.client.sync import Admin, Consumer, Producer
from tidegate.client.types import (
    ConfigEntry,
    ConfigResource,
    ConsumerGroupMetadata,
    ConsumerRecord,
    NewTopic,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)

__all__ = [
    "Admin",
    "AdminConfig",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "ClientClosedError",
    "ConfigEntry",
    "ConfigError",
    "ConfigResource",
    "Consumer",
    "ConsumerConfig",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "FatalProducerError",
    "IllegalStateError",
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "PreparedTxnMismatchError",
    "PreparedTxnState",
    "Producer",
    "ProducerConfig",
    "ProducerFencedError",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TxnState",
]
