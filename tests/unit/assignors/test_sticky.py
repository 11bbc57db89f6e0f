"""The sticky assignor: Kafka's documented examples (the book seed 003 comes from),
balance and stickiness properties, generation conflicts, and the user-data format."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyAssignorUserDataV1
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData

from tidegate.assignors import Assignment, MemberId, Subscription, TopicPartition, round_robin
from tidegate.assignors.protocol import ConsumerProtocolError
from tidegate.assignors.sticky import (
    assign,
    balanced_sticky,
    decode_user_data,
    encode_user_data,
    resolve_claims,
    user_data,
)

from ._support import as_names, check_valid, clusters, counts, groups, locally_balanced, parts


def with_previous(members: Mapping[MemberId, Subscription],
                  previous: Mapping[MemberId, Assignment], generation: int = 1
                  ) -> dict[MemberId, Subscription]:
    """Members' subscriptions carrying their previous assignment as sticky user data."""
    return {m: Subscription(s.topics, user_data(previous[m].partitions, generation)
                            if m in previous else None,
                            group_instance_id=s.group_instance_id)
            for m, s in members.items()}


def kept(previous: Mapping[MemberId, Assignment], now: Mapping[MemberId, Assignment]) -> int:
    return sum(len(set(previous[m].partitions) & set(now[m].partitions))
               for m in now if m in previous)


def test_first_example_member_leaves_and_the_rest_stay_put() -> None:
    # Three members, four topics of two partitions each; then C1 leaves.
    cluster = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    topics = ("t0", "t1", "t2", "t3")
    members = {MemberId(m): Subscription(topics) for m in ("C0", "C1", "C2")}
    first = assign(cluster, members)
    assert as_names(first[MemberId("C0")]) == ["t0p0", "t1p1", "t3p0"]
    assert as_names(first[MemberId("C1")]) == ["t0p1", "t2p0", "t3p1"]
    assert as_names(first[MemberId("C2")]) == ["t1p0", "t2p1"]
    del members[MemberId("C1")]
    second = assign(cluster, with_previous(members, first))
    check_valid(cluster, members, second)
    assert counts(second) == [4, 4]
    for m in members:  # nothing moves but C1's partitions
        assert set(first[m].partitions) <= set(second[m].partitions)
    # Round-robin, by contrast, reshuffles: it keeps only 3 of the 5 stayers.
    rr = round_robin.assign(cluster, members)
    assert kept(first, rr) == 3 and kept(first, second) == 5


def test_second_example_different_subscriptions() -> None:
    # C0: t0; C1: t0, t1; C2: t0, t1, t2 over t0 (1), t1 (2), t2 (3) partitions.
    cluster = {"t0": 1, "t1": 2, "t2": 3}
    members = {MemberId("C0"): Subscription(("t0",)),
               MemberId("C1"): Subscription(("t0", "t1")),
               MemberId("C2"): Subscription(("t0", "t1", "t2"))}
    first = assign(cluster, members)
    assert as_names(first[MemberId("C0")]) == ["t0p0"]
    assert as_names(first[MemberId("C1")]) == ["t1p0", "t1p1"]
    assert as_names(first[MemberId("C2")]) == ["t2p0", "t2p1", "t2p2"]
    del members[MemberId("C0")]
    second = assign(cluster, with_previous(members, first))
    assert as_names(second[MemberId("C1")]) == ["t0p0", "t1p0", "t1p1"]
    assert as_names(second[MemberId("C2")]) == ["t2p0", "t2p1", "t2p2"]


def test_a_new_member_takes_only_what_balance_requires() -> None:
    cluster = {"t": 6}
    members = {MemberId("A"): Subscription(("t",)), MemberId("B"): Subscription(("t",))}
    first = assign(cluster, members)
    members[MemberId("C")] = Subscription(("t",))
    second = assign(cluster, with_previous(members, first))
    assert counts(second) == [2, 2, 2]
    assert kept(first, second) == 4  # A and B each give up exactly one


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_valid_and_locally_balanced_for_any_subscriptions_and_history(
        data: st.DataObject) -> None:
    cluster = data.draw(clusters())
    members = data.draw(groups(cluster))
    history = {m: Assignment(tuple(data.draw(st.lists(st.sampled_from(parts(
        *[f"{t}p{p}" for t in [*cluster, "gone"] for p in range(cluster.get(t, 2) + 1)])),
        max_size=6))))
        for m in members if data.draw(st.booleans())}
    subs = with_previous(members, history, generation=data.draw(st.integers(-1, 5)))
    result = assign(cluster, subs)
    check_valid(cluster, members, result)
    assert locally_balanced(members, result)
    if len({frozenset(s.topics) for s in members.values()}) == 1:
        assert max(counts(result)) - min(counts(result)) <= 1


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_keeps_the_most_partitions_a_balanced_assignment_can_keep(
        data: st.DataObject) -> None:
    """Identical subscriptions: with quota q = T // n and T % n larger quotas, the
    best possible is sum(min(owned, q)) + min(T % n, members owning more than q)."""
    cluster = data.draw(clusters(max_partitions=10))
    members = data.draw(groups(cluster, same_topics=True))
    every = [TopicPartition(t, p) for t in sorted(set(next(iter(members.values())).topics))
             if t in cluster for p in range(cluster[t])]
    owner = {tp: data.draw(st.sampled_from([None, *members])) for tp in every}
    previous = {m: Assignment(tuple(tp for tp, o in owner.items() if o == m)) for m in members}
    result = assign(cluster, with_previous(members, previous))
    check_valid(cluster, members, result)
    q, extra = divmod(len(every), len(members))
    owned = [len(previous[m].partitions) for m in members]
    best = sum(min(o, q) for o in owned) + min(extra, sum(o > q for o in owned))
    assert kept(previous, result) == best


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_leaving_member_moves_only_its_partitions_and_reruns_are_stable(
        data: st.DataObject) -> None:
    cluster = data.draw(clusters(max_partitions=10))
    members = data.draw(groups(cluster, same_topics=data.draw(st.booleans())))
    first = assign(cluster, members)
    again = assign(cluster, with_previous(members, first))
    assert again == first  # nothing changed: nothing moves
    if len(members) > 1 and len({frozenset(s.topics) for s in members.values()}) == 1:
        leaving = data.draw(st.sampled_from(sorted(members)))
        rest = {m: s for m, s in members.items() if m != leaving}
        second = assign(cluster, with_previous(rest, first))
        for m in rest:
            assert set(first[m].partitions) <= set(second[m].partitions)


