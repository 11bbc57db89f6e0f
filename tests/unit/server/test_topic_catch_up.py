"""Cluster mode: Metadata and DescribeTopicPartitions describe a topic the metadata view
has not seen yet (handlers/new_topics.py's `catch_up`).

A topic created through another broker moments ago is looked up at the topic admin's
truth (after the ACL checks) and awaited in the view, so the answer has its leaders;
one the view never shows in time is answered from the truth with no leader
(LEADER_NOT_AVAILABLE); one found nowhere costs no wait. The end-to-end race is
tests/integration/test_cluster_metadata_lag.py's test_topics_described_right_after_create.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from tests.unit.server.topic_truth import Denying, TopicTruth

from tidegate.protocol.messages import build, request_class
from tidegate.replication.controller_logic import VersionedState
from tidegate.replication.znodes import (
    BrokerEndpoint,
    BrokerInfo,
    PartitionState,
    TopicAssignment,
)
from tidegate.server.cluster.metadata import ClusterMetadata
from tidegate.server.context import RequestContext
from tidegate.server.handlers import describe_topic_partitions, metadata, new_topics
from tidegate.server.handlers.new_topics import catch_up
from tidegate.server.topic_admin import FoundTopic

CACHED_ID, NEW_ID, UNKNOWN_ID = uuid.UUID(int=5), uuid.UUID(int=6), uuid.UUID(int=99)
REPLICAS = ((1, 2), (2, 1))


def _truth(topics: dict[str, uuid.UUID], delay: float = 0.02) -> TopicTruth:
    """The topic admin's truth: these topics (name -> id), each with REPLICAS."""
    return TopicTruth.with_ids(topics, REPLICAS, delay)


def _assignment(name: str, topic_id: uuid.UUID) -> TopicAssignment:
    return TopicAssignment(name, dict(enumerate(REPLICAS)), topic_id=topic_id)


def _learn(md: ClusterMetadata, name: str, topic_id: uuid.UUID, *, states: bool = True) -> None:
    """What the metadata watcher does for a new topic: its znode, then its states."""
    md.set_topic(name, _assignment(name, topic_id))
    for p, replicas in enumerate(REPLICAS) if states else ():
        md.set_state((name, p), VersionedState(
            PartitionState(leader=replicas[0], leader_epoch=0, isr=replicas,
                           controller_epoch=1), 0))


def _broker(truth: TopicTruth, denied: set[str] = frozenset(), cluster: bool = True,  # type: ignore[assignment]
            auto_create: bool = False) -> Any:
    md = ClusterMetadata(1, "PLAINTEXT", "cluster")
    md.set_brokers({i: BrokerInfo(i, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + i),))
                    for i in (1, 2)})
    _learn(md, "cached", CACHED_ID)
    return SimpleNamespace(
        metadata=md, topic_admin=truth, authorizer=Denying(set(denied)),
        replicas=SimpleNamespace(cluster=cluster), auto_create_enabled=lambda: auto_create,
        default_partitions=lambda: 1, clock=SimpleNamespace(monotonic=time.monotonic))


def _later(delay: float, action: Any) -> None:
    asyncio.get_running_loop().call_later(delay, action)


def test_a_topic_the_view_learns_of_is_awaited_with_its_leaders() -> None:
    truth = _truth({"cached": CACHED_ID, "new": NEW_ID})
    b = _broker(truth)

    async def run() -> Any:
        # the watcher reads the znode first, the states a moment later
        _later(0.03, lambda: _learn(b.metadata, "new", NEW_ID, states=False))
        _later(0.06, lambda: _learn(b.metadata, "new", NEW_ID))
        return await catch_up(b, ["new", "gone"])

    got = asyncio.run(run())
    assert list(got) == ["new"] and got["new"].topic_id == NEW_ID
    assert [p.leader for p in got["new"].partitions] == [1, 2]
    assert sorted(truth.asked) == ["gone", "new"] and truth.most_in_flight == 2


