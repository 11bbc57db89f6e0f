"""Cluster mode: a broker's metadata cache lags a topic created through another broker.

Found by librdkafka's 0081 (CreatePartitions through another broker right after
CreateTopics) and 0099 (OffsetCommit right after the create) on a 3-broker cluster.
Handlers asking only "does this topic (partition) exist" ask the topic admin's truth
(the topic znode) when the cache says no; CreatePartitions counts from the znode.
The end-to-end race is tests/integration/test_cluster_metadata_lag.py."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from tidegate.common.errors import (
    ErrorCode,
    InvalidPartitionsError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from tidegate.replication.znodes import TopicAssignment
from tidegate.server.cluster import topic_admin as cluster_topic_admin
from tidegate.server.cluster.errors import ConnectionLossError, NoNodeError
from tidegate.server.cluster.metadata import ClusterMetadata
from tidegate.server.cluster.topic_admin import ClusterTopicAdmin, add_partitions_in_zk
from tidegate.server.handlers.common import partition_count
from tidegate.server.topic_admin import FoundTopic, check_partition_increase

TOPIC_ID = uuid.UUID(int=7)


class FakeZk:
    """get() of /brokers/topics/<t> from a dict; `fail` raises, `hang` never answers."""

    def __init__(self, topics: dict[str, TopicAssignment]) -> None:
        self.topics = topics
        self.gets = 0
        self.fail: Exception | None = None
        self.hang = False
        self.written: list[Any] = []

    async def get(self, path: str, watch: object = None) -> tuple[bytes, Any]:
        self.gets += 1
        if self.fail is not None:
            raise self.fail
        if self.hang:
            await asyncio.Event().wait()
        name = path.rsplit("/", 1)[1]
        if name not in self.topics:
            raise NoNodeError(path)
        return self.topics[name].encode(), SimpleNamespace(version=3)

    async def get_children(self, path: str, watch: object = None) -> list[str]:
        return []  # no live brokers: only reached after the checks under test

    async def transaction(self, ops: list[Any]) -> None:
        self.written += ops


def _assignment(partitions: int) -> TopicAssignment:
    return TopicAssignment("t", {p: (1,) for p in range(partitions)}, topic_id=TOPIC_ID)


class FakeAdmin:
    def __init__(self, found: FoundTopic | None) -> None:
        self.found = found
        self.asked: list[str] = []

    async def find_topic(self, name: str) -> FoundTopic | None:
        self.asked.append(name)
        return self.found


def _broker(cached: int | None, truth: int | None) -> Any:
    md = ClusterMetadata(1, "PLAINTEXT", "cluster")
    if cached is not None:
        md.set_topic("t", _assignment(cached))
    admin = FakeAdmin(None if truth is None else FoundTopic(TOPIC_ID, truth))
    return SimpleNamespace(metadata=md, topic_admin=admin)


def test_the_cache_is_trusted_when_it_has_the_partitions() -> None:
    b = _broker(cached=2, truth=5)
    assert asyncio.run(partition_count(b, "t", wanted=2)) == 2
    assert b.topic_admin.asked == []


def test_a_topic_the_cache_lacks_is_looked_up() -> None:
    b = _broker(cached=None, truth=3)
    assert asyncio.run(partition_count(b, "t")) == 3
    assert b.topic_admin.asked == ["t"]
    assert asyncio.run(partition_count(_broker(None, None), "t")) == 0  # truly absent


def test_a_partition_the_cache_lacks_is_looked_up() -> None:
    b = _broker(cached=1, truth=4)
    assert asyncio.run(partition_count(b, "t", wanted=3)) == 4
    # the truth never shrinks what the cache has (a topic is not shrunk)
    assert asyncio.run(partition_count(_broker(cached=2, truth=None), "t", wanted=3)) == 2


def test_find_topic_reads_the_znode() -> None:
    zk = FakeZk({"t": _assignment(3)})
    admin = ClusterTopicAdmin(zk, 3)  # type: ignore[arg-type]
    assert asyncio.run(admin.find_topic("t")) == FoundTopic(TOPIC_ID, 3, ((1,),) * 3)
    assert asyncio.run(admin.find_topic("nope")) is None


def test_find_topic_without_zookeeper_leaves_the_answer_no(
        monkeypatch: pytest.MonkeyPatch) -> None:
    zk = FakeZk({"t": _assignment(3)})
    admin = ClusterTopicAdmin(zk, 3)  # type: ignore[arg-type]
    zk.fail = ConnectionLossError("/brokers/topics/t")
    assert asyncio.run(admin.find_topic("t")) is None
    zk.fail, zk.hang = None, True
    monkeypatch.setattr(cluster_topic_admin, "FIND_TIMEOUT_S", 0.05)
    assert asyncio.run(admin.find_topic("t")) is None


def test_create_partitions_counts_from_the_znode() -> None:
    """The checks that need the current count use the znode's count."""
    zk = FakeZk({"t": _assignment(2)})
    with pytest.raises(InvalidPartitionsError):
        asyncio.run(add_partitions_in_zk(zk, "t", 2))  # type: ignore[arg-type]
    with pytest.raises(KafkaError) as e:
        asyncio.run(add_partitions_in_zk(zk, "t", 4, [[1]]))  # type: ignore[arg-type]
    assert e.value.code == ErrorCode.invalid_replica_assignment
    with pytest.raises(UnknownTopicOrPartitionError):
        asyncio.run(add_partitions_in_zk(zk, "nope", 4))  # type: ignore[arg-type]
    assert zk.written == []


