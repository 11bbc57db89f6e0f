"""`AsyncProducer`: send records to topics with Kafka's producer semantics.

``await producer.send(topic, value, key=...)`` serializes the record, checks its size
against ``max.request.size`` and ``buffer.memory`` (raising MessageTooLargeError at
once, before anything is sent), waits up to ``max.block.ms`` for the topic's metadata
and for buffer space, picks a partition (murmur2 of the key, or sticky for unkeyed
records — see `partitioner`), appends the record to the accumulator and returns an
asyncio future of its `RecordMetadata`. The sender task (`sender.Sender`) does the rest.

Callbacks (`on_delivery(metadata, error)`) run on the event loop when the record
completes. `flush()` waits for every record sent before it; `close()` flushes, then
releases connections; sending after close raises `ClientClosedError`.

With ``enable.idempotence`` (the default) the sender gets a producer id before the
first batch and every batch a per-partition sequence, so retries neither duplicate nor
reorder records (see `idempotence`). After a fatal idempotence error (e.g. the producer
was fenced) unfinished records fail and `send` raises it. Transactions are not
available yet; see `client.config`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from tidegate.client.config import ProducerConfig
from tidegate.client.errors import ClientClosedError, KafkaTimeoutError
from tidegate.client.metadata import MetadataClient
from tidegate.client.net import NetworkClient
from tidegate.client.partitioner import StickyPartitioner, partition_for_key
from tidegate.client.producer.accumulator import (
    ProducerBatch,
    RecordAccumulator,
    record_size_upper_bound,
)
from tidegate.client.producer.idempotence import IdempotenceManager
from tidegate.client.producer.sender import Completion, Sender
from tidegate.client.types import RecordMetadata, TopicPartition
from tidegate.common.errors import InvalidPartitionsError, MessageTooLargeError
from tidegate.records.batch import HEADER_SIZE
from tidegate.records.compression import codec_from_name

__all__ = ["AsyncProducer", "DeliveryCallback"]

Header = tuple[str, bytes | None]
DeliveryCallback = Callable[[RecordMetadata | None, BaseException | None], None]
Prepared = tuple[bytes | None, bytes | None, tuple[Header, ...], int]

# A batch holding one record without key, value or headers, at most (see
# `record_size_upper_bound`).
_EMPTY_RECORD_SIZE = record_size_upper_bound(None, None) + HEADER_SIZE
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


class AsyncProducer:
    """See the module docstring. Use as ``async with AsyncProducer({...}) as p:``."""

    def __init__(self, config: ProducerConfig | Mapping[str, object] | None = None,
                 **overrides: object) -> None:
        if isinstance(config, ProducerConfig):
            self.config = config
        else:
            self.config = ProducerConfig.from_dict(config, **overrides)
        cfg = self.config
        self._net = NetworkClient(cfg)
        self._metadata = MetadataClient(self._net, max_age_ms=cfg.metadata_max_age_ms,
                                        retry_backoff_ms=cfg.retry_backoff_ms)
        self._acc: RecordAccumulator[Completion] = RecordAccumulator(
            batch_size=cfg.batch_size, linger_ms=cfg.linger_ms,
            buffer_memory=cfg.buffer_memory,
            compression=codec_from_name(cfg.compression_type),
            retry_backoff_ms=cfg.retry_backoff_ms)
        self._idem = IdempotenceManager() if cfg.enable_idempotence else None
        self._partitioner = StickyPartitioner()
        # The sticky partition per topic, while its batch fills (see try_append).
        self._sticky: dict[str, int] = {}
        self._ignore_keys = cfg.partitioner_ignore_keys
        self._key_partitions: dict[bytes, int] = {}
        self._key_partitions_n = 0
        self._key_serializer = cfg.key_serializer
        self._value_serializer = cfg.value_serializer
        # A record needs a batch of its own, so it must fit in both of these.
        self._max_record_size = min(cfg.max_request_size, cfg.buffer_memory)
        # The loop the producer runs on, set by its first use; its futures belong there.
        self._loop: asyncio.AbstractEventLoop | None = None
        # TopicPartition objects per topic, reused for every record; rebuilt after
        # each metadata update (the partition count may have changed).
        self._tps: dict[str, list[TopicPartition]] = {}
        self._tps_version = -1
        # Set when a batch filled up: `send` then yields once so the sender task can
        # ship it while the caller keeps appending (send otherwise never suspends).
        self._should_yield = False
        self._incomplete: set[ProducerBatch[Completion]] = set()
        self._sender: Sender | None = None
        self._batch_done: asyncio.Event | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster (optional: the first send starts the producer)."""
        self._ensure_started()
        await self._metadata.refresh()

    def _ensure_started(self) -> Sender:
        if self._sender is None:
            self._loop = asyncio.get_running_loop()
            self._batch_done = asyncio.Event()
            self._sender = Sender(self.config, self._acc, self._net, self._metadata,
                                  self._on_batch_done, self._idem)
            self._sender.start()
        return self._sender

    def _on_batch_done(self, batch: ProducerBatch[Completion]) -> None:
        self._incomplete.discard(batch)
        assert self._batch_done is not None
        self._batch_done.set()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    async def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything buffered now, ignoring linger.ms, and wait until each record
        sent before this call is acknowledged or failed. KafkaTimeoutError on timeout."""
        if self._sender is None or not self._incomplete:
            return
        assert self._batch_done is not None
        pending = list(self._incomplete)
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        self._acc.flushing += 1
        self._sender.wakeup()
        try:
            while any(not b.done for b in pending):
                self._batch_done.clear()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise KafkaTimeoutError(f"flush did not complete within {timeout_ms} ms")
                try:
                    await asyncio.wait_for(self._batch_done.wait(), remaining)
                except TimeoutError:
                    continue
        finally:
            self._acc.flushing -= 1

    async def close(self, timeout_ms: int | None = None) -> None:
        """Flush (up to `timeout_ms`, None = no limit), then close connections. Records
        still unsent after the timeout fail with ClientClosedError."""
        if self._closed:
            return
        self._closed = True
        sender = self._sender
        if sender is not None:
            self._acc.closing = True
            try:
                await asyncio.wait_for(sender.stop(), None if timeout_ms is None
                                       else timeout_ms / 1000)
            except TimeoutError:
                await sender.abort(ClientClosedError(
                    "the producer was closed before these records were sent"))
        await self._net.close()

    # -- sending -----------------------------------------------------------------------

    def prepare(self, topic: str, value: object, key: object,
                headers: Sequence[tuple[str, bytes | str | None]] | None) -> Prepared:
        """Serialize and check a record without touching the event loop (thread-safe).

        Raises ClientClosedError after close, TypeError for unserializable values and
        MessageTooLargeError if the record cannot fit in a request or the buffer."""
        if self._closed:
            raise ClientClosedError(f"cannot send to {topic!r}: the producer is closed")
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
        if self._metadata.cache.version != self._tps_version:
            self._tps.clear()
            self._tps_version = self._metadata.cache.version
        tps = self._tps.get(topic)
        if tps is None:
            info = self._metadata.cache.topic(topic)
            if info is None or topic not in self._metadata.tracked:
                return False
            tps = self._tps[topic] = [TopicPartition(topic, p) for p in sorted(info.partitions)]
        key, value, headers, size = prepared
        n = len(tps)
        sticky = False
        if partition is None:
            if key is None or self._ignore_keys:
                partition = self._sticky.get(topic)
                if partition is None or partition >= n:
                    partition = self._partitioner.partition(topic, n)
                    self._sticky[topic] = partition
                sticky = True
            else:
                partition = self._partition_for_key(key, n)
        elif not 0 <= partition < n:
            return False
        acc = self._acc
        if acc.used_memory + size > acc.buffer_memory and acc.used_memory:
            return False
        batch, created, full = acc.append(
            tps[partition], time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms,
            key, value, headers, token, _now_ms(), size - HEADER_SIZE)
        if created or full:
            if created:
                self._incomplete.add(batch)
            (self._sender or self._ensure_started()).wakeup()
            if full:
                self._should_yield = True
                if sticky:
                    self._partitioner.on_new_batch(topic, n, partition)
                    self._sticky.pop(topic, None)
        return True

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

    async def append(self, topic: str, partition: int | None, prepared: Prepared,
                     timestamp_ms: int | None, token: Completion) -> None:
        """Append, waiting up to max.block.ms for metadata and buffer space."""
        if self.try_append(topic, partition, prepared, timestamp_ms, token):
            return
        if self._closed:
            raise ClientClosedError(f"cannot send to {topic!r}: the producer is closed")
        sender = self._ensure_started()
        block_ms = self.config.max_block_ms
        deadline = time.monotonic() + block_ms / 1000
        info = await self._metadata.topic(topic, block_ms)
        if partition is not None and partition not in info.partitions:
            raise InvalidPartitionsError(
                f"partition {partition} of topic {topic!r} does not exist: the topic has "
                f"{info.partition_count} partition(s)")
        assert self._batch_done is not None
        size = prepared[3]
        while not self._acc.has_room(size):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"failed to allocate {size} bytes within max.block.ms={block_ms}: "
                    f"buffer.memory={self.config.buffer_memory} is full")
            self._acc.memory_waiters += 1
            self._batch_done.clear()
            sender.wakeup()
            try:
                await asyncio.wait_for(self._batch_done.wait(), remaining)
            except TimeoutError:
                pass
            finally:
                self._acc.memory_waiters -= 1
        if not self.try_append(topic, partition, prepared, timestamp_ms, token):
            await self.append(topic, partition, prepared, timestamp_ms, token)

    async def send(self, topic: str, value: object = None, key: object = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Sequence[tuple[str, bytes | str | None]] | None = None,
                   on_delivery: DeliveryCallback | None = None,
                   ) -> asyncio.Future[RecordMetadata]:
        """Queue a record; return a future of its RecordMetadata (see module docstring)."""
        prepared = self.prepare(topic, value, key, headers)
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[RecordMetadata] = loop.create_future()
        if on_delivery is not None:
            fut.add_done_callback(_callback(on_delivery))
        if not self.try_append(topic, partition, prepared, timestamp_ms, fut):
            await self.append(topic, partition, prepared, timestamp_ms, fut)
        if self._should_yield:
            self._should_yield = False
            await asyncio.sleep(0)
        return fut

    async def send_and_wait(self, topic: str, value: object = None, key: object = None, *,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: Sequence[tuple[str, bytes | str | None]] | None = None,
                            ) -> RecordMetadata:
        fut = await self.send(topic, value, key, partition=partition,
                              timestamp_ms=timestamp_ms, headers=headers)
        return await fut

    async def partitions_for(self, topic: str) -> list[int]:
        info = await self._metadata.topic(topic, self.config.max_block_ms)
        return sorted(info.partitions)


def _callback(cb: DeliveryCallback) -> Callable[[asyncio.Future[RecordMetadata]], None]:
    def done(fut: asyncio.Future[RecordMetadata]) -> None:
        if fut.cancelled():
            cb(None, asyncio.CancelledError())
        elif fut.exception() is not None:
            cb(None, fut.exception())
        else:
            cb(fut.result(), None)
    return done
