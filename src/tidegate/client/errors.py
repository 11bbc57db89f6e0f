"""Exceptions the client raises that are not broker error codes.

Broker-reported failures arrive as `tidegate.common.errors.KafkaError` subclasses
(built with `error_for_code`). The classes here cover what happens on the client's own
side: bad configuration, unreachable brokers, timeouts, use after close. Their messages
say what to do, because the CLI prints them as they are.

Transactions (KIP-1050's classes): `FatalProducerError` (and `ProducerFencedError`)
mean the producer cannot go on: close it; `TransactionAbortableError` means the
current transaction cannot commit: call `abort_transaction()` and start again;
`IllegalStateError` is a call the transaction state does not allow (the seed's
IllegalStateException); `TransactionAbortedError` fails records dropped by an abort.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tidegate.common.errors import KafkaError, OffsetOutOfRangeError

__all__ = [
    "AuthenticationError",
    "ClientClosedError",
    "ConfigError",
    "FatalProducerError",
    "IllegalStateError",
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "NoOffsetForPartitionError",
    "PreparedTxnMismatchError",
    "ProducerFencedError",
    "ProtocolError",
    "RequestTimedOutError",
    "SslHandshakeError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "explain",
    "fatal_error",
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


class AuthenticationError(KafkaError):
    """The broker refused this client's credentials (Kafka's AuthenticationException).
    Not retriable: trying again with the same password cannot succeed."""

    code = ErrorCode.sasl_authentication_failed

    @property
    def retriable(self) -> bool:
        return False


class SslHandshakeError(AuthenticationError):
    """The TLS handshake failed: an untrusted or mismatched certificate, or a broker
    that does not speak TLS on that port (Kafka's SslAuthenticationException)."""

    @property
    def name(self) -> str:
        return "SSL_HANDSHAKE_FAILED"


class ClientClosedError(RuntimeError):
    """The producer, consumer or admin client was used after `close()`."""


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """A partition has no position and `auto.offset.reset` is `none`."""


class FatalProducerError(KafkaError):
    """The producer cannot go on (fenced, not authorized, an unusable broker): close it
    and create a new one. `retriable` is false whatever the code."""

    @property
    def retriable(self) -> bool:
        return False


class ProducerFencedError(FatalProducerError):
    """Another producer with the same transactional.id started (its InitProducerId
    bumped the epoch): this one is a zombie and must stop."""

    code = ErrorCode.producer_fenced


_FENCED_CODES = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})


def fatal_error(code: ErrorCode, message: str) -> FatalProducerError:
    """The fatal error for `code`: `ProducerFencedError` for a fenced producer."""
    if code in _FENCED_CODES:
        return ProducerFencedError(message, code=code)
    return FatalProducerError(message, code=code)


class TransactionAbortableError(KafkaError):
    """The current transaction cannot commit (a record failed, the coordinator refused
    an offset commit, ...): call `abort_transaction()`, then begin a new one.
    `__cause__` is what went wrong."""

    code = ErrorCode.transaction_abortable

    @property
    def retriable(self) -> bool:
        return False


class TransactionAbortedError(KafkaError):
    """The record was dropped because its transaction was aborted before it was sent."""

    code = ErrorCode.transaction_abortable

    @property
    def retriable(self) -> bool:
        return False


class IllegalStateError(KafkaError):
    """A transactional call the producer's state does not allow now (begin twice,
    commit without a transaction, send before `init_transactions()`, ...)."""

    code = ErrorCode.invalid_txn_state

    @property
    def retriable(self) -> bool:
        return False


class PreparedTxnMismatchError(IllegalStateError):
    """`complete_transaction()` was given a prepared state that is not the one the
    coordinator holds for this transactional.id."""


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