def test_check_partition_increase() -> None:
    check_partition_increase("t", 2, 3, None)
    check_partition_increase("t", 2, 4, [[1], [2]])
    with pytest.raises(InvalidPartitionsError):
        check_partition_increase("t", 2, 1, None)
    for bad in ([[1]], [[1], []], [[1], [2, 2]]):
        with pytest.raises(KafkaError) as e:
            check_partition_increase("t", 2, 4, bad)
        assert e.value.code == ErrorCode.invalid_replica_assignment


def _coordinator(held: bool, leader: int | None, epoch: int = 0) -> Any:
    """A stand-in for GroupCoordinator's `_taking_up`: broker 1, partition 0 of
    __consumer_offsets held or not, and the metadata's leader (None: no topic)."""
    from tidegate.server.metadata_view import PartitionView, TopicView
    parts = () if leader is None else (PartitionView(0, leader, epoch, (1, 2), ()),)
    topic = None if leader is None else TopicView("__consumer_offsets", TOPIC_ID, parts)
    return SimpleNamespace(
        runtime=SimpleNamespace(state=lambda _p: "ACTIVE" if held else None),
        broker=SimpleNamespace(node_id=1, metadata=SimpleNamespace(topic=lambda _n: topic)))


def test_a_coordinator_not_yet_leading_is_retried_not_refused() -> None:
    """COORDINATOR_LOAD_IN_PROGRESS (not NOT_COORDINATOR) while this broker does not hold
    a partition that the metadata names it leader of, or has no state for yet."""
    from tidegate.server.group_coordinator import GroupCoordinator
    taking_up = GroupCoordinator._taking_up
    assert taking_up(_coordinator(held=False, leader=1), 0)  # named, not taken up yet
    assert taking_up(_coordinator(held=False, leader=None), 0)  # topic not seen yet
    assert taking_up(_coordinator(held=False, leader=-1, epoch=-1), 0)  # no state yet
    assert not taking_up(_coordinator(held=False, leader=2), 0)  # another leads it
    assert not taking_up(_coordinator(held=False, leader=-1, epoch=3), 0)  # offline
    assert not taking_up(_coordinator(held=True, leader=1), 0)  # held: its own answer
