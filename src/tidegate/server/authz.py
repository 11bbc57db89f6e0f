"""The handlers' one door to the authorizer: `check(broker, ctx, op, type, name)`.

With no authorizer configured (`broker.authorizer is None`) every check is one
attribute test and answers True, so the embedded broker pays nothing for ACLs. With one,
the decision is common/acl.py's, for the request's principal and the client's address
(Kafka matches ACL hosts against the client's IP).

Denials are logged to `tidegate.authorizer` (Kafka's `kafka.authorizer.logger`) in
Kafka's words, once per (principal, operation, resource) every `_QUIET_S` seconds, so
a client retrying a refused produce in a loop does not flood the log. Some checks are
questions, not attempts (the topics Metadata lists, authorized-operation bitfields):
those pass `log_denied=False`, as Kafka's `logIfDenied = false`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tidegate.common.acl import (
    CLUSTER_NAME,
    RESOURCE_NAMES,
    AclOperation,
    PatternType,
    ResourceType,
)
from tidegate.server.dispatch import api_name

if TYPE_CHECKING:
    from tidegate.server.broker import Broker
    from tidegate.server.context import RequestContext

__all__ = ["CLUSTER_NAME", "AclOperation", "ResourceType", "authorized_ops", "check",
           "check_any", "client_host"]

log = logging.getLogger("tidegate.authorizer")

_QUIET_S = 60.0
_MAX_REMEMBERED = 10_000
_last_logged: dict[tuple[str, str, int, int, str], float] = {}


def client_host(peer: str) -> str:
    """'10.0.0.5:51234' -> '10.0.0.5'; '[::1]:51234' -> '::1'."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return host.strip("[]")


def check(broker: Broker, ctx: RequestContext, op: AclOperation, rtype: ResourceType,
          name: str, *, log_denied: bool = True) -> bool:
    """May the request's principal do `op` on the resource? (True with no authorizer.)"""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    host = client_host(ctx.peer)
    if authorizer.authorize(ctx.principal, host, op, rtype, name):
        return True
    if log_denied:
        _log_denial(broker, ctx, host, op, rtype, name)
    return False


def check_cluster(broker: Broker, ctx: RequestContext, op: AclOperation, *,
                  log_denied: bool = True) -> bool:
    return check(broker, ctx, op, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)


def check_any(broker: Broker, ctx: RequestContext, op: AclOperation,
              rtype: ResourceType) -> bool:
    """Kafka's authorizeByResourceType: `op` allowed on at least one resource of `rtype`."""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_any(ctx.principal, client_host(ctx.peer), op, rtype)


def authorized_ops(broker: Broker, ctx: RequestContext, rtype: ResourceType, name: str,
                   supported: Iterable[AclOperation]) -> int:
    """The authorized-operations bitfield for one resource (every supported operation
    when there is no authorizer)."""
    authorizer = broker.authorizer
    if authorizer is None:
        bits = 0
        for op in supported:
            bits |= 1 << int(op)
        return bits
    return authorizer.authorized_operations(ctx.principal, client_host(ctx.peer), rtype,
                                            name, supported)


def _log_denial(broker: Broker, ctx: RequestContext, host: str, op: AclOperation,
                rtype: ResourceType, name: str) -> None:
    key = (ctx.principal, host, int(op), int(rtype), name)
    now = broker.clock.monotonic()
    last = _last_logged.get(key)
    if last is not None and now - last < _QUIET_S:
        return
    if len(_last_logged) >= _MAX_REMEMBERED:
        _last_logged.clear()
    _last_logged[key] = now
    log.info(
        "Principal = %s is Denied Operation = %s from host = %s on resource = %s:%s:%s "
        "for request = %s with resourceRefCount = 1",
        ctx.principal, _camel(op), host, RESOURCE_NAMES[rtype], PatternType.LITERAL.name,
        name, _camel_api(ctx.api_key))


def _camel(op: AclOperation) -> str:
    return "".join(p.capitalize() for p in op.name.split("_"))


def _camel_api(api_key: int) -> str:
    try:
        return "".join(p.capitalize() for p in api_name(api_key).split("_"))
    except KeyError:
        return str(api_key)
