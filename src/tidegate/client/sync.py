"""Blocking facades — `Producer`, `Consumer`, `Admin` — over the asyncio clients.

Each facade owns a private event loop running in a daemon thread (`LoopThread`) and
runs the very same async client code there, so scripts, notebooks and Spark executors
get Kafka's behaviour without writing asyncio. Methods block the calling thread until
the loop thread has the answer. `Producer` lives in `producer/blocking.py` (its `send`
appends in the caller's thread, see there); `Consumer` and `Admin` are here. `Admin`
imports the admin modules when the first one is made, so producers and consumers
never load them.

`Consumer.poll` (and `poll_batches`, `poll_columns`) usually does not go there and
back: the loop thread drains the next polls ahead and the caller takes one on its own
thread (`consumer/staging.py`, which says why positions and commits stay exact).

Callbacks (`on_delivery`, rebalance listeners aside: see `consumer/blocking.py`) run on
the loop thread: keep them short, and do not call the facade's blocking methods from
them (that would deadlock; it raises RuntimeError).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar, cast

from tidegate.client.config import AdminConfig, ConsumerConfig
from tidegate.client.consumer.blocking import CallbackPump, poll_timeout_ms
from tidegate.client.consumer.columns import ColumnSlice
from tidegate.client.consumer.consumer import AsyncConsumer, PartitionLike, TopicsLike
from tidegate.client.consumer.group import CommitCallback, ConsumerGroupMetadata
from tidegate.client.consumer.group_offsets import OffsetAndMetadata
from tidegate.client.consumer.staging import StagedPolls
from tidegate.client.loop_thread import LoopThread
from tidegate.client.producer.blocking import MAX_QUEUED, Producer
from tidegate.client.types import (
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConsumerRecord,
    NewTopic,
    OffsetAndTimestamp,
    ProducerState,
    TopicDescription,
    TopicInfo,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from tidegate.common.errors import KafkaError
from tidegate.records.record import Record

if TYPE_CHECKING:
    from tidegate.client.admin import AsyncAdmin
    from tidegate.client.scram_admin import ScramCredentialInfo, ScramUpsertion

__all__ = ["MAX_QUEUED", "Admin", "Consumer", "LoopThread", "Producer"]

T = TypeVar("T")


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
        # The next poll, drained ahead on the loop thread (consumer/staging.py).
        self._staged = StagedPolls(self._async, self._loop.loop)

    def _unstaged(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the loop thread after giving up the staged poll: for everything
        that changes what the next poll returns."""
        def run() -> T:
            self._staged.unstage()
            return fn()
        return self._loop.call(run)

    def _poll(self, kind: str, wait: int, max_records: int | None) -> object:
        limit = max_records or self.config.max_poll_records
        out = self._staged.take(kind, limit)
        if out is not None:
            return out
        return self._pump.run(self._loop, self._staged.poll(kind, wait, limit))

    def start(self) -> None:
        """Connect to the cluster now (optional: `poll` starts the consumer). Entering
        ``with Consumer(...)`` calls it, as ``async with AsyncConsumer(...)`` does, so a
        first poll finds the connection and the metadata ready."""
        self._loop.run(self._async.start())

    def __enter__(self) -> Consumer:
        try:
            self.start()
        except BaseException:
            self.close()  # __exit__ will not run: stop the loop thread here
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- consumer groups: see AsyncConsumer; listener callbacks run in poll()'s thread
    def subscribe(self, topics: TopicsLike, listener: object | None = None) -> None:
        wrapped = self._pump.wrap(listener)
        self._loop.call(lambda: self._async.subscribe(topics, wrapped))

    def unsubscribe(self) -> None:
        self._pump.run(self._loop, self._unsubscribe())

    async def _unsubscribe(self) -> None:
        self._staged.unstage()
        await self._async.unsubscribe()

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
        self._unstaged(lambda: self._async.assign(tps))

    def assignment(self) -> set[TopicPartition]:
        return self._loop.call(self._async.assignment)

    def seek(self, partition: PartitionLike, offset: int) -> None:
        self._unstaged(lambda: self._async.seek(partition, offset))

    def seek_to_beginning(self, *partitions: PartitionLike) -> None:
        self._unstaged(lambda: self._async.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: PartitionLike) -> None:
        self._unstaged(lambda: self._async.seek_to_end(*partitions))

    def position(self, partition: PartitionLike) -> int:
        return self._loop.run(self._async.position(partition))

    def highwater(self, partition: PartitionLike) -> int | None:
        return self._loop.call(lambda: self._async.highwater(partition))

    def pause(self, *partitions: PartitionLike) -> None:
        self._unstaged(lambda: self._async.pause(*partitions))

    def resume(self, *partitions: PartitionLike) -> None:
        self._loop.call(lambda: self._async.resume(*partitions))

    def paused(self) -> set[TopicPartition]:
        return self._loop.call(self._async.paused)

    def poll(self, timeout_ms: int | None = None, max_records: int | None = None, *,
             timeout: float | None = None) -> list[ConsumerRecord]:
        """Records fetched within `timeout_ms` milliseconds (default 1000) — or
        `timeout` seconds, as confluent-kafka's `poll(timeout)` takes them."""
        wait = poll_timeout_ms(timeout_ms, timeout)
        return cast(list[ConsumerRecord], self._poll("poll", wait, max_records))

    def poll_batches(self, timeout_ms: int | None = None, max_records: int | None = None,
                     *, timeout: float | None = None) -> dict[TopicPartition, list[Record]]:
        wait = poll_timeout_ms(timeout_ms, timeout)
        return cast(dict[TopicPartition, list[Record]],
                    self._poll("batches", wait, max_records))

    def use_columns(self, include_headers: bool = False) -> None:
        """See `AsyncConsumer.use_columns`."""
        self._unstaged(lambda: self._async.use_columns(include_headers))  # the fetcher's

    def poll_columns(self, timeout_ms: int | None = None, max_records: int | None = None,
                     *, timeout: float | None = None) -> dict[TopicPartition, list[ColumnSlice]]:
        """See `AsyncConsumer.poll_columns`."""
        wait = poll_timeout_ms(timeout_ms, timeout)
        return cast(dict[TopicPartition, list[ColumnSlice]],
                    self._poll("columns", wait, max_records))

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
        self._staged.closed = True  # commits on close count what was handed out (held)
        try:
            self._pump.run(self._loop, self._async.close())
        finally:
            self._loop.stop()


