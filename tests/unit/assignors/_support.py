"""Hypothesis strategies and checks shared by the assignor tests."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import strategies as st

from tidegate.assignors import Assignment, MemberId, Subscription, TopicPartition

TOPICS = ["t0", "t1", "t2", "t3", "t4"]


def subs(**topics: list[str]) -> dict[MemberId, Subscription]:
    """``subs(C0=["t0"], C1=["t0", "t1"])``."""
    return {MemberId(m): Subscription(tuple(ts)) for m, ts in topics.items()}


def parts(*names: str) -> list[TopicPartition]:
    """``parts("t0p1", "t1p0")`` -> TopicPartitions."""
    out = []
    for n in names:
        t, p = n.rsplit("p", 1)
        out.append(TopicPartition(t, int(p)))
    return out


def as_names(a: Assignment) -> list[str]:
    return [f"{t}p{p}" for t, p in a.partitions]


@st.composite
def clusters(draw: st.DrawFn, max_partitions: int = 8) -> dict[str, int]:
    names = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=5, unique=True))
    return {t: draw(st.integers(1, max_partitions)) for t in names}


@st.composite
def groups(draw: st.DrawFn, cluster: Mapping[str, int], *, same_topics: bool = False,
           max_members: int = 7, static: bool | None = None
           ) -> dict[MemberId, Subscription]:
    """Members with subscriptions over `cluster`'s topics plus, sometimes, a topic
    that does not exist."""
    n = draw(st.integers(1, max_members))
    ids = draw(st.lists(st.text("abcdef0123456789-", min_size=1, max_size=8),
                        min_size=n, max_size=n, unique=True))
    pool = [*cluster, "missing"]
    shared = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool), unique=True))
    out: dict[MemberId, Subscription] = {}
    for i, m in enumerate(ids):
        topics = shared if same_topics else draw(
            st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool), unique=True))
        is_static = draw(st.booleans()) if static is None else static
        out[MemberId(m)] = Subscription(tuple(topics), member_id=m,
                                        group_instance_id=f"i{i:02d}" if is_static else None)
    return out


def check_valid(cluster: Mapping[str, int], subscriptions: Mapping[MemberId, Subscription],
                result: Mapping[MemberId, Assignment], *, complete: bool = True) -> None:
    """Every member has an entry; every partition is assigned at most once (exactly
    once when `complete`), to a member subscribed to its topic."""
    assert set(result) == set(subscriptions)
    seen: dict[TopicPartition, MemberId] = {}
    for m, a in result.items():
        for tp in a.partitions:
            assert tp.topic in subscriptions[m].topics, (m, tp)
            assert tp.topic in cluster and 0 <= tp.partition < cluster[tp.topic]
            assert tp not in seen, f"{tp} assigned to {seen[tp]} and {m}"
            seen[tp] = m
    if complete:
        wanted = {TopicPartition(t, p) for s in subscriptions.values() for t in s.topics
                  if t in cluster for p in range(cluster[t])}
        assert set(seen) == wanted


def counts(result: Mapping[MemberId, Assignment]) -> list[int]:
    return [len(a.partitions) for a in result.values()]


def locally_balanced(subscriptions: Mapping[MemberId, Subscription],
                     result: Mapping[MemberId, Assignment]) -> bool:
    """No partition can move from a member to another eligible member with at least
    two fewer partitions."""
    for aa in result.values():
        for b, bb in result.items():
            if len(aa.partitions) > len(bb.partitions) + 1 and any(
                    tp.topic in subscriptions[b].topics for tp in aa.partitions):
                return False
    return True
