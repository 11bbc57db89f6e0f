"""cooperative-sticky (KIP-429): never hand out a partition another member still
owns; converge over rounds of revoke-and-rejoin to a balanced, sticky assignment."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.assignors import Assignment, MemberId, Subscription, TopicPartition
from tidegate.assignors.cooperative_sticky import assign, generation_of, user_data

from ._support import as_names, check_valid, clusters, counts, groups, locally_balanced, parts


def member(topics: tuple[str, ...], owned: list[TopicPartition], generation: int,
           instance: str | None = None) -> Subscription:
    return Subscription(topics, user_data(owned, generation), tuple(owned), generation,
                        group_instance_id=instance)


def check_safe(subs: Mapping[MemberId, Subscription],
               result: Mapping[MemberId, Assignment]) -> None:
    for m, a in result.items():
        for tp in a.partitions:
            others = [o for o, s in subs.items() if o != m and tp in s.owned_partitions]
            assert not others, f"{tp} given to {m} while {others} still own it"


def rebalance_rounds(cluster: Mapping[str, int], members: Mapping[MemberId, Subscription],
                     owned: dict[MemberId, list[TopicPartition]], generation: int,
                     max_rounds: int = 4) -> tuple[dict[MemberId, Assignment], int]:
    """Run rounds as real members would: each round, members report what they own;
    afterwards each owns exactly its assignment (it revoked the rest). Stop when a
    round revokes nothing."""
    for round_ in range(1, max_rounds + 1):
        subs = {m: member(s.topics, owned.get(m, []), generation, s.group_instance_id)
                for m, s in members.items()}
        result = assign(cluster, subs)
        check_valid(cluster, members, result, complete=False)
        check_safe(subs, result)
        revoked = any(set(owned.get(m, [])) - set(result[m].partitions) for m in members)
        owned = {m: list(result[m].partitions) for m in members}
        generation += 1
        if not revoked:
            return result, round_
    raise AssertionError(f"no convergence after {max_rounds} rounds")


def test_moving_partitions_takes_two_rounds() -> None:
    cluster = {"t": 4}
    a, b = MemberId("a"), MemberId("b")
    # a owns everything; b joins. Round 1: b gets nothing yet, a keeps two.
    subs = {a: member(("t",), parts("tp0", "tp1", "tp2", "tp3"), 1),
            b: member(("t",), [], -1)}
    first = assign(cluster, subs)
    assert as_names(first[a]) == ["tp0", "tp1"] and as_names(first[b]) == []
    # Round 2: a revoked tp2 and tp3; now b gets them.
    subs = {a: member(("t",), list(first[a].partitions), 2), b: member(("t",), [], 2)}
    second = assign(cluster, subs)
    assert as_names(second[a]) == ["tp0", "tp1"] and as_names(second[b]) == ["tp2", "tp3"]


def test_conflicting_owners_are_withheld_from_both() -> None:
    cluster = {"t": 2}
    subs = {MemberId("a"): member(("t",), parts("tp0"), 3),
            MemberId("b"): member(("t",), parts("tp0", "tp1"), 3)}
    result = assign(cluster, subs)
    assert as_names(result[MemberId("a")]) == []
    assert as_names(result[MemberId("b")]) == ["tp1"]


def test_free_partitions_are_assigned_at_once() -> None:
    subs = {MemberId("a"): member(("t",), [], -1), MemberId("b"): member(("t",), [], -1)}
    assert counts(assign({"t": 5}, subs)) == [3, 2]


def test_generation_comes_from_the_subscription_else_the_user_data() -> None:
    assert generation_of(Subscription(("t",), generation_id=7)) == 7
    assert generation_of(Subscription(("t",), user_data(parts(), 5))) == 5
    assert generation_of(Subscription(("t",), b"xx")) == -1
    # The stale claim (generation 2) loses to the fresh one (generation 9).
    subs = {MemberId("a"): Subscription(("t",), user_data([], 2), parts("tp0")),
            MemberId("b"): Subscription(("t",), None, parts("tp0"), 9)}
    result = assign({"t": 2}, subs)
    # tp0 stays with b... but a still claims it, so it is withheld until a revokes.
    assert as_names(result[MemberId("b")]) == [] and as_names(result[MemberId("a")]) == ["tp1"]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_never_assigns_what_another_member_owns_and_converges(data: st.DataObject) -> None:
    cluster = data.draw(clusters(max_partitions=8))
    members = data.draw(groups(cluster, same_topics=data.draw(st.booleans())))
    every = sorted(TopicPartition(t, p) for t in cluster for p in range(cluster[t]))
    # Consistent ownership from a previous round, some of it by departed members.
    holders = [*members, MemberId("departed")]
    owned: dict[MemberId, list[TopicPartition]] = {}
    for tp in every:
        who = data.draw(st.sampled_from([None, *holders]))
        if who is not None and who in members:
            owned.setdefault(who, []).append(tp)
    final, _rounds = rebalance_rounds(cluster, members, owned, data.draw(st.integers(0, 9)))
    check_valid(cluster, members, final)
    assert locally_balanced(members, final)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_joining_member_only_costs_the_partitions_it_takes(data: st.DataObject) -> None:
    cluster = data.draw(clusters(max_partitions=8))
    members = data.draw(groups(cluster, same_topics=True))
    start, _ = rebalance_rounds(cluster, members, {}, 1)
    owned = {m: list(a.partitions) for m, a in start.items()}
    newcomer = MemberId("zz-new")
    grown = {**members, newcomer: Subscription(next(iter(members.values())).topics)}
    final, rounds = rebalance_rounds(cluster, grown, owned, 5)
    assert rounds <= 2
    moved = sum(len(set(owned[m]) - set(final[m].partitions)) for m in members)
    assert moved == len(final[newcomer].partitions)
    assert max(counts(final)) - min(counts(final)) <= 1
