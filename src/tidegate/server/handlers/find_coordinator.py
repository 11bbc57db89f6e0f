"""FindCoordinator: which broker coordinates a group or a transactional id (v0-v3 one
key, v4+ batched keys).

Embedded broker: this node coordinates everything. Cluster: the coordinator of a key is
the leader of its partition of `__consumer_offsets` (groups) or `__transaction_state`
(transactional ids): the partition's shard is loaded there (server/coordinator.py). The
topic is created on the first request, which then waits (up to `LEADER_WAIT_S`) until the
key's partition has a leader in the metadata, and answers that broker; only past that
wait is the answer COORDINATOR_NOT_AVAILABLE. Kafka answers COORDINATOR_NOT_AVAILABLE at
once while the topic is being created, but creating it here takes a few ZooKeeper round
trips per broker, longer than librdkafka's coordinator lookup retries for before it
waits for a broker state change to try again — which, in a quiet cluster, can outlast a
transaction's timeout (a first `send_offsets_to_transaction` then stalled until the
coordinator aborted the transaction). A leader that has not loaded its shard yet answers
COORDINATOR_LOAD_IN_PROGRESS to the request that follows, which every client retries.

Key type 0 (groups) and key type 1 (transactional ids) answer this node once the
matching coordinator has started (COORDINATOR_NOT_AVAILABLE before, which clients
retry); an empty transactional id is INVALID_REQUEST, as in Kafka. Other key types
(2, share groups) are INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
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

# How long a FindCoordinator waits for its internal topic's partition to have a leader
# (module docstring): well inside every client's request timeout (librdkafka 60 s, Java
# 30 s), and long enough for a cluster to create a 50-partition topic.
LEADER_WAIT_S = 5.0
_POLL_S = 0.05


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
    exists = await coordinator.ensure_topic()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LEADER_WAIT_S
    while True:
        leader = _leader(broker, coordinator, internal, key)
        if leader >= 0:
            return ErrorCode.none, None, leader
        if loop.time() >= deadline:
            break
        await asyncio.sleep(_POLL_S)  # the metadata watcher updates the view
    if not exists and broker.metadata.topic(internal) is None:
        return ErrorCode.coordinator_not_available, f"{internal} is being created", -1
    return ErrorCode.coordinator_not_available, "the coordinator has no leader yet", -1


def _leader(broker: Broker, coordinator: GroupCoordinator | TransactionCoordinator,
            internal: str, key: str) -> int:
    """The leader of `key`'s partition of the internal topic in the metadata, or -1."""
    topic = broker.metadata.topic(internal)
    if topic is None:
        return -1
    index = coordinator.partition_for(key)
    return -1 if index >= len(topic.partitions) else topic.partitions[index].leader


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
