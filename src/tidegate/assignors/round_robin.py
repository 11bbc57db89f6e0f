"""The ``roundrobin`` assignor (Java's RoundRobinAssignor): deal partitions in turn.

All partitions of every topic some member subscribes to are sorted by topic and
partition, the members are put in Java's member order (`types.member_sort_key`), and
the partitions are dealt one by one around that circle, skipping members not
subscribed to the partition's topic. With identical subscriptions the counts differ by
at most one; with different subscriptions the result can be unbalanced (Kafka's
documented behaviour: the skipping does not compensate).

Seed 003's example: members C0 and C1 both subscribed to t0 and t1 of 3 partitions
each get C0: t0p0, t0p2, t1p1 and C1: t0p1, t1p0, t1p2.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidegate.assignors.types import (
    Assignment,
    MemberId,
    Subscription,
    TopicPartition,
    sorted_members,
)

__all__ = ["NAME", "assign"]

NAME = "roundrobin"


def assign(cluster_partitions: Mapping[str, int],
           subscriptions: Mapping[MemberId, Subscription]) -> dict[MemberId, Assignment]:
    """Round-robin assignment; see the module docstring."""
    result: dict[MemberId, list[TopicPartition]] = {m: [] for m in subscriptions}
    members = sorted_members(subscriptions)
    topics_of = {m: set(subscriptions[m].topics) for m in members}
    topics = sorted({t for ts in topics_of.values() for t in ts if t in cluster_partitions})
    cursor = 0
    for topic in topics:
        for partition in range(cluster_partitions[topic]):
            # Some member subscribes to `topic`, so this finds one within a lap.
            while topic not in topics_of[members[cursor]]:
                cursor = (cursor + 1) % len(members)
            result[members[cursor]].append(TopicPartition(topic, partition))
            cursor = (cursor + 1) % len(members)
    return {m: Assignment(tuple(tps)) for m, tps in result.items()}