def test_the_view_wakes_the_wait_when_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait ends at the update that settles the topic, not at a poll's next tick (a
    poll slower than the whole test shows it); an update of another topic only wakes the
    wait to look again."""
    monkeypatch.setattr(new_topics, "CATCH_UP_POLL_S", 0.9)
    b = _broker(_truth({"new": NEW_ID}, delay=0))

    async def run() -> tuple[Any, float]:
        _later(0.01, lambda: _learn(b.metadata, "other", uuid.UUID(int=9)))
        _later(0.03, lambda: _learn(b.metadata, "new", NEW_ID, states=False))
        _later(0.05, lambda: _learn(b.metadata, "new", NEW_ID))
        start = time.monotonic()
        got = await catch_up(b, ["new"])
        return got, time.monotonic() - start

    got, took = asyncio.run(run())
    assert [p.leader for p in got["new"].partitions] == [1, 2]
    assert took < 0.5, took


def test_the_cluster_view_sets_one_future_per_update() -> None:
    """`ClusterMetadata.changed()`: one future shared by the waiters until the next
    update (brokers, topic, partition state) sets it; a stale state sets nothing."""
    async def run() -> None:
        md = ClusterMetadata(1, "PLAINTEXT", "cluster")
        for update in (lambda: md.set_brokers({}),
                       lambda: md.set_topic("t", _assignment("t", NEW_ID)),
                       lambda: md.set_state(("t", 0), VersionedState(PartitionState(
                           leader=1, leader_epoch=0, isr=(1,), controller_epoch=1), 2))):
            first = md.changed()
            assert md.changed() is first and not first.done()
            update()
            assert first.done() and md.changed() is not first
        waiting = md.changed()
        assert not md.set_state(("t", 0), VersionedState(PartitionState(
            leader=2, leader_epoch=0, isr=(2,), controller_epoch=1), 1))
        assert not waiting.done()

    asyncio.run(run())


def test_a_view_that_never_catches_up_gives_a_leaderless_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Never a leader the view has not seen: each partition LEADER_NOT_AVAILABLE, with
    the znode's replicas."""
    monkeypatch.setattr(new_topics, "CATCH_UP_S", 0.05)
    b = _broker(_truth({"new": NEW_ID}))
    got = asyncio.run(catch_up(b, ["new"]))["new"]
    assert got.topic_id == NEW_ID
    assert [(p.leader, p.replicas, p.isr) for p in got.partitions] == [
        (-1, (1, 2), ()), (-1, (2, 1), ())]
    # a topic found by id: its znode read after the wait
    truth = _truth({"new": NEW_ID})
    got = asyncio.run(catch_up(_broker(truth), [], known={"new"}))["new"]
    assert truth.asked == ["new"] and [p.leader for p in got.partitions] == [-1, -1]


def test_a_name_found_nowhere_costs_no_wait() -> None:
    truth = _truth({})
    start = time.monotonic()
    assert asyncio.run(catch_up(_broker(truth), ["gone-1", "gone-2"])) == {}
    assert time.monotonic() - start < new_topics.CATCH_UP_S / 2
    assert sorted(truth.asked) == ["gone-1", "gone-2"]


def test_an_offline_partition_is_not_waited_for() -> None:
    """A state without a leader (no replica alive) is an answer: no wait for a leader."""
    b = _broker(_truth({"new": NEW_ID}))
    b.metadata.set_topic("new", _assignment("new", NEW_ID))
    for p in range(len(REPLICAS)):
        b.metadata.set_state(("new", p), VersionedState(
            PartitionState(leader=-1, leader_epoch=3, isr=(1,), controller_epoch=1), 0))
    start = time.monotonic()
    got = asyncio.run(catch_up(b, ["new"]))["new"]
    assert time.monotonic() - start < new_topics.CATCH_UP_S / 2
    assert [(p.leader, p.leader_epoch) for p in got.partitions] == [(-1, 3), (-1, 3)]


def test_lookups_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(new_topics, "FIND_NAMES_MAX", 3)
    truth = _truth({}, delay=0)
    asyncio.run(catch_up(_broker(truth), [f"gone-{i}" for i in range(10)]))
    assert len(truth.asked) == 3


def test_embedded_looks_nothing_up() -> None:
    truth = _truth({"new": NEW_ID})
    assert asyncio.run(catch_up(_broker(truth, cluster=False), ["new"], {"x"})) == {}
    assert truth.asked == []


def _metadata(b: Any, topics: list[dict[str, Any]], auto: bool = False) -> dict[str, str]:
    req = build(request_class(3, 12), {"topics": topics, "allow_auto_topic_creation": auto,
                                       "include_topic_authorized_operations": False})
    resp = asyncio.run(metadata.handle(b, RequestContext(3, 12, 1, "t", "peer"), req))
    return {str(t.name or t.topic_id): t.error_code.name + "".join(
        f" {p.partition_index}:{p.leader_id}" for p in t.partitions) for t in resp.topics}


