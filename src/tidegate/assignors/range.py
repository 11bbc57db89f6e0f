"""The ``range`` assignor (Java's RangeAssignor): contiguous ranges, topic by topic.

For each topic, the members subscribed to it are put in Java's member order
(`types.member_sort_key`: static members by ``group.instance.id``, then dynamic members
by member id) and its partitions, in order, are cut into contiguous ranges:
``n // k`` each, and the first ``n % k`` members get one more. Topics are assigned
independently, so with many topics whose partition count does not divide evenly the
first members get more partitions overall; that is Range's documented behaviour, and
what makes co-partitioned topics land on the same member (t0p0 and t1p0 together).

Seed 003's example: members C0 and C1 both subscribed to t0 and t1 of 3 partitions
each get C0: t0p0, t0p1, t1p0, t1p1 and C1: t0p2, t1p2.

Rack-aware assignment (KIP-881) needs replica racks, which the assignor interface does
not carry; it is not done.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidegate.assignors.types import (
    Assignment,
    MemberId,
    Subscription,
    TopicPartition,
    member_sort_key,
)

__all__ = ["NAME", "assign"]

NAME = "range"


def assign(cluster_partitions: Mapping[str, int],
           subscriptions: Mapping[MemberId, Subscription]) -> dict[MemberId, Assignment]:
    """Range assignment; see the module docstring."""
    members_of: dict[str, list[MemberId]] = {}
    for member, sub in subscriptions.items():
        for topic in dict.fromkeys(sub.topics):
            if topic in cluster_partitions:
                members_of.setdefault(topic, []).append(member)
    result: dict[MemberId, list[TopicPartition]] = {m: [] for m in subscriptions}
    for topic, members in members_of.items():
        members.sort(key=lambda m: member_sort_key(m, subscriptions[m].group_instance_id))
        count = cluster_partitions[topic]
        per_member, extra = divmod(count, len(members))
        for i, member in enumerate(members):
            start = per_member * i + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            result[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
    return {m: Assignment(tuple(tps)) for m, tps in result.items()}
