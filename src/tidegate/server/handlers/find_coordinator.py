"""FindCoordinator: this node coordinates every group (v0-v3 one key, v4+ batched keys).

Key type 0 (groups) answers this node once the group coordinator has started; key
type 1 (transactions) answers COORDINATOR_NOT_AVAILABLE until the transaction
coordinator exists; other key types (2, share groups) are INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from tidegate.common.errors import ErrorCode
from tidegate.protocol.messages import build, view
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


def _lookup(broker: Broker, key_type: int) -> tuple[ErrorCode, str | None]:
    if key_type == GROUP_KEY_TYPE:
        if broker.group_coordinator.available:
            return ErrorCode.none, None
        return ErrorCode.coordinator_not_available, "the group coordinator is starting"
    if key_type == TRANSACTION_KEY_TYPE:
        return ErrorCode.coordinator_not_available, "the transaction coordinator is not available"
    return ErrorCode.invalid_request, f"unsupported coordinator key type {key_type}"


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    key_type = int(view(req, "key_type", GROUP_KEY_TYPE))
    lis = broker.config.advertised_listeners()[0]
    code, message = _lookup(broker, key_type)
    node: dict[str, Any] = (
        {"node_id": broker.node_id, "host": lis.host, "port": lis.port}
        if code == ErrorCode.none
        else {"node_id": -1, "host": "", "port": -1}
    )
    if ctx.api_version >= 4:
        coordinators = [
            {"key": key, **node, "error_code": code, "error_message": message}
            for key in req.coordinator_keys
        ]
        return build(ctx.response_class, {"throttle_time": 0, "coordinators": coordinators})
    return build(
        ctx.response_class,
        {"throttle_time": 0, "error_code": code, "error_message": message, **node},
    )
