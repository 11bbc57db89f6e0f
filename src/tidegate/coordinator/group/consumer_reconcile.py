"""Incremental reconciliation of a KIP-848 member: its next current assignment.

`reconcile` is a pure function of the member's current assignment, the target
assignment and its epoch, the partitions the member says it owns (None: not sent) and
which partitions other members still hold. Rules (Kafka's CurrentAssignmentBuilder):

- a partition the target takes away is first *revoked*: the member stays at its epoch
  in UNREVOKED_PARTITIONS, told to keep only the rest, until a heartbeat's owned
  partitions no longer include any partition pending revocation;
- a partition the target gives is *assigned* only once no other member holds it
  (assigned or pending revocation); until then the member is UNRELEASED_PARTITIONS at
  the target epoch and gets it at a later heartbeat;
- otherwise the member is STABLE at the target epoch with exactly its target.

Hence no partition is ever held by two members (Hypothesis-tested).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from tidegate.coordinator.group.consumer_model import MEMBER_TRANSITIONS, MemberState
from tidegate.protocol.consumer_group_records import Assignment

__all__ = ["Current", "reconcile"]


@dataclass(frozen=True)
class Current:
    epoch: int
    previous_epoch: int
    state: MemberState
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)


def _owns_any(owned: Assignment | None, parts: Assignment) -> bool:
    if owned is None:
        return True  # not told otherwise: assume it still holds them
    return any(owned.get(t, frozenset()) & ps for t, ps in parts.items())


def reconcile(cur: Current, target_epoch: int, target: Assignment, owned: Assignment | None,
              held_by_other: Callable[[uuid.UUID, int], bool]) -> Current:
    if cur.state is MemberState.STABLE and cur.epoch == target_epoch:
        return cur
    if cur.state is MemberState.UNREVOKED_PARTITIONS and _owns_any(owned, cur.revoking):
        return cur  # still revoking
    nxt = _next(cur, target_epoch, target, owned, held_by_other)
    if nxt.state not in MEMBER_TRANSITIONS[cur.state]:  # pragma: no cover - table is total
        raise RuntimeError(f"member cannot move from {cur.state} to {nxt.state}")
    return nxt


def _next(cur: Current, target_epoch: int, target: Assignment, owned: Assignment | None,
          held_by_other: Callable[[uuid.UUID, int], bool]) -> Current:
    keep: Assignment = {}
    revoke: Assignment = {}
    gain: Assignment = {}
    unreleased = False
    for tid in set(target) | set(cur.assigned):
        now = cur.assigned.get(tid, frozenset())
        want = target.get(tid, frozenset())
        if now & want:
            keep[tid] = now & want
        if now - want:
            revoke[tid] = now - want
        free = frozenset(p for p in want - now if not held_by_other(tid, p))
        if free:
            gain[tid] = free
        if len(free) < len(want - now):
            unreleased = True
    if revoke and _owns_any(owned, revoke):
        return Current(cur.epoch, cur.previous_epoch, MemberState.UNREVOKED_PARTITIONS,
                       keep, revoke)
    assigned = {t: keep.get(t, frozenset()) | gain.get(t, frozenset())
                for t in set(keep) | set(gain)}
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return Current(target_epoch, cur.epoch, state, assigned, {})
