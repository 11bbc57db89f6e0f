"""A KIP-848 consumer group and its members, and the member state machine as a table.

A group id names either a classic group (`model.Group`) or a consumer group, never both
at once; its committed offsets live in the shard's `Group` object of that id either way
(the offset code is shared).

Everything here is durable state rebuilt by replaying the consumer-group records
(`consumer_group_records`): the group epoch, the subscribed topics' metadata, the
target assignment with its epoch, and per member its metadata and current assignment
(member epoch, previous epoch, state, assigned partitions, partitions pending
revocation). `owners` is derived from the members' current assignments: which member
holds each partition (assigned or still to revoke); reconciliation gives a partition to
a member only once no other member holds it.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from tidegate.protocol.consumer_group_records import (
    Assignment,
    ClassicMemberMetadata,
    RegexValue,
    TopicMetadata,
)

__all__ = [
    "MEMBER_TRANSITIONS",
    "ConsumerGroup",
    "ConsumerMember",
    "GroupKind",
    "MemberState",
    "TopicPartitionId",
]

TopicPartitionId = tuple[uuid.UUID, int]


class GroupKind(enum.Enum):
    CLASSIC = "classic"
    CONSUMER = "consumer"


class MemberState(enum.Enum):
    """A member's reconciliation state; the value is Kafka's byte in
    ConsumerGroupCurrentMemberAssignmentValue.State."""

    _doc: str

    def __new__(cls, code: int, doc: str) -> MemberState:
        obj = object.__new__(cls)
        obj._value_ = code
        obj._doc = doc
        return obj

    @property
    def doc(self) -> str:
        return self._doc

    UNREVOKED_PARTITIONS = (
        0,
        """The target took partitions away from the member: its heartbeat answer lists
        only the partitions it keeps, and its epoch stays until a heartbeat's owned
        partitions no longer include any partition pending revocation (or the
        rebalance timeout fences it). Then it moves to the target epoch.""",
    )
    UNRELEASED_PARTITIONS = (
        1,
        """The member is at the target epoch but some partitions of its target are
        still held by other members (revoking them). It gets them, one heartbeat
        later, once they are released.""",
    )
    STABLE = (
        2,
        """The member owns exactly its target assignment at the target epoch.
        A new group epoch (member joins/leaves, subscription or partition count
        changes) recomputes the target and reconciliation starts again.""",
    )


_UR, _UL, _ST = (MemberState.UNREVOKED_PARTITIONS, MemberState.UNRELEASED_PARTITIONS,
                 MemberState.STABLE)

MEMBER_TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    _ST: frozenset({_ST, _UR, _UL}),
    _UR: frozenset({_UR, _UL, _ST}),
    _UL: frozenset({_UL, _UR, _ST}),
}
"""from-state -> states a heartbeat may move the member to (every state is reachable
from every other: the target can change at any heartbeat). Leaving, session expiry
and fencing remove the member from any state."""


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None  # resolved in ConsumerGroup.regexes
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    has_metadata: bool = False  # a MemberMetadata record was replayed
    # a classic-protocol member of this consumer group (mixed groups, consumer_classic.py)
    classic: ClassicMemberMetadata | None = None


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.topics: dict[str, TopicMetadata] = {}  # the subscribed topics' metadata
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        self.owners: dict[TopicPartitionId, str] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        # regex subscriptions (consumer_regex.py): regex -> its resolution (durable), and
        # the topic-metadata version each was last found current at (memory only)
        self.regexes: dict[str, RegexValue] = {}
        self.regexes_checked: dict[str, int] = {}

    def __repr__(self) -> str:
        return (f"ConsumerGroup({self.group_id!r}, epoch {self.group_epoch}, "
                f"{len(self.members)} members)")

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroupState name as ListGroups/DescribeGroups show it."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def member(self, member_id: str) -> ConsumerMember:
        m = self.members.get(member_id)
        if m is None:
            m = self.members[member_id] = ConsumerMember(member_id)
        return m

    def set_current(self, m: ConsumerMember, epoch: int, previous: int, state: MemberState,
                    assigned: Assignment, revoking: Assignment) -> None:
        """Replay of a CurrentMemberAssignment: also moves partition ownership."""
        for tp in [tp for tp, owner in self.owners.items() if owner == m.member_id]:
            del self.owners[tp]
        m.member_epoch, m.previous_member_epoch, m.state = epoch, previous, state
        m.assigned, m.pending_revocation = assigned, revoking
        for a in (assigned, revoking):
            for tid, ps in a.items():
                for p in ps:
                    self.owners[(tid, p)] = m.member_id

    def remove(self, member_id: str) -> None:
        m = self.members.pop(member_id, None)
        if m is None:
            return
        for tp in [tp for tp, owner in self.owners.items() if owner == member_id]:
            del self.owners[tp]
        if m.instance_id is not None and self.static_members.get(m.instance_id) == member_id:
            del self.static_members[m.instance_id]
        self.target.pop(member_id, None)

    def subscribed(self) -> set[str]:
        """Every topic a member subscribes to, by name or through a regex."""
        out = {t for m in self.members.values() for t in m.subscribed_topic_names}
        for m in self.members.values():
            if m.subscribed_topic_regex and m.subscribed_topic_regex in self.regexes:
                out.update(self.regexes[m.subscribed_topic_regex].topics)
        return out
