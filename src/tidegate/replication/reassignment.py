"""Partition reassignment, sans-IO: Kafka's ZooKeeper-mode algorithm (KIP-455).

A reassignment moves a partition from its *origin* replicas (ORS) to *target* replicas
(TRS) without losing a record: the new replicas copy the data by fetching before the old
ones are dropped. While it runs, `/brokers/topics/<t>` holds

    replicas = TRS ++ ORS (distinct, target first), adding = RS - ORS, removing = RS - TRS

(`ReplicaAssignment.reassign_to`), which is how a new controller finds and resumes it.
The controller then:

1. writes that assignment and bumps the leader epoch, so the leader accepts fetches from
   the adding replicas, which open their log and follow;
2. waits (watching the partition's state znode) until every target replica is in the
   ISR (`is_complete`);
3. moves leadership into the target if the leader is not in it or is down
   (`leader_for_completion`: the first target replica live and in the ISR), shrinks the
   ISR to the target and writes the final assignment (replicas = TRS, nothing adding or
   removing); the removed replicas see they are no longer assigned and delete their
   data. A last leader-epoch bump makes the leader forget the removed replicas.

A new reassignment of a partition already being reassigned replaces the old target (the
origin stays); cancelling one (a null target) is a reassignment back to the origin.
Validation and error messages are Kafka's (`validate_target`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tidegate.common.errors import ErrorCode
from tidegate.replication.election import reassignment_leader
from tidegate.replication.znodes import NO_LEADER, PartitionState, TopicAssignment

__all__ = [
    "ReplicaAssignment",
    "assignment_of",
    "completion_state",
    "is_complete",
    "leader_for_completion",
    "new_reassignment",
    "replace_partition",
    "stop_replicas_state",
    "validate_target",
]


def _distinct(ids: Sequence[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(ids))


@dataclass(frozen=True)
class ReplicaAssignment:
    """One partition's replicas with the reassignment in flight, if any (Kafka's
    `ReplicaAssignment`)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def origin(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        full = _distinct([*target, *self.origin])
        return ReplicaAssignment(full, tuple(r for r in full if r not in self.origin),
                                 tuple(r for r in full if r not in target))


def assignment_of(topic: TopicAssignment, partition: int) -> ReplicaAssignment | None:
    replicas = topic.partitions.get(partition)
    if replicas is None:
        return None
    return ReplicaAssignment(tuple(replicas), tuple(topic.adding_replicas.get(partition, ())),
                             tuple(topic.removing_replicas.get(partition, ())))


def replace_partition(topic: TopicAssignment, partition: int,
                      ra: ReplicaAssignment) -> TopicAssignment:
    """`topic` with partition `partition` assigned as `ra` (empty adding/removing are
    dropped from the znode, as Kafka writes them)."""
    adding = {p: r for p, r in topic.adding_replicas.items() if p != partition}
    removing = {p: r for p, r in topic.removing_replicas.items() if p != partition}
    if ra.adding:
        adding[partition] = ra.adding
    if ra.removing:
        removing[partition] = ra.removing
    partitions = dict(topic.partitions)
    partitions[partition] = ra.replicas
    return dataclasses.replace(topic, partitions=partitions, adding_replicas=adding,
                               removing_replicas=removing)


def validate_target(target: Sequence[int], current: ReplicaAssignment,
                    live: Collection[int]) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of a requested replica list (INVALID_REPLICA_ASSIGNMENT), or None."""
    listed = list(target)
    if not listed:
        return (ErrorCode.invalid_replica_assignment,
                "Empty replica list specified in partition reassignment.")
    if len(set(listed)) != len(listed):
        return (ErrorCode.invalid_replica_assignment,
                f"Duplicate replica ids in partition reassignment replica list: {listed}")
    if any(r < 0 for r in listed):
        return (ErrorCode.invalid_replica_assignment,
                f"Invalid broker id in replica list: {listed}")
    adding = current.reassign_to(listed).adding
    if not set(adding) <= set(live):
        return (ErrorCode.invalid_replica_assignment,
                f"Replica assignment has brokers that are not alive. Replica list: "
                f"{list(adding)}, live broker list: {sorted(live)}")
    return None


def new_reassignment(current: ReplicaAssignment,
                     target: Sequence[int] | None) -> ReplicaAssignment | None:
    """The assignment to start from `current` (Kafka's `maybeBuildReassignment`); None
    for a cancellation with nothing in progress (NO_REASSIGNMENT_IN_PROGRESS)."""
    if target is None:
        return current.reassign_to(current.origin) if current.being_reassigned else None
    return current.reassign_to(target)


def is_complete(ra: ReplicaAssignment, isr: Collection[int]) -> bool:
    """Nothing to wait for: no reassignment, or every target replica in the ISR."""
    return not ra.being_reassigned or set(ra.target) <= set(isr)


def leader_for_completion(target: Sequence[int], current: PartitionState,
                          live: Collection[int]) -> int | None:
    """Who leads once the partition is on `target`: the current leader if it is in the
    target and live, else `reassignment_leader` (None: nobody eligible yet)."""
    if current.leader in target and current.leader in live:
        return current.leader
    return reassignment_leader(target, current.isr, live)


def completion_state(target: Sequence[int], current: PartitionState, live: Collection[int],
                     controller_epoch: int) -> PartitionState | None:
    """The state that ends a reassignment: a leader in the target, the ISR shrunk to the
    target, a new leader epoch; None while no target replica can lead."""
    leader = leader_for_completion(target, current, live)
    if leader is None:
        return None
    isr = tuple(r for r in current.isr if r in target)
    if leader not in isr:
        isr = (leader, *isr)  # cannot happen with a leader from the ISR; kept total
    return PartitionState(leader, current.leader_epoch + 1, isr, controller_epoch)


def stop_replicas_state(stopped: Collection[int], replicas: Sequence[int],
                        current: PartitionState, live: Collection[int],
                        controller_epoch: int) -> PartitionState | None:
    """The state once replicas `stopped` leave the partition (an updated target no longer
    holds them): out of the ISR, and a new leader among `replicas` if one of them led.
    None if they are neither leader nor in the ISR."""
    gone = set(stopped)
    if current.leader not in gone and not gone & set(current.isr):
        return None
    isr = tuple(r for r in current.isr if r not in gone)
    leader = current.leader
    if leader in gone:
        won = reassignment_leader(replicas, isr, live)
        leader = NO_LEADER if won is None else won
    if not isr:  # keep the last member, as Kafka does, so a clean election stays possible
        isr = tuple(current.isr[-1:])
    return PartitionState(leader, current.leader_epoch + 1, isr, controller_epoch)
