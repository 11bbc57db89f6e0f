"""Cluster metadata: brokers, topics, partitions, leaders and topic ids.

`Metadata` is the sans-IO cache: it is updated from Metadata responses, answers
"who leads this partition", and knows when it is stale — older than
``metadata.max.age.ms`` or marked by `request_update()` after a produce/fetch error
that means "your metadata is wrong" (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
LEADER_NOT_AVAILABLE, ...). `MetadataClient` refreshes it over the network; concurrent
refreshes are merged into one request.

Invariant: the cache holds only what the latest response about a topic said; a topic
the broker reports as unknown is dropped, so callers retry rather than use stale leaders.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.net import NetworkClient
from tidegate.client.types import BrokerInfo, PartitionInfo, TopicInfo, TopicPartition
from tidegate.common.errors import KafkaError, UnknownTopicOrPartitionError, error_for_code

__all__ = ["REFRESH_ERRORS", "Metadata", "MetadataClient"]

METADATA = 3
ZERO_UUID = uuid.UUID(int=0)

# Error codes after which a client must refresh metadata before retrying.
REFRESH_ERRORS = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available, ErrorCode.unknown_topic_id,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
    ErrorCode.kafka_storage_error, ErrorCode.inconsistent_topic_id,
    ErrorCode.not_controller,
})


class Metadata:
    """The metadata cache; see the module docstring."""

    def __init__(self, max_age_ms: int = 300_000) -> None:
        self.max_age_ms = max_age_ms
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_errors: dict[str, int] = {}
        self.names_by_id: dict[uuid.UUID, str] = {}
        self.last_refresh_ms: float = float("-inf")
        self._update_requested = False
        self.version = 0  # bumped by every update, so users can drop derived caches

    def request_update(self) -> None:
        self._update_requested = True

    def needs_update(self, now_ms: float) -> bool:
        return self._update_requested or now_ms - self.last_refresh_ms >= self.max_age_ms

    def update(self, resp: Any, now_ms: float, *, all_topics: bool = False) -> None:
        """Apply a Metadata response (any version)."""
        self.brokers = {
            int(b.node_id): BrokerInfo(int(b.node_id), b.host, int(b.port), b.rack)
            for b in resp.brokers}
        self.cluster_id = getattr(resp, "cluster_id", None)
        self.controller_id = int(getattr(resp, "controller_id", -1))
        if all_topics:
            self.topics.clear()
            self.topic_errors.clear()
        for t in resp.topics:
            name = t.name
            code = int(t.error_code.value)
            if name is None:
                continue
            if (code and code != ErrorCode.leader_not_available.value) or not t.partitions:
                self.topics.pop(name, None)
                self.topic_errors[name] = code or ErrorCode.leader_not_available.value
                continue
            self.topic_errors.pop(name, None)
            topic_id = getattr(t, "topic_id", None) or ZERO_UUID
            parts = {
                int(p.partition_index): PartitionInfo(
                    int(p.partition_index), int(p.leader_id),
                    int(getattr(p, "leader_epoch", -1)), tuple(p.replica_nodes),
                    tuple(p.isr_nodes), tuple(getattr(p, "offline_replicas", ())),
                    int(p.error_code.value))
                for p in t.partitions}
            self.topics[name] = TopicInfo(name, topic_id, parts, bool(t.is_internal), code)
            if topic_id != ZERO_UUID:
                self.names_by_id[topic_id] = name
        self.last_refresh_ms = now_ms
        self._update_requested = False
        self.version += 1

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return info.partition_count if info else None

    def leader_for(self, tp: TopicPartition) -> int | None:
        """The leader's node id, or None if unknown or unavailable."""
        info = self.topics.get(tp.topic)
        if info is None:
            return None
        part = info.partitions.get(tp.partition)
        if part is None or part.leader < 0 or part.leader not in self.brokers:
            return None
        return part.leader

    def topic_id(self, topic: str) -> uuid.UUID:
        info = self.topics.get(topic)
        return info.topic_id if info else ZERO_UUID

    def topic_error(self, topic: str) -> KafkaError | None:
        code = self.topic_errors.get(topic)
        return None if code is None else error_for_code(code, f"topic {topic!r}")