def test_metadata_describes_a_topic_created_through_another_broker() -> None:
    """By id and by name, after the ACL checks: a denied name costs no lookup (an id
    needs one to know its name), found topics are answered with their leaders."""
    truth = _truth({"cached": CACHED_ID, "new": NEW_ID, "secret": uuid.UUID(int=7)})
    b = _broker(truth, denied={"secret", "secret-2"})

    async def learn_soon(ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
        asyncio.get_running_loop().call_later(0.03, _learn, b.metadata, "new", NEW_ID)
        return await TopicTruth.find_topic_ids(truth, ids)

    truth.find_topic_ids = learn_soon  # type: ignore[method-assign]
    got = _metadata(b, [{"name": None, "topic_id": i}
                        for i in (NEW_ID, UNKNOWN_ID, uuid.UUID(int=7))]
                    + [{"name": n} for n in ("secret-2", "gone", "cached")])
    assert got == {"new": "none 0:1 1:2", str(UNKNOWN_ID): "unknown_topic_id",
                   str(uuid.UUID(int=7)): "topic_authorization_failed",
                   "secret-2": "topic_authorization_failed",
                   "gone": "unknown_topic_or_partition", "cached": "none 0:1 1:2"}
    assert truth.asked_ids == [{NEW_ID, UNKNOWN_ID, uuid.UUID(int=7)}]
    assert truth.asked == ["gone"]  # not the denied name, not the topic found by id


def test_auto_creation_does_not_fire_on_a_topic_another_broker_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in the truth: described, not created again. Created meanwhile by another
    broker (the create fails): LEADER_NOT_AVAILABLE, as Kafka, not TOPIC_ALREADY_EXISTS."""
    monkeypatch.setattr(new_topics, "CATCH_UP_S", 0.05)
    truth = _truth({"new": NEW_ID})
    b = _broker(truth, auto_create=True)
    assert _metadata(b, [{"name": "new"}], auto=True) == {"new": "none 0:-1 1:-1"}
    assert truth.created == []

    async def made_meanwhile(name: str) -> FoundTopic | None:
        truth.topics["racing"] = len(REPLICAS)
        return None

    truth.find_topic = made_meanwhile  # type: ignore[method-assign]
    assert _metadata(b, [{"name": "racing"}], auto=True) == {"racing": "leader_not_available"}
    assert truth.created == ["racing"]


def test_a_topic_without_partition_states_is_awaited() -> None:
    """The view has the znode but not the states yet: waited for, then answered with
    the leaders (the view's own answer, not looked up)."""
    truth = _truth({})
    b = _broker(truth)
    _learn(b.metadata, "new", NEW_ID, states=False)

    async def run() -> Any:
        _later(0.03, lambda: _learn(b.metadata, "new", NEW_ID))
        req = build(request_class(75, 0), {"topics": [{"name": "new"}, {"name": "gone"}],
                                           "response_partition_limit": 2000, "cursor": None})
        return await describe_topic_partitions.handle(
            b, RequestContext(75, 0, 1, "t", "peer"), req)

    resp = asyncio.run(run())
    assert [(t.name, t.error_code.name, [p.leader_id for p in t.partitions])
            for t in resp.topics] == [("gone", "unknown_topic_or_partition", []),
                                      ("new", "none", [1, 2])]
    assert truth.asked == ["gone"]


def test_the_view_finds_a_topic_by_id_through_its_index() -> None:
    """`ClusterMetadata.topic_by_id` (each Metadata by id asks it) follows `set_topic`:
    a topic recreated under a new id is not found by the old one, a deleted one by
    neither."""
    md = ClusterMetadata(1, "PLAINTEXT", "cluster")
    md.set_topic("t", _assignment("t", NEW_ID))
    got = md.topic_by_id(NEW_ID)
    assert got is not None and got.name == "t"
    md.set_topic("t", _assignment("t", UNKNOWN_ID))
    assert md.topic_by_id(NEW_ID) is None
    assert (got := md.topic_by_id(UNKNOWN_ID)) is not None and got.topic_id == UNKNOWN_ID
    md.set_topic("t", None)
    assert md.topic_by_id(UNKNOWN_ID) is None and md.topic_by_id(NEW_ID) is None


def test_create_waits_for_leaders_until_the_view_shows_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CreateTopics/CreatePartitions with a timeout (handlers/admin.py `_await_leaders`)
    answer at the update that gives the partitions made their leaders, not at a poll's
    next tick (a poll slower than the test shows it); without one, at the timeout, with
    the topic still leaderless."""
    from tidegate.server.handlers import admin

    monkeypatch.setattr(admin, "_LEADER_POLL_S", 0.9)
    b = _broker(_truth({}))

    async def run() -> tuple[set[str], float, set[str]]:
        _later(0.02, lambda: _learn(b.metadata, "new", NEW_ID, states=False))
        _later(0.05, lambda: _learn(b.metadata, "new", NEW_ID))
        start = time.monotonic()
        late = await admin._await_leaders(b, {"new": (0, 2)}, 2_000)
        took = time.monotonic() - start
        never = await admin._await_leaders(b, {"never": (0, 1)}, 50)
        return late, took, never

    late, took, never = asyncio.run(run())
    assert late == set() and took < 0.5, took
    assert never == {"never"}
