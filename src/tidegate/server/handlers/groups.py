"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup: wire messages <-> the coordinator.

Each handler turns the request (any version) into the coordinator's version-free
request, awaits the answer — parked JoinGroup/SyncGroup requests wait for the
rebalance — and builds the response at the request's version. Coordinator errors
(loading, unavailable) become the error code of the response.
"""

from __future__ import annotations

from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.group.messages import (
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveMember,
    LeaveRequest,
    LeaveResponse,
    SyncRequest,
    SyncResponse,
)
from tidegate.protocol.messages import build, ms, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext


def client_host(ctx: RequestContext) -> str:
    """Kafka shows a member's host as "/<ip>"."""
    host = ctx.peer.rsplit(":", 1)[0] if ":" in ctx.peer else ctx.peer
    return "/" + host.strip("[]")


def _authorize_group(broker: Broker, ctx: RequestContext, group_id: str) -> None:
    """Kafka: JoinGroup, SyncGroup, Heartbeat and LeaveGroup need READ on the group."""
    if not check(broker, ctx, Op.READ, Res.GROUP, group_id):
        raise KafkaError(code=ErrorCode.group_authorization_failed)


async def handle_join_group(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    session = ms(req.session_timeout)
    jr = JoinRequest(
        group_id=str(req.group_id),
        member_id=str(req.member_id or ""),
        group_instance_id=view(req, "group_instance_id"),
        protocol_type=str(req.protocol_type),
        protocols=tuple((str(p.name), bytes(p.metadata)) for p in req.protocols),
        session_timeout_ms=session,
        rebalance_timeout_ms=ms(view(req, "rebalance_timeout", session)),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9,
        reason=view(req, "reason"),
    )
    try:
        _authorize_group(broker, ctx, jr.group_id)
        resp = await broker.group_coordinator.join(jr)
    except KafkaError as e:
        resp = JoinResponse(e.code, jr.member_id)
    protocol_name = resp.protocol_name
    if protocol_name is None and v < 7:
        protocol_name = ""  # nullable only from v7
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "error_code": resp.error,
            "generation_id": resp.generation_id,
            "protocol_type": resp.protocol_type,
            "protocol_name": protocol_name,
            "leader": resp.leader,
            "skip_assignment": resp.skip_assignment,
            "member_id": resp.member_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata,
                }
                for m in resp.members
            ],
        },
    )


async def handle_sync_group(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    sr = SyncRequest(
        group_id=str(req.group_id),
        generation_id=int(req.generation_id),
        member_id=str(req.member_id),
        group_instance_id=view(req, "group_instance_id"),
        protocol_type=view(req, "protocol_type"),
        protocol_name=view(req, "protocol_name"),
        assignments=tuple((str(a.member_id), bytes(a.assignment)) for a in req.assignments),
    )
    try:
        _authorize_group(broker, ctx, sr.group_id)
        resp = await broker.group_coordinator.sync(sr)
    except KafkaError as e:
        resp = SyncResponse(e.code)
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "error_code": resp.error,
            "protocol_type": resp.protocol_type,
            "protocol_name": resp.protocol_name,
            "assignment": resp.assignment,
        },
    )


async def handle_heartbeat(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    hr = HeartbeatRequest(
        group_id=str(req.group_id),
        generation_id=int(req.generation_id),
        member_id=str(req.member_id),
        group_instance_id=view(req, "group_instance_id"),
    )
    try:
        _authorize_group(broker, ctx, hr.group_id)
        code = await broker.group_coordinator.heartbeat(hr)
    except KafkaError as e:
        code = e.code
    return build(ctx.response_class, {"throttle_time": 0, "error_code": code})


async def handle_leave_group(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    if v >= 3:
        members = tuple(
            LeaveMember(str(m.member_id or ""), view(m, "group_instance_id"), view(m, "reason"))
            for m in req.members
        )
    else:
        members = (LeaveMember(str(req.member_id)),)
    lr = LeaveRequest(str(req.group_id), members)
    try:
        _authorize_group(broker, ctx, lr.group_id)
        resp = await broker.group_coordinator.leave(lr)
    except KafkaError as e:
        resp = LeaveResponse(e.code)
    if v < 3:
        code = resp.error
        if code == ErrorCode.none and resp.members:
            code = resp.members[0][1]
        return build(ctx.response_class, {"throttle_time": 0, "error_code": code})
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "error_code": resp.error,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "error_code": code,
                }
                for m, code in resp.members
            ],
        },
    )
