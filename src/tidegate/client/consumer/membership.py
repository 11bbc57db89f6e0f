"""Sans-IO group membership: the member state machine and the rebalance arithmetic.

`MemberState` is Kafka's client-side member state, as a table (`TRANSITIONS`) with one
`Membership.transition_to` that raises on an illegal move:

- UNJOINED: not in the group (new, left, or reset by the coordinator). No heartbeats.
- PREPARING_REBALANCE: a JoinGroup is in flight. No heartbeats (the join itself keeps
  the member alive).
- COMPLETING_REBALANCE: joined; a SyncGroup is in flight. Heartbeats run.
- STABLE: has its assignment for the current generation. Heartbeats run.

`Membership` also holds the generation (generation id, member id, chosen protocol)
and why a rejoin is needed. Resetting it (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, poll
timeout, leaving) forgets the member id and generation and marks owned partitions as
*lost*: they may belong to someone else by now.

The functions below are the pure parts of a rebalance: `join_protocols` builds the
JoinGroup protocol list (one ConsumerProtocolSubscription per configured assignor),
`leader_assignments` runs the chosen assignor for the leader, and `diff` splits a new
assignment into what was revoked and what was added.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from tidegate.assignors import (
    Assignment,
    MemberId,
    PartitionAssignor,
    RebalanceProtocol,
    Subscription,
)
from tidegate.assignors import TopicPartition as AssignorTP
from tidegate.assignors.protocol import (
    ConsumerProtocolError,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from tidegate.client.types import TopicPartition

__all__ = [
    "NO_GENERATION",
    "TRANSITIONS",
    "Generation",
    "GroupMember",
    "MemberState",
    "Membership",
    "diff",
    "join_protocols",
    "leader_assignments",
]

log = logging.getLogger("tidegate.client.consumer.group")


class MemberState(Enum):
    UNJOINED = "unjoined"
    PREPARING_REBALANCE = "preparing_rebalance"
    COMPLETING_REBALANCE = "completing_rebalance"
    STABLE = "stable"


_S = MemberState
TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    _S.UNJOINED: frozenset({_S.UNJOINED, _S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.UNJOINED, _S.PREPARING_REBALANCE,
                                       _S.COMPLETING_REBALANCE}),
    _S.COMPLETING_REBALANCE: frozenset({_S.UNJOINED, _S.PREPARING_REBALANCE, _S.STABLE}),
    _S.STABLE: frozenset({_S.UNJOINED, _S.PREPARING_REBALANCE, _S.STABLE}),
}


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int = -1
    member_id: str = ""
    protocol: str | None = None

    @property
    def valid(self) -> bool:
        return self.generation_id >= 0


NO_GENERATION = Generation()


class Membership:
    """The member's state, generation and rejoin flags; see the module docstring."""

    def __init__(self, group_id: str, group_instance_id: str | None = None) -> None:
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        self.member_id = ""  # kept across rejoins; may be set before a generation exists
        self.rejoin_reason: str | None = "initial join"
        self.partitions_lost = False

    def transition_to(self, state: MemberState) -> None:
        if state not in TRANSITIONS[self.state]:
            raise RuntimeError(f"illegal member state change {self.state.value} -> "
                               f"{state.value}")
        self.state = state

    def at(self, state: MemberState) -> bool:
        """Whether the member is in `state` (a call, so type checkers do not carry a
        narrowed state across awaits, where other tasks may change it)."""
        return self.state is state

    @property
    def rejoin_needed(self) -> bool:
        return self.rejoin_reason is not None

    def request_rejoin(self, reason: str) -> None:
        if self.rejoin_reason is None:
            log.info("group %s: rejoining: %s", self.group_id, reason)
            self.rejoin_reason = reason

    def begin_join(self) -> str | None:
        """A JoinGroup is being sent: return why, and clear the flag (a request to
        rejoin made from now on means another round after this one)."""
        self.transition_to(MemberState.PREPARING_REBALANCE)
        reason, self.rejoin_reason = self.rejoin_reason, None
        return reason

    def joined(self, generation: Generation) -> None:
        """JoinGroup succeeded; SyncGroup comes next."""
        self.generation = generation
        self.member_id = generation.member_id
        self.transition_to(MemberState.COMPLETING_REBALANCE)

    def synced(self) -> None:
        self.transition_to(MemberState.STABLE)

    def left(self, *, keep_member_id: bool = False) -> None:
        """We left the group on purpose (close, unsubscribe, poll timeout)."""
        self.generation = NO_GENERATION
        if not keep_member_id:
            self.member_id = ""
        self.transition_to(MemberState.UNJOINED)

    def reset(self, reason: str, *, keep_member_id: bool = False) -> None:
        """Forget the generation (and member id); owned partitions are now lost."""
        log.info("group %s: member %s reset: %s", self.group_id, self.member_id or "-",
                 reason)
        if self.generation.valid:
            self.partitions_lost = True
        self.generation = NO_GENERATION
        if not keep_member_id:
            self.member_id = ""
        self.transition_to(MemberState.UNJOINED)
        self.request_rejoin(reason)


