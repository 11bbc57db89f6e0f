"""The classic group state machine: the states and the table of allowed transitions.

Every state change of a live group goes through `check_transition` (via
`Group.transition_to`); an illegal move raises `IllegalStateTransition`, which is a
coordinator bug, never a client error. Each state's docstring says what the
coordinator does with each request in that state. Loading a partition sets the states
its records describe (Empty or Stable) without transitions, as Kafka's loader does.
"""

from __future__ import annotations

import enum

__all__ = ["TRANSITIONS", "GroupState", "IllegalStateTransition", "check_transition"]


class GroupState(enum.Enum):
    """A group's state; the value is Kafka's name, as DescribeGroups/ListGroups show."""

    _doc: str

    def __new__(cls, wire_name: str, doc: str) -> GroupState:
        obj = object.__new__(cls)
        obj._value_ = wire_name
        obj._doc = doc
        return obj

    @property
    def doc(self) -> str:
        return self._doc

    EMPTY = (
        "Empty",
        """No members; offsets may be committed (simple consumers commit with
        generation -1 here). JoinGroup: adds the member and moves to PreparingRebalance
        (first rebalance delayed by group.initial.rebalance.delay.ms). SyncGroup,
        Heartbeat: UNKNOWN_MEMBER_ID. LeaveGroup: UNKNOWN_MEMBER_ID per member.
        DeleteGroups: allowed. Offsets expire after offsets.retention.minutes counted
        from when the group became Empty; with no offsets left the group is removed.""",
    )
    PREPARING_REBALANCE = (
        "PreparingRebalance",
        """Waiting for every member to (re)join, up to the rebalance timeout.
        JoinGroup: parked until all known members have joined or the timeout expires;
        then members that did not rejoin are removed and the next generation is formed.
        SyncGroup: REBALANCE_IN_PROGRESS. Heartbeat: REBALANCE_IN_PROGRESS (the signal
        to rejoin). OffsetCommit: allowed for current members at the current
        generation. LeaveGroup: removes the member; may complete the join.""",
    )
    COMPLETING_REBALANCE = (
        "CompletingRebalance",
        """The generation is formed; waiting for the leader's SyncGroup with the
        assignment. JoinGroup: a member with unchanged metadata gets the current
        generation again, otherwise a new rebalance starts. SyncGroup: followers are
        parked until the leader's assignment is stored. Heartbeat: NONE. OffsetCommit:
        REBALANCE_IN_PROGRESS. A member leaving or expiring starts a new rebalance.""",
    )
    STABLE = (
        "Stable",
        """Assignment stored and handed out. JoinGroup: the leader or a member with
        changed metadata starts a rebalance, a follower with unchanged metadata gets the
        current generation; a static member rejoining with a new member id keeps its
        assignment without a rebalance. SyncGroup: returns the member's assignment.
        Heartbeat, OffsetCommit: allowed at the current generation. A member leaving or
        expiring starts a rebalance.""",
    )
    DEAD = (
        "Dead",
        """Being removed (DeleteGroups, or expired with no offsets left). The group is
        dropped from the coordinator; requests then see an unknown group.""",
    )


_E, _P, _C, _S, _D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    _E: frozenset({_P, _D}),
    _P: frozenset({_C, _E, _D}),
    _C: frozenset({_P, _S, _D}),
    _S: frozenset({_P, _D}),
    _D: frozenset({_D}),
}
"""from-state -> the states it may move to (Kafka's GroupMetadata validPreviousStates)."""


class IllegalStateTransition(RuntimeError):
    pass


def check_transition(current: GroupState, target: GroupState) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalStateTransition(
            f"group cannot move from {current.value} to {target.value}"
        )
