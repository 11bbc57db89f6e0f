"""The ``cooperative-sticky`` assignor (Java's CooperativeStickyAssignor, KIP-429).

Same placement as ``sticky`` (`sticky.balanced_sticky`), but for incremental
cooperative rebalancing: members do not revoke before rejoining, they report what they
still own in the subscription's ``owned_partitions`` with the ``generation_id`` it was
owned in (subscription v2+; older members put the generation in ``user_data`` as one
int32, which we write too, for leaders that read it there).

The one rule that makes it cooperative: a partition is never given to a member while
another member still owns it. Such a partition is left out of this round's assignment;
its owner sees it missing from its own assignment, revokes it and rejoins, and the
next round gives it to its new member (it is then owned by nobody). Claims that
conflict (two owners) are withheld from everyone until both have revoked.

Java's CooperativeStickyAssignor supports both the COOPERATIVE and the EAGER rebalance
protocols (the consumer uses the highest protocol all its configured assignors
support), so ``range,cooperative-sticky`` runs eagerly until ``range`` is removed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

from tidegate.assignors.sticky import balanced_sticky, resolve_claims
from tidegate.assignors.types import Assignment, MemberId, Subscription, TopicPartition

__all__ = ["NAME", "assign", "generation_of", "user_data"]

NAME = "cooperative-sticky"
_I32 = struct.Struct(">i")


def user_data(owned: Sequence[tuple[str, int]], generation: int) -> bytes | None:
    """The generation as a 4-byte int32, as Java writes it for pre-v2 leaders."""
    return _I32.pack(generation)


def generation_of(sub: Subscription) -> int:
    """The generation a member's owned partitions are from: the subscription's
    generation_id (v2+), else the int32 in user_data, else -1."""
    if sub.generation_id >= 0:
        return sub.generation_id
    if sub.user_data is not None and len(sub.user_data) == 4:
        return int(_I32.unpack(sub.user_data)[0])
    return -1


def assign(cluster_partitions: Mapping[str, int],
           subscriptions: Mapping[MemberId, Subscription]) -> dict[MemberId, Assignment]:
    """Cooperative sticky assignment; see the module docstring."""
    claims: dict[MemberId, tuple[Iterable[tuple[str, int]], int]] = {
        m: (s.owned_partitions, generation_of(s)) for m, s in subscriptions.items()}
    target = balanced_sticky(
        cluster_partitions, {m: s.topics for m, s in subscriptions.items()},
        resolve_claims(claims), {m: s.group_instance_id for m, s in subscriptions.items()})
    owners: dict[TopicPartition, set[MemberId]] = {}
    for member, sub in subscriptions.items():
        for tp in sub.owned_partitions:
            owners.setdefault(tp, set()).add(member)
    result: dict[MemberId, Assignment] = {}
    for member, tps in target.items():
        # Withhold what someone else still owns: it must be revoked first.
        keep = [tp for tp in tps if not owners.get(tp, set()) - {member}]
        result[member] = Assignment(tuple(keep))
    for member in subscriptions:
        result.setdefault(member, Assignment())
    return result
