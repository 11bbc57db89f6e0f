"""Authorized-operation bitfields for Metadata, DescribeCluster and DescribeGroups.

Kafka answers `*_authorized_operations` with a bitfield of ACL operations (bit n set
for operation code n) when the request asks for them, and INT32_MIN when it does not.
Without an authorizer every client may do everything, so the answer is every operation
the resource type supports, as Kafka's AclEntry lists them.
"""

from __future__ import annotations

import enum

__all__ = [
    "CLUSTER_OPS",
    "GROUP_OPS",
    "NOT_REQUESTED",
    "TOPIC_OPS",
    "AclOperation",
    "authorized_operations",
]

NOT_REQUESTED = -2147483648  # INT32_MIN: "authorized operations were not asked for"


class AclOperation(enum.IntEnum):
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


_O = AclOperation
TOPIC_OPS = frozenset(
    {_O.READ, _O.WRITE, _O.CREATE, _O.DELETE, _O.ALTER, _O.DESCRIBE, _O.DESCRIBE_CONFIGS,
     _O.ALTER_CONFIGS}
)  # fmt: skip
CLUSTER_OPS = frozenset(
    {_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
     _O.ALTER, _O.DESCRIBE}
)  # fmt: skip
GROUP_OPS = frozenset({_O.READ, _O.DELETE, _O.DESCRIBE})


def authorized_operations(supported: frozenset[AclOperation], requested: bool) -> int:
    """The bitfield of `supported`, or INT32_MIN when the client did not ask."""
    if not requested:
        return NOT_REQUESTED
    bits = 0
    for op in supported:
        bits |= 1 << int(op)
    return bits
