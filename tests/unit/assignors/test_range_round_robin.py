"""Range and round-robin: seed 003's worked examples, Java's member order, and
kafka-python's assignors as the oracle for identical results."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from tidegate.assignors import MemberId, Subscription, round_robin
from tidegate.assignors import range as range_assignor
from tidegate.assignors.types import AssignFn

from ._support import as_names, check_valid, clusters, counts, groups, subs


def test_seed_003_range_example() -> None:
    result = range_assignor.assign({"t0": 3, "t1": 3}, subs(C0=["t0", "t1"], C1=["t0", "t1"]))
    assert as_names(result[MemberId("C0")]) == ["t0p0", "t0p1", "t1p0", "t1p1"]
    assert as_names(result[MemberId("C1")]) == ["t0p2", "t1p2"]


def test_seed_003_round_robin_example() -> None:
    result = round_robin.assign({"t0": 3, "t1": 3}, subs(C0=["t0", "t1"], C1=["t0", "t1"]))
    assert as_names(result[MemberId("C0")]) == ["t0p0", "t0p2", "t1p1"]
    assert as_names(result[MemberId("C1")]) == ["t0p1", "t1p0", "t1p2"]


def test_round_robin_with_different_subscriptions_is_unbalanced_as_documented() -> None:
    # C0: t0; C1: t0, t1; C2: t0, t1, t2 over t0 (1), t1 (2), t2 (3) partitions.
    result = round_robin.assign({"t0": 1, "t1": 2, "t2": 3},
                                subs(C0=["t0"], C1=["t0", "t1"], C2=["t0", "t1", "t2"]))
    assert as_names(result[MemberId("C0")]) == ["t0p0"]
    assert as_names(result[MemberId("C1")]) == ["t1p0"]
    assert as_names(result[MemberId("C2")]) == ["t1p1", "t2p0", "t2p1", "t2p2"]


def test_static_members_come_first_ordered_by_instance_id() -> None:
    members = {
        MemberId("a-dynamic"): Subscription(("t",)),
        MemberId("z-static"): Subscription(("t",), group_instance_id="i1"),
        MemberId("b-static"): Subscription(("t",), group_instance_id="i2"),
    }
    result = range_assignor.assign({"t": 5}, members)
    assert as_names(result[MemberId("z-static")]) == ["tp0", "tp1"]
    assert as_names(result[MemberId("b-static")]) == ["tp2", "tp3"]
    assert as_names(result[MemberId("a-dynamic")]) == ["tp4"]


def test_missing_topics_members_without_topics_and_empty_groups() -> None:
    members = subs(A=["missing"], B=["t"], C=[])
    for assign in (range_assignor.assign, round_robin.assign):
        result = assign({"t": 2}, members)
        assert as_names(result[MemberId("A")]) == [] and as_names(result[MemberId("C")]) == []
        assert as_names(result[MemberId("B")]) == ["tp0", "tp1"]
        assert assign({"t": 2}, {}) == {}


# -- the kafka-python oracle ----------------------------------------------------------


def kafka_python(assignor: type, cluster: Mapping[str, int],
                 members: Mapping[MemberId, Subscription]) -> dict[str, list[str]]:
    fake_cluster = SimpleNamespace(
        partitions_for_topic=lambda t: set(range(cluster[t])) if t in cluster else None)
    # kafka-python groups static and dynamic members with itertools.groupby over the
    # input order, so hand it static members first (Java's order does not depend on it).
    ordered = sorted(members, key=lambda m: members[m].group_instance_id is None)
    theirs = assignor.assign(fake_cluster, [
        SimpleNamespace(member_id=m, group_instance_id=members[m].group_instance_id,
                        metadata=SimpleNamespace(topics=list(members[m].topics)))
        for m in ordered])
    return {m: [f"{tp.topic}p{tp.partition}" for tp in sorted(a.partitions())]
            for m, a in theirs.items()}


def ours(assign: AssignFn, cluster: Mapping[str, int],
         members: Mapping[MemberId, Subscription]) -> dict[str, list[str]]:
    return {m: as_names(a) for m, a in assign(cluster, members).items()}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_range_matches_kafka_python(data: st.DataObject) -> None:
    cluster = data.draw(clusters())
    members = data.draw(groups(cluster))
    result = range_assignor.assign(cluster, members)
    check_valid(cluster, members, result)
    assert ours(range_assignor.assign, cluster, members) == kafka_python(
        RangePartitionAssignor, cluster, members)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_round_robin_is_valid_with_any_subscriptions(data: st.DataObject) -> None:
    cluster = data.draw(clusters())
    members = data.draw(groups(cluster))
    check_valid(cluster, members, round_robin.assign(cluster, members))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_round_robin_matches_kafka_python(data: st.DataObject) -> None:
    # Only identical subscriptions: kafka-python 3.0's round-robin crashes (KeyError)
    # when it must skip a member not subscribed to a topic. The skipping case is
    # covered by Kafka's documented example above.
    cluster = data.draw(clusters())
    members = data.draw(groups(cluster, same_topics=True))
    result = round_robin.assign(cluster, members)
    check_valid(cluster, members, result)
    assert ours(round_robin.assign, cluster, members) == kafka_python(
        RoundRobinPartitionAssignor, cluster, members)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_round_robin_is_balanced_with_identical_subscriptions(data: st.DataObject) -> None:
    cluster = data.draw(clusters(max_partitions=20))
    members = data.draw(groups(cluster, same_topics=True))
    c = counts(round_robin.assign(cluster, members))
    assert max(c) - min(c) <= 1


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_range_is_balanced_per_topic(data: st.DataObject) -> None:
    cluster = data.draw(clusters(max_partitions=20))
    members = data.draw(groups(cluster))
    result = range_assignor.assign(cluster, members)
    for topic in cluster:
        per = [sum(tp.topic == topic for tp in result[m].partitions)
               for m, s in members.items() if topic in s.topics]
        if per:
            assert max(per) - min(per) <= 1
