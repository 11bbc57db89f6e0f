"""The controller's decisions, sans-IO: its view of the cluster (`ControllerContext`) plus
an event give the conditional ZooKeeper writes to make.

Fencing, the whole point: every write the controller makes is a transaction that starts
with `Check(/controller_epoch, version it wrote when elected)`. A controller that was
paused (SIGSTOP, GC, partition) past its session and then resumes cannot overwrite a
newer controller's decision: the newer one changed /controller_epoch, so the check
fails. A partition state write also carries the state znode's version, so a concurrent
ISR change by the leader makes the write fail and the controller re-reads and decides
again (Kafka's ZooKeeper-mode controller, which also re-reads states before electing).

What each event does to a partition (Kafka's PartitionStateMachine / ReplicaStateMachine):
- leader dead (or no leader): `offline_election` from the ISR (unclean only if
  allowed); new leader epoch; ISR = its live members. No eligible leader: leader -1,
  dead members leave the ISR but the last one stays (the previous leader if it was a
  member), so that a clean election is possible when it returns;
- leader alive, followers dead: they leave the ISR (leader epoch bumped, as Kafka's
  ZooKeeper controller does);
- new partition: leader = first live replica of the assignment, ISR = live replicas,
  epoch 0; none live: no state yet (retried when brokers arrive).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tidegate.replication.election import isr_after_broker_loss, offline_election
from tidegate.replication.zk_ops import Check, Create, Delete, SetData, ZkOp
from tidegate.replication.znodes import (
    CONTROLLER,
    CONTROLLER_EPOCH,
    NO_LEADER,
    BrokerInfo,
    ControllerRegistration,
    PartitionState,
    TopicAssignment,
    TopicPartition,
    delete_topic_path,
    encode_controller_epoch,
    partition_path,
    partition_state_path,
    partitions_path,
    topic_config_path,
    topic_path,
)

__all__ = [
    "ControllerContext",
    "VersionedState",
    "broker_change_decision",
    "delete_topic_ops",
    "election_ops",
    "initial_state",
    "partitions_needing_state",
]


@dataclass(frozen=True)
class VersionedState:
    """A partition state with the znode version it was read at (Kafka's zkVersion)."""

    state: PartitionState
    zk_version: int


@dataclass
class ControllerContext:
    """What an active controller knows. Rebuilt from ZooKeeper on election and kept
    current by watches; every write re-checks what matters (epoch, state version)."""

    broker_id: int
    epoch: int
    epoch_zk_version: int
    live_brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    # broker id -> broker epoch (czxid of its registration): a change means it restarted
    broker_epochs: dict[int, int] = field(default_factory=dict)
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, VersionedState] = field(default_factory=dict)
    # brokers in a controlled shutdown (Kafka's shuttingDownBrokerIds): registered, but
    # never elected leader again; forgotten when their registration goes or changes
    shutting_down: set[int] = field(default_factory=set)

    def live_ids(self) -> set[int]:
        """Brokers that may lead: registered and not shutting down."""
        return set(self.live_brokers) - self.shutting_down

    def fenced(self, ops: Iterable[ZkOp]) -> list[ZkOp]:
        """`ops` as a transaction that fails if another controller was elected since."""
        return [Check(CONTROLLER_EPOCH, self.epoch_zk_version), *ops]

    def assignment(self, tp: TopicPartition) -> tuple[int, ...]:
        topic = self.topics.get(tp[0])
        return () if topic is None else tuple(topic.partitions.get(tp[1], ()))

    def partitions(self) -> list[TopicPartition]:
        return sorted((t, p) for t, a in self.topics.items() for p in a.partitions)

    def partitions_on(self, brokers: Collection[int]) -> list[TopicPartition]:
        """Partitions with a replica on any of `brokers`."""
        return [tp for tp in self.partitions() if set(self.assignment(tp)) & set(brokers)]

    # -- writes -------------------------------------------------------------------------

    def state_write(self, tp: TopicPartition, new: PartitionState, version: int) -> list[ZkOp]:
        return self.fenced([SetData(partition_state_path(*tp), new.encode(), version)])

    def state_create(
        self, tp: TopicPartition, new: PartitionState, existing: Collection[str]
    ) -> list[ZkOp]:
        """Create the state znode, and the `partitions` parents not in `existing`, all
        fenced (a deposed controller must not resurrect a deleted topic's parents)."""
        ops: list[ZkOp] = []
        for parent in (partitions_path(tp[0]), partition_path(*tp)):
            if parent not in existing:
                ops.append(Create(parent))
        ops.append(Create(partition_state_path(*tp), new.encode()))
        return self.fenced(ops)


def election_ops(
    broker_id: int, now_ms: int, current_epoch: int, epoch_zk_version: int
) -> list[ZkOp]:
    """Become controller: create the ephemeral /controller and bump /controller_epoch
    from the version read, in one transaction (Kafka 2.2+). Fails with NodeExists if
    someone is controller, BadVersion if another broker bumped the epoch first."""
    return [
        Create(CONTROLLER, ControllerRegistration(broker_id, now_ms).encode(), ephemeral=True),
        SetData(CONTROLLER_EPOCH, encode_controller_epoch(current_epoch + 1), epoch_zk_version),
    ]


def broker_change_decision(
    assignment: Sequence[int],
    current: PartitionState,
    live: Collection[int],
    unclean: bool,
    controller_epoch: int,
) -> PartitionState | None:
    """The state to write for a partition after the set of live brokers changed, or
    None if it stays as it is."""
    dead = [r for r in current.isr if r not in live]
    if current.leader == NO_LEADER or current.leader not in live:
        won = offline_election(assignment, current.isr, live, unclean)
        if won is not None:
            return PartitionState(won.leader, current.leader_epoch + 1, won.isr, controller_epoch)
        # Nobody eligible: shrink the ISR, keeping its last member; the previous leader
        # goes last so it is the one kept (it had every committed record).
        isr = current.isr
        for lost in sorted(dead, key=lambda r: r == current.leader):
            isr = isr_after_broker_loss(isr, lost)
        if current.leader == NO_LEADER and isr == current.isr:
            return None
        return PartitionState(NO_LEADER, current.leader_epoch + 1, isr, controller_epoch)
    if dead:
        isr = tuple(r for r in current.isr if r in live)
        return PartitionState(current.leader, current.leader_epoch + 1, isr, controller_epoch)
    return None


def initial_state(
    assignment: Sequence[int], live: Collection[int], controller_epoch: int
) -> PartitionState | None:
    """A new partition's first state, or None while none of its replicas is live."""
    replicas = [r for r in assignment if r in live]
    if not replicas:
        return None
    return PartitionState(replicas[0], 0, tuple(replicas), controller_epoch)


def partitions_needing_state(
    topics: Mapping[str, TopicAssignment], states: Mapping[TopicPartition, VersionedState]
) -> list[TopicPartition]:
    return sorted((t, p) for t, a in topics.items() for p in a.partitions if (t, p) not in states)


def delete_topic_ops(ctx: ControllerContext, topic: str, existing: Collection[str]) -> list[ZkOp]:
    """Delete a topic's znodes (those in `existing`: its tree under /brokers/topics, its
    config, its /admin/delete_topics request), children before parents, fenced."""
    doomed = [
        p
        for p in existing
        if p == topic_path(topic)
        or p.startswith(topic_path(topic) + "/")
        or p in (topic_config_path(topic), delete_topic_path(topic))
    ]
    doomed.sort(key=lambda p: (-p.count("/"), p))
    return ctx.fenced(Delete(p) for p in doomed)
