"""The consumer: assignment state, background fetcher, group membership, `AsyncConsumer`."""

from tidegate.client.consumer.consumer import AsyncConsumer
from tidegate.client.consumer.group import ConsumerGroupMetadata
from tidegate.client.consumer.group_offsets import (
    CommitFailedError,
    FencedInstanceIdError,
    InvalidGroupIdError,
    OffsetAndMetadata,
    RebalanceInProgressError,
)
from tidegate.client.consumer.listener import RebalanceListener

__all__ = [
    "AsyncConsumer",
    "CommitFailedError",
    "ConsumerGroupMetadata",
    "FencedInstanceIdError",
    "InvalidGroupIdError",
    "OffsetAndMetadata",
    "RebalanceInProgressError",
    "RebalanceListener",
]
