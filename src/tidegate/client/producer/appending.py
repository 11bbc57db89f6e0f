"""How `AsyncProducer` turns a record into an append to a batch: `prepare` serializes
and size-checks it, `try_append` picks its partition (sticky for unkeyed records,
KIP-480; murmur2 of the key, with a cache of recent keys, for keyed ones) and appends it
to that partition's open batch, or a new one, without ever waiting. Waiting for
metadata or buffer space is `AsyncProducer.append`'s.

`try_append_unkeyed` is the common case (an unkeyed bytes value without headers that
fits the open batch of its topic's sticky partition); `AsyncProducer.send` has an
inline copy of it, which must stay in step.

Threading: a mixin of `AsyncProducer` sharing its state (the attributes declared below,
set by its `__init__`). `prepare` is thread-safe; the appends run on the loop thread or,
for the blocking `Producer` (``threadsafe``), on a caller's thread holding the
accumulator's lock.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from tidegate.client.config import ProducerConfig, Serializer
from tidegate.client.errors import ClientClosedError
from tidegate.client.metadata import Metadata, MetadataClient
from tidegate.client.partitioner import StickyPartitioner, partition_for_key
from tidegate.client.producer.accumulator import (
    ProducerBatch,
    RecordAccumulator,
    record_size_upper_bound,
)
from tidegate.client.producer.completion import Completion
from tidegate.client.producer.idempotence import IdempotenceManager
from tidegate.client.producer.txn_manager import TransactionManager
from tidegate.client.types import TopicPartition
from tidegate.common.errors import MessageTooLargeError
from tidegate.records.batch import HEADER_SIZE

__all__ = ["EMPTY_BATCH_RECORD_SIZE", "AppendingMixin", "Header", "Prepared"]

Header = tuple[str, bytes | None]
Prepared = tuple[bytes | None, bytes | None, tuple[Header, ...], int]

# A batch holding one record without key, value or headers, at most (see
# `record_size_upper_bound`).
_EMPTY_RECORD_SIZE = record_size_upper_bound(None, None) + HEADER_SIZE
EMPTY_BATCH_RECORD_SIZE = _EMPTY_RECORD_SIZE - HEADER_SIZE
_KEY_CACHE_SIZE = 10_000


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _to_bytes(what: str, value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"the record {what} must be bytes, str or None (or set "
                    f"{what}.serializer), not {type(value).__name__}")


class AppendingMixin:
    """Appending records to batches, for `AsyncProducer` (module docstring)."""

    config: ProducerConfig
    _metadata: MetadataClient
    _cache: Metadata
    _acc: RecordAccumulator[Completion]
    _idem: IdempotenceManager | None
    _txn: TransactionManager | None
    _partitioner: StickyPartitioner
    _sticky_batches: dict[str, ProducerBatch[Completion]]
    _ignore_keys: bool
    _key_partitions: dict[bytes, int]
    _key_partitions_n: int
    _key_serializer: Serializer | None
    _value_serializer: Serializer | None
    _max_record_size: int
    _max_batch_record_size: int
    _tps: dict[str, list[TopicPartition]]
    _tps_version: int
    _should_yield: bool
    _incomplete: set[ProducerBatch[Completion]]
    _closed: bool

    def _wake(self) -> None:
        raise NotImplementedError  # AsyncProducer's

    def prepare(self, topic: str, value: object, key: object,
                headers: Sequence[tuple[str, bytes | str | None]] | None) -> Prepared:
        """Serialize and check a record without touching the event loop (thread-safe).

        Raises ClientClosedError after close, TypeError for unserializable values and
        MessageTooLargeError if the record cannot fit in a request or the buffer."""
        if self._closed:
            raise ClientClosedError(f"cannot send to {topic!r}: the producer is closed")
        if self._txn is not None:
            self._txn.check_send()
        if self._idem is not None and self._idem.fatal is not None:
            raise self._idem.fatal
        # `type(x) is bytes` first: the common case costs no function call.
        ks, vs = self._key_serializer, self._value_serializer
        if ks is not None:
            k = ks(key)
        else:
            k = key if key is None or type(key) is bytes else _to_bytes("key", key)
        if vs is not None:
            v = vs(value)
        else:
            v = value if value is None or type(value) is bytes else _to_bytes("value", value)
        hs: tuple[Header, ...] = ()
        if headers:
            hs = tuple((name, hv.encode() if isinstance(hv, str) else hv)
                       for name, hv in headers)
            size = record_size_upper_bound(k, v, hs) + HEADER_SIZE
        else:
            size = _EMPTY_RECORD_SIZE + (len(k) if k else 0) + (len(v) if v else 0)
        if size > self._max_record_size:
            cfg = self.config
            limit = ("max.request.size", cfg.max_request_size) \
                if size > cfg.max_request_size else ("buffer.memory", cfg.buffer_memory)
            raise MessageTooLargeError(
                f"the record is {size} bytes when serialized, which is larger than "
                f"{limit[0]}={limit[1]}")
        return k, v, hs, size

    def try_append(self, topic: str, partition: int | None, prepared: Prepared,
                   timestamp_ms: int | None, token: Completion) -> bool:
        """Append without waiting if metadata and buffer space allow; else False."""
        key, value, headers, size = prepared
        return self._append(topic, partition, key, value, headers, size, timestamp_ms, token)

    def try_append_unkeyed(self, topic: str, value: bytes, timestamp_ms: int | None,
                           token: Completion) -> bool:
        """The common case of `try_append`, for a caller that checked the record is
        one: an unkeyed bytes value without headers or partition, with no serializers
        configured. Appends it if it fits the open batch of the topic's sticky
        partition; else False, and the caller goes the general way (`prepare`, whose
        checks this skips only where they cannot fail, and `try_append`).
        (`send` has an inline copy of this.)"""
        batch = self._sticky_batches.get(topic)
        if batch is None or not batch.open or self._cache.version != self._tps_version \
                or (self._idem is not None and self._idem.fatal is not None):
            return False
        acc = self._acc
        size = EMPTY_BATCH_RECORD_SIZE + len(value)
        if acc.used_memory + size > acc.buffer_memory or size > self._max_batch_record_size \
                or (batch.size + size > acc.batch_size and not acc.fits(batch, size)):
            return False
        ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        batch.builder.append(ts, None, value)
        batch.timestamps.append(ts)
        batch.tokens.append(token)
        acc.used_memory += size
        size = batch.size = batch.size + size
        if size >= acc.batch_size:
            self._check_full(batch)
        return True

    def _append(self, topic: str, partition: int | None, key: bytes | None,
                value: bytes | None, headers: tuple[Header, ...], size: int,
                timestamp_ms: int | None, token: Completion) -> bool:
        """`try_append`'s general case (`size` includes a batch header)."""
        cache = self._cache
        if cache.version != self._tps_version:
            self._tps.clear()
            self._sticky_batches.clear()
            self._tps_version = cache.version
        tps = self._tps.get(topic)
        if tps is None:
            info = cache.topic(topic)
            if info is None or topic not in self._metadata.tracked:
                return False
            tps = self._tps[topic] = [TopicPartition(topic, p) for p in sorted(info.partitions)]
        n = len(tps)
        acc = self._acc
        if acc.used_memory + size > acc.buffer_memory and acc.used_memory:
            return False
        size -= HEADER_SIZE
        wake = False
        sticky = partition is None and (key is None or self._ignore_keys)
        batch: ProducerBatch[Completion] | None = None
        if sticky:
            # Sticky partitioning (KIP-480): stay on a partition while its batch takes
            # records; once that batch is full or gone, move to another partition.
            prev = self._sticky_batches.get(topic)
            if prev is not None:
                if prev.open and prev.tp.partition < n and (
                        prev.size + size <= acc.batch_size or acc.fits(prev, size)):
                    batch = prev
                else:
                    if prev.open:
                        prev.open = False  # closed for appends: ready to send
                        wake = True
                    self._partitioner.on_new_batch(topic, n, prev.tp.partition)
            if batch is None:
                partition = self._partitioner.partition(topic, n)
        elif partition is None:
            assert key is not None
            partition = self._partition_for_key(key, n)
        elif not 0 <= partition < n:
            return False
        created = False
        queue = None
        if batch is None:
            assert partition is not None
            queue = acc.queue(tps[partition])
            if queue and queue[-1].open:
                batch = acc.open_batch(queue, size)
                wake = wake or batch is None
            if batch is None:
                batch = acc.new_batch(tps[partition], queue, _now_ms())
                created = True
        ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        try:
            batch.builder.append(ts, key, value, headers)
        except BaseException:
            if created:  # leave no empty batch behind
                assert queue is not None
                queue.pop()
                acc.deallocate(batch)
            raise
        batch.timestamps.append(ts)
        batch.tokens.append(token)
        acc.used_memory += size
        batch.size += size
        if sticky and not self._closed:
            self._sticky_batches[topic] = batch
        if created:
            self._incomplete.add(batch)
            if self._txn is not None:
                self._txn.state.on_new_partition(batch.tp)
        if wake:
            self._should_yield = True
        if created or wake:
            self._wake()
        if batch.size >= acc.batch_size:
            self._check_full(batch)
        return True

    def _check_full(self, batch: ProducerBatch[Completion]) -> None:
        """`batch` may have reached batch.size: if so close it for appends, wake the
        sender and let it run (`send` yields once)."""
        if self._acc.resync(batch) >= self._acc.batch_size:
            batch.open = False
            self._should_yield = True
            self._wake()

    def _partition_for_key(self, key: bytes, n: int) -> int:
        """`partition_for_key`, remembering recent keys: murmur2 in Python costs more
        than the rest of a send, and applications reuse keys."""
        cache = self._key_partitions
        if n != self._key_partitions_n:
            cache.clear()
            self._key_partitions_n = n
        p = cache.get(key)
        if p is None:
            if len(cache) >= _KEY_CACHE_SIZE:
                cache.clear()
            p = cache[key] = partition_for_key(key, n)
        return p
