"""Authorized-operation bitfields for Metadata, DescribeCluster and DescribeGroups.

Kafka answers `*_authorized_operations` with a bitfield of ACL operations (bit n set
for operation code n) when the request asks for them, and INT32_MIN when it does not.
Without an authorizer every client may do everything, so the answer is every operation
the resource type supports, as Kafka's AclEntry lists them; with one, handlers ask
server/authz.py's `authorized_ops` for the operations the ACLs allow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidegate.common.acl import CLUSTER_NAME, AclOperation, ResourceType
from tidegate.server.authz import authorized_ops, check_cluster

if TYPE_CHECKING:
    from tidegate.server.broker import Broker
    from tidegate.server.context import RequestContext

__all__ = [
    "CLUSTER_OPS",
    "GROUP_OPS",
    "NOT_REQUESTED",
    "TOPIC_OPS",
    "AclOperation",
    "authorized_operations",
    "cluster_ops_field",
]

NOT_REQUESTED = -2147483648  # INT32_MIN: "authorized operations were not asked for"


_O = AclOperation
TOPIC_OPS = frozenset(
    {_O.READ, _O.WRITE, _O.CREATE, _O.DELETE, _O.ALTER, _O.DESCRIBE, _O.DESCRIBE_CONFIGS,
     _O.ALTER_CONFIGS}
)  # fmt: skip
CLUSTER_OPS = frozenset(
    {_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
     _O.ALTER, _O.DESCRIBE}
)  # fmt: skip
# Kafka 4 (group configs): DescribeConfigs and AlterConfigs on a group too (AclEntry)
GROUP_OPS = frozenset(
    {_O.READ, _O.DELETE, _O.DESCRIBE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}
)  # fmt: skip


def authorized_operations(supported: frozenset[AclOperation], requested: bool) -> int:
    """The bitfield of `supported`, or INT32_MIN when the client did not ask."""
    if not requested:
        return NOT_REQUESTED
    bits = 0
    for op in supported:
        bits |= 1 << int(op)
    return bits


def cluster_ops_field(broker: Broker, ctx: RequestContext, requested: bool) -> int:
    """Kafka: the cluster's authorized operations when asked for, 0 for a principal
    who may not even DESCRIBE the cluster."""
    if not requested:
        return authorized_operations(CLUSTER_OPS, False)
    if not check_cluster(broker, ctx, AclOperation.DESCRIBE, log_denied=False):
        return 0
    return authorized_ops(broker, ctx, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPS)
