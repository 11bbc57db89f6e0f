"""The ``sticky`` assignor (Java's StickyAssignor, KIP-54) and the sticky algorithm.

Goals, in priority order (seed 003): (1) the assignment is balanced; (2) as many
partitions as possible stay with the member that had them. `balanced_sticky` is the
algorithm, shared with ``cooperative-sticky``; it takes each member's topics and the
partitions it validly owned before, and returns the new assignment:

- A member keeps the partitions it owned that still exist and that it still
  subscribes to.
- When every member subscribes to the same topics, the counts are fixed first: with
  T partitions and n members each gets ``T // n`` and ``T % n`` members get one more.
  Members keep at most their quota (the "one more" slots go to members that owned
  more, so the most previous partitions survive); the rest are dealt to the members
  below quota. The number kept is then the maximum any balanced assignment can keep.
- Otherwise, unowned partitions go one by one (those with the fewest eligible members
  first) to the eligible member with the fewest partitions, then partitions move from
  a member with more to an eligible member with at least two fewer until no such
  move exists, preferring partitions the donor did not own before. Each move lowers
  the sum of squared counts, so this ends; the result has no move that would improve
  balance.

Everything is ordered by Java's member order and partition order, so every leader
computes the same result from the same input.

For ``sticky`` itself, the previous ownership travels in the subscription's user data
as StickyAssignorUserData: ``previous_assignment [(topic, [int32])]`` and, in v1, a
``generation`` int32, with no version prefix (as the Java client and librdkafka encode
it). We encode v1; we decode v1, v0, and also the int16-version-prefixed form that
kafka-python 3 writes. When two members claim a partition, the claim from the higher
generation wins; equal generations cancel out and the partition is assigned afresh.
``sticky`` is an eager assignor: members revoke everything before rejoining.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence

from tidegate.assignors.protocol import ConsumerProtocolError, Reader, Writer
from tidegate.assignors.types import (
    Assignment,
    MemberId,
    Subscription,
    TopicPartition,
    member_sort_key,
)

__all__ = [
    "NAME",
    "assign",
    "balanced_sticky",
    "decode_user_data",
    "encode_user_data",
    "resolve_claims",
    "user_data",
]

NAME = "sticky"


# -- StickyAssignorUserData ----------------------------------------------------------


def encode_user_data(partitions: Iterable[tuple[str, int]], generation: int = -1,
                     version: int = 1) -> bytes:
    """StickyAssignorUserData v0/v1 as the Java client writes it (no version prefix)."""
    w = Writer().topic_partitions(partitions)
    if version >= 1:
        w.int32(generation)
    return w.getvalue()


def _read_user_data(r: Reader, version: int) -> tuple[list[TopicPartition], int]:
    partitions = r.topic_partitions()
    generation = r.int32() if version >= 1 else -1
    if r.remaining:
        raise ConsumerProtocolError(f"{r.remaining} bytes after StickyAssignorUserData")
    return partitions, generation


def decode_user_data(data: bytes | None) -> tuple[list[TopicPartition], int]:
    """``(previous partitions, generation)`` from sticky user data; generation is -1
    when unknown (v0). Raises `ConsumerProtocolError` if no known form fits."""
    if not data:
        return [], -1
    for version in (1, 0):  # Java's rule: newest first, until one decodes
        try:
            return _read_user_data(Reader(data), version)
        except ConsumerProtocolError:
            pass
    r = Reader(data)  # kafka-python 3 prefixes an int16 version
    version = r.int16()
    if version in (0, 1):
        return _read_user_data(r, version)
    raise ConsumerProtocolError("not StickyAssignorUserData v0 or v1")


def user_data(owned: Sequence[tuple[str, int]], generation: int) -> bytes | None:
    """What a member running ``sticky`` puts in its subscription: the partitions it
    was last assigned and that assignment's generation (nothing before the first)."""
    if generation < 0 and not owned:
        return None
    return encode_user_data(owned, generation)


# -- the algorithm --------------------------------------------------------------------


def resolve_claims(claims: Mapping[MemberId, tuple[Iterable[tuple[str, int]], int]]
                   ) -> dict[MemberId, list[TopicPartition]]:
    """Previous owners from ``member -> (partitions, generation)``: for each partition
    the claim with the highest generation wins; a tie at the top means nobody keeps it.
    """
    best: dict[TopicPartition, tuple[int, MemberId | None]] = {}
    for member, (partitions, generation) in claims.items():
        for tp in dict.fromkeys(TopicPartition(t, p) for t, p in partitions):
            top = best.get(tp)
            if top is None or generation > top[0]:
                best[tp] = (generation, member)
            elif generation == top[0]:
                best[tp] = (generation, None)
    owned: dict[MemberId, list[TopicPartition]] = {m: [] for m in claims}
    for tp, (_, winner) in best.items():
        if winner is not None:
            owned[winner].append(tp)
    return owned


