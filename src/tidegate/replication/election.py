"""Kafka's partition leader election algorithms, as pure functions over replica ids.

The controller picks a partition's leader with one of these, depending on why the
partition needs one (Kafka's `PartitionLeaderElectionAlgorithms` and the ZooKeeper-mode
controller's `PartitionStateMachine`). Assignment order is preference order: the first
replica of the assignment is the *preferred* leader, so leadership spreads as the
assignment spreads it.

- leader's broker died, or no leader: `offline_leader` — the first assigned replica that
  is live and in the ISR; if none and `unclean.leader.election.enable`, the first live
  assigned replica. New ISR: the live ISR members (`[leader]` after an unclean election).
- preferred leader election (auto rebalance, ElectLeaders PREFERRED): `preferred_leader`
  — the first assigned replica if live and in the ISR, else no change. ISR unchanged.
- controlled shutdown: `controlled_shutdown_leader` — the first assigned replica live, in
  the ISR and not shutting down. New ISR: the old one without the brokers shutting down.
- reassignment moving the leader away: `reassignment_leader` — the first target replica
  live and in the ISR. ISR unchanged.

`None` means no eligible leader: the partition stays (or goes) offline, and nothing is
written. Each `*_election` returns a `LeaderAndIsr` decision with the new ISR as listed
above; the bare `*_leader` functions return only the leader's id.

Invariants: an elected leader is always an assigned (or target) replica that is live; a
clean election always picks an ISR member, so every committed record survives; the ISR
returned always contains the leader; ids keep the order they had in the inputs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = [
    "NO_LEADER",
    "LeaderAndIsr",
    "controlled_shutdown_election",
    "controlled_shutdown_leader",
    "isr_after_broker_loss",
    "offline_election",
    "offline_leader",
    "preferred_election",
    "preferred_leader",
    "reassignment_election",
    "reassignment_leader",
]

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader, as written in the partition state znode


@dataclass(frozen=True)
class LeaderAndIsr:
    """An election's outcome: the leader and the ISR to write (with a bumped epoch)."""

    leader: int
    isr: tuple[int, ...]
    unclean: bool = False  # the leader came from outside the ISR: records may be lost


def offline_leader(
    assignment: Sequence[int],
    isr: Collection[int],
    live: Collection[int],
    unclean: bool,
) -> int | None:
    """Leader for a partition whose leader is gone: the first assigned replica that is live
    and in the ISR; failing that, only if unclean election is allowed, the first live
    assigned replica (it may lack committed records: Kafka counts these elections)."""
    for rid in assignment:
        if rid in live and rid in isr:
            return rid
    if unclean:
        for rid in assignment:
            if rid in live:
                return rid
    return None


def offline_election(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    unclean: bool,
) -> LeaderAndIsr | None:
    """`offline_leader` with the ISR Kafka writes: the live members of the old ISR, or the
    new leader alone after an unclean election."""
    leader = offline_leader(assignment, isr, live, unclean)
    if leader is None:
        return None
    if leader in isr:
        return LeaderAndIsr(leader, tuple(r for r in isr if r in live))
    return LeaderAndIsr(leader, (leader,), unclean=True)


def preferred_leader(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    """The preferred replica (first of the assignment) if it is live and in the ISR."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def preferred_election(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> LeaderAndIsr | None:
    leader = preferred_leader(assignment, isr, live)
    return None if leader is None else LeaderAndIsr(leader, tuple(isr))


def controlled_shutdown_leader(
    assignment: Sequence[int],
    isr: Collection[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> int | None:
    """Leader while brokers in `shutting_down` stop cleanly: the first assigned replica that
    is live, in the ISR and staying up. (The current leader is chosen again if it is
    not shutting down, which the controller then treats as "nothing to move".)"""
    for rid in assignment:
        if rid in live and rid in isr and rid not in shutting_down:
            return rid
    return None


def controlled_shutdown_election(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> LeaderAndIsr | None:
    """`controlled_shutdown_leader` with Kafka's new ISR: the old one without the brokers
    shutting down (they stop fetching, so waiting for them would stall acks=all)."""
    leader = controlled_shutdown_leader(assignment, isr, live, shutting_down)
    if leader is None:
        return None
    return LeaderAndIsr(leader, tuple(r for r in isr if r not in shutting_down))


def reassignment_leader(
    target_replicas: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    """Leader when a reassignment moves the partition off its current leader: the first
    target replica that is live and in the ISR (targets join the ISR before this runs)."""
    for rid in target_replicas:
        if rid in live and rid in isr:
            return rid
    return None


def reassignment_election(
    target_replicas: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> LeaderAndIsr | None:
    leader = reassignment_leader(target_replicas, isr, live)
    return None if leader is None else LeaderAndIsr(leader, tuple(isr))


def isr_after_broker_loss(isr: Sequence[int], lost: int) -> tuple[int, ...]:
    """The ISR the controller writes when broker `lost` goes offline and no new leader is
    elected for the partition (Kafka's `removeReplicasFromIsr`): without it, except that
    the last member stays, so that when it returns a clean election can pick it (an empty
    ISR would leave only an unclean election). The leader field becomes `NO_LEADER` when
    `lost` was the leader; that is the caller's part."""
    if len(isr) == 1:
        return tuple(isr)
    return tuple(r for r in isr if r != lost)
