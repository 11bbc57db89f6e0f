"""A classic group and its members, as the coordinator holds them in memory.

What is durable and what is not (Kafka's split, kept deliberately):

- durable, changed only by replaying records: committed offsets (`offsets`) and the
  group as last stored (`stored`: generation, protocol, leader, members with their
  subscriptions and assignments, and when the group entered its state). The shard's
  replay also resets the live fields below to what a stored record says;
- live and ephemeral: the rebalance in progress — who has rejoined (`join_waiter`), who
  still has to sync, pending member ids handed out with MEMBER_ID_REQUIRED, and the
  generation, protocol and leader being formed between the end of the joins and the
  leader's SyncGroup. A coordinator that restarts resumes from the last stored
  generation and members simply rejoin, exactly as after a Kafka coordinator failover.

Invariants: `leader` is a member whenever there are members (or None); every member
in `static_members` maps back to a member with that instance id; members never
appear in `pending`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from tidegate.coordinator.group.states import GroupState, check_transition
from tidegate.protocol.coordinator_records import (
    GroupMetadataValue,
    MemberMetadata,
    subscription_topics,
)

__all__ = ["CONSUMER_PROTOCOL_TYPE", "Group", "Member", "OffsetAndMetadata", "TopicPartition"]

CONSUMER_PROTOCOL_TYPE = "consumer"

TopicPartition = tuple[str, int]
Protocols = tuple[tuple[str, bytes], ...]


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols  # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    join_waiter: int | None = None  # token of a parked JoinGroup
    sync_waiter: int | None = None  # token of a parked SyncGroup
    is_new: bool = False  # joined during the rebalance in progress

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


class OffsetAndMetadata(NamedTuple):
    """A committed offset (a NamedTuple: a million of them are built at load)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int  # -1: expire by offsets.retention.minutes
    record_offset: int  # where its record sits in the coordinator partition


class Group:
    def __init__(self, group_id: str, state_timestamp: int | None = None) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.state_timestamp: int | None = state_timestamp
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.generation = 0
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending: dict[str, int] = {}  # member id -> its session timeout
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        self.stored: GroupMetadataValue | None = None
        # The rebalance in progress (ephemeral).
        self.initial_delay = False  # the delayed first join of an Empty group
        self.new_member_added = False
        self.initial_remaining_ms = 0
        self.pending_sync: set[str] = set()
        self._subscribed: frozenset[str] | None = None
        self._subscribed_valid = False

    def __repr__(self) -> str:
        return (
            f"Group({self.group_id!r}, {self.state.value}, gen {self.generation}, "
            f"{len(self.members)} members)"
        )

    # -- state ----------------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        check_transition(self.state, target)
        self.state = target
        self.state_timestamp = now_ms

    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def is_removable(self) -> bool:
        """Holds nothing worth keeping: no members, offsets or stored metadata."""
        return (
            self.state is GroupState.EMPTY
            and not self.members
            and not self.pending
            and not self.offsets
            and self.stored is None
        )

    # -- membership -----------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.pending.pop(member.member_id, None)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id
        self._subscribed_valid = False

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        if member is None:
            return None
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self._subscribed_valid = False
        return member

    def static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """A request naming `instance_id` from a member id that no longer holds it."""
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def all_joined(self) -> bool:
        return not self.pending and all(m.awaiting_join for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick the first member that did.
        False when no member has rejoined."""
        if self.leader is None:
            return False
        if self.members[self.leader].awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader = member.member_id
                return True
        return False

    # -- protocols ------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name, _ in m.protocols:
                counts[name] = counts.get(name, 0) + 1
        n = len(self.members)
        return {name for name, c in counts.items() if c == n}

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self.state is GroupState.EMPTY and not self.members:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        if not self.members:
            return bool(names)
        return bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its first choice among the common protocols; most
        votes wins, ties going to the leader's preference order."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        order = [n for n, _ in self.members[self.leader].protocols] if self.leader else []
        rank = {name: i for i, name in enumerate(order)}
        return min(votes, key=lambda name: (-votes[name], rank.get(name, len(rank)), name))

    def subscribed_topics(self) -> frozenset[str] | None:
        """Topics the consumer-protocol members subscribe to; None if not a consumer
        group or some subscription cannot be read (then treat every topic as used)."""
        if not self._subscribed_valid:
            self._subscribed = self._compute_subscribed()
            self._subscribed_valid = True
        return self._subscribed

    def _compute_subscribed(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            sub = subscription_topics(m.metadata(self.protocol))
            if sub is None:
                return None
            topics |= sub
        return frozenset(topics)

    def invalidate_subscriptions(self) -> None:
        self._subscribed_valid = False

    # -- records --------------------------------------------------------------------------

    def metadata_value(
        self,
        now_ms: int,
        *,
        generation: int | None = None,
        assignments: dict[str, bytes] | None = None,
        members: Iterable[Member] | None = None,
        leader: str | None = None,
    ) -> GroupMetadataValue:
        """The GroupMetadataValue describing this group with the given overrides."""
        chosen = list(self.members.values()) if members is None else list(members)
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation if generation is None else generation,
            protocol=self.protocol if chosen else None,
            leader=(leader or self.leader) if chosen else None,
            current_state_timestamp=now_ms,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(self.protocol),
                    assignment=(
                        m.assignment if assignments is None
                        else assignments.get(m.member_id, b"")
                    ),
                )
                for m in chosen
            ),
        )
