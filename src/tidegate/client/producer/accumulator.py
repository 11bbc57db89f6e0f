"""The record accumulator: per-partition queues of batches waiting to be sent.

Sans-IO: time comes in as `now_ms`; the sender asks what is ready, drains batches into
requests, and hands failed batches back for retry.

Rules (as Kafka's RecordAccumulator):
- A record goes into the last open batch of its partition if the batch stays within
  ``batch.size``; otherwise that batch is closed for appends (it is *full*, as Java's
  ``closeForRecordAppends``) and a new batch is opened. A record larger than
  ``batch.size`` gets a batch of its own.
- The first batch of a partition is *ready* when it is full (closed for appends, its
  size reached ``batch.size``, or a newer batch exists behind it), when it has waited
  ``linger.ms``, when a flush or close is in progress, or when senders are blocked on
  memory — unless it is backing off after a failed attempt (``retry.backoff.ms``).
- ``buffer.memory`` bounds the bytes of records held by unfinished batches (queued or in
  flight); `has_room` tells the producer whether to block. While a batch is open it is
  charged each record's `record_size_upper_bound` (no call into the builder per
  record); its charge comes down to the builder's actual size whenever the upper
  bounds say the batch is full (`fits`) and when it is drained.
- Draining closes a batch (no more appends) and builds its bytes once; a retried batch
  re-sends the same bytes and goes back to the *front* of its queue, keeping
  per-partition order as long as one request per partition is in flight.
- With idempotence a `Sequencer` (see `idempotence`) decides whether a partition's
  first batch may be drained and stamps it with its sequence when it is; retried
  batches go back in sequence order (``seq_order``) ahead of newer ones.

Each record carries an opaque `token` (the producer's future) that the batch returns on
completion; no other object is kept per record.

Threads: the blocking producer appends from its callers' threads while the sender runs
on the loop thread, so the accumulator has a `lock`, which its methods take and the
producer holds around its own (inline) appends.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from tidegate.client.types import TopicPartition
from tidegate.records.batch import HEADER_SIZE, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from tidegate.records.builder import BatchBuilder
from tidegate.records.compression import Codec

__all__ = ["ProducerBatch", "RecordAccumulator", "Sequencer", "record_size_upper_bound"]

T = TypeVar("T")
Header = tuple[str, bytes | None]

# length varint (5) + attributes (1) + timestamp delta varlong (10) + offset delta (5)
# + key length (5) + value length (5) + header count (5): Kafka's
# DefaultRecord.MAX_RECORD_OVERHEAD.
_MAX_RECORD_OVERHEAD = 21


def record_size_upper_bound(key: bytes | None, value: bytes | None,
                            headers: Sequence[Header] = ()) -> int:
    """Bytes a record can take in a batch, at most (without compression)."""
    size = _MAX_RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, hvalue in headers:
        size += 10 + len(name.encode("utf-8", "surrogateescape")) + (len(hvalue) if hvalue else 0)
    return size


class ProducerBatch(Generic[T]):
    """Records for one partition that are sent, acknowledged and retried together."""

    __slots__ = ("attempts", "base_sequence", "builder", "created_ms", "done", "open",
                 "payload", "producer_epoch", "producer_id", "retry_at_ms", "seq_order",
                 "size", "timestamps", "tokens", "tp")

    def __init__(self, tp: TopicPartition, builder: BatchBuilder, now_ms: int) -> None:
        self.tp = tp
        self.builder = builder
        self.created_ms = now_ms
        self.timestamps: list[int] = []
        self.tokens: list[T] = []
        # Bytes charged to buffer.memory: while open, at least the builder's size.
        self.size = 0
        # Takes appends: false once full (closed for appends) or drained.
        self.open = True
        self.payload: bytes | None = None  # built bytes once drained
        self.attempts = 0
        self.retry_at_ms = 0
        self.done = False  # acknowledged or failed for good
        # Idempotence: set when the batch is drained (see `Sequencer`); seq_order is
        # the drain order of stamped batches (-1: none), used to requeue retries.
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.seq_order = -1

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def closed(self) -> bool:
        return self.payload is not None

    def close(self) -> bytes:
        self.open = False
        if self.payload is None:
            self.payload = self.builder.build()
        return self.payload

    def __repr__(self) -> str:
        return f"ProducerBatch({self.tp.topic}-{self.tp.partition}, {len(self)} records)"


class Sequencer(Protocol):
    """Gives drained batches their idempotence sequence (`idempotence`)."""

    def can_send(self, batch: ProducerBatch[Any], /) -> bool: ...
    def on_drain(self, batch: ProducerBatch[Any], /) -> None: ...


class RecordAccumulator(Generic[T]):
    """Per-partition batch queues; see the module docstring."""

    def __init__(self, *, batch_size: int, linger_ms: int, buffer_memory: int,
                 compression: Codec = Codec.NONE, retry_backoff_ms: int = 100) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.compression = compression
        self.retry_backoff_ms = retry_backoff_ms
        self._queues: dict[TopicPartition, deque[ProducerBatch[T]]] = {}
        self.used_memory = 0
        self.flushing = 0  # flushes in progress
        self.closing = False
        self.memory_waiters = 0  # producers blocked in send() on buffer.memory
        # Guards the queues and batches where threads share them: the blocking
        # producer appends from its callers' threads (holding it around
        # `AsyncProducer.try_append`) while the sender drains on the loop thread. The
        # methods here take it; the producer's inline append path and `queue`,
        # `open_batch`, `fits`, `resync`, `new_batch` expect it held (or one thread).
        self.lock = threading.RLock()

    # -- appending -------------------------------------------------------------------

    def has_room(self, size: int) -> bool:
        return self.used_memory + size <= self.buffer_memory or self.used_memory == 0

    def append(self, tp: TopicPartition, timestamp: int, key: bytes | None,
               value: bytes | None, headers: Sequence[Header], token: T, now_ms: int,
               record_size: int | None = None) -> tuple[ProducerBatch[T], bool, bool]:
        """Add a record; return its batch, whether a new batch was opened, and whether
        the batch is now full. `record_size` is `record_size_upper_bound` if known.
        (The producer inlines this for its common case: see `AsyncProducer.try_append`.)"""
        with self.lock:
            queue = self.queue(tp)
            if record_size is None:
                record_size = record_size_upper_bound(key, value, headers)
            batch = self.open_batch(queue, record_size)
            created = batch is None
            if batch is None:
                batch = self.new_batch(tp, queue, now_ms)
            batch.builder.append(timestamp, key, value, headers)
            batch.size += record_size
            self.used_memory += record_size
            batch.timestamps.append(timestamp)
            batch.tokens.append(token)
            if batch.size >= self.batch_size and self.resync(batch) >= self.batch_size:
                batch.open = False
            return batch, created, not batch.open

    def queue(self, tp: TopicPartition) -> deque[ProducerBatch[T]]:
        """The queue of `tp` (the same deque for the accumulator's lifetime)."""
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        return queue

    def open_batch(self, queue: deque[ProducerBatch[T]], record_size: int
                   ) -> ProducerBatch[T] | None:
        """The last batch of `queue` if it is open and can take `record_size` more bytes;
        else None, having closed that batch for appends if it lacked the room."""
        if not queue:
            return None
        batch = queue[-1]
        if not batch.open:
            return None
        if batch.size + record_size <= self.batch_size or self.fits(batch, record_size):
            return batch
        batch.open = False
        return None

    def fits(self, batch: ProducerBatch[T], record_size: int) -> bool:
        """Whether `record_size` more bytes keep the open `batch` within batch.size by
        its builder's actual size (see `resync`). A batch with no record takes any."""
        return self.resync(batch) + record_size <= self.batch_size or not batch.tokens

    def resync(self, batch: ProducerBatch[T]) -> int:
        """Charge `batch` its builder's actual size (not the records' upper bounds)."""
        size = batch.builder.estimated_size()
        self.used_memory -= batch.size - size
        batch.size = size
        return size

    def new_batch(self, tp: TopicPartition, queue: deque[ProducerBatch[T]],
                  now_ms: int) -> ProducerBatch[T]:
        """Open a batch at the back of `queue` (the queue of `tp`)."""
        batch: ProducerBatch[T] = ProducerBatch(
            tp, BatchBuilder(compression=self.compression), now_ms)
        batch.size = HEADER_SIZE
        self.used_memory += HEADER_SIZE
        queue.append(batch)
        return batch

    def is_full(self, batch: ProducerBatch[T]) -> bool:
        return not batch.open or batch.builder.estimated_size() >= self.batch_size

    # -- deciding what to send ---------------------------------------------------------

    def partitions(self) -> list[TopicPartition]:
        with self.lock:
            return [tp for tp, q in self._queues.items() if q]

    def ready(self, now_ms: int, muted: Iterable[TopicPartition] = ()
              ) -> tuple[list[TopicPartition], int | None]:
        """Partitions whose first batch can be sent now, and the ms until the next
        batch becomes ready (None if nothing is waiting)."""
        with self.lock:
            muted_set = set(muted)
            urgent = bool(self.flushing or self.closing or self.memory_waiters)
            ready: list[TopicPartition] = []
            next_ms: int | None = None
            for tp, queue in self._queues.items():
                if not queue or tp in muted_set:
                    continue
                wait = self._wait_ms(queue, now_ms, urgent)
                if wait <= 0:
                    ready.append(tp)
                else:
                    next_ms = wait if next_ms is None else min(next_ms, wait)
            return ready, next_ms

    def ready_among(self, tps: Iterable[TopicPartition], now_ms: int,
                    muted: Iterable[TopicPartition] = ()) -> list[TopicPartition]:
        """Those of `tps` whose first batch can be sent now (as `ready`)."""
        with self.lock:
            urgent = bool(self.flushing or self.closing or self.memory_waiters)
            out = []
            for tp in tps:
                queue = self._queues.get(tp)
                if queue and tp not in muted and self._wait_ms(queue, now_ms, urgent) <= 0:
                    out.append(tp)
            return out

    def _wait_ms(self, queue: deque[ProducerBatch[T]], now_ms: int, urgent: bool) -> int:
        """Ms until the first batch of `queue` (not empty) is ready; <= 0: ready."""
        batch = queue[0]
        if batch.retry_at_ms > now_ms:
            return batch.retry_at_ms - now_ms
        if urgent or len(queue) > 1 or self.is_full(batch):
            return 0
        return batch.created_ms + self.linger_ms - now_ms

    def drain(self, tps: Sequence[TopicPartition], max_request_size: int,
              now_ms: int, sequencer: Sequencer | None = None) -> list[ProducerBatch[T]]:
        """Take the first batch of each partition in `tps` while the request stays
        within `max_request_size` (the first batch is always taken) and, with a
        `sequencer`, while it allows; the sequencer stamps each batch taken."""
        with self.lock:
            out: list[ProducerBatch[T]] = []
            total = 0
            for tp in tps:
                queue = self._queues.get(tp)
                if not queue or queue[0].retry_at_ms > now_ms:
                    continue
                first = queue[0]
                if sequencer is not None and not sequencer.can_send(first):
                    continue
                if first.payload is None:
                    self.resync(first)  # closing: its actual size from now on
                payload = first.close()
                if out and total + len(payload) > max_request_size:
                    break
                out.append(queue.popleft())
                total += len(payload)
                if sequencer is not None:
                    sequencer.on_drain(first)
            return out

    def reenqueue(self, batch: ProducerBatch[T], now_ms: int) -> None:
        """Put a failed batch back at the front of its queue, backing off; behind
        batches stamped before it (idempotence: retries stay in sequence order)."""
        with self.lock:
            batch.retry_at_ms = now_ms + self.retry_backoff_ms
            queue = self._queues.setdefault(batch.tp, deque())
            order = batch.seq_order
            i = 0
            if order >= 0:
                n = len(queue)
                while i < n and 0 <= queue[i].seq_order < order:
                    i += 1
            queue.insert(i, batch)

    def queued_batches(self) -> list[ProducerBatch[T]]:
        """Every queued batch, front to back per partition."""
        with self.lock:
            return [b for q in self._queues.values() for b in q]

    def deallocate(self, batch: ProducerBatch[T]) -> None:
        """A batch finished (acknowledged or failed for good): free its memory."""
        with self.lock:
            self.used_memory -= batch.size
            batch.size = 0

    def expired(self, now_ms: int, delivery_timeout_ms: int) -> list[ProducerBatch[T]]:
        """Remove and return queued batches older than ``delivery.timeout.ms``."""
        with self.lock:
            out: list[ProducerBatch[T]] = []
            for queue in self._queues.values():
                while queue and queue[0].created_ms + delivery_timeout_ms <= now_ms:
                    batch = queue.popleft()
                    batch.open = False
                    out.append(batch)
            return out

    def abort_all(self) -> list[ProducerBatch[T]]:
        """Remove and return every queued batch (forced close). The queues stay (empty),
        so a queue held by the producer is still the partition's."""
        with self.lock:
            out = [b for q in self._queues.values() for b in q]
            for q in self._queues.values():
                q.clear()
            for b in out:
                b.open = False
            return out

    def has_unsent(self) -> bool:
        with self.lock:
            return any(self._queues.values())

    def batches(self, tp: TopicPartition) -> list[ProducerBatch[T]]:
        with self.lock:
            return list(self._queues.get(tp, ()))
