"""Completing a producer batch's records: each record's token (an asyncio future, a
`DeliveryFuture`, or anything offering `Completion`) gets its `RecordMetadata` or the
batch's error.

The common cases run in C-level passes, with no Python frame per record: a batch of
asyncio futures completes through `map` over `asyncio.Future.set_result`, one of
`DeliveryFuture`s through `DeliveryFuture.set_results`. A token its user cancelled, or
one of another kind, is completed one at a time.

Threading: called by the sender on the event loop (a `DeliveryFuture` hands its
callbacks to the threads waiting on it).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import repeat
from typing import Any, Protocol

from tidegate.client.futures import DeliveryFuture
from tidegate.client.producer.accumulator import ProducerBatch
from tidegate.client.types import RecordMetadata

__all__ = ["Completion", "complete_tokens", "fail_tokens"]


class Completion(Protocol):
    """What a record's token must offer: asyncio and concurrent futures both do."""

    def done(self) -> bool: ...
    def set_result(self, result: RecordMetadata, /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...


_AsyncFuture = asyncio.Future
_set_async_result = asyncio.Future.set_result
_exhaust = deque[None](maxlen=0).extend  # runs an iterator to its end, keeping nothing
_new_tuple = tuple.__new__


def _metadata(batch: ProducerBatch[Completion], base_offset: int,
              log_append_ms: int) -> Iterator[RecordMetadata]:
    """Each record's RecordMetadata, built in C (no NamedTuple __new__ per record)."""
    topic, partition = batch.tp
    n = len(batch.tokens)
    offsets: Iterable[int] = range(base_offset, base_offset + n) if base_offset >= 0 \
        else repeat(-1, n)
    stamps: Iterable[int] = batch.timestamps if log_append_ms < 0 else repeat(log_append_ms, n)
    return map(_new_tuple, repeat(RecordMetadata),
               zip(repeat(topic), repeat(partition), offsets, stamps))


def complete_tokens(batch: ProducerBatch[Completion], base_offset: int,
                    log_append_ms: int) -> None:
    """Give every record of `batch` its metadata (`base_offset` -1: unknown;
    `log_append_ms` -1: each record's own timestamp)."""
    tokens = batch.tokens
    kind: type[Any] | None = type(tokens[0]) if tokens else None
    try:
        if kind is _AsyncFuture:
            # One C-level pass: no Python frame per record.
            _exhaust(map(_set_async_result, tokens,  # type: ignore[arg-type]
                         _metadata(batch, base_offset, log_append_ms)))
        elif kind is not None and issubclass(kind, DeliveryFuture):
            DeliveryFuture.set_results(tokens, _metadata(batch, base_offset, log_append_ms))
        else:
            raise TypeError
    except Exception:
        # A token cancelled by its user (InvalidStateError), or of another kind:
        # one at a time, skipping those already done.
        for token, md in zip(tokens, _metadata(batch, base_offset, log_append_ms)):
            if not token.done():
                try:
                    token.set_result(md)
                except Exception:
                    pass


def fail_tokens(batch: ProducerBatch[Completion], exc: BaseException) -> None:
    """Fail every record of `batch` not done yet with `exc`."""
    for token in batch.tokens:
        if not token.done():
            try:
                token.set_exception(exc)
            except Exception:
                pass