def test_higher_generation_wins_and_equal_generations_cancel() -> None:
    owned = resolve_claims({
        MemberId("old"): (parts("tp0", "tp1"), 3),
        MemberId("new"): (parts("tp0"), 4),
        MemberId("twin"): (parts("tp1"), 3),
    })
    assert owned == {MemberId("old"): [], MemberId("new"): parts("tp0"),
                     MemberId("twin"): []}
    members = {
        MemberId("old"): Subscription(("t",), encode_user_data(parts("tp0", "tp1"), 3)),
        MemberId("new"): Subscription(("t",), encode_user_data(parts("tp0"), 4)),
    }
    result = assign({"t": 2}, members)
    assert as_names(result[MemberId("new")]) == ["tp0"]
    assert as_names(result[MemberId("old")]) == ["tp1"]


def test_owned_partitions_are_used_when_there_is_no_user_data() -> None:
    members = {MemberId("a"): Subscription(("t",), owned_partitions=parts("tp2", "tp3"),
                                           generation_id=2),
               MemberId("b"): Subscription(("t",))}
    result = assign({"t": 4}, members)
    assert as_names(result[MemberId("a")]) == ["tp2", "tp3"]


def test_unreadable_user_data_is_ignored() -> None:
    members = {MemberId("a"): Subscription(("t",), b"\x01\x02\x03")}
    assert as_names(assign({"t": 1}, members)[MemberId("a")]) == ["tp0"]


def test_balanced_sticky_drops_invalid_and_duplicate_claims() -> None:
    result = balanced_sticky({"t": 2}, {MemberId("a"): ["t"], MemberId("b"): ["t"]},
                             {MemberId("a"): parts("tp0", "tp5", "xp0"),
                              MemberId("b"): parts("tp0")})
    assert result == {MemberId("a"): parts("tp0"), MemberId("b"): parts("tp1")}
    assert balanced_sticky({"t": 2}, {}, {}) == {}


# -- StickyAssignorUserData -----------------------------------------------------------


tps = st.lists(st.builds(TopicPartition, st.text(min_size=1, max_size=8),
                         st.integers(0, 1000)), max_size=8, unique=True)


@settings(max_examples=200, deadline=None)
@given(tps, st.integers(-1, 2**31 - 1))
def test_user_data_matches_the_java_layout(partitions: list[TopicPartition],
                                           generation: int) -> None:
    """aiokafka keeps the Java client's headerless StickyAssignorUserData v1."""
    data = encode_user_data(partitions, generation)
    theirs = StickyAssignorUserDataV1.decode(data)
    assert theirs.generation == generation
    assert sorted(TopicPartition(t, p) for t, ps in theirs.previous_assignment
                  for p in ps) == sorted(partitions)
    ours = StickyAssignorUserDataV1(
        [(t, sorted(p for tt, p in partitions if tt == t))
         for t in sorted({t for t, _ in partitions})], generation).encode()
    assert ours == data
    assert decode_user_data(data) == (sorted(partitions), generation)


@settings(max_examples=100, deadline=None)
@given(tps, st.integers(-1, 2**31 - 1))
def test_user_data_from_kafka_python_3_and_v0(partitions: list[TopicPartition],
                                              generation: int) -> None:
    grouped = [(t, sorted(p for tt, p in partitions if tt == t))
               for t in sorted({t for t, _ in partitions})]
    prefixed = StickyAssignorUserData(grouped, generation).encode()
    assert decode_user_data(prefixed) == (sorted(partitions), generation)
    assert decode_user_data(encode_user_data(partitions, version=0)) == (sorted(partitions), -1)


def test_user_data_edge_cases() -> None:
    assert decode_user_data(None) == ([], -1)
    assert decode_user_data(b"") == ([], -1)
    assert user_data([], -1) is None
    with pytest.raises(ConsumerProtocolError):
        decode_user_data(b"\x00\x05garbage")
