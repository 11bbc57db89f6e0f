"""Partition reassignment rules (Kafka's ZooKeeper-mode algorithm): the assignment in
flight, validation, cancellation, completion."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from tidegate.common.errors import ErrorCode
from tidegate.replication.reassignment import (
    ReplicaAssignment,
    assignment_of,
    completion_state,
    is_complete,
    new_reassignment,
    replace_partition,
    stop_replicas_state,
    validate_target,
)
from tidegate.replication.znodes import NO_LEADER, PartitionState, TopicAssignment


def test_reassign_to_lists_target_first_then_origin() -> None:
    ra = ReplicaAssignment((1, 2, 3)).reassign_to([3, 4, 5])
    assert ra == ReplicaAssignment((3, 4, 5, 1, 2), adding=(4, 5), removing=(1, 2))
    assert ra.origin == (3, 1, 2) and ra.target == (3, 4, 5)


def test_a_new_target_replaces_the_old_one_and_keeps_the_origin() -> None:
    ra = ReplicaAssignment((1,)).reassign_to([3])
    again = new_reassignment(ra, [2])
    assert again == ReplicaAssignment((2, 1), adding=(2,), removing=(1,))


def test_cancel_returns_to_the_origin_and_needs_a_reassignment() -> None:
    ra = ReplicaAssignment((1, 2)).reassign_to([3, 2])
    # Kafka's order: the origin as it appears in the full replica list (2 now first)
    assert new_reassignment(ra, None) == ReplicaAssignment((2, 1))
    assert new_reassignment(ReplicaAssignment((1, 2)), None) is None  # NO_REASSIGNMENT


def test_validation_errors_are_kafkas() -> None:
    cur = ReplicaAssignment((1,))
    assert validate_target([], cur, {1, 2})[0] == ErrorCode.invalid_replica_assignment  # type: ignore[index]
    dup = validate_target([2, 2], cur, {1, 2})
    assert dup is not None and "Duplicate" in dup[1]
    neg = validate_target([-1], cur, {1, 2})
    assert neg is not None and "Invalid broker id" in neg[1]
    dead = validate_target([9], cur, {1, 2})
    assert dead is not None and dead[0] == ErrorCode.invalid_replica_assignment
    assert "not alive" in dead[1]
    assert validate_target([2, 1], cur, {1, 2}) is None
    # a replica already hosting it may be down: only added replicas must be alive
    assert validate_target([1, 2], cur, {2}) is None


def test_topic_znode_round_trip_of_a_reassignment() -> None:
    topic = TopicAssignment("t", {0: (1,), 1: (2,)}, uuid.UUID(int=5))
    ra = ReplicaAssignment((1,)).reassign_to([3])
    moving = replace_partition(topic, 0, ra)
    back = TopicAssignment.decode("t", moving.encode())
    assert assignment_of(back, 0) == ra
    assert assignment_of(back, 1) == ReplicaAssignment((2,))
    done = replace_partition(back, 0, ReplicaAssignment(ra.target))
    assert done.adding_replicas == {} and done.removing_replicas == {}
    assert done.partitions[0] == (3,) and done.topic_id == topic.topic_id


def test_completion_waits_for_every_target_in_the_isr() -> None:
    ra = ReplicaAssignment((1,)).reassign_to([3])
    assert not is_complete(ra, (1,))
    assert is_complete(ra, (1, 3))
    assert is_complete(ReplicaAssignment((1,)), ())


def test_completion_moves_the_leader_into_the_target_and_shrinks_the_isr() -> None:
    cur = PartitionState(1, 4, (1, 3), 2)
    assert completion_state((3,), cur, {1, 3}, 7) == PartitionState(3, 5, (3,), 7)
    # the leader is in the target: it stays
    cur = PartitionState(2, 4, (2, 1, 3), 2)
    assert completion_state((3, 2), cur, {1, 2, 3}, 7) == PartitionState(2, 5, (2, 3), 7)
    # no target replica live: not yet
    assert completion_state((3,), PartitionState(1, 4, (1, 3), 2), {1}, 7) is None


def test_stopping_replicas_of_an_old_target() -> None:
    cur = PartitionState(1, 2, (1, 3), 1)
    assert stop_replicas_state({3}, (2, 1), cur, {1, 2, 3}, 1) == PartitionState(1, 3, (1,), 1)
    assert stop_replicas_state({4}, (2, 1), cur, {1, 2, 3}, 1) is None
    # the stopped replica led: the first remaining replica in the ISR takes over
    cur = PartitionState(3, 2, (3, 1), 1)
    assert stop_replicas_state({3}, (2, 1), cur, {1, 2, 3}, 1) == PartitionState(1, 3, (1,), 1)
    # nobody left in sync: leaderless, the last member kept
    cur = PartitionState(3, 2, (3,), 1)
    assert stop_replicas_state({3}, (2, 1), cur, {1, 2, 3}, 1) == \
        PartitionState(NO_LEADER, 3, (3,), 1)


@given(st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True),
       st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True),
       st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True))
def test_any_sequence_of_targets_keeps_origin_and_target_consistent(
        origin: list[int], first: list[int], second: list[int]) -> None:
    ra = ReplicaAssignment(tuple(origin))
    for target in (first, second):
        nxt = new_reassignment(ra, target)
        assert nxt is not None
        ra = nxt
        assert set(ra.replicas) == set(origin) | set(target)
        assert ra.origin == tuple(r for r in ra.replicas if r in origin)
        assert set(ra.target) == set(target)
        assert not set(ra.adding) & set(origin)
    back = new_reassignment(ra, None)
    if ra.being_reassigned:
        assert back is not None and set(back.replicas) == set(origin)
        assert not back.being_reassigned
