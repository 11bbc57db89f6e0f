"""The blocking `Producer`: the asyncio producer's code on a private loop thread.

Its methods run on the loop thread, except `send`: as the Java client's, it serializes,
size-checks and appends the record to its batch in the caller's thread (so MessageTooLargeError,
TypeError and ClientClosedError are raised at once), holding the accumulator's lock,
and returns a `concurrent.futures.Future` (a `DeliveryFuture`) of its `RecordMetadata`
without waiting; the loop thread only hears of it once per batch (to send it). When
``buffer.memory`` is full, `send` waits in the caller's thread, up to
``max.block.ms``. Only records that need the loop first — the topic's metadata is not
known yet, or records are already queued ahead of them — go through a queue that the
loop thread drains (in order); it holds at most `MAX_QUEUED` records, beyond that
`send` blocks.

Callbacks (`on_delivery`) run on the loop thread (only a record that fails in `send`
itself, after max.block.ms, calls its callback in the caller's thread): keep them
short, and do not call the facade's blocking methods from them (that would deadlock;
it raises RuntimeError).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from tidegate.client.config import ProducerConfig
from tidegate.client.consumer.group_offsets import OffsetAndMetadata
from tidegate.client.errors import ClientClosedError, KafkaTimeoutError
from tidegate.client.futures import DeliveryFuture, FutureGroup
from tidegate.client.loop_thread import LoopThread
from tidegate.client.producer.producer import AsyncProducer, DeliveryCallback, Prepared
from tidegate.client.producer.transactions import PreparedTxnState, TxnState
from tidegate.client.types import ConsumerGroupMetadata, RecordMetadata, TopicPartition

__all__ = ["MAX_QUEUED", "Producer"]

MAX_QUEUED = 10_000


Item = tuple[str, int | None, Prepared, int | None, "concurrent.futures.Future[RecordMetadata]"]


class Producer:
    """Blocking producer; see the module docstring and `AsyncProducer`."""

    def __init__(self, config: ProducerConfig | Mapping[str, object] | None = None,
                 **overrides: object) -> None:
        self._async = AsyncProducer(config, **overrides)
        self._async.threadsafe = True
        # The accumulator's lock: held around every append to the async producer, and
        # guards `_queue` and `_pumping` (see `send` and `_drain`).
        self._lock = self._async._acc.lock
        self.config = self._async.config
        self._loop = LoopThread("tidegate-producer")
        # Records waiting for the loop thread to append them, in send order.
        self._queue: deque[Item] = deque()
        self._futures = FutureGroup()
        self._new_future = self._futures.future
        # Signals room in `_queue` and the end of a pump to waiting callers.
        self._cond = threading.Condition()
        # True while a pump (`_drain`) runs on the loop thread: from the moment a
        # record is queued until the queue is empty again. Records go straight into
        # the accumulator only while it is false (so none overtakes a queued one).
        self._pumping = False
        self._room_waiters = 0
        # Threads waiting in `send` for buffer.memory, and the batches finished since
        # the producer started (counted while any wait), under `_room`.
        self._room = threading.Condition()
        self._memory_waiters = 0
        self._batches_done = 0
        self._async.on_batch_done = self._on_batch_done
        self._closed = False

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def send(self, topic: str, value: object = None, key: object = None, *,
             partition: int | None = None, timestamp_ms: int | None = None,
             headers: Sequence[tuple[str, bytes | str | None]] | None = None,
             on_delivery: DeliveryCallback | None = None,
             ) -> concurrent.futures.Future[RecordMetadata]:
        """Queue a record; return a future of its RecordMetadata."""
        if self._closed:
            raise ClientClosedError(f"cannot send to {topic!r}: the producer is closed")
        producer = self._async
        # Straight into the accumulator from this thread (as Java's send does) when no
        # record is queued ahead of this one and the sender runs: the loop thread then
        # hears of it once per batch, not per record.
        if key is None and type(value) is bytes and partition is None and not headers \
                and producer._plain:
            # The common case: no `prepare` (see AsyncProducer.try_append_unkeyed).
            fut: DeliveryFuture[RecordMetadata] = self._new_future()
            if on_delivery is not None:
                fut.add_done_callback(_callback(on_delivery))
            lock = self._lock
            lock.acquire()  # not `with`: that costs twice as much, per record
            try:
                if not self._pumping and \
                        producer.try_append_unkeyed(topic, value, timestamp_ms, fut):
                    return fut
            finally:
                lock.release()
            prepared = producer.prepare(topic, value, key, headers)
        else:
            prepared = producer.prepare(topic, value, key, headers)
            fut = self._new_future()
            if on_delivery is not None:
                fut.add_done_callback(_callback(on_delivery))
        queue = self._queue
        if len(queue) >= MAX_QUEUED:
            self._wait_for_room()
        with self._lock:
            if not self._pumping and producer._sender is not None:
                if producer._closed:
                    raise ClientClosedError(
                        f"cannot send to {topic!r}: the producer is closed")
                if producer.try_append(topic, partition, prepared, timestamp_ms, fut):
                    return fut
                full = not producer._acc.has_room(prepared[3])
            else:
                full = False
        if full and self._append_when_room(topic, partition, prepared, timestamp_ms, fut):
            return fut
        with self._lock:
            # Else (metadata to fetch, buffer.memory full, records queued ahead) the
            # loop thread appends it, waiting as AsyncProducer.send would.
            queue.append((topic, partition, prepared, timestamp_ms, fut))
            if self._pumping:
                return fut
            self._pumping = True
        try:
            self._loop.submit(self._drain())
        except BaseException:
            with self._lock:
                self._pumping = False
                queue.clear()  # the loop is gone: nothing queued can be sent
            raise
        return fut

    def _append_when_room(self, topic: str, partition: int | None, prepared: Prepared,
                          timestamp_ms: int | None,
                          fut: concurrent.futures.Future[RecordMetadata]) -> bool:
        """buffer.memory is full: wait in this thread (as Java's send does) until the
        record fits, then append it; after max.block.ms fail its future with
        KafkaTimeoutError, as AsyncProducer.send would raise. False if it must be
        queued after all (it is not memory that stops it, or a pump started)."""
        if threading.current_thread() is self._loop._thread:
            return False  # from a callback: waiting here would stop what frees memory
        producer = self._async
        acc = producer._acc
        size = prepared[3]
        block_ms = self.config.max_block_ms
        deadline = time.monotonic() + block_ms / 1000
        room = self._room
        with acc.lock:
            acc.memory_waiters += 1  # the sender sends what it has (see accumulator)
        with room:
            self._memory_waiters += 1
        try:
            producer._wake()
            while True:
                seen = self._batches_done
                with self._lock:
                    if self._pumping:
                        return False
                    if producer._closed:
                        raise ClientClosedError(
                            f"cannot send to {topic!r}: the producer is closed")
                    if producer.try_append(topic, partition, prepared, timestamp_ms, fut):
                        return True
                    if acc.has_room(size):
                        return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    fut.set_exception(KafkaTimeoutError(
                        f"failed to allocate {size} bytes within max.block.ms={block_ms}: "
                        f"buffer.memory={self.config.buffer_memory} is full"))
                    return True
                with room:
                    if self._batches_done == seen:
                        room.wait(remaining)
        finally:
            with room:
                self._memory_waiters -= 1
            with acc.lock:
                acc.memory_waiters -= 1

    def _on_batch_done(self) -> None:
        """On the loop thread, when a batch finished: wake threads waiting for memory."""
        if self._memory_waiters:
            with self._room:
                self._batches_done += 1
                self._room.notify_all()

    def _wait_for_room(self) -> None:
        with self._cond:
            self._room_waiters += 1
            try:
                while len(self._queue) >= MAX_QUEUED and self._pumping:
                    self._cond.wait(0.1)
            finally:
                self._room_waiters -= 1

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    async def _drain(self) -> None:
        """The pump: append queued records, in order, until the queue is empty. A record
        that cannot be appended at once (metadata, buffer.memory) stays at the front
        while `AsyncProducer.append` waits for it, so none overtakes it."""
        producer = self._async
        queue = self._queue
        lock = self._lock
        finished = False  # set when this pump handed `_pumping` back (another may start)
        try:
            while True:
                blocked: Item | None = None
                # All at once, holding the lock (callers wait for it rather than queue
                # behind), so that the queue empties and they append directly again.
                with lock:
                    while queue:
                        item = queue[0]
                        try:
                            appended = producer.try_append(*item)
                        except Exception as e:
                            appended = True
                            if not item[4].done():
                                item[4].set_exception(e)
                        if not appended:
                            blocked = item
                            break
                        queue.popleft()
                    if not queue:
                        self._pumping = False
                        finished = True
                        break
                assert blocked is not None
                try:
                    await producer.append(*blocked)
                except Exception as e:
                    if not blocked[4].done():
                        blocked[4].set_exception(e)
                with lock:
                    queue.popleft()
                if self._room_waiters:
                    self._notify()
        finally:
            failed: list[Item] = []
            if not finished:  # left early (cancelled): fail what is still queued
                with lock:
                    self._pumping = False
                    failed = list(queue)
                    queue.clear()
            for item in failed:
                if not item[4].done():
                    item[4].set_exception(ClientClosedError(
                        "the producer stopped before this record was sent"))
            self._notify()

    def _wait_queue(self) -> None:
        """Block until every record queued so far is in the async producer."""
        with self._cond:
            while self._pumping or self._queue:
                self._cond.wait(0.1)

    def flush(self, timeout_ms: int | None = None) -> None:
        """Block until every record sent before this call is acknowledged or failed."""
        self._wait_queue()
        self._loop.run(self._async.flush(timeout_ms))

    def partitions_for(self, topic: str) -> list[int]:
        return self._loop.run(self._async.partitions_for(topic))

    # -- transactions: see AsyncProducer and txn_manager --------------------------------

    @property
    def transaction_state(self) -> TxnState | None:
        return self._async.transaction_state

    def init_transactions(self, keep_prepared_txn: bool = False,
                          timeout_ms: int | None = None) -> PreparedTxnState | None:
        return self._loop.run(self._async.init_transactions(keep_prepared_txn, timeout_ms))

    def begin_transaction(self) -> None:
        self._loop.call(self._async.begin_transaction)

    def send_offsets_to_transaction(
            self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
            group_metadata: ConsumerGroupMetadata, timeout_ms: int | None = None) -> None:
        self._loop.run(self._async.send_offsets_to_transaction(offsets, group_metadata,
                                                               timeout_ms))

    def commit_transaction(self, timeout_ms: int | None = None) -> None:
        self._wait_queue()
        self._loop.run(self._async.commit_transaction(timeout_ms))

    def abort_transaction(self, timeout_ms: int | None = None) -> None:
        self._wait_queue()
        self._loop.run(self._async.abort_transaction(timeout_ms))

    def prepare_transaction(self, timeout_ms: int | None = None) -> PreparedTxnState:
        self._wait_queue()
        return self._loop.run(self._async.prepare_transaction(timeout_ms))

    def complete_transaction(self, prepared_state: PreparedTxnState, commit: bool = True,
                             timeout_ms: int | None = None) -> None:
        self._loop.run(self._async.complete_transaction(prepared_state, commit, timeout_ms))

    def close(self, timeout_ms: int | None = None) -> None:
        """Flush, then release connections and the loop thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._wait_queue()
            self._loop.run(self._async.close(timeout_ms))
        finally:
            self._loop.stop()


def _callback(cb: DeliveryCallback) -> Callable[[concurrent.futures.Future[RecordMetadata]],
                                                 None]:
    def done(fut: concurrent.futures.Future[RecordMetadata]) -> None:
        if fut.cancelled():
            cb(None, concurrent.futures.CancelledError())
        elif fut.exception() is not None:
            cb(None, fut.exception())
        else:
            cb(fut.result(), None)
    return done
