"""Exceptions the client raises that are not broker error codes.

Broker-reported failures arrive as `tidegate.common.errors.KafkaError` subclasses
(built with `error_for_code`). The classes here cover what happens on the client's own
side: bad configuration, unreachable brokers, timeouts, use after close. Their messages
say what to do, because the CLI prints them as they are.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tidegate.common.errors import KafkaError, OffsetOutOfRangeError

__all__ = [
    "ClientClosedError",
    "ConfigError",
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "NoOffsetForPartitionError",
    "ProtocolError",
    "RequestTimedOutError",
    "explain",
]


class ConfigError(ValueError):
    """A client configuration key is unknown or its value is invalid."""


class KafkaConnectionError(KafkaError):
    """A broker could not be reached or the connection broke (retriable)."""

    code = ErrorCode.network_exception


class RequestTimedOutError(KafkaError):
    """No response arrived within `request.timeout.ms`; the connection was closed."""

    code = ErrorCode.request_timed_out


class KafkaTimeoutError(KafkaError):
    """A client-side deadline passed (`delivery.timeout.ms`, `max.block.ms`, a poll)."""

    code = ErrorCode.request_timed_out

    @property
    def retriable(self) -> bool:
        return False


class ProtocolError(KafkaConnectionError):
    """The broker sent bytes that do not match the protocol (bad frame, wrong id)."""


class ClientClosedError(RuntimeError):
    """The producer, consumer or admin client was used after `close()`."""


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """A partition has no position and `auto.offset.reset` is `none`."""


def explain(exc: BaseException) -> str:
    """One line telling a person what went wrong and, where we can tell, what to do."""
    text = str(exc)
    if isinstance(exc, KafkaConnectionError) and "cannot reach" in text:
        return f"{text}: is the broker running? start it with `tidegate serve`"
    if isinstance(exc, ConfigError):
        return f"configuration error: {text}"
    if isinstance(exc, KafkaError):
        name = exc.name
        return text if name in text else f"{name}: {text}"
    if isinstance(exc, ValueError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
