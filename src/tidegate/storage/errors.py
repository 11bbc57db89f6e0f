"""Typed Kafka errors raised by the storage layer that `common.errors` does not define yet.

Each carries Kafka's wire code, so handlers can turn them into responses like any other
`KafkaError`. (Candidates to move into `tidegate.common.errors`.)
"""

from __future__ import annotations

from tidegate.common.errors import ErrorCode, KafkaError, KafkaStorageError

__all__ = [
    "CorruptIndexError",
    "InconsistentClusterIdError",
    "InconsistentTopicIdError",
    "InvalidTimestampError",
    "LogDirectoryError",
    "RecordListTooLargeError",
    "UnexpectedAppendOffsetError",
]


class InvalidTimestampError(KafkaError):
    """A CreateTime timestamp outside message.timestamp.before/after.max.ms."""

    code = ErrorCode.invalid_timestamp


class RecordListTooLargeError(KafkaError):
    """A produce request's batches for one partition exceed segment.bytes."""

    code = ErrorCode.record_list_too_large


class InconsistentTopicIdError(KafkaError):
    """partition.metadata names a different topic id than the caller expects."""

    code = ErrorCode.inconsistent_topic_id


class InconsistentClusterIdError(KafkaError):
    """meta.properties belongs to another cluster."""

    code = ErrorCode.inconsistent_cluster_id


class UnexpectedAppendOffsetError(KafkaError):
    """A follower was given batches that do not continue its log (a base offset below
    its log end, or out of order): it must truncate or re-fetch (Kafka's
    UnexpectedAppendOffsetException, which has no wire code of its own)."""


class LogDirectoryError(KafkaStorageError):
    """The log directory cannot be used (wrong node id, unreadable metadata, ...)."""


class CorruptIndexError(Exception):
    """An index file failed its sanity check; the caller rebuilds it from the log.

    Internal to storage: never reaches a handler.
    """
