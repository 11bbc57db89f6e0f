"""The controller's operator-driven decisions: controlled shutdown, ElectLeaders
(preferred and unclean) and the automatic rebalance, checked against Kafka's rules."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegate.common.errors import ErrorCode
from tidegate.replication.controller_ops import (
    PREFERRED,
    UNCLEAN,
    ElectionRefused,
    acts_on,
    admin_election,
    controlled_shutdown_decision,
    imbalanced_partitions,
    still_led,
)
from tidegate.replication.znodes import NO_LEADER, PartitionState

TP = ("t", 0)


def st8(leader: int, epoch: int, isr: tuple[int, ...]) -> PartitionState:
    return PartitionState(leader, epoch, isr, 1)


# -- controlled shutdown -----------------------------------------------------------------


def test_shutting_down_leader_hands_over_to_first_in_sync_replica_that_stays() -> None:
    new = controlled_shutdown_decision(1, [1, 2, 3], st8(1, 4, (1, 2, 3)), {1, 2, 3}, set(), 9)
    assert new == PartitionState(2, 5, (2, 3), 9)


def test_other_brokers_shutting_down_are_not_elected_and_leave_the_isr() -> None:
    new = controlled_shutdown_decision(1, [1, 2, 3], st8(1, 0, (1, 2, 3)), {1, 2, 3}, {2}, 1)
    assert new == PartitionState(3, 1, (3,), 1)


def test_no_in_sync_replica_to_take_over_leaves_the_partition_led_here() -> None:
    assert controlled_shutdown_decision(1, [1, 2], st8(1, 0, (1,)), {1, 2}, set(), 1) is None
    assert still_led(1, [1, 2], st8(1, 0, (1,)))


def test_a_follower_leaves_the_isr_with_a_new_epoch_but_never_empties_it() -> None:
    new = controlled_shutdown_decision(2, [1, 2, 3], st8(1, 3, (1, 2, 3)), {1, 2, 3}, set(), 1)
    assert new == PartitionState(1, 4, (1, 3), 1)
    # not in the ISR: nothing to write
    assert controlled_shutdown_decision(2, [1, 2], st8(1, 3, (1,)), {1, 2}, set(), 1) is None


def test_single_replica_partitions_are_not_acted_on() -> None:
    assert not acts_on(1, [1], st8(1, 0, (1,)))
    assert not still_led(1, [1], st8(1, 0, (1,)))
    assert acts_on(1, [2, 1], st8(2, 0, (2, 1)))
    assert not acts_on(1, [2, 1], None)


@given(st.permutations([1, 2, 3, 4]), st.sets(st.sampled_from([1, 2, 3, 4]), min_size=1),
       st.sets(st.sampled_from([1, 2, 3, 4])), st.sampled_from([1, 2, 3, 4]))
def test_a_shutdown_never_elects_an_out_of_sync_or_stopping_replica(
        assignment: list[int], isr: set[int], going: set[int], broker: int) -> None:
    leader = sorted(isr)[0]
    cur = st8(leader, 5, tuple(sorted(isr)))
    new = controlled_shutdown_decision(broker, assignment, cur, {1, 2, 3, 4}, going, 2)
    if new is None:
        return
    assert new.leader_epoch == 6
    assert new.leader in cur.isr and new.leader in new.isr
    if new.leader != cur.leader:  # an election: never onto a stopping broker
        assert new.leader not in going | {broker}
    else:  # the broker was a follower: it only left the ISR
        assert cur.leader != broker
    assert set(new.isr) <= set(cur.isr)
    assert broker not in new.isr or (len(cur.isr) == 1)


# -- ElectLeaders --------------------------------------------------------------------------


def test_preferred_election() -> None:
    assert admin_election(PREFERRED, [1, 2], st8(2, 3, (2, 1)), {1, 2}, 5, TP) == \
        PartitionState(1, 4, (2, 1), 5)
    assert admin_election(PREFERRED, [1, 2], st8(1, 3, (2, 1)), {1, 2}, 5, TP) == \
        ElectionRefused(ErrorCode.election_not_needed)
    refused = admin_election(PREFERRED, [1, 2], st8(2, 3, (2,)), {1, 2}, 5, TP)
    assert isinstance(refused, ElectionRefused)
    assert refused.code == ErrorCode.preferred_leader_not_available
    assert refused.message is not None and "t-0" in refused.message
    # in sync but down: not available either
    got = admin_election(PREFERRED, [1, 2], st8(2, 3, (2, 1)), {2}, 5, TP)
    assert isinstance(got, ElectionRefused)


def test_unclean_election() -> None:
    # a live leader: nothing to do
    assert admin_election(UNCLEAN, [1, 2], st8(1, 0, (1,)), {1, 2}, 1, TP) == \
        ElectionRefused(ErrorCode.election_not_needed)
    # leader down, the only ISR member down: the first live replica, ISR = itself
    assert admin_election(UNCLEAN, [1, 2, 3], st8(NO_LEADER, 7, (1,)), {2, 3}, 1, TP) == \
        PartitionState(2, 8, (2,), 1)
    # a live ISR member is preferred to an out-of-sync one
    assert admin_election(UNCLEAN, [1, 2, 3], st8(1, 7, (1, 3)), {2, 3}, 1, TP) == \
        PartitionState(3, 8, (3,), 1)
    got = admin_election(UNCLEAN, [1, 2], st8(NO_LEADER, 7, (1,)), set(), 1, TP)
    assert isinstance(got, ElectionRefused)
    assert got.code == ErrorCode.eligible_leaders_not_available


# -- auto rebalance ------------------------------------------------------------------------


def test_imbalance_above_the_percentage_triggers_preferred_elections() -> None:
    assignments = {("t", p): ((1, 2) if p % 2 == 0 else (2, 1)) for p in range(10)}
    # broker 2 leads everything: broker 1 is preferred for 5 and leads 0 of them
    leaders = {tp: 2 for tp in assignments}
    assert imbalanced_partitions(assignments, leaders, 10) == \
        [("t", p) for p in range(0, 10, 2)]
    # one of 5 misplaced = 20 %: above 10 %, not above 25 %
    leaders = {tp: (1 if r[0] == 1 else 2) for tp, r in assignments.items()}
    leaders[("t", 0)] = 2
    assert imbalanced_partitions(assignments, leaders, 10) == [("t", 0)]
    assert imbalanced_partitions(assignments, leaders, 25) == []
    # partitions without a state are not misplaced
    assert imbalanced_partitions(assignments, {}, 0) == []
