"""What happens when a group's deadlines pass (called from `GroupShard.poll`).

- ("member", group, id): a member's session ended without a heartbeat (or a pending
  member id was never used): it is removed and the group rebalances. Members that have
  rejoined and wait for the join to complete, or wait in SyncGroup for the leader, are
  kept (Kafka's hasSatisfiedHeartbeat) and their timer is not renewed: the join's end,
  and the answer to their SyncGroup (the assignment, or REBALANCE_IN_PROGRESS when a new
  rebalance starts), give them a new session; the sync deadline bounds the wait.
- ("join", group): the rebalance timeout (or the initial delay) is over: the join
  completes with whoever rejoined.
- ("sync", group): members that got the new generation but did not SyncGroup within the
  rebalance timeout are removed, and the group rebalances (Kafka 3.1+).
"""

from __future__ import annotations

from collections.abc import Hashable

from tidegate.coordinator.group import consumer
from tidegate.coordinator.group.model import Group
from tidegate.coordinator.group.rebalance import (
    after_member_removed,
    maybe_complete_join,
    merge,
    on_join_deadline,
    remove_member,
)
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.group.states import GroupState
from tidegate.coordinator.runtime import Result

__all__ = ["on_deadline"]

_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE


def on_deadline(shard: GroupShard, key: Hashable, now: int) -> Result[None]:
    kind, group_id, member_id = shard.timer_key(key)
    if kind.startswith("consumer"):
        return consumer.on_deadline(shard, key, now)  # a KIP-848 member
    group = shard.groups.get(group_id)
    out: Result[None] = Result(None)
    if group is None:
        return out
    if kind == "join":
        out = on_join_deadline(shard, group, now)
    elif kind == "sync":
        if group.state in (_C, _S) and group.pending_sync:
            for mid in sorted(group.pending_sync):
                remove_member(shard, group, mid, out)
            merge(out, after_member_removed(shard, group, now))
    elif kind == "member" and member_id is not None:
        out = _on_session_expired(shard, group, member_id, now)
    shard.drop_if_removable(group)
    return out


def _on_session_expired(shard: GroupShard, group: Group, member_id: str, now: int
                        ) -> Result[None]:
    out: Result[None] = Result(None)
    if group.pending.pop(member_id, None) is not None:
        return maybe_complete_join(shard, group, now)
    member = group.members.get(member_id)
    if member is None:
        return out
    if member.awaiting_join and not member.is_new:
        return out  # it rejoined; completing the join gives it a new session
    if member.sync_waiter is not None:
        return out  # waiting for the leader; the sync deadline covers that
    remove_member(shard, group, member_id, out)
    merge(out, after_member_removed(shard, group, now))
    return out