class MetadataClient:
    """Keeps a `Metadata` cache fresh for a set of topics, over a `NetworkClient`."""

    def __init__(self, net: NetworkClient, *, max_age_ms: int = 300_000,
                 allow_auto_create: bool = True, retry_backoff_ms: int = 100) -> None:
        self.net = net
        self.cache = Metadata(max_age_ms)
        self.allow_auto_create = allow_auto_create
        self.retry_backoff_ms = retry_backoff_ms
        self.tracked: set[str] = set()
        self._inflight: asyncio.Task[None] | None = None

    @staticmethod
    def now_ms() -> float:
        return time.monotonic() * 1000

    async def refresh(self, topics: Iterable[str] | None = None) -> Metadata:
        """Fetch metadata for `topics` (None: the tracked topics; empty: brokers only)
        and return the cache. Concurrent callers share one in-flight request when they
        ask for nothing beyond the tracked topics."""
        extra = set(topics or ()) - self.tracked
        self.tracked |= extra
        task = self._inflight
        if task is not None and not task.done():
            if not extra:
                await asyncio.shield(task)
                return self.cache
            # The running request was built before `extra` was tracked: wait, then ask
            # again (unless someone already started a newer request).
            await asyncio.wait([task])
        if self._inflight is task:
            task = asyncio.get_running_loop().create_task(self._fetch(None))
            task.add_done_callback(_retrieve)
            self._inflight = task
        assert self._inflight is not None
        await asyncio.shield(self._inflight)
        return self.cache

    async def fetch_all(self) -> Metadata:
        """Metadata for every topic in the cluster (for listing)."""
        await self._fetch(all_topics=True)
        return self.cache

    async def _fetch(self, names: list[str] | None = None, *, all_topics: bool = False) -> None:
        wanted = sorted(self.tracked if names is None else names)
        data: dict[str, Any] = {
            "topics": None if all_topics else [{"name": n} for n in wanted],
            "allow_auto_topic_creation": self.allow_auto_create,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        resp = await self.net.request(None, METADATA, data)
        self.cache.update(resp, self.now_ms(), all_topics=all_topics)
        self.net.nodes = dict(self.cache.brokers)

    async def maybe_refresh(self) -> None:
        if self.cache.needs_update(self.now_ms()):
            await self.refresh()

    async def topic(self, name: str, timeout_ms: int) -> TopicInfo:
        """Metadata for `name`, waiting (and auto-creating if allowed) up to `timeout_ms`
        for it to exist with a leader for every partition."""
        deadline = time.monotonic() + timeout_ms / 1000
        info = self.cache.topic(name)
        if info is not None and name in self.tracked:
            return info
        while True:
            await self.refresh([name])
            info = self.cache.topic(name)
            if info is not None and all(p.leader >= 0 for p in info.partitions.values()):
                return info
            err = self.cache.topic_error(name)
            if err is not None and not err.retriable:
                raise err
            missing = err is not None and err.code == ErrorCode.unknown_topic_or_partition
            if missing and not self.allow_auto_create:
                # Nothing will create it: say so now rather than after the timeout.
                raise UnknownTopicOrPartitionError(
                    f"topic {name!r} does not exist; create it with "
                    f"`tidegate topics create {name}`")
            if time.monotonic() >= deadline:
                if info is not None:
                    return info
                raise UnknownTopicOrPartitionError(
                    f"topic {name!r} is not in the cluster metadata after {timeout_ms} ms; "
                    f"create it (tidegate topics create {name}) or enable "
                    "auto.create.topics.enable on the broker")
            self.cache.request_update()
            await asyncio.sleep(min(self.retry_backoff_ms / 1000,
                                    max(0.0, deadline - time.monotonic())))


def _retrieve(task: asyncio.Task[None]) -> None:
    # Every caller awaits the shared task, but one that was cancelled meanwhile would
    # leave its failure unretrieved; mark it retrieved to avoid asyncio's warning.
    if not task.cancelled():
        task.exception()
