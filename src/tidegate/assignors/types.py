"""The values partition assignors take and return: subscriptions and assignments.

A `Subscription` is what one group member sent in its JoinGroup metadata (the decoded
ConsumerProtocolSubscription, see `assignors.protocol`): the topics it wants, the
assignor's opaque ``user_data``, the partitions it still owns (KIP-429, subscription
v1+), the generation those were owned in (v2+) and its rack (v3+), plus the member's
``group.instance.id`` from the JoinGroup response. An `Assignment` is what the leader
sends back to one member: its partitions and the assignor's ``user_data``.

Every assignor is a pure function ``assign(cluster_partitions, subscriptions)`` from
partition counts per topic and subscriptions by member id to an assignment for every
member (members that get nothing get an empty `Assignment`). Invariants every
assignor keeps: a partition goes to at most one member, only to a member subscribed
to its topic, and only if the topic exists in ``cluster_partitions``.

`member_sort_key` is Java's member order (``MemberInfo.compareTo``): static members
(with a ``group.instance.id``) first, ordered by instance id, then dynamic members by
member id. Range and round-robin depend on it to match the Java client exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, NewType

__all__ = [
    "AssignFn",
    "Assignment",
    "MemberId",
    "Subscription",
    "TopicPartition",
    "group_by_topic",
    "member_sort_key",
    "sorted_members",
]

MemberId = NewType("MemberId", str)


class TopicPartition(NamedTuple):
    """A partition of a topic. Equal (and hash-equal) to any ``(topic, partition)``
    tuple, so the client's own TopicPartition tuples interoperate."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's JoinGroup metadata, decoded. Sequences are normalized to tuples.

    ``member_id`` is informational: assignors key members by the mapping they are
    given, which is authoritative.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    group_instance_id: str | None = None
    rack: str | None = None
    member_id: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "owned_partitions", tuple(
            TopicPartition(str(t), int(p)) for t, p in self.owned_partitions))


@dataclass(frozen=True, slots=True)
class Assignment:
    """The partitions one member is given (kept sorted) and the assignor's user data."""

    partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", tuple(sorted(
            TopicPartition(str(t), int(p)) for t, p in self.partitions)))


AssignFn = Callable[[Mapping[str, int], Mapping[MemberId, Subscription]],
                    dict[MemberId, Assignment]]


def member_sort_key(member_id: str, group_instance_id: str | None) -> tuple[int, str, str]:
    """Java's member order: static members by instance id first, then dynamic ones by
    member id."""
    if group_instance_id is not None:
        return (0, group_instance_id, member_id)
    return (1, member_id, "")


def sorted_members(subscriptions: Mapping[MemberId, Subscription]) -> list[MemberId]:
    """Member ids in Java's member order (see `member_sort_key`)."""
    return sorted(subscriptions,
                  key=lambda m: member_sort_key(m, subscriptions[m].group_instance_id))


def group_by_topic(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    """``[(topic, [partition, ...]), ...]`` sorted by topic and partition, as the
    consumer protocol encodes partition lists."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [(t, sorted(ps)) for t, ps in sorted(by_topic.items())]
