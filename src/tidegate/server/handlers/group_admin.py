"""DescribeGroups, ListGroups and DeleteGroups.

DescribeGroups shows member metadata and assignments only for Stable groups (Kafka's
group summary); an unknown group is "Dead" with NONE before v6 and GROUP_ID_NOT_FOUND
from v6 (KIP-1043). ListGroups filters by state (v4+) and type (v5+; every group here
is "classic"). DeleteGroups deletes only Empty groups, with their offsets.
"""

from __future__ import annotations

from typing import Any

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group.messages import DescribedGroup
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import authorized_ops, check, check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.operations import GROUP_OPS, authorized_operations


def _denied(group_id: str) -> DescribedGroup:
    return DescribedGroup(group_id, ErrorCode.group_authorization_failed, state="")


async def handle_describe_groups(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    with_ops = bool(view(req, "include_authorized_operations", False))
    # ACLs (Kafka): DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for it
    names = [str(g) for g in req.groups]
    allowed = [g for g in names if check(broker, ctx, Op.DESCRIBE, Res.GROUP, g)]
    found = {d.group_id: d for d in await broker.group_coordinator.describe(
        allowed, not_found_error=v >= 6)}
    described = [found.get(g) or _denied(g) for g in names]
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "groups": [
                {
                    "error_code": d.error,
                    "error_message": None if d.error == ErrorCode.none else d.error.name.upper(),
                    "group_id": d.group_id,
                    "group_state": d.state,
                    "protocol_type": d.protocol_type,
                    "protocol_data": d.protocol,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.metadata,
                            "member_assignment": m.assignment,
                        }
                        for m in d.members
                    ],
                    "authorized_operations": (
                        authorized_ops(broker, ctx, Res.GROUP, d.group_id, GROUP_OPS)
                        if with_ops and d.error != ErrorCode.group_authorization_failed
                        else authorized_operations(GROUP_OPS, False)),
                }
                for d in described
            ],
        },
    )


async def handle_list_groups(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    code, groups = await broker.group_coordinator.list_groups(
        [str(s) for s in view(req, "states_filter", ())],
        [str(t) for t in view(req, "types_filter", ())],
    )
    # ACLs (Kafka): DESCRIBE on the cluster lists all, else the groups one may DESCRIBE
    if not check_cluster(broker, ctx, Op.DESCRIBE, log_denied=False):
        groups = [g for g in groups
                  if check(broker, ctx, Op.DESCRIBE, Res.GROUP, g.group_id, log_denied=False)]
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "error_code": code,
            "groups": [
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": g.state,
                    "group_type": g.group_type,
                }
                for g in groups
            ],
        },
    )


async def handle_delete_groups(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    names = [str(g) for g in req.groups_names]
    # ACLs (Kafka): DELETE on each group, else GROUP_AUTHORIZATION_FAILED for it
    allowed = [g for g in names if check(broker, ctx, Op.DELETE, Res.GROUP, g)]
    done = dict(await broker.group_coordinator.delete_groups(allowed)) if allowed else {}
    results = [(g, done.get(g, ErrorCode.group_authorization_failed)) for g in names]
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "results": [{"group_id": g, "error_code": code} for g, code in results],
        },
    )
