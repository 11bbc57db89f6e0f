"""FindCoordinator: which broker coordinates a group or a transactional id (v0-v3 one
key, v4+ batched keys).

Embedded broker: this node coordinates everything. Cluster: the coordinator of a key is
the leader of its partition of `__consumer_offsets` (groups) or `__transaction_state`
(transactional ids): the partition's shard is loaded there (server/coordinator.py). The
topic is created on the first request, and while it has no leader the answer is
COORDINATOR_NOT_AVAILABLE, which clients retry.

Key type 0 (groups) and key type 1 (transactional ids) answer this node once the
matching coordinator has started (COORDINATOR_NOT_AVAILABLE before, which clients
retry); an empty transactional id is INVALID_REQUEST, as in Kafka. Other key types
(2, share groups) are INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidegate.common.errors import ErrorCode
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.metadata_view import broker_on

if TYPE_CHECKING:
    from tidegate.server.group_coordinator import GroupCoordinator
    from tidegate.server.txn_coordinator import TransactionCoordinator

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


async def _cluster_lookup(broker: Broker, key_type: int,
                          key: str) -> tuple[ErrorCode, str | None, int]:
    coordinator: GroupCoordinator | TransactionCoordinator
    if key_type == TRANSACTION_KEY_TYPE:
        if not key:
            return ErrorCode.invalid_request, "the transactional id must not be empty", -1
        coordinator = broker.txn_coordinator
    elif key_type == GROUP_KEY_TYPE:
        coordinator = broker.group_coordinator
    else:
        return ErrorCode.invalid_request, f"unsupported coordinator key type {key_type}", -1
    internal = coordinator.runtime.topic
    if not await coordinator.ensure_topic():
        return ErrorCode.coordinator_not_available, f"{internal} is being created", -1
    topic = broker.metadata.topic(internal)
    index = coordinator.partition_for(key)
    leader = -1 if topic is None or index >= len(topic.partitions) \
        else topic.partitions[index].leader
    if leader < 0:
        return ErrorCode.coordinator_not_available, "the coordinator has no leader yet", -1
    return ErrorCode.none, None, leader


def _lookup(broker: Broker, key_type: int, key: str) -> tuple[ErrorCode, str | None]:
    if key_type == GROUP_KEY_TYPE:
        if broker.group_coordinator.available:
            return ErrorCode.none, None
        return ErrorCode.coordinator_not_available, "the group coordinator is starting"
    if key_type == TRANSACTION_KEY_TYPE:
        if not key:
            return ErrorCode.invalid_request, "the transactional id must not be empty"
        if broker.txn_coordinator.available:
            return ErrorCode.none, None
        return ErrorCode.coordinator_not_available, "the transaction coordinator is starting"
    return ErrorCode.invalid_request, f"unsupported coordinator key type {key_type}"


async def _find(broker: Broker, key_type: int, key: str) -> tuple[ErrorCode, str | None, int]:
    if broker.replicas.cluster:
        return await _cluster_lookup(broker, key_type, key)
    code, message = _lookup(broker, key_type, key)
    return code, message, broker.node_id


def _node(broker: Broker, code: ErrorCode, node_id: int, listener: str = "") -> dict[str, Any]:
    node = broker_on(broker.metadata, node_id, listener) if code == ErrorCode.none else None
    if node is not None:
        return {"node_id": node.node_id, "host": node.host, "port": node.port}
    return {"node_id": -1, "host": "", "port": -1}


async def _find_authorized(broker: Broker, ctx: RequestContext, key_type: int,
                           key: str) -> tuple[ErrorCode, str | None, int]:
    """Kafka: DESCRIBE on the group or the transactional id the key names."""
    if key_type == GROUP_KEY_TYPE and not check(broker, ctx, Op.DESCRIBE, Res.GROUP, key):
        return ErrorCode.group_authorization_failed, None, -1
    if key_type == TRANSACTION_KEY_TYPE and not check(
            broker, ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed, None, -1
    return await _find(broker, key_type, key)


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    key_type = int(view(req, "key_type", GROUP_KEY_TYPE))
    if ctx.api_version >= 4:
        coordinators = []
        for key in req.coordinator_keys or ():
            code, message, node = await _find_authorized(broker, ctx, key_type, str(key))
            coordinators.append({"key": key, **_node(broker, code, node, ctx.listener),
                                 "error_code": code, "error_message": message})
        return build(ctx.response_class, {"throttle_time": 0, "coordinators": coordinators})
    code, message, node = await _find_authorized(broker, ctx, key_type,
                                              str(view(req, "key", "") or ""))
    return build(
        ctx.response_class,
        {"throttle_time": 0, "error_code": code, "error_message": message,
         **_node(broker, code, node, ctx.listener)},
    )
