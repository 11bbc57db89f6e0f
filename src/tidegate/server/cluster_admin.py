"""The cluster-administration port: controlled shutdown, leader elections and partition
reassignments, whichever broker the request reaches.

Handlers (server/handlers/cluster_ops.py: ControlledShutdown, ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments) call the `ClusterAdmin` on
`broker.cluster_admin`; they never import the cluster package.

- `EmbeddedClusterAdmin` (here): the single broker, answering as a one-broker Kafka
  cluster would. It leads every partition already, so an election is
  ELECTION_NOT_NEEDED (UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist);
  a reassignment onto this broker alone changes nothing, one naming another broker is
  INVALID_REPLICA_ASSIGNMENT (not alive), cancelling is NO_REASSIGNMENT_IN_PROGRESS; a
  controlled shutdown has nothing to move (one replica per partition).
- the cluster implementation (`server/cluster/cluster_admin.py`): the controller's
  operations when this broker is the controller, NOT_CONTROLLER otherwise (as a
  ZooKeeper-mode Kafka broker answers: per partition for ElectLeaders, top-level for the
  reassignment APIs and ControlledShutdown).

A top-level refusal is raised as a `KafkaError` carrying the code; per-partition
outcomes come back as `PartitionResult`s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tidegate.common.errors import ErrorCode

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

__all__ = [
    "ClusterAdmin",
    "EmbeddedClusterAdmin",
    "OngoingReassignment",
    "PartitionResult",
    "ShutdownAnswer",
]

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionResult:
    code: ErrorCode
    message: str | None = None


@dataclass(frozen=True)
class OngoingReassignment:
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True)
class ShutdownAnswer:
    code: ErrorCode
    remaining: tuple[TopicPartition, ...] = ()


class ClusterAdmin(Protocol):
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> ShutdownAnswer:
        """Move `broker_id`'s leaderships away before it stops."""
        ...

    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None,
                            timeout_ms: int) -> dict[TopicPartition, PartitionResult]:
        """PREFERRED (0) or UNCLEAN (1) elections; None = every partition."""
        ...

    async def alter_reassignments(self, requests: Mapping[TopicPartition, Sequence[int] | None],
                                  timeout_ms: int) -> dict[TopicPartition, PartitionResult]:
        """Start (target) or cancel (None) reassignments; KafkaError = top-level error."""
        ...

    async def list_reassignments(self, partitions: list[TopicPartition] | None,
                                 timeout_ms: int) -> dict[TopicPartition, OngoingReassignment]:
        """The reassignments in progress (of `partitions`, or all)."""
        ...


class EmbeddedClusterAdmin:
    """The single broker's answers (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def _exists(self, tp: TopicPartition) -> bool:
        view = self.broker.metadata.topic(tp[0])
        return view is not None and 0 <= tp[1] < len(view.partitions)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> ShutdownAnswer:
        if broker_id != self.broker.node_id:
            return ShutdownAnswer(ErrorCode.broker_not_available)
        return ShutdownAnswer(ErrorCode.none)

    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None,
                            timeout_ms: int) -> dict[TopicPartition, PartitionResult]:
        if partitions is None:
            return {}  # every partition is led by its only (preferred) replica already
        return {tp: PartitionResult(ErrorCode.election_not_needed) if self._exists(tp)
                else PartitionResult(ErrorCode.unknown_topic_or_partition,
                                     "The partition does not exist.")
                for tp in partitions}

    async def alter_reassignments(self, requests: Mapping[TopicPartition, Sequence[int] | None],
                                  timeout_ms: int) -> dict[TopicPartition, PartitionResult]:
        node = self.broker.node_id
        out: dict[TopicPartition, PartitionResult] = {}
        for tp, target in requests.items():
            if target is None:
                out[tp] = PartitionResult(ErrorCode.no_reassignment_in_progress)
            elif not target or len(set(target)) != len(target) or set(target) != {node}:
                others = [r for r in target if r != node]
                out[tp] = PartitionResult(
                    ErrorCode.invalid_replica_assignment,
                    f"Replica assignment has brokers that are not alive. Replica list: "
                    f"{others}, live broker list: [{node}]" if others else
                    f"Invalid replica list in partition reassignment: {list(target)}")
            elif not self._exists(tp):
                out[tp] = PartitionResult(ErrorCode.unknown_topic_or_partition,
                                          "The partition does not exist.")
            else:
                out[tp] = PartitionResult(ErrorCode.none)  # already there
        return out

    async def list_reassignments(self, partitions: list[TopicPartition] | None,
                                 timeout_ms: int) -> dict[TopicPartition, OngoingReassignment]:
        return {}
