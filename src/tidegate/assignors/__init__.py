"""Partition assignors: pure functions from group subscriptions to assignments.

The leader of a consumer group runs one of these on the members' subscriptions
(decoded from JoinGroup metadata with `protocol`) and sends each member its
`Assignment` through SyncGroup. Modules: `range`, `round_robin`, `sticky`,
`cooperative_sticky` (one assignor each, by Kafka's protocol names "range",
"roundrobin", "sticky", "cooperative-sticky"), `types` (Subscription, Assignment),
`protocol` (the ConsumerProtocol wire bytes) and `registry` (lookup by name, rebalance
protocols). Sans-IO: no clocks, no sockets, deterministic for a given input.
"""

from tidegate.assignors.registry import (
    ASSIGNORS,
    PartitionAssignor,
    RebalanceProtocol,
    lookup,
    rebalance_protocol,
)
from tidegate.assignors.types import Assignment, MemberId, Subscription, TopicPartition

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "MemberId",
    "PartitionAssignor",
    "RebalanceProtocol",
    "Subscription",
    "TopicPartition",
    "lookup",
    "rebalance_protocol",
]
