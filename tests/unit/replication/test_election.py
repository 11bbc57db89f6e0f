"""Kafka's leader election algorithms (replication/election.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegate.replication.election import (
    LeaderAndIsr,
    controlled_shutdown_election,
    controlled_shutdown_leader,
    isr_after_broker_loss,
    offline_election,
    offline_leader,
    preferred_election,
    preferred_leader,
    reassignment_election,
    reassignment_leader,
)


def test_offline_leader_takes_the_first_live_isr_member_in_assignment_order() -> None:
    assert offline_leader([1, 2, 3], isr=[3, 2], live={2, 3}, unclean=False) == 2
    assert offline_leader([1, 2, 3], isr=[1, 3], live={2, 3}, unclean=False) == 3


def test_offline_leader_without_live_isr_member() -> None:
    assert offline_leader([1, 2, 3], isr=[1], live={2, 3}, unclean=False) is None
    assert offline_leader([1, 2, 3], isr=[1], live={3, 2}, unclean=True) == 2
    assert offline_leader([1, 2, 3], isr=[1], live=set(), unclean=True) is None


def test_offline_election_isr() -> None:
    assert offline_election([1, 2, 3], [1, 2, 3], {2, 3}, False) == LeaderAndIsr(2, (2, 3))
    unclean = offline_election([1, 2, 3], [1], {3}, True)
    assert unclean == LeaderAndIsr(3, (3,), unclean=True)
    assert offline_election([1, 2, 3], [1], {3}, False) is None


def test_preferred_leader() -> None:
    assert preferred_leader([2, 1, 3], isr=[1, 2], live={1, 2}) == 2
    assert preferred_leader([2, 1, 3], isr=[1, 3], live={1, 2, 3}) is None  # not in ISR
    assert preferred_leader([2, 1, 3], isr=[1, 2], live={1}) is None  # not live
    assert preferred_leader([], isr=[], live=set()) is None
    assert preferred_election([2, 1], [1, 2], {1, 2}) == LeaderAndIsr(2, (1, 2))


def test_controlled_shutdown() -> None:
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == 2
    assert controlled_shutdown_leader([1, 2, 3], [1, 3], {1, 2, 3}, {1}) == 3
    assert controlled_shutdown_leader([1, 2, 3], [1], {1, 2, 3}, {1}) is None
    assert controlled_shutdown_leader([1, 2, 3], [1, 2], {1}, {1}) is None  # 2 is not live
    assert controlled_shutdown_election([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 3}) == LeaderAndIsr(
        2, (2,)
    )


def test_reassignment_leader() -> None:
    assert reassignment_leader([4, 5, 6], isr=[1, 5, 4], live={1, 4, 5}) == 4
    assert reassignment_leader([4, 5, 6], isr=[1, 5], live={1, 4, 5}) == 5
    assert reassignment_leader([4, 5, 6], isr=[1], live={1, 4, 5}) is None
    assert reassignment_election([4, 5], [1, 5], {1, 5}) == LeaderAndIsr(5, (1, 5))


def test_isr_after_broker_loss_keeps_the_last_member() -> None:
    assert isr_after_broker_loss([1, 2, 3], 2) == (1, 3)
    assert isr_after_broker_loss([2], 2) == (2,)
    assert isr_after_broker_loss([1, 3], 2) == (1, 3)


ids = st.lists(st.integers(0, 6), unique=True, min_size=1, max_size=6)


@given(ids, st.data())
def test_clean_elections_pick_a_live_isr_member(assignment: list[int], data: st.DataObject) -> None:
    isr = data.draw(st.lists(st.sampled_from(assignment), unique=True))
    live = set(data.draw(st.lists(st.integers(0, 6), unique=True)))
    down = set(data.draw(st.lists(st.sampled_from(assignment), unique=True)))
    for leader in (
        offline_leader(assignment, isr, live, False),
        preferred_leader(assignment, isr, live),
        controlled_shutdown_leader(assignment, isr, live, down),
        reassignment_leader(assignment, isr, live),
    ):
        assert leader is None or (leader in isr and leader in live and leader in assignment)
    decision = offline_election(assignment, isr, live, True)
    if decision is not None:
        assert decision.leader in decision.isr and set(decision.isr) <= live
        assert decision.unclean == (decision.leader not in isr)
    shut = controlled_shutdown_election(assignment, isr, live, down)
    if shut is not None:
        assert shut.leader in shut.isr and not set(shut.isr) & down
