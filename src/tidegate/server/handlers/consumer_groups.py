"""ConsumerGroupHeartbeat (API 68) and ConsumerGroupDescribe (API 69): KIP-848 on the wire.

The heartbeat becomes the coordinator's version-free `consumer.HeartbeatRequest`; the
coordinator answers with the member's epoch and, when it changed, its assignment.
ACLs as Kafka's KafkaApis: READ on the group for the heartbeat (and DESCRIBE on every
subscribed topic: TOPIC_AUTHORIZATION_FAILED otherwise; a regex resolves only to topics
the principal may DESCRIBE), DESCRIBE on each group for
ConsumerGroupDescribe (GROUP_AUTHORIZATION_FAILED for that group).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.group.consumer import HeartbeatRequest, HeartbeatResponse
from tidegate.protocol.consumer_group_records import Assignment
from tidegate.protocol.messages import build, ms, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import authorized_ops, check
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.groups import client_host
from tidegate.server.handlers.operations import GROUP_OPS, authorized_operations

log = logging.getLogger(__name__)

# malformed requests: logged (a client bug or a feature not served); fencing is routine
_REFUSALS = frozenset({ErrorCode.invalid_request, ErrorCode.unsupported_assignor,
                       ErrorCode.group_id_not_found, ErrorCode.invalid_regular_expression})


def _owned(req: Any) -> Assignment | None:
    tps = view(req, "topic_partitions")
    if tps is None:
        return None
    out: Assignment = {}
    for t in tps:
        if t.topic_id is not None and t.partitions:
            out[uuid.UUID(str(t.topic_id))] = frozenset(int(p) for p in t.partitions)
    return out


async def handle_heartbeat(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    names = view(req, "subscribed_topic_names")
    timeout = view(req, "rebalance_timeout")
    hr = HeartbeatRequest(
        group_id=str(req.group_id),
        member_id=str(req.member_id or ""),
        member_epoch=int(req.member_epoch),
        instance_id=view(req, "instance_id"),
        rack_id=view(req, "rack_id"),
        rebalance_timeout_ms=-1 if timeout is None else ms(timeout),
        subscribed_topic_names=None if names is None else tuple(str(n) for n in names),
        subscribed_topic_regex=view(req, "subscribed_topic_regex"),
        server_assignor=view(req, "server_assignor"),
        owned=_owned(req),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
    )
    try:
        if not check(broker, ctx, Op.READ, Res.GROUP, hr.group_id):
            raise KafkaError(code=ErrorCode.group_authorization_failed)
        denied = [t for t in hr.subscribed_topic_names or ()
                  if not check(broker, ctx, Op.DESCRIBE, Res.TOPIC, t)]
        if denied:
            raise KafkaError(f"not authorized to describe {', '.join(sorted(denied))}",
                             code=ErrorCode.topic_authorization_failed)
        resp = await broker.group_coordinator.consumer_heartbeat(
            hr, lambda t: check(broker, ctx, Op.DESCRIBE, Res.TOPIC, t))
        if resp.error in _REFUSALS:
            log.info("ConsumerGroupHeartbeat of %r in group %r refused (%s): %s",
                     hr.member_id, hr.group_id, resp.error.name, resp.message)
    except KafkaError as e:
        resp = HeartbeatResponse(e.code, str(e) or None, hr.member_id or None, hr.member_epoch)
    assignment = None
    if resp.assignment is not None:
        assignment = {"topic_partitions": [
            {"topic_id": tid, "partitions": sorted(ps)}
            for tid, ps in sorted(resp.assignment.items()) if ps]}
    return build(ctx.response_class, {
        "throttle_time": 0,
        "error_code": resp.error,
        "error_message": resp.message,
        "member_id": resp.member_id,
        "member_epoch": resp.member_epoch,
        "heartbeat_interval": resp.heartbeat_interval_ms,
        "assignment": assignment,
    })


async def handle_describe(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    with_ops = bool(view(req, "include_authorized_operations", False))
    names = [str(g) for g in req.group_ids]
    allowed = [g for g in names if check(broker, ctx, Op.DESCRIBE, Res.GROUP, g)]
    found = {str(d["group_id"]): d
             for d in await broker.group_coordinator.consumer_describe(allowed)}
    groups = []
    for g in names:
        d = dict(found.get(g) or {"group_id": g, "members": [],
                                  "error_code": ErrorCode.group_authorization_failed})
        ok = d["error_code"] == ErrorCode.none
        d["authorized_operations"] = (
            authorized_ops(broker, ctx, Res.GROUP, g, GROUP_OPS) if with_ops and ok
            else authorized_operations(GROUP_OPS, False))
        groups.append(d)
    return build(ctx.response_class, {"throttle_time": 0, "groups": groups})
