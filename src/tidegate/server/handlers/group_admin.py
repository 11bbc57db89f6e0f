"""DescribeGroups, ListGroups and DeleteGroups.

DescribeGroups shows member metadata and assignments only for Stable groups (Kafka's
group summary); an unknown group is "Dead" with NONE before v6 and GROUP_ID_NOT_FOUND
from v6 (KIP-1043). ListGroups filters by state (v4+) and type (v5+; every group here
is "classic"). DeleteGroups deletes only Empty groups, with their offsets.
"""

from __future__ import annotations

from typing import Any

from tidegate.common.errors import ErrorCode
from tidegate.protocol.messages import build, view
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.operations import GROUP_OPS, authorized_operations


async def handle_describe_groups(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    v = ctx.api_version
    ops = authorized_operations(GROUP_OPS, bool(view(req, "include_authorized_operations", False)))
    described = await broker.group_coordinator.describe(
        [str(g) for g in req.groups], not_found_error=v >= 6
    )
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
                    "authorized_operations": ops,
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
                    "group_type": "classic",
                }
                for g in groups
            ],
        },
    )


async def handle_delete_groups(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    results = await broker.group_coordinator.delete_groups([str(g) for g in req.groups_names])
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "results": [{"group_id": g, "error_code": code} for g, code in results],
        },
    )