def balanced_sticky(cluster_partitions: Mapping[str, int],
                    topics: Mapping[MemberId, Collection[str]],
                    owned: Mapping[MemberId, Iterable[tuple[str, int]]],
                    instance_ids: Mapping[MemberId, str | None] | None = None,
                    ) -> dict[MemberId, list[TopicPartition]]:
    """The sticky algorithm (see the module docstring). `owned` must not give a
    partition to two members (use `resolve_claims`); invalid claims are dropped."""
    ids = instance_ids or {}
    members = sorted(topics, key=lambda m: member_sort_key(m, ids.get(m)))
    topics_of = {m: {t for t in topics[m] if t in cluster_partitions} for m in members}
    every = sorted(TopicPartition(t, p) for t in set().union(*topics_of.values())
                   for p in range(cluster_partitions[t]))
    current: dict[MemberId, list[TopicPartition]] = {m: [] for m in members}
    taken: set[TopicPartition] = set()
    for m in members:
        for t, p in sorted(owned.get(m, ())):
            tp = TopicPartition(t, p)
            if tp not in taken and t in topics_of[m] and 0 <= p < cluster_partitions[t]:
                current[m].append(tp)
                taken.add(tp)
    if not members:
        return {}
    if all(topics_of[m] == topics_of[members[0]] for m in members):
        return _constrained(members, every, current)
    return _general(members, every, current, topics_of, taken)


def _constrained(members: list[MemberId], every: list[TopicPartition],
                 current: dict[MemberId, list[TopicPartition]]
                 ) -> dict[MemberId, list[TopicPartition]]:
    """Identical subscriptions: exact quotas, keeping the most previous partitions."""
    quota, extra = divmod(len(every), len(members))
    result: dict[MemberId, list[TopicPartition]] = {}
    # Members that owned the most get the `extra` larger quotas first.
    by_owned = sorted(members, key=lambda m: -len(current[m]))
    for m in by_owned:
        keep = quota
        if len(current[m]) > quota and extra > 0:
            keep, extra = quota + 1, extra - 1
        result[m] = current[m][:keep]
    kept = {tp for tps in result.values() for tp in tps}
    pool = deque(tp for tp in every if tp not in kept)
    # Deal the rest round-robin: first everyone up to the quota, then the `extra`
    # larger quotas not taken by keeping (the counts guarantee the pool suffices).
    under = [m for m in members if len(result[m]) < quota]
    while under:
        for m in under:
            result[m].append(pool.popleft())
        under = [m for m in under if len(result[m]) < quota]
    for m in members:
        if not pool:
            break
        if len(result[m]) == quota:
            result[m].append(pool.popleft())
    assert not pool, "constrained sticky assignment left partitions unassigned"
    return result


def _general(members: list[MemberId], every: list[TopicPartition],
             current: dict[MemberId, list[TopicPartition]],
             topics_of: dict[MemberId, set[str]], taken: set[TopicPartition]
             ) -> dict[MemberId, list[TopicPartition]]:
    """Different subscriptions: greedy placement, then balancing moves."""
    order = {m: i for i, m in enumerate(members)}
    eligible = {t: [m for m in members if t in topics_of[m]]
                for t in {tp.topic for tp in every}}
    previous = {m: set(tps) for m, tps in current.items()}
    result = {m: list(tps) for m, tps in current.items()}
    fresh = sorted((tp for tp in every if tp not in taken),
                   key=lambda tp: (len(eligible[tp.topic]), tp))
    for tp in fresh:
        target = min(eligible[tp.topic], key=lambda m: (len(result[m]), order[m]))
        result[target].append(tp)
    while _move_one(members, result, topics_of, previous, order):
        pass
    return {m: sorted(tps) for m, tps in result.items()}


def _move_one(members: list[MemberId], result: dict[MemberId, list[TopicPartition]],
              topics_of: dict[MemberId, set[str]], previous: dict[MemberId, set[TopicPartition]],
              order: dict[MemberId, int]) -> bool:
    """Make one balancing move if one exists; False when balanced."""
    ascending = sorted(members, key=lambda m: (len(result[m]), order[m]))
    descending = sorted(members, key=lambda m: (-len(result[m]), order[m]))
    for taker in ascending:
        for donor in descending:
            if len(result[donor]) <= len(result[taker]) + 1:
                break
            movable = [tp for tp in result[donor] if tp.topic in topics_of[taker]]
            if not movable:
                continue
            # Prefer a partition the donor did not own before, then the one the taker
            # owned before, then the last one: keeps stickiness where possible.
            movable.sort(key=lambda tp: (tp in previous[donor], tp not in previous[taker], tp))
            tp = movable[0]
            result[donor].remove(tp)
            result[taker].append(tp)
            return True
    return False


# -- the assignor ---------------------------------------------------------------------


def assign(cluster_partitions: Mapping[str, int],
           subscriptions: Mapping[MemberId, Subscription]) -> dict[MemberId, Assignment]:
    """Sticky assignment from each member's StickyAssignorUserData (falling back to
    the subscription's owned partitions and generation when it has none)."""
    claims: dict[MemberId, tuple[Iterable[tuple[str, int]], int]] = {}
    for member, sub in subscriptions.items():
        try:
            partitions, generation = decode_user_data(sub.user_data)
        except ConsumerProtocolError:
            partitions, generation = [], -1  # unreadable: as Java, ignore it
        if not sub.user_data:
            partitions, generation = list(sub.owned_partitions), sub.generation_id
        claims[member] = (partitions, generation)
    result = balanced_sticky(
        cluster_partitions, {m: s.topics for m, s in subscriptions.items()},
        resolve_claims(claims), {m: s.group_instance_id for m, s in subscriptions.items()})
    return {m: Assignment(tuple(tps)) for m, tps in result.items()}
