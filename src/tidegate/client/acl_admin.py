"""The ACL admin APIs from the client side: CreateAcls, DescribeAcls, DeleteAcls.

Bindings and filters are common/acl.py's, so the CLI and the broker speak the same
model. The requests go to any broker (Kafka's admin client sends them to the least
loaded node); each raises the broker's error (SECURITY_DISABLED with no authorizer,
CLUSTER_AUTHORIZATION_FAILED without ALTER / DESCRIBE on the cluster, INVALID_REQUEST
for a binding the broker refuses).
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from tidegate.client.net import NetworkClient
from tidegate.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    ResourcePattern,
    operation,
    pattern_type,
    permission,
    resource_type,
)
from tidegate.common.errors import KafkaError, error_for_code

__all__ = ["create_acls", "delete_acls", "describe_acls"]

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31


def _error(code: ErrorCode, message: str | None, what: str) -> KafkaError | None:
    if code == ErrorCode.none:
        return None
    return error_for_code(code.value, f"{what}: {message}" if message else what)


def _filter_fields(f: AclBindingFilter) -> dict[str, object]:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.name,
            "pattern_type_filter": int(f.pattern), "principal_filter": f.principal,
            "host_filter": f.host, "operation": int(f.operation),
            "permission_type": int(f.permission)}


async def create_acls(net: NetworkClient, bindings: Iterable[AclBinding]
                      ) -> list[KafkaError | None]:
    """One result per binding, in order (None: created)."""
    wanted = list(bindings)
    resp = await net.request(None, CREATE_ACLS, {"creations": [
        {"resource_type": int(b.pattern.type), "resource_name": b.pattern.name,
         "resource_pattern_type": int(b.pattern.pattern), "principal": b.entry.principal,
         "host": b.entry.host, "operation": int(b.entry.operation),
         "permission_type": int(b.entry.permission)} for b in wanted]})
    return [_error(r.error_code, r.error_message, f"cannot create {b}")
            for b, r in zip(wanted, resp.results, strict=False)]


async def describe_acls(net: NetworkClient, f: AclBindingFilter) -> list[AclBinding]:
    resp = await net.request(None, DESCRIBE_ACLS, _filter_fields(f))
    err = _error(resp.error_code, resp.error_message, "cannot describe ACLs")
    if err is not None:
        raise err
    return [AclBinding(
        ResourcePattern(resource_type(int(r.resource_type)), str(r.resource_name),
                        pattern_type(int(r.pattern_type))),
        AccessControlEntry(str(a.principal), str(a.host), operation(int(a.operation)),
                           permission(int(a.permission_type))))
        for r in resp.resources for a in r.acls]


async def delete_acls(net: NetworkClient, filters: Iterable[AclBindingFilter]
                      ) -> list[AclBinding]:
    """The bindings deleted; raises the first filter's error."""
    resp = await net.request(None, DELETE_ACLS,
                             {"filters": [_filter_fields(f) for f in filters]})
    out: list[AclBinding] = []
    for r in resp.filter_results:
        err = _error(r.error_code, r.error_message, "cannot delete ACLs")
        if err is not None:
            raise err
        out += [AclBinding(
            ResourcePattern(resource_type(int(m.resource_type)), str(m.resource_name),
                            pattern_type(int(m.pattern_type))),
            AccessControlEntry(str(m.principal), str(m.host), operation(int(m.operation)),
                               permission(int(m.permission_type))))
            for m in r.matching_acls]
    return out
