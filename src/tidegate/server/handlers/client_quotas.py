"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546.

Describe: the entities matching a filter (server/quotas/entities.py) with their
configs; a bad filter is INVALID_REQUEST for the whole request. Alter: each entry is
validated on its own (entity types, keys, values: INVALID_REQUEST with Kafka's
message) and the valid ones are written together through the broker's quota store (the
log-dir file, or ZooKeeper in cluster mode), unless `validate_only`. An entry that
names the same entity as an earlier one in the request is refused, as Kafka does.
Kafka's ACLs: DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster.
"""

from __future__ import annotations

import logging
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.quotas.entities import (
    Entity,
    FilterComponent,
    QuotaRequestError,
    entity_path,
    make_entity,
)
from tidegate.server.quotas.manager import QuotaManager
from tidegate.server.quotas.store import Change

log = logging.getLogger(__name__)

_DENIED = "Cluster authorization failed"


async def handle_describe_client_quotas(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    def answer(code: ErrorCode, message: str | None, entries: list[Any] | None) -> Any:
        return build(ctx.response_class, {"throttle_time": 0, "error_code": code,
                                          "error_message": message, "entries": entries})

    if not check_cluster(broker, ctx, Op.DESCRIBE_CONFIGS):
        return answer(ErrorCode.cluster_authorization_failed, _DENIED, None)
    components = [FilterComponent(str(c.entity_type), int(c.match_type), c.match)
                  for c in req.components]
    try:
        found = broker.quotas.describe(components, bool(req.strict))
    except QuotaRequestError as e:
        log.info("DescribeClientQuotas from %s refused: %s", ctx.peer, e)
        return answer(ErrorCode.invalid_request, str(e), None)
    entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "values": [{"key": k, "value": float(v)} for k, v in sorted(configs.items())]}
               for entity, configs in found]
    return answer(ErrorCode.none, None, entries)


async def handle_alter_client_quotas(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    allowed = check_cluster(broker, ctx, Op.ALTER_CONFIGS)
    results: list[tuple[list[dict[str, Any]], ErrorCode, str | None]] = []
    changes: list[Change] = []
    seen: set[Entity] = set()
    for entry in req.entries:
        wire = [{"entity_type": str(c.entity_type), "entity_name": c.entity_name}
                for c in entry.entity]
        if not allowed:
            results.append((wire, ErrorCode.cluster_authorization_failed, _DENIED))
            continue
        try:
            entity = make_entity((c["entity_type"], c["entity_name"]) for c in wire)
            if entity in seen:
                raise QuotaRequestError(f"Entity {entity_path(entity)} appears twice")
            seen.add(entity)
            ops = [(str(o.key), float(o.value), bool(o.remove)) for o in entry.ops]
            QuotaManager.altered({}, ops)  # validates; applied to the current set by the store
        except QuotaRequestError as e:
            log.info("AlterClientQuotas from %s: entry refused: %s", ctx.peer, e)
            results.append((wire, ErrorCode.invalid_request, str(e)))
            continue
        changes.append((entity, ops))
        results.append((wire, ErrorCode.none, None))
    if changes and not bool(view(req, "validate_only", False)):
        try:
            await broker.quota_store.alter(changes)
            log.info("client quotas altered by %s: %s", ctx.principal,
                     [entity_path(e) for e, _ in changes])
        except KafkaError as e:
            results = [(w, e.code if code == ErrorCode.none else code,
                        str(e) if code == ErrorCode.none else msg)
                       for w, code, msg in results]
    return build(ctx.response_class, {"throttle_time": 0, "entries": [
        {"error_code": code, "error_message": msg, "entity": wire}
        for wire, code, msg in results]})
