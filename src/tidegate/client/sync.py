"""Blocking facades — `Producer`, `Consumer`, `Admin` — over the asyncio clients.

Each facade owns a private event loop running in a daemon thread (`LoopThread`) and
runs the very same async client code there, so scripts, notebooks and Spark executors
get Kafka's behaviour without writing asyncio. Methods block the calling thread until
the loop thread has the answer.

`Producer.send` is the exception: it serializes and size-checks the record in the
caller's thread (so MessageTooLargeError, TypeError and ClientClosedError are raised
at once, as in Kafka), queues it for the loop thread, and returns a
`concurrent.futures.Future` of its `RecordMetadata` without waiting. The queue holds at
most `MAX_QUEUED` records; beyond that `send` blocks, which — together with the async
producer blocking on ``buffer.memory`` — is the back-pressure.

Callbacks (`on_delivery`) run on the loop thread: keep them short, and do not call the
facade's blocking methods from them (that would deadlock; it raises RuntimeError).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from tidegate.client.admin import AsyncAdmin
from tidegate.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from tidegate.client.consumer.blocking import CallbackPump
from tidegate.client.consumer.consumer import AsyncConsumer, PartitionLike, TopicsLike
from tidegate.client.consumer.group import CommitCallback, ConsumerGroupMetadata
from tidegate.client.consumer.group_offsets import OffsetAndMetadata
from tidegate.client.errors import ClientClosedError
from tidegate.client.futures import DeliveryFuture, FutureGroup
from tidegate.client.producer.producer import AsyncProducer, DeliveryCallback, Prepared
from tidegate.client.types import (
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConsumerRecord,
    NewTopic,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicDescription,
    TopicInfo,
    TopicPartition,
)
from tidegate.common.errors import KafkaError
from tidegate.records.record import Record

__all__ = ["MAX_QUEUED", "Admin", "Consumer", "LoopThread", "Producer"]

T = TypeVar("T")
MAX_QUEUED = 10_000


class LoopThread:
    """An event loop in a daemon thread; `run` executes a coroutine there."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._what = name.removeprefix("tidegate-")  # "producer", "consumer", "admin"
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.loop.is_closed() or not self._thread.is_alive():
            coro.close()
            raise ClientClosedError(f"the {self._what} is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop thread and wait for its result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking client method was called from the client's own "
                               "loop thread (e.g. from a delivery callback)")
        fut = self._submit(coro)
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()
            raise

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coro` on the loop thread; ClientClosedError once the client closed."""
        return self._submit(coro)

    def call(self, fn: Callable[[], T]) -> T:
        """Run a plain function on the loop thread (for state the loop owns)."""
        async def wrapper() -> T:
            return fn()
        return self.run(wrapper())

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()
            self.loop.close()


Item = tuple[str, int | None, Prepared, int | None, "concurrent.futures.Future[RecordMetadata]"]


class Producer:
    """Blocking producer; see the module docstring and `AsyncProducer`."""

    def __init__(self, config: ProducerConfig | Mapping[str, object] | None = None,
                 **overrides: object) -> None:
        self._async = AsyncProducer(config, **overrides)
        self.config = self._async.config
        self._loop = LoopThread("tidegate-producer")
        self._queue: deque[Item] = deque()  # append/popleft are atomic: no lock needed
        self._futures = FutureGroup()
        self._cond = threading.Condition()
        # True while a pump (`_drain`) runs on the loop thread. Set under `_cond`; a
        # record is appended to the queue *before* `_pumping` is read, and the pump
        # clears `_pumping` *before* its last look at the queue, so every record is
        # seen by a running pump or starts one (see `_drain`).
        self._pumping = False
        self._room_waiters = 0
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
        prepared = self._async.prepare(topic, value, key, headers)
        fut: DeliveryFuture[RecordMetadata] = DeliveryFuture(self._futures)
        if on_delivery is not None:
            fut.add_done_callback(_callback(on_delivery))
        queue = self._queue
        if len(queue) >= MAX_QUEUED:
            self._wait_for_room()
        queue.append((topic, partition, prepared, timestamp_ms, fut))
        if not self._pumping:
            with self._cond:
                if not self._pumping:
                    self._pumping = True
                    self._loop.submit(self._drain())
        return fut

    def _wait_for_room(self) -> None:
        with self._cond:
            self._room_waiters += 1
            try:
                while len(self._queue) >= MAX_QUEUED and self._pumping:
                    self._cond.wait(0.1)
            finally:
                self._room_waiters -= 1

    async def _drain(self) -> None:
        """Move queued records into the async producer until the queue is empty."""
        producer = self._async
        queue = self._queue
        owner = True  # this pump is the one `_pumping` stands for
        try:
            while True:
                n = 0
                while queue:
                    topic, partition, prepared, ts, fut = queue.popleft()
                    try:
                        if not producer.try_append(topic, partition, prepared, ts, fut):
                            await producer.append(topic, partition, prepared, ts, fut)
                    except Exception as e:
                        if not fut.done():
                            fut.set_exception(e)
                    n += 1
                    if n >= 1000 or producer._should_yield:
                        producer._should_yield = False
                        n = 0
                        if self._room_waiters:
                            with self._cond:
                                self._cond.notify_all()
                        await asyncio.sleep(0)  # let the sender ship full batches
                with self._cond:
                    self._pumping = owner = False
                    self._cond.notify_all()
                # A record appended after the queue looked empty saw `_pumping` still
                # set and started no pump: carry on with it unless a new pump did.
                if not queue:
                    return
                with self._cond:
                    if self._pumping:
                        return
                    self._pumping = owner = True
        finally:
            with self._cond:
                if owner:  # left early (cancelled): fail what is still queued
                    self._pumping = False
                    while queue:
                        item = queue.popleft()
                        if not item[4].done():
                            item[4].set_exception(ClientClosedError(
                                "the producer stopped before this record was sent"))
                    self._cond.notify_all()

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


class Consumer:
    """Blocking consumer; see the module docstring and `AsyncConsumer`."""

    def __init__(self, config: ConsumerConfig | Mapping[str, object] | None = None,
                 **overrides: object) -> None:
        self._async = AsyncConsumer(config, **overrides)
        self.config = self._async.config
        self._loop = LoopThread("tidegate-consumer")
        self._closed = False
        # Rebalance callbacks run on the thread that polls (consumer/blocking.py).
        self._pump = CallbackPump()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- consumer groups: see AsyncConsumer; listener callbacks run in poll()'s thread
    def subscribe(self, topics: TopicsLike, listener: object | None = None) -> None:
        wrapped = self._pump.wrap(listener)
        self._loop.call(lambda: self._async.subscribe(topics, wrapped))

    def unsubscribe(self) -> None:
        self._pump.run(self._loop, self._async.unsubscribe())

    def subscription(self) -> set[str]:
        return self._loop.call(self._async.subscription)

    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
               timeout_ms: int | None = None) -> None:
        self._loop.run(self._async.commit(offsets, timeout_ms))

    def commit_async(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
                     | None = None, callback: CommitCallback | None = None
                     ) -> concurrent.futures.Future[None]:
        """Returns a future of the commit; `callback` runs on the loop thread."""
        async def send() -> None:
            await self._async.commit_async(offsets, callback)
        return self._loop.submit(send())

    def committed(self, partitions: Iterable[PartitionLike], timeout_ms: int | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._loop.run(self._async.committed(list(partitions), timeout_ms))

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._loop.call(self._async.group_metadata)

    def assign(self, partitions: Iterable[PartitionLike]) -> None:
        tps = list(partitions)
        self._loop.call(lambda: self._async.assign(tps))

    def assignment(self) -> set[TopicPartition]:
        return self._loop.call(self._async.assignment)

    def seek(self, partition: PartitionLike, offset: int) -> None:
        self._loop.call(lambda: self._async.seek(partition, offset))

    def seek_to_beginning(self, *partitions: PartitionLike) -> None:
        self._loop.call(lambda: self._async.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: PartitionLike) -> None:
        self._loop.call(lambda: self._async.seek_to_end(*partitions))

    def position(self, partition: PartitionLike) -> int:
        return self._loop.run(self._async.position(partition))

    def highwater(self, partition: PartitionLike) -> int | None:
        return self._loop.call(lambda: self._async.highwater(partition))

    def pause(self, *partitions: PartitionLike) -> None:
        self._loop.call(lambda: self._async.pause(*partitions))

    def resume(self, *partitions: PartitionLike) -> None:
        self._loop.call(lambda: self._async.resume(*partitions))

    def paused(self) -> set[TopicPartition]:
        return self._loop.call(self._async.paused)

    def poll(self, timeout_ms: int = 1000,
             max_records: int | None = None) -> list[ConsumerRecord]:
        return self._pump.run(self._loop, self._async.poll(timeout_ms, max_records))

    def poll_batches(self, timeout_ms: int = 1000, max_records: int | None = None
                     ) -> dict[TopicPartition, list[Record]]:
        return self._pump.run(self._loop, self._async.poll_batches(timeout_ms, max_records))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while not self._closed:
            yield from self.poll()

    def offsets_for_times(self, timestamps: Mapping[PartitionLike, int],
                          timeout_ms: int | None = None
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._loop.run(self._async.offsets_for_times(timestamps, timeout_ms))

    def beginning_offsets(self, partitions: Iterable[PartitionLike],
                          timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        return self._loop.run(self._async.beginning_offsets(partitions, timeout_ms))

    def end_offsets(self, partitions: Iterable[PartitionLike],
                    timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        return self._loop.run(self._async.end_offsets(partitions, timeout_ms))

    def partitions_for_topic(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        return self._loop.run(self._async.partitions_for_topic(topic, timeout_ms))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._pump.run(self._loop, self._async.close())
        finally:
            self._loop.stop()


class Admin:
    """Blocking admin client; see `AsyncAdmin` for what each method does."""

    def __init__(self, config: AdminConfig | Mapping[str, object] | None = None,
                 **overrides: object) -> None:
        self._async = AsyncAdmin(config, **overrides)
        self.config = self._async.config
        self._loop = LoopThread("tidegate-admin")
        self._closed = False

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False
                      ) -> dict[str, KafkaError | None]:
        return self._loop.run(self._async.create_topics(topics, validate_only=validate_only))

    def create_topic(self, name: str, num_partitions: int = 1, replication_factor: int = 1,
                     configs: Mapping[str, str] | None = None) -> None:
        self._loop.run(self._async.create_topic(name, num_partitions, replication_factor,
                                                configs))

    def delete_topics(self, names: Iterable[str]) -> dict[str, KafkaError | None]:
        return self._loop.run(self._async.delete_topics(names))

    def delete_topic(self, name: str) -> None:
        self._loop.run(self._async.delete_topic(name))

    def list_topics(self, include_internal: bool = False) -> dict[str, TopicInfo]:
        return self._loop.run(self._async.list_topics(include_internal))

    def describe_topics(self, names: Iterable[str] | None = None,
                        include_configs: bool = True) -> list[TopicDescription]:
        return self._loop.run(self._async.describe_topics(names, include_configs))

    def create_partitions(self, new_totals: Mapping[str, int], *,
                          validate_only: bool = False) -> dict[str, KafkaError | None]:
        return self._loop.run(self._async.create_partitions(new_totals,
                                                            validate_only=validate_only))

    def describe_configs(self, resources: Iterable[ConfigResource]
                         ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        return self._loop.run(self._async.describe_configs(resources))

    def incremental_alter_configs(self, resource: ConfigResource,
                                  set: Mapping[str, str] | None = None,
                                  delete: Iterable[str] = (), *,
                                  validate_only: bool = False) -> None:
        self._loop.run(self._async.incremental_alter_configs(
            resource, set, delete, validate_only=validate_only))

    def list_offsets(self, query: Mapping[TopicPartition, int], *, isolation_level: int = 0
                     ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._loop.run(self._async.list_offsets(query, isolation_level=isolation_level))

    def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return self._loop.run(self._async.delete_records(before))

    def describe_cluster(self) -> ClusterDescription:
        return self._loop.run(self._async.describe_cluster())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._async.close())
        finally:
            self._loop.stop()