def join_protocols(assignors: Sequence[PartitionAssignor], topics: Iterable[str],
                   protocol: RebalanceProtocol, owned: Sequence[TopicPartition],
                   generation: int, last_assigned: Sequence[TopicPartition],
                   last_generation: int, rack: str | None) -> list[dict[str, object]]:
    """JoinGroup ``protocols``: one entry per assignor in preference order.

    Eager members have revoked everything, so they report no owned partitions; their
    stickiness travels in the assignor's user data (built from the last assignment).
    Cooperative members report what they own and the generation they own it in.
    """
    cooperative = protocol is RebalanceProtocol.COOPERATIVE
    entries: list[dict[str, object]] = []
    for assignor in assignors:
        sub = Subscription(
            tuple(sorted(topics)),
            assignor.user_data(list(owned if cooperative else last_assigned),
                               generation if cooperative else last_generation),
            tuple(AssignorTP(t, p) for t, p in owned) if cooperative else (),
            generation if cooperative else -1,
            rack=rack or None,
        )
        entries.append({"name": assignor.name, "metadata": encode_subscription(sub)})
    return entries


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member as the JoinGroup response lists it to the leader."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


def leader_assignments(assignor: PartitionAssignor, members: Sequence[GroupMember],
                       cluster_partitions: Mapping[str, int]) -> dict[str, bytes]:
    """Run `assignor` over the members' subscriptions; SyncGroup assignment bytes by
    member id. A member whose metadata does not decode is treated as subscribing to
    nothing (and logged), so one bad client cannot stall the group."""
    subscriptions: dict[MemberId, Subscription] = {}
    for m in members:
        try:
            sub = decode_subscription(m.metadata, member_id=m.member_id,
                                      group_instance_id=m.group_instance_id)
        except ConsumerProtocolError as e:
            log.error("member %s sent undecodable subscription metadata (%s); it gets "
                      "no partitions", m.member_id, e)
            sub = Subscription((), member_id=m.member_id,
                               group_instance_id=m.group_instance_id)
        subscriptions[MemberId(m.member_id)] = sub
    result = assignor.assign(cluster_partitions, subscriptions)
    log.info("group leader: %s assigned %s", assignor.name,
             {m: len(a.partitions) for m, a in sorted(result.items())})
    return {m: encode_assignment(result.get(MemberId(m), Assignment()))
            for m in subscriptions}


def diff(owned: Iterable[TopicPartition], assigned: Iterable[TopicPartition]
         ) -> tuple[set[TopicPartition], set[TopicPartition]]:
    """``(revoked, added)`` going from `owned` to `assigned`."""
    before, after = set(owned), set(assigned)
    return before - after, after - before
