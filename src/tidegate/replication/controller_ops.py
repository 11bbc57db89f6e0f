"""The controller's operator-driven decisions, sans-IO: controlled shutdown, elections an
admin asks for (ElectLeaders), and the automatic preferred-leader rebalance.

Each function takes a partition's assignment (preference order) and current state and
returns the state to write (a new leader epoch) or why nothing is written, following
Kafka's ZooKeeper-mode controller:

- **controlled shutdown** of broker B (`controlled_shutdown_decision`): a partition B
  leads gets a new leader with `controlled_shutdown_election` (the first assigned
  replica live, in the ISR and not shutting down; the new ISR drops every broker shutting
  down); a partition B follows loses B from its ISR (the last member stays, as when a
  broker dies). Partitions with one replica are left alone: there is nobody to move to
  (`acts_on`). What B still leads afterwards is what the controller answers as
  "remaining partitions".
- **preferred election** (ElectLeaders PREFERRED, auto rebalance): the first assigned
  replica, if live and in the ISR; ELECTION_NOT_NEEDED if it already leads,
  PREFERRED_LEADER_NOT_AVAILABLE if it cannot. ISR unchanged.
- **unclean election** (ElectLeaders UNCLEAN): only for a partition without a live
  leader; the first live ISR member, else the first live assigned replica (records may be
  lost: that is what the operator asked for); ELECTION_NOT_NEEDED when the leader is
  live, ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is.
- **auto rebalance** (`imbalanced_partitions`): for each broker, the share of the
  partitions it is preferred leader of that someone else leads; above
  `leader.imbalance.per.broker.percentage`, those partitions are candidates for a
  preferred election.

`live` always means registered and not shutting down (`ControllerContext.live_ids`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from tidegate.common.errors import ErrorCode
from tidegate.replication.election import (
    controlled_shutdown_election,
    isr_after_broker_loss,
    offline_election,
    preferred_election,
)
from tidegate.replication.znodes import NO_LEADER, PartitionState, TopicPartition

__all__ = [
    "PREFERRED",
    "UNCLEAN",
    "ElectionRefused",
    "acts_on",
    "admin_election",
    "controlled_shutdown_decision",
    "imbalanced_partitions",
    "still_led",
]

PREFERRED, UNCLEAN = 0, 1  # Kafka's ElectionType values (ElectLeaders v1+)
_STRATEGY = {PREFERRED: "PreferredReplicaPartitionLeaderElectionStrategy",
             UNCLEAN: "OfflinePartitionLeaderElectionStrategy(true)"}


@dataclass(frozen=True)
class ElectionRefused:
    """Why an admin election writes nothing: Kafka's per-partition error and message."""

    code: ErrorCode
    message: str | None = None


def acts_on(broker_id: int, assignment: Sequence[int], state: PartitionState | None) -> bool:
    """Whether a controlled shutdown of `broker_id` concerns this partition: hosted there,
    with another replica to move to, and a state (Kafka's `partitionsToActOn`)."""
    return state is not None and broker_id in assignment and len(assignment) > 1


def controlled_shutdown_decision(
    broker_id: int,
    assignment: Sequence[int],
    current: PartitionState,
    live: Collection[int],
    shutting_down: Collection[int],
    controller_epoch: int,
) -> PartitionState | None:
    """The state to write for a partition of `broker_id` while it shuts down, or None
    (nothing to change, or no eligible leader: the partition stays led by it)."""
    if current.leader == broker_id:
        won = controlled_shutdown_election(assignment, current.isr, live,
                                           {*shutting_down, broker_id})
        if won is None:
            return None
        return PartitionState(won.leader, current.leader_epoch + 1, won.isr, controller_epoch)
    if broker_id in current.isr:
        isr = isr_after_broker_loss(current.isr, broker_id)
        if isr == current.isr:
            return None
        return PartitionState(current.leader, current.leader_epoch + 1, isr, controller_epoch)
    return None


def still_led(broker_id: int, assignment: Sequence[int], state: PartitionState | None) -> bool:
    """A partition the controlled shutdown could not move (Kafka's
    `partitionLeadersOnBroker`: led by the broker, more than one replica)."""
    return state is not None and state.leader == broker_id and len(assignment) > 1


def admin_election(
    election_type: int,
    assignment: Sequence[int],
    current: PartitionState,
    live: Collection[int],
    controller_epoch: int,
    tp: TopicPartition,
) -> PartitionState | ElectionRefused:
    """The state an ElectLeaders of `election_type` writes for `tp`, or why not."""
    if election_type == PREFERRED:
        if assignment and current.leader == assignment[0]:
            return ElectionRefused(ErrorCode.election_not_needed)
        won = preferred_election(assignment, current.isr, live)
        refused = ErrorCode.preferred_leader_not_available
    else:
        if current.leader != NO_LEADER and current.leader in live:
            return ElectionRefused(ErrorCode.election_not_needed)
        won = offline_election(assignment, current.isr, live, True)
        refused = ErrorCode.eligible_leaders_not_available
    if won is None:
        return ElectionRefused(refused, f"Failed to elect leader for partition {tp[0]}-{tp[1]} "
                                        f"under strategy {_STRATEGY[election_type]}")
    return PartitionState(won.leader, current.leader_epoch + 1, won.isr, controller_epoch)


def imbalanced_partitions(
    assignments: Mapping[TopicPartition, Sequence[int]],
    leaders: Mapping[TopicPartition, int],
    percentage: int,
) -> list[TopicPartition]:
    """Partitions to hand back to their preferred replica (Kafka's
    `checkAndTriggerAutoLeaderRebalance`): for each broker, the partitions it is the
    preferred replica of and does not lead, when they are more than `percentage` percent
    of its preferred partitions. Partitions without a known state do not count as
    misplaced (they have no leader to move)."""
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp, replicas in assignments.items():
        if replicas:
            by_preferred.setdefault(replicas[0], []).append(tp)
    out: list[TopicPartition] = []
    for broker, tps in sorted(by_preferred.items()):
        misplaced = [tp for tp in tps if tp in leaders and leaders[tp] != broker]
        if len(misplaced) / len(tps) > percentage / 100:
            out.extend(misplaced)
    return sorted(out)
