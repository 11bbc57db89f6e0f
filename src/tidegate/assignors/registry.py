"""The assignors by protocol name, and what a consumer needs to know about each.

A consumer lists its assignors (``partition.assignment.strategy``) in JoinGroup by
their protocol names; the coordinator picks one every member supports and the leader
runs it. `PartitionAssignor` bundles the name, the pure `assign` function, the
rebalance protocols it supports (EAGER revokes everything before rejoining;
COOPERATIVE, KIP-429, revokes only what moves) and `user_data`, which builds the
assignor's part of the member's subscription from what the member owns and the
generation it got it in.

`lookup` accepts the protocol names and, for users coming from Java, the Java class
names (``org.apache.kafka.clients.consumer.RangeAssignor`` and friends).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from tidegate.assignors import cooperative_sticky, range, round_robin, sticky
from tidegate.assignors.types import AssignFn

__all__ = ["ASSIGNORS", "PartitionAssignor", "RebalanceProtocol", "lookup", "rebalance_protocol"]

UserDataFn = Callable[[Sequence[tuple[str, int]], int], bytes | None]


class RebalanceProtocol(IntEnum):
    """KIP-429's rebalance protocols; higher is preferred."""

    EAGER = 0
    COOPERATIVE = 1


def _no_user_data(owned: Sequence[tuple[str, int]], generation: int) -> bytes | None:
    return None


@dataclass(frozen=True)
class PartitionAssignor:
    name: str
    assign: AssignFn
    protocols: tuple[RebalanceProtocol, ...]
    user_data: UserDataFn = _no_user_data


ASSIGNORS: dict[str, PartitionAssignor] = {
    a.name: a for a in (
        PartitionAssignor(range.NAME, range.assign, (RebalanceProtocol.EAGER,)),
        PartitionAssignor(round_robin.NAME, round_robin.assign, (RebalanceProtocol.EAGER,)),
        PartitionAssignor(sticky.NAME, sticky.assign, (RebalanceProtocol.EAGER,),
                          sticky.user_data),
        PartitionAssignor(cooperative_sticky.NAME, cooperative_sticky.assign,
                          (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE),
                          cooperative_sticky.user_data),
    )
}

_JAVA_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": range.NAME,
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": round_robin.NAME,
    "org.apache.kafka.clients.consumer.StickyAssignor": sticky.NAME,
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": cooperative_sticky.NAME,
}


def lookup(name: str) -> PartitionAssignor:
    """The assignor for a protocol name or Java class name; KeyError (listing the
    known names) if there is none."""
    key = _JAVA_NAMES.get(name.strip(), name.strip().lower())
    found = ASSIGNORS.get(key)
    if found is None:
        raise KeyError(f"unknown partition assignor {name!r}: known are "
                       f"{', '.join(ASSIGNORS)} (or their Java class names)")
    return found


def rebalance_protocol(assignors: Sequence[PartitionAssignor]) -> RebalanceProtocol:
    """The highest protocol every assignor supports (as the Java consumer chooses);
    ValueError if they share none."""
    if not assignors:
        raise ValueError("no partition assignors configured")
    common = set(assignors[0].protocols)
    for a in assignors[1:]:
        common &= set(a.protocols)
    if not common:
        raise ValueError("the configured assignors share no rebalance protocol: "
                         + ", ".join(a.name for a in assignors))
    return max(common)
