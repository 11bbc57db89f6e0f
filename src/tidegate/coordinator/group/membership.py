"""SyncGroup, Heartbeat and LeaveGroup.

SyncGroup: followers are parked until the leader's SyncGroup arrives; the leader's
assignment (empty for members it left out) is stored as the group's metadata record,
and once that record is durable every parked member gets its share and the group is
Stable. Heartbeat extends a member's session and tells it when to rejoin
(REBALANCE_IN_PROGRESS). LeaveGroup (batched in v3+) removes members — a static
member by its `group.instance.id` — and starts a rebalance.

Error precedence follows Kafka: unknown group or member, fenced static member,
stale generation, inconsistent protocol, then the state's own answer.
"""

from __future__ import annotations

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group.messages import (
    HeartbeatRequest,
    LeaveRequest,
    LeaveResponse,
    SyncRequest,
    SyncResponse,
)
from tidegate.coordinator.group.model import Group, Member
from tidegate.coordinator.group.rebalance import (
    after_member_removed,
    group_record,
    maybe_complete_join,
    merge,
    remove_member,
)
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.group.states import GroupState
from tidegate.coordinator.runtime import PARKED, Result

__all__ = ["heartbeat", "leave", "sync"]


def sync(shard: GroupShard, req: SyncRequest, token: int, now: int) -> Result[SyncResponse]:
    def error(code: ErrorCode) -> Result[SyncResponse]:
        return Result(SyncResponse(code))

    found = _current_member(shard, req)
    if isinstance(found, ErrorCode):
        return error(found)
    group, member = found
    if req.protocol_type is not None and req.protocol_type != group.protocol_type:
        return error(ErrorCode.inconsistent_group_protocol)
    if req.protocol_name is not None and req.protocol_name != group.protocol:
        return error(ErrorCode.inconsistent_group_protocol)
    if group.state is GroupState.PREPARING_REBALANCE:
        return error(ErrorCode.rebalance_in_progress)
    if group.state is GroupState.STABLE:
        _synced(shard, group.group_id, req.member_id)
        shard.schedule_member(group, member.member_id, now + member.session_timeout_ms)
        return Result(SyncResponse(ErrorCode.none, member.assignment, group.protocol_type,
                                   group.protocol))
    if group.state is not GroupState.COMPLETING_REBALANCE:
        return error(ErrorCode.unknown_member_id)
    out: Result[SyncResponse] = Result(PARKED)
    if member.sync_waiter is not None and member.sync_waiter != token:
        out.replies.append((member.sync_waiter, SyncResponse(ErrorCode.rebalance_in_progress)))
    member.sync_waiter = token
    _synced(shard, group.group_id, req.member_id)
    if req.member_id != group.leader:
        return out
    assignments = {mid: data for mid, data in req.assignments if mid in group.members}
    out.records.append(group_record(group, group.metadata_value(now, assignments=assignments)))
    for m in group.members.values():
        if m.sync_waiter is not None:
            out.replies.append((m.sync_waiter, SyncResponse(
                ErrorCode.none, assignments.get(m.member_id, b""), group.protocol_type,
                group.protocol,
            )))
            m.sync_waiter = None
    return out


def _current_member(
    shard: GroupShard, req: SyncRequest | HeartbeatRequest
) -> tuple[Group, Member] | ErrorCode:
    """The request's group and member if it names a current member of the current
    generation; otherwise the error code Kafka answers, checked in Kafka's order."""
    if not req.group_id:
        return ErrorCode.invalid_group_id
    group = shard.groups.get(req.group_id)
    if group is None:
        return ErrorCode.unknown_member_id
    if group.static_member_fenced(req.group_instance_id, req.member_id):
        return ErrorCode.fenced_instance_id
    member = group.members.get(req.member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if req.generation_id != group.generation:
        return ErrorCode.illegal_generation
    return group, member


def _synced(shard: GroupShard, group_id: str, member_id: str) -> None:
    group = shard.groups[group_id]
    group.pending_sync.discard(member_id)
    if not group.pending_sync:
        shard.timers.cancel(("sync", group_id))


def heartbeat(shard: GroupShard, req: HeartbeatRequest, now: int) -> Result[ErrorCode]:
    found = _current_member(shard, req)
    if isinstance(found, ErrorCode):
        return Result(found)
    group, member = found
    if group.state is GroupState.EMPTY:
        return Result(ErrorCode.unknown_member_id)
    shard.schedule_member(group, member.member_id, now + member.session_timeout_ms)
    if group.state is GroupState.PREPARING_REBALANCE:
        return Result(ErrorCode.rebalance_in_progress)
    return Result(ErrorCode.none)


def leave(shard: GroupShard, req: LeaveRequest, now: int) -> Result[LeaveResponse]:
    if not req.group_id:
        return Result(LeaveResponse(ErrorCode.invalid_group_id))
    group = shard.groups.get(req.group_id)
    if group is None:
        return Result(LeaveResponse(
            ErrorCode.none, tuple((m, ErrorCode.unknown_member_id) for m in req.members)
        ))
    out: Result[LeaveResponse] = Result(LeaveResponse(ErrorCode.none))
    results = []
    removed = pending_removed = False
    for lm in req.members:
        code = ErrorCode.none
        if lm.group_instance_id is not None:
            current = group.static_members.get(lm.group_instance_id)
            if current is None:
                code = ErrorCode.unknown_member_id
            elif lm.member_id and lm.member_id != current:
                code = ErrorCode.fenced_instance_id
            else:
                remove_member(shard, group, current, out)
                removed = True
        elif lm.member_id in group.pending:
            del group.pending[lm.member_id]
            shard.cancel_member(group, lm.member_id)
            pending_removed = True
        elif lm.member_id in group.members:
            remove_member(shard, group, lm.member_id, out)
            removed = True
        else:
            code = ErrorCode.unknown_member_id
        results.append((lm, code))
    out.response = LeaveResponse(ErrorCode.none, tuple(results))
    if removed:
        merge(out, after_member_removed(shard, group, now))
    elif pending_removed:
        merge(out, maybe_complete_join(shard, group, now))
    shard.drop_if_removable(group)
    return out
