"""JoinGroup and the rebalance: preparing, completing, and what ends a member.

Kafka's classic protocol: a join moves the group to PreparingRebalance; when every
known member has (re)joined, or the rebalance timeout (the largest member
`rebalance.timeout.ms`) expires, members that did not rejoin are removed (static ones
stay until their session expires), the next generation is formed — generation + 1,
the protocol elected by vote, a leader among the joined members — and every parked
JoinGroup is answered (only the leader's answer lists the members and their
metadata). The first rebalance of an Empty group waits `group.initial.rebalance.delay.ms`,
extended while new members keep arriving, up to the rebalance timeout.

What starts a rebalance: a new member, a member leaving (LeaveGroup) or expiring
(`session.timeout.ms` without a heartbeat, bounded by `group.min/max.session.timeout.ms`),
the leader or a member with changed metadata rejoining, a member not rejoining within
the rebalance timeout or not syncing after it. A subscribed topic gaining partitions
is noticed by the clients, as in Kafka's classic protocol: the leader's metadata
refresh sees the new count and rejoins (its rejoin starts the rebalance), so the
coordinator needs no topic watch of its own.

Operations follow the runtime's contract (`coordinator/runtime.py`): they return the
records to append (durable changes happen when those are replayed) and may change only
the group's live rebalance state directly (see `model.py`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group.config import NEW_MEMBER_JOIN_TIMEOUT_MS
from tidegate.coordinator.group.messages import (
    JoinedMember,
    JoinRequest,
    JoinResponse,
    SyncResponse,
)
from tidegate.coordinator.group.model import Group, Member
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.group.states import GroupState
from tidegate.coordinator.runtime import PARKED, Result
from tidegate.protocol.coordinator_records import (
    GroupMetadataValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
)

__all__ = [
    "after_member_removed",
    "complete_join",
    "group_record",
    "join",
    "maybe_complete_join",
    "merge",
    "on_join_deadline",
    "prepare_rebalance",
    "remove_member",
]

T = TypeVar("T")
U = TypeVar("U")

_E = GroupState.EMPTY
_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE


def merge(into: Result[T], other: Result[U]) -> None:
    into.records += other.records
    into.replies += other.replies


def _error(code: ErrorCode, member_id: str = "") -> Result[JoinResponse]:
    return Result(JoinResponse(code, member_id))


def group_record(group: Group, value: GroupMetadataValue) -> tuple[bytes, bytes | None]:
    return encode_group_metadata_key(group.group_id), encode_group_metadata_value(value)


# -- JoinGroup -----------------------------------------------------------------------------


def join(shard: GroupShard, req: JoinRequest, token: int, now: int) -> Result[JoinResponse]:
    cfg = shard.config
    if not req.group_id:
        return _error(ErrorCode.invalid_group_id, req.member_id)
    if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
        return _error(ErrorCode.invalid_session_timeout, req.member_id)
    cgroup = shard.consumer_groups.get(req.group_id)
    if cgroup is not None and cgroup.members:
        # a KIP-848 consumer group; mixed (upgrading) groups are not supported yet
        return _error(ErrorCode.inconsistent_group_protocol, req.member_id)
    group = shard.groups.get(req.group_id)
    if group is None:
        if req.member_id:
            return _error(ErrorCode.unknown_member_id, req.member_id)
        group = shard.groups[req.group_id] = Group(req.group_id, now)
    if req.member_id:
        out = _join_known(shard, group, req, token, now)
    else:
        out = _join_unknown(shard, group, req, token, now)
    if not out.records:
        merge(out, maybe_complete_join(shard, group, now))
    shard.drop_if_removable(group)
    return out


def _join_unknown(
    shard: GroupShard, group: Group, req: JoinRequest, token: int, now: int
) -> Result[JoinResponse]:
    if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
        return _error(ErrorCode.inconsistent_group_protocol)
    instance = req.group_instance_id
    new_id = f"{instance if instance is not None else req.client_id}-{shard.new_id()}"
    if instance is not None and instance in group.static_members:
        return _static_rejoin(shard, group, group.static_members[instance], new_id, req, token,
                              now)
    if len(group.members) + len(group.pending) >= shard.config.max_size:
        return _error(ErrorCode.group_max_size_reached)
    if instance is None and req.require_known_member_id:
        # KIP-394: hand out the id first; the member joins with it in a second request.
        group.pending[new_id] = req.session_timeout_ms
        shard.schedule_member(group, new_id, now + req.session_timeout_ms)
        return _error(ErrorCode.member_id_required, new_id)
    return _add_member(shard, group, new_id, req, token, now)


def _join_known(
    shard: GroupShard, group: Group, req: JoinRequest, token: int, now: int
) -> Result[JoinResponse]:
    member_id, instance = req.member_id, req.group_instance_id
    if member_id in group.pending:
        if len(group.members) >= shard.config.max_size:
            return _error(ErrorCode.group_max_size_reached, member_id)
        return _add_member(shard, group, member_id, req, token, now)
    if group.static_member_fenced(instance, member_id):
        return _error(ErrorCode.fenced_instance_id, member_id)
    member = group.members.get(member_id)
    if member is None or (instance is not None and instance not in group.static_members):
        return _error(ErrorCode.unknown_member_id, member_id)
    if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
        return _error(ErrorCode.inconsistent_group_protocol, member_id)
    if group.state is _C and member.matches(req.protocols):
        return Result(current_join_response(group, member))  # a retry: same generation
    if group.state is _S and member_id != group.leader and member.matches(req.protocols):
        return Result(current_join_response(group, member))  # nothing changed
    if group.state in (_P, _C, _S):
        return _update_member(shard, group, member, req, token, now)
    return _error(ErrorCode.unknown_member_id, member_id)


def current_join_response(group: Group, member: Member, *, leader: str | None = None,
                          skip_assignment: bool = False) -> JoinResponse:
    is_leader = member.member_id == group.leader
    return JoinResponse(
        ErrorCode.none,
        member.member_id,
        group.generation,
        group.protocol_type,
        group.protocol,
        leader if leader is not None else (group.leader or ""),
        _member_list(group) if is_leader else (),
        skip_assignment,
    )


def _member_list(group: Group) -> tuple[JoinedMember, ...]:
    return tuple(
        JoinedMember(m.member_id, m.group_instance_id, m.metadata(group.protocol))
        for m in group.members.values()
    )


def _member_from(req: JoinRequest, member_id: str, **state: Any) -> Member:
    """A member as its JoinGroup request describes it, plus `state` (waiter, ...)."""
    return Member(
        member_id=member_id,
        group_instance_id=req.group_instance_id,
        client_id=req.client_id,
        client_host=req.client_host,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        session_timeout_ms=req.session_timeout_ms,
        protocol_type=req.protocol_type,
        protocols=req.protocols,
        **state,
    )


def _add_member(
    shard: GroupShard, group: Group, member_id: str, req: JoinRequest, token: int, now: int
) -> Result[JoinResponse]:
    member = _member_from(req, member_id, join_waiter=token, is_new=True)
    if group.state is _P and group.generation == 0:
        group.new_member_added = True
    group.add(member)
    shard.schedule_member(group, member_id, now + NEW_MEMBER_JOIN_TIMEOUT_MS)
    out: Result[JoinResponse] = Result(PARKED)
    merge(out, maybe_prepare_rebalance(shard, group, now))
    return out


def _update_member(
    shard: GroupShard, group: Group, member: Member, req: JoinRequest, token: int, now: int
) -> Result[JoinResponse]:
    out: Result[JoinResponse] = Result(PARKED)
    if member.join_waiter is not None and member.join_waiter != token:
        # A repeated JoinGroup (e.g. after a client-side timeout): the newest one waits.
        out.replies.append(
            (member.join_waiter, JoinResponse(ErrorCode.rebalance_in_progress, member.member_id))
        )
    member.protocols = req.protocols
    member.rebalance_timeout_ms = req.rebalance_timeout_ms
    member.session_timeout_ms = req.session_timeout_ms
    member.join_waiter = token
    group.invalidate_subscriptions()
    merge(out, maybe_prepare_rebalance(shard, group, now))
    return out


def _static_rejoin(
    shard: GroupShard,
    group: Group,
    old_id: str,
    new_id: str,
    req: JoinRequest,
    token: int,
    now: int,
) -> Result[JoinResponse]:
    """KIP-345: a static member restarted. The new member id replaces the old one; in
    Stable, unless the group's protocol would change, no rebalance happens and the
    member keeps its assignment."""
    old = group.members[old_id]
    out: Result[JoinResponse] = Result(PARKED)
    if old.join_waiter is not None:
        out.replies.append((old.join_waiter, JoinResponse(ErrorCode.fenced_instance_id, old_id)))
    if old.sync_waiter is not None:
        out.replies.append((old.sync_waiter, SyncResponse(ErrorCode.fenced_instance_id)))
    previous_leader = group.leader or ""
    new = _member_from(req, new_id, assignment=old.assignment)
    group.members = {(new_id if k == old_id else k): (new if k == old_id else m)
                     for k, m in group.members.items()}
    assert req.group_instance_id is not None
    group.static_members[req.group_instance_id] = new_id
    if group.leader == old_id:
        group.leader = new_id
    if old_id in group.pending_sync:
        group.pending_sync.discard(old_id)
        group.pending_sync.add(new_id)
    group.invalidate_subscriptions()
    shard.cancel_member(group, old_id)
    shard.schedule_member(group, new_id, now + req.session_timeout_ms)
    if group.state is _S and group.select_protocol() == group.protocol:
        # Persist the new member id; answer with the current generation. A pre-KIP-814
        # leader is told the old leader id, so it does not compute a useless assignment.
        is_leader = group.leader == new_id
        skip = is_leader and req.supports_skip_assignment
        leader = previous_leader if is_leader and not skip else None
        out.response = current_join_response(group, new, leader=leader, skip_assignment=skip)
        out.records.append(group_record(group, group.metadata_value(now)))
        return out
    new.join_waiter = token
    if group.state in (_S, _C):
        merge(out, prepare_rebalance(shard, group, now))
    return out


# -- preparing and completing a rebalance ---------------------------------------------------


def maybe_prepare_rebalance(shard: GroupShard, group: Group, now: int) -> Result[None]:
    if group.state in (_S, _C, _E):
        return prepare_rebalance(shard, group, now)
    return Result(None)


def prepare_rebalance(shard: GroupShard, group: Group, now: int) -> Result[None]:
    out: Result[None] = Result(None)
    if group.state is _C:
        for m in group.members.values():
            if m.sync_waiter is not None:
                out.replies.append((m.sync_waiter, SyncResponse(ErrorCode.rebalance_in_progress)))
                m.sync_waiter = None
                # A session that ended while the member was parked in SyncGroup was
                # ignored (timeouts.py) and its timer is gone: start a new one, as Kafka's
                # propagateAssignment does for every member whose SyncGroup it answers.
                # Without it a static member that never rejoins is never removed, and
                # the group stays in PreparingRebalance for good.
                shard.schedule_member(group, m.member_id, now + m.session_timeout_ms)
    group.pending_sync.clear()
    shard.timers.cancel(("sync", group.group_id))
    timeout = group.rebalance_timeout_ms()
    delay = shard.config.initial_rebalance_delay_ms
    if group.state is _E:
        group.initial_delay = True
        group.new_member_added = False
        group.initial_remaining_ms = max(timeout - delay, 0)
        deadline = now + min(delay, timeout)
    else:
        group.initial_delay = False
        deadline = now + timeout
    group.transition_to(_P, now)
    shard.timers.schedule(("join", group.group_id), deadline)
    return out


def maybe_complete_join(shard: GroupShard, group: Group, now: int) -> Result[None]:
    """Complete the join if everyone is in (or an already-due initial delay ended)."""
    if group.state is not _P:
        return Result(None)
    key = ("join", group.group_id)
    deadline = shard.timers.get(key)
    if group.initial_delay:
        if deadline is not None and deadline <= now:
            shard.timers.cancel(key)
            return on_join_deadline(shard, group, now)
        return Result(None)
    if group.all_joined():
        return complete_join(shard, group, now)
    return Result(None)


def on_join_deadline(shard: GroupShard, group: Group, now: int) -> Result[None]:
    if group.state is not _P:
        return Result(None)
    if group.initial_delay and group.new_member_added and group.initial_remaining_ms > 0:
        group.new_member_added = False
        delay = min(shard.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
        group.initial_remaining_ms = max(group.initial_remaining_ms - delay, 0)
        shard.timers.schedule(("join", group.group_id), now + delay)
        return Result(None)
    return complete_join(shard, group, now)


def complete_join(shard: GroupShard, group: Group, now: int) -> Result[None]:
    out: Result[None] = Result(None)
    group.initial_delay = False
    shard.timers.cancel(("join", group.group_id))
    for m in list(group.members.values()):
        if not m.awaiting_join and m.group_instance_id is None:
            remove_member(shard, group, m.member_id, out)
    if group.members and not group.maybe_elect_joined_leader():
        # Only static members that have not rejoined are left: give them another
        # rebalance timeout (their sessions expire meanwhile if they are gone).
        shard.timers.schedule(("join", group.group_id), now + group.rebalance_timeout_ms())
        return out
    if not group.members:
        value = group.metadata_value(now, generation=group.generation + 1, members=())
        out.records.append(group_record(group, value))  # replay moves the group to Empty
        return out
    group.generation += 1
    group.protocol = group.select_protocol()
    group.invalidate_subscriptions()
    group.transition_to(_C, now)
    members = _member_list(group)
    for m in group.members.values():
        if m.join_waiter is not None:
            out.replies.append((m.join_waiter, JoinResponse(
                ErrorCode.none, m.member_id, group.generation, group.protocol_type,
                group.protocol, group.leader or "",
                members if m.member_id == group.leader else (),
            )))
            m.join_waiter = None
        m.is_new = False
        shard.schedule_member(group, m.member_id, now + m.session_timeout_ms)
    group.pending_sync = set(group.members)
    shard.timers.schedule(("sync", group.group_id), now + group.rebalance_timeout_ms())
    return out


# -- members leaving -----------------------------------------------------------------------


def remove_member(shard: GroupShard, group: Group, member_id: str, out: Result[T]) -> None:
    """Drop a member; its parked requests are answered UNKNOWN_MEMBER_ID."""
    member = group.remove(member_id)
    if member is None:
        return
    shard.cancel_member(group, member_id)
    if member.join_waiter is not None:
        out.replies.append((member.join_waiter,
                            JoinResponse(ErrorCode.unknown_member_id, member_id)))
    if member.sync_waiter is not None:
        out.replies.append((member.sync_waiter, SyncResponse(ErrorCode.unknown_member_id)))


def after_member_removed(shard: GroupShard, group: Group, now: int) -> Result[None]:
    """A member left or expired: rebalance, or see whether the join can complete."""
    out: Result[None] = Result(None)
    if group.state in (_S, _C):
        merge(out, prepare_rebalance(shard, group, now))
    if group.state is _P:
        merge(out, maybe_complete_join(shard, group, now))
    return out
