"""Kafka error codes and the typed exceptions that carry them inside Tidegate.

Inside the broker and client, failures are raised as `KafkaError` subclasses. At a
handler's edge they become the wire error code (`exc.code`). The codes themselves are
kio's `ErrorCode` enum, generated from Kafka's own definitions, so names and numbers
match the Java broker exactly.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = [
    "CorruptRecordError",
    "ErrorCode",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidTopicError",
    "KafkaError",
    "KafkaStorageError",
    "LogDirNotFoundError",
    "MessageTooLargeError",
    "OffsetOutOfRangeError",
    "PolicyViolationError",
    "TopicAlreadyExistsError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "error_for_code",
]


class KafkaError(Exception):
    """Base of every Kafka-coded failure. `code` is what goes on the wire."""

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str = "", *, code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message or self.code.name.upper())

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)

    @property
    def name(self) -> str:
        """Kafka's upper-case error name, e.g. ``CORRUPT_MESSAGE``."""
        return self.code.name.upper()


class CorruptRecordError(KafkaError):
    code = ErrorCode.corrupt_message


class InvalidRecordError(KafkaError):
    code = ErrorCode.invalid_record


class MessageTooLargeError(KafkaError):
    code = ErrorCode.message_too_large


class UnknownTopicOrPartitionError(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class OffsetOutOfRangeError(KafkaError):
    code = ErrorCode.offset_out_of_range


class InvalidRequestError(KafkaError):
    code = ErrorCode.invalid_request


class UnsupportedVersionError(KafkaError):
    code = ErrorCode.unsupported_version


class InvalidTopicError(KafkaError):
    code = ErrorCode.invalid_topic_exception


class TopicAlreadyExistsError(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidConfigError(KafkaError):
    code = ErrorCode.invalid_config


class PolicyViolationError(KafkaError):
    code = ErrorCode.policy_violation


class KafkaStorageError(KafkaError):
    code = ErrorCode.kafka_storage_error


class LogDirNotFoundError(KafkaError):
    code = ErrorCode.log_dir_not_found


_BY_CODE: dict[ErrorCode, type[KafkaError]] = {
    cls.code: cls
    for cls in (
        CorruptRecordError,
        InvalidRecordError,
        MessageTooLargeError,
        UnknownTopicOrPartitionError,
        OffsetOutOfRangeError,
        InvalidRequestError,
        UnsupportedVersionError,
        InvalidTopicError,
        TopicAlreadyExistsError,
        InvalidPartitionsError,
        InvalidReplicationFactorError,
        InvalidConfigError,
        PolicyViolationError,
        KafkaStorageError,
    )
}


def error_for_code(code: int, message: str = "") -> KafkaError:
    """Build the typed exception for a wire error code (used by clients)."""
    ec = ErrorCode(code)
    cls = _BY_CODE.get(ec, KafkaError)
    return cls(message, code=ec)