class Admin:
    """Blocking admin client; see `AsyncAdmin` for what each method does."""

    def __init__(self, config: AdminConfig | Mapping[str, object] | None = None,
                 **overrides: object) -> None:
        from tidegate.client.admin import AsyncAdmin  # the admin modules load on first use

        self._async: AsyncAdmin = AsyncAdmin(config, **overrides)
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

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_filter_ms: int = -1) -> list[TransactionListing]:
        return self._loop.run(self._async.list_transactions(states, producer_ids,
                                                            duration_filter_ms))

    def describe_transactions(self, ids: Iterable[str]) -> dict[str, TransactionDescription]:
        return self._loop.run(self._async.describe_transactions(ids))

    def describe_producers(self, partitions: Iterable[TopicPartition]
                           ) -> dict[TopicPartition, list[ProducerState]]:
        return self._loop.run(self._async.describe_producers(partitions))

    def abort_transaction(self, topic: str, partition: int, producer_id: int,
                          producer_epoch: int, coordinator_epoch: int) -> None:
        self._loop.run(self._async.abort_transaction(topic, partition, producer_id,
                                                     producer_epoch, coordinator_epoch))

    def describe_user_scram_credentials(
            self, users: Iterable[str] | None = None,
    ) -> dict[str, list[ScramCredentialInfo] | KafkaError]:
        return self._loop.run(self._async.describe_user_scram_credentials(users))

    def alter_user_scram_credentials(
            self, upsertions: Iterable[ScramUpsertion] = (),
            deletions: Iterable[tuple[str, str]] = ()) -> dict[str, KafkaError | None]:
        return self._loop.run(self._async.alter_user_scram_credentials(upsertions, deletions))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._async.close())
        finally:
            self._loop.stop()
