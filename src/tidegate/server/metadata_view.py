"""The metadata view: what handlers know about brokers, topics and partition leaders.

Handlers that describe the cluster (Metadata, DescribeCluster, FindCoordinator, the
topic lookups of every other request) read this view, never the `LogManager` or
ZooKeeper directly. Two implementations answer the same `MetadataView` protocol:

- `EmbeddedMetadata` (here): the single broker. Every topic in the local topics file,
  this node the leader of every partition at leader epoch 0, replicas = ISR = [node].
- the cluster view (`server/cluster/metadata.py`, once cluster mode is on): a cache of
  ZooKeeper's `/brokers/ids`, `/brokers/topics` and partition-state znodes.

A view answers from memory and never blocks: it is read on the event loop for every
request. Values are immutable snapshots (`PartitionView`, `TopicView`), so a handler
that reads a topic twice sees one consistent state per read.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tidegate.common.config import BrokerConfig
from tidegate.common.topics import INTERNAL_TOPICS
from tidegate.storage.log_manager import LogManager

EMBEDDED_LEADER_EPOCH = 0


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionView:
    index: int
    leader: int  # -1 when no replica may lead (offline)
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionView, ...]

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


class MetadataView(Protocol):
    """What every handler may ask about the cluster; see the module docstring."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    def brokers(self) -> Sequence[BrokerEndpoint]: ...

    def broker(self, node_id: int) -> BrokerEndpoint | None: ...

    def topic_names(self) -> list[str]: ...

    def topic(self, name: str) -> TopicView | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicView | None: ...


@runtime_checkable
class ListenerAwareView(Protocol):
    """A view that can answer with the endpoints of a given listener (Kafka: clients get
    the endpoints of the listener they came in on). The embedded and the cluster views
    are; a view that is not answers `brokers()` for all."""

    def brokers_on(self, listener: str) -> Sequence[BrokerEndpoint]: ...


@runtime_checkable
class ChangingView(Protocol):
    """A view that follows a truth elsewhere and can say when it changed (the cluster
    view): `changed()` is a future done at its next update, shared by every waiter (wait
    on it with `asyncio.wait`, which does not cancel it)."""

    def changed(self) -> asyncio.Future[None]: ...


async def next_change(view: MetadataView, timeout: float, poll: float) -> None:
    """Return at `view`'s next update (a `ChangingView`: the metadata watcher wakes it) or
    after `poll` seconds (a view that cannot tell), at the latest after `timeout`. Look at
    the view, then call this with no await between, and no update is missed."""
    if timeout <= 0:
        return
    if isinstance(view, ChangingView):
        await asyncio.wait((view.changed(),), timeout=timeout)
    else:
        await asyncio.sleep(min(poll, timeout))


def brokers_on(view: MetadataView, listener: str) -> Sequence[BrokerEndpoint]:
    if listener and isinstance(view, ListenerAwareView):
        return view.brokers_on(listener)
    return view.brokers()


def broker_on(view: MetadataView, node_id: int, listener: str) -> BrokerEndpoint | None:
    if listener and isinstance(view, ListenerAwareView):
        return next((b for b in view.brokers_on(listener) if b.node_id == node_id), None)
    return view.broker(node_id)


class EmbeddedMetadata:
    """The single broker's view: this node leads every partition of the topics file."""

    def __init__(self, config: BrokerConfig, logs: LogManager) -> None:
        self._config = config
        self._logs = logs
        self.node_id = config.node_id
        self._views: dict[str, TopicView] = {}  # rebuilt when the topic changes
        # the offline partitions each cached view was built with: comparing sets, not
        # walking every partition's view, on each request (Produce resolves its topics)
        self._views_down: dict[str, frozenset[int]] = {}

    @property
    def cluster_id(self) -> str:
        return self._logs.cluster_id

    @property
    def controller_id(self) -> int:
        return self.node_id

    def brokers(self) -> Sequence[BrokerEndpoint]:
        lis = self._config.advertised_listeners()[0]
        rack = self._config.get("broker.rack") or None
        return (BrokerEndpoint(self.node_id, lis.host, lis.port, rack),)

    def brokers_on(self, listener: str) -> Sequence[BrokerEndpoint]:
        """This node's advertised endpoint on `listener` (the first one if not advertised)."""
        advertised = self._config.advertised_listeners()
        lis = next((a for a in advertised if a.name == listener), advertised[0])
        rack = self._config.get("broker.rack") or None
        return (BrokerEndpoint(self.node_id, lis.host, lis.port, rack),)

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return self.brokers()[0] if node_id == self.node_id else None

    def topic_names(self) -> list[str]:
        return sorted(self._logs.topics)

    def topic(self, name: str) -> TopicView | None:
        meta = self._logs.topics.get(name)
        if meta is None:
            return None
        # JBOD: a partition in a log directory taken offline has no leader, its replica
        # is offline (as Kafka reports it: LEADER_NOT_AVAILABLE, offline_replicas)
        down = frozenset(p for p in range(meta.partitions) if self._logs.is_offline(name, p)
                         ) if self._logs.dirs.offline else frozenset()
        cached = self._views.get(name)
        if (cached is not None and cached.topic_id == meta.topic_id
                and len(cached.partitions) == meta.partitions
                and down == self._views_down.get(name)):
            return cached
        node = (self.node_id,)
        parts = tuple(
            PartitionView(p, -1, EMBEDDED_LEADER_EPOCH, node, (), node) if p in down
            else PartitionView(p, self.node_id, EMBEDDED_LEADER_EPOCH, node, node)
            for p in range(meta.partitions)
        )
        view = self._views[name] = TopicView(name, meta.topic_id, parts)
        self._views_down[name] = down
        return view

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicView | None:
        meta = self._logs.topic_by_id(topic_id)
        return None if meta is None else self.topic(meta.name)
