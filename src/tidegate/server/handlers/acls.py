"""CreateAcls, DescribeAcls, DeleteAcls (v1-3; v0 predates pattern types and kio).

As in Kafka's KafkaApis / AclAuthorizer: with no authorizer each answers
SECURITY_DISABLED; creating and deleting need ALTER on the cluster, describing needs
DESCRIBE on it (else CLUSTER_AUTHORIZATION_FAILED). A creation that Kafka would refuse
(unknown operation or permission, empty or unparsable principal, a pattern type other
than LITERAL/PREFIXED, a CLUSTER resource not named kafka-cluster) gets
INVALID_REQUEST in its own result and the others are still created. A filter with an
UNKNOWN element is INVALID_REQUEST. Changes are durable (server/acl_store.py) before
the answer.
"""

from __future__ import annotations

import logging
from typing import Any

from tidegate.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourcePattern,
    operation,
    pattern_type,
    permission,
    resource_type,
    validate_binding,
    validate_filter,
)
from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.protocol.messages import build, view
from tidegate.server.authz import check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import error_fields

log = logging.getLogger(__name__)

_DISABLED = "No Authorizer is configured on the broker"
_ALTER_DENIED = "Cluster authorization failed: ALTER on the cluster is needed to change ACLs"


def _filter_of(f: Any, *, prefix: str = "") -> AclBindingFilter:
    return AclBindingFilter(
        resource_type(int(view(f, "resource_type_filter"))),
        view(f, "resource_name_filter"),
        pattern_type(int(view(f, "pattern_type_filter", 3))),
        view(f, "principal_filter"),
        view(f, "host_filter"),
        operation(int(view(f, "operation"))),
        permission(int(view(f, "permission_type"))),
    )


def _wire(b: AclBinding) -> dict[str, Any]:
    return {"resource_type": int(b.pattern.type), "resource_name": b.pattern.name,
            "pattern_type": int(b.pattern.pattern), "principal": b.entry.principal,
            "host": b.entry.host, "operation": int(b.entry.operation),
            "permission_type": int(b.entry.permission)}


async def handle_create_acls(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    creations = list(view(req, "creations"))

    def answer(results: list[tuple[ErrorCode, str | None]]) -> Any:
        return build(ctx.response_class, {"throttle_time": 0, "results": [
            {"error_code": c, "error_message": m} for c, m in results]})

    if broker.authorizer is None or broker.acl_store is None:
        return answer([(ErrorCode.security_disabled, _DISABLED)] * len(creations))
    if not check_cluster(broker, ctx, AclOperation.ALTER):
        return answer([(ErrorCode.cluster_authorization_failed, _ALTER_DENIED)]
                      * len(creations))
    results: list[tuple[ErrorCode, str | None]] = []
    valid: list[AclBinding] = []
    for c in creations:
        b = AclBinding(
            ResourcePattern(resource_type(int(c.resource_type)), str(c.resource_name),
                            pattern_type(int(view(c, "resource_pattern_type", 3)))),
            AccessControlEntry(str(c.principal), str(c.host), operation(int(c.operation)),
                               permission(int(c.permission_type))))
        problem = validate_binding(b)
        if problem is not None:
            log.info("CreateAcls from %s refused %s: %s", ctx.principal, b, problem)
            results.append((ErrorCode.invalid_request, problem))
        else:
            results.append((ErrorCode.none, None))
            valid.append(b)
    if valid:
        try:
            await broker.acl_store.create(valid)
        except KafkaError as e:
            code, msg = error_fields(e)
            results = [(code, msg) if r[0] == ErrorCode.none else r for r in results]
        else:
            log.info("ACLs created by %s: %s", ctx.principal, valid)
    return answer(results)


async def handle_describe_acls(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    def answer(code: ErrorCode, msg: str | None, resources: list[Any]) -> Any:
        return build(ctx.response_class, {"throttle_time": 0, "error_code": code,
                                          "error_message": msg, "resources": resources})

    if broker.authorizer is None:
        return answer(ErrorCode.security_disabled, _DISABLED, [])
    if not check_cluster(broker, ctx, AclOperation.DESCRIBE):
        return answer(ErrorCode.cluster_authorization_failed,
                      "Cluster authorization failed: DESCRIBE on the cluster is needed", [])
    f = _filter_of(req)
    problem = validate_filter(f)
    if problem is not None:
        return answer(ErrorCode.invalid_request, problem, [])
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in broker.authorizer.matching(f):
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    resources = [
        {"resource_type": int(p.type), "resource_name": p.name, "pattern_type": int(p.pattern),
         "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                   "permission_type": int(e.permission)} for e in entries]}
        for p, entries in by_pattern.items()
    ]
    return answer(ErrorCode.none, None, resources)


async def handle_delete_acls(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    filters = list(view(req, "filters"))

    def failed(code: ErrorCode, msg: str) -> dict[str, Any]:
        return {"error_code": code, "error_message": msg, "matching_acls": []}

    if broker.authorizer is None or broker.acl_store is None:
        results = [failed(ErrorCode.security_disabled, _DISABLED) for _ in filters]
    elif not check_cluster(broker, ctx, AclOperation.ALTER):
        results = [failed(ErrorCode.cluster_authorization_failed, _ALTER_DENIED)
                   for _ in filters]
    else:
        results = []
        doomed: set[AclBinding] = set()
        for raw in filters:
            f = _filter_of(raw)
            problem = validate_filter(f)
            if problem is not None:
                results.append(failed(ErrorCode.invalid_request, problem))
                continue
            matched = broker.authorizer.matching(f)
            doomed.update(matched)
            results.append({"error_code": 0, "error_message": None, "matching_acls": [
                {"error_code": 0, "error_message": None, **_wire(b)} for b in matched]})
        if doomed:
            try:
                await broker.acl_store.delete(sorted(doomed, key=str))
            except KafkaError as e:
                code, msg = error_fields(e)
                results = [failed(code, msg) for _ in filters]
            else:
                log.info("ACLs deleted by %s: %s", ctx.principal, sorted(doomed, key=str))
    return build(ctx.response_class, {"throttle_time": 0, "filter_results": results})
