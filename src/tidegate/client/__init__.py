"""Tidegate's Python client: producer, consumer and admin, asyncio and blocking.

The asyncio classes (`AsyncProducer`, `AsyncConsumer`, `AsyncAdmin`) are the
implementation; `Producer`, `Consumer` and `Admin` run the same code on a private
event-loop thread for blocking use. Configuration uses Kafka's keys and defaults
(`client.config`). Layers inside: `connection` (sans-IO framing and correlation) ->
`net` (asyncio connections, version negotiation, reconnects) -> `metadata` ->
`producer` / `consumer` / `admin`. The client never imports the broker.

Every name here is imported on first use (`__getattr__`), so `import tidegate.client`
and `from tidegate.client import Producer` load only what that name needs: the admin
modules, the SASL library and the TLS settings code stay unloaded until used (a Spark
worker and every `tidegate` command start faster; tests/unit/client/test_lazy_imports.py
keeps it so).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# name -> the module defining it, imported when the name is first asked for
_LAZY = {
    "Admin": "tidegate.client.sync",
    "AdminConfig": "tidegate.client.config",
    "AsyncAdmin": "tidegate.client.admin",
    "AsyncConsumer": "tidegate.client.consumer",
    "AsyncProducer": "tidegate.client.producer",
    "ClientClosedError": "tidegate.client.errors",
    "ConfigEntry": "tidegate.client.types",
    "ConfigError": "tidegate.client.errors",
    "ConfigResource": "tidegate.client.types",
    "Consumer": "tidegate.client.sync",
    "ConsumerConfig": "tidegate.client.config",
    "ConsumerGroupMetadata": "tidegate.client.types",
    "ConsumerRecord": "tidegate.client.types",
    "FatalProducerError": "tidegate.client.errors",
    "IllegalStateError": "tidegate.client.errors",
    "KafkaConnectionError": "tidegate.client.errors",
    "KafkaTimeoutError": "tidegate.client.errors",
    "NewTopic": "tidegate.client.types",
    "NoOffsetForPartitionError": "tidegate.client.errors",
    "OffsetAndTimestamp": "tidegate.client.types",
    "PreparedTxnMismatchError": "tidegate.client.errors",
    "PreparedTxnState": "tidegate.client.producer.transactions",
    "Producer": "tidegate.client.sync",
    "ProducerConfig": "tidegate.client.config",
    "ProducerFencedError": "tidegate.client.errors",
    "RecordMetadata": "tidegate.client.types",
    "TopicDescription": "tidegate.client.types",
    "TopicPartition": "tidegate.client.types",
    "TransactionAbortableError": "tidegate.client.errors",
    "TransactionAbortedError": "tidegate.client.errors",
    "TxnState": "tidegate.client.producer.transactions",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
