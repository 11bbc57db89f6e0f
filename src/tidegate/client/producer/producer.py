"""`AsyncProducer`: send records to topics with Kafka's producer semantics.

``await producer.send(topic, value, key=...)`` serializes the record, checks its size
against ``max.request.size`` and ``buffer.memory`` (raising MessageTooLargeError at
once, before anything is sent), waits up to ``max.block.ms`` for the topic's metadata
and for buffer space, picks a partition (murmur2 of the key, or sticky for unkeyed
records — see `partitioner`), appends the record to the accumulator and returns an
asyncio future of its `RecordMetadata`. The sender task (`sender.Sender`) does the rest.

A send costs a few attribute checks and the record's encoding: the common case (an
unkeyed bytes value without headers that fits the open batch of its topic's sticky
partition) runs inline in `send` with one clock read (the record's CreateTime, as
Java's) and no other call; everything else takes `prepare` + `try_append`. `send`
never suspends except to wait for metadata or memory, and once whenever a batch fills,
so the sender task can ship it while the caller keeps appending.

The blocking `Producer` appends from its callers' threads (``threadsafe``): they call
`try_append` holding the accumulator's lock, which the sender also takes, and wake
the sender through the loop (`_wake`).

Callbacks (`on_delivery(metadata, error)`) run on the event loop when the record
completes. `flush()` waits for every record sent before it; `close()` flushes, then
releases connections; sending after close raises `ClientClosedError`.

With ``enable.idempotence`` (the default) the sender gets a producer id before the
first batch and every batch a per-partition sequence, so retries neither duplicate nor
reorder records (see `idempotence`). After a fatal idempotence error (e.g. the producer
was fenced) unfinished records fail and `send` raises it.

With ``transactional.id`` the producer is transactional: `init_transactions()`, then
`begin_transaction()`, sends, `send_offsets_to_transaction()`, and
`commit_transaction()` or `abort_transaction()` (KIP-939 adds `prepare_transaction()`
and `complete_transaction()`). `txn_manager` does the work; sends take the general
path there (`prepare` checks the transaction state).

Turning a record into an append (`prepare`, `try_append` and the partition choice) is
the `AppendingMixin` (appending.py); the transactional calls are `TransactionalMixin`
(txn_api.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from tidegate.client.config import ProducerConfig
from tidegate.client.errors import ClientClosedError, KafkaTimeoutError
from tidegate.client.metadata import MetadataClient
from tidegate.client.net import NetworkClient
from tidegate.client.partitioner import StickyPartitioner
from tidegate.client.producer.accumulator import ProducerBatch, RecordAccumulator
from tidegate.client.producer.appending import (
    EMPTY_BATCH_RECORD_SIZE,
    AppendingMixin,
    Prepared,
)
from tidegate.client.producer.completion import Completion
from tidegate.client.producer.idempotence import IdempotenceManager
from tidegate.client.producer.sender import Sender
from tidegate.client.producer.txn_api import TransactionalMixin
from tidegate.client.producer.txn_manager import TransactionManager
from tidegate.client.types import RecordMetadata, TopicPartition
from tidegate.common.errors import InvalidPartitionsError
from tidegate.records.batch import HEADER_SIZE
from tidegate.records.compression import codec_from_name

__all__ = ["AsyncProducer", "DeliveryCallback", "Prepared"]  # Prepared: for blocking.py

DeliveryCallback = Callable[[RecordMetadata | None, BaseException | None], None]

_Future = asyncio.Future


class AsyncProducer(AppendingMixin, TransactionalMixin):
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
        self._cache = self._metadata.cache
        self._acc: RecordAccumulator[Completion] = RecordAccumulator(
            batch_size=cfg.batch_size, linger_ms=cfg.linger_ms,
            buffer_memory=cfg.buffer_memory,
            compression=codec_from_name(cfg.compression_type),
            retry_backoff_ms=cfg.retry_backoff_ms)
        self._idem = IdempotenceManager() if cfg.enable_idempotence else None
        self._txn = TransactionManager(self) if cfg.transactional_id is not None else None
        self._partitioner = StickyPartitioner()
        # The batch of each topic's sticky partition, while it fills (see _append).
        self._sticky_batches: dict[str, ProducerBatch[Completion]] = {}
        self._ignore_keys = cfg.partitioner_ignore_keys
        self._key_partitions: dict[bytes, int] = {}
        self._key_partitions_n = 0
        self._key_serializer = cfg.key_serializer
        self._value_serializer = cfg.value_serializer
        # A record needs a batch of its own, so it must fit in both of these.
        self._max_record_size = min(cfg.max_request_size, cfg.buffer_memory)
        self._max_batch_record_size = self._max_record_size - HEADER_SIZE
        # No serializers: `send` may take its inline path.
        self._plain = cfg.key_serializer is None and cfg.value_serializer is None \
            and self._txn is None
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
        # Set by the blocking `Producer`: other threads call `try_append` (holding
        # the accumulator's lock), so wakeups from them go through the loop.
        self.threadsafe = False
        # Called on the loop thread when a batch finishes (memory may be free).
        self.on_batch_done: Callable[[], None] | None = None
        self._loop_thread = -1  # the loop's thread id, once started
        self._wake_scheduled = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster (optional: the first send starts the producer)."""
        self._ensure_started()
        await self._metadata.refresh()

    def _ensure_started(self) -> Sender:
        if self._sender is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._batch_done = asyncio.Event()
            self._sender = Sender(self.config, self._acc, self._net, self._metadata,
                                  self._on_batch_done, self._idem)
            if self._txn is not None:
                self._txn.attach(self._sender)
            self._sender.start()
        return self._sender

    def _on_batch_done(self, batch: ProducerBatch[Completion]) -> None:
        self._incomplete.discard(batch)
        assert self._batch_done is not None
        self._batch_done.set()
        if self.on_batch_done is not None:
            self.on_batch_done()

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
        with self._acc.lock:  # a thread appending directly sees either state whole
            self._closed = True
            self._sticky_batches.clear()  # `send` then takes the path that raises
        sender = self._sender
        if sender is not None:
            self._acc.closing = True
            try:
                await asyncio.wait_for(sender.stop(), None if timeout_ms is None
                                       else timeout_ms / 1000)
            except TimeoutError:
                await sender.abort(ClientClosedError(
                    "the producer was closed before these records were sent"))
        if self._txn is not None:
            await self._txn.close()
        await self._net.close()

    # -- sending -----------------------------------------------------------------------

    def _wake(self) -> None:
        """Wake the sender: at once on the loop thread, else (the blocking producer's
        callers appending directly, see `threadsafe`) by one call_soon_threadsafe
        per burst of wakeups."""
        sender = self._sender
        if sender is None:  # the first append: on the loop thread (see sync.Producer)
            self._ensure_started().wakeup()
        elif not self.threadsafe or self._loop_thread == threading.get_ident():
            sender.wakeup()
        elif not self._wake_scheduled:
            assert self._loop is not None
            self._wake_scheduled = True
            self._loop.call_soon_threadsafe(self._wake_now)

    def _wake_now(self) -> None:
        self._wake_scheduled = False
        if self._sender is not None:
            self._sender.wakeup()

    def _try_append_locked(self, topic: str, partition: int | None, prepared: Prepared,
                           timestamp_ms: int | None, token: Completion) -> bool:
        if not self.threadsafe:
            return self.try_append(topic, partition, prepared, timestamp_ms, token)
        with self._acc.lock:
            return self.try_append(topic, partition, prepared, timestamp_ms, token)

    async def append(self, topic: str, partition: int | None, prepared: Prepared,
                     timestamp_ms: int | None, token: Completion) -> None:
        """Append, waiting up to max.block.ms for metadata and buffer space."""
        if self._try_append_locked(topic, partition, prepared, timestamp_ms, token):
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
        if not self._try_append_locked(topic, partition, prepared, timestamp_ms, token):
            await self.append(topic, partition, prepared, timestamp_ms, token)

    async def send(self, topic: str, value: object = None, key: object = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Sequence[tuple[str, bytes | str | None]] | None = None,
                   on_delivery: DeliveryCallback | None = None,
                   ) -> asyncio.Future[RecordMetadata]:
        """Queue a record; return a future of its RecordMetadata (see module docstring)."""
        loop = self._loop
        # The common case first, inline (a copy of `try_append_unkeyed`; `prepare` and
        # `try_append` do the rest): an unkeyed bytes value without headers that fits
        # the open batch of its topic's sticky partition. (The sticky batches are
        # dropped on close, so a closed producer goes the way that raises.)
        if key is None and type(value) is bytes and partition is None and not headers \
                and self._plain and loop is not None:
            batch = self._sticky_batches.get(topic)
            if batch is not None and batch.open and self._cache.version == self._tps_version \
                    and (self._idem is None or self._idem.fatal is None):
                acc = self._acc
                size = EMPTY_BATCH_RECORD_SIZE + len(value)
                if acc.used_memory + size <= acc.buffer_memory \
                        and size <= self._max_batch_record_size \
                        and (batch.size + size <= acc.batch_size or acc.fits(batch, size)):
                    fut: asyncio.Future[RecordMetadata] = _Future(loop=loop)
                    ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
                    batch.builder.append(ts, None, value)
                    batch.timestamps.append(ts)
                    batch.tokens.append(fut)
                    acc.used_memory += size
                    size = batch.size = batch.size + size
                    if on_delivery is not None:
                        fut.add_done_callback(_callback(on_delivery))
                    if size >= acc.batch_size:
                        self._check_full(batch)
                        if self._should_yield:
                            self._should_yield = False
                            await asyncio.sleep(0)
                    return fut
        prepared = self.prepare(topic, value, key, headers)
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fut = _Future(loop=loop)
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
