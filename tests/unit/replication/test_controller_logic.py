"""The controller's sans-IO decisions: elections on broker changes, first states, and the
fencing every write carries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegate.replication.controller_logic import (
    ControllerContext,
    VersionedState,
    broker_change_decision,
    delete_topic_ops,
    election_ops,
    initial_state,
    partitions_needing_state,
)
from tidegate.replication.zk_ops import Check, Create, Delete, SetData
from tidegate.replication.znodes import (
    CONTROLLER,
    CONTROLLER_EPOCH,
    NO_LEADER,
    ControllerRegistration,
    PartitionState,
    TopicAssignment,
)


def state(leader: int, epoch: int, isr: tuple[int, ...], ce: int = 1) -> PartitionState:
    return PartitionState(leader, epoch, isr, ce)


def test_dead_leader_moves_to_first_live_isr_member_with_a_new_epoch() -> None:
    new = broker_change_decision([1, 2, 3], state(1, 4, (1, 2, 3)), {2, 3}, False, 7)
    assert new == PartitionState(2, 5, (2, 3), 7)


def test_dead_leader_prefers_assignment_order_not_isr_order() -> None:
    new = broker_change_decision([3, 2, 1], state(1, 0, (1, 2, 3)), {2, 3}, False, 1)
    assert new is not None and new.leader == 3


def test_no_live_isr_member_leaves_the_partition_leaderless_keeping_the_last_leader() -> None:
    new = broker_change_decision([1, 2, 3], state(1, 4, (2, 1)), {3}, False, 2)
    assert new == PartitionState(NO_LEADER, 5, (1,), 2)
    # nothing more to write while nobody eligible comes back
    assert broker_change_decision([1, 2, 3], new, {3}, False, 2) is None


def test_a_returning_isr_member_becomes_leader() -> None:
    offline = state(NO_LEADER, 5, (1,))
    new = broker_change_decision([1, 2, 3], offline, {1, 3}, False, 3)
    assert new == PartitionState(1, 6, (1,), 3)
    # a non-ISR replica alone does not (clean election)
    assert broker_change_decision([1, 2, 3], offline, {3}, False, 3) is None


def test_unclean_election_only_when_allowed() -> None:
    cur = state(1, 2, (1,))
    assert broker_change_decision([1, 2], cur, {2}, False, 1) == PartitionState(
        NO_LEADER, 3, (1,), 1
    )
    assert broker_change_decision([1, 2], cur, {2}, True, 1) == PartitionState(2, 3, (2,), 1)


def test_dead_followers_leave_the_isr_and_bump_the_leader_epoch() -> None:
    new = broker_change_decision([1, 2, 3], state(1, 4, (1, 2, 3)), {1, 3}, False, 2)
    assert new == PartitionState(1, 5, (1, 3), 2)
    assert broker_change_decision([1, 2, 3], state(1, 4, (1, 3)), {1, 3}, False, 2) is None


def test_initial_state() -> None:
    assert initial_state([2, 3, 1], {1, 2, 3}, 4) == PartitionState(2, 0, (2, 3, 1), 4)
    assert initial_state([2, 3, 1], {1, 3}, 4) == PartitionState(3, 0, (3, 1), 4)
    assert initial_state([2, 3], {1}, 4) is None


def test_election_ops_create_controller_and_bump_the_epoch_conditionally() -> None:
    ops = election_ops(2, 1234, current_epoch=5, epoch_zk_version=9)
    assert ops[0] == Create(CONTROLLER, ControllerRegistration(2, 1234).encode(), ephemeral=True)
    assert ops[1] == SetData(CONTROLLER_EPOCH, b"6", 9)


def test_every_controller_write_is_fenced_by_the_epoch_version() -> None:
    ctx = ControllerContext(broker_id=1, epoch=6, epoch_zk_version=10)
    ctx.topics["t"] = TopicAssignment("t", {0: (1, 2)})
    new = state(2, 1, (2,), 6)
    ops = ctx.state_write(("t", 0), new, version=3)
    assert ops == [
        Check(CONTROLLER_EPOCH, 10),
        SetData("/brokers/topics/t/partitions/0/state", new.encode(), 3),
    ]
    created = ctx.state_create(("t", 0), new, existing={"/brokers/topics/t/partitions"})
    assert created[0] == Check(CONTROLLER_EPOCH, 10)
    assert [type(op) for op in created[1:]] == [Create, Create]
    assert created[-1].path == "/brokers/topics/t/partitions/0/state"


def test_delete_topic_ops_remove_children_first_and_only_the_topic() -> None:
    ctx = ControllerContext(broker_id=1, epoch=2, epoch_zk_version=3)
    existing = [
        "/brokers/topics/t",
        "/brokers/topics/t/partitions",
        "/brokers/topics/t/partitions/0",
        "/brokers/topics/t/partitions/0/state",
        "/brokers/topics/tt",  # another topic sharing a prefix
        "/config/topics/t",
        "/admin/delete_topics/t",
    ]
    ops = delete_topic_ops(ctx, "t", existing)
    assert ops[0] == Check(CONTROLLER_EPOCH, 3)
    paths = [op.path for op in ops[1:]]
    assert all(isinstance(op, Delete) for op in ops[1:])
    assert "/brokers/topics/tt" not in paths
    assert paths.index("/brokers/topics/t/partitions/0/state") < paths.index(
        "/brokers/topics/t/partitions/0"
    )
    assert paths.index("/brokers/topics/t/partitions") < paths.index("/brokers/topics/t")
    assert len(paths) == 6


def test_partitions_needing_state() -> None:
    topics = {"a": TopicAssignment("a", {0: (1,), 1: (2,)}), "b": TopicAssignment("b", {0: (1,)})}
    states = {("a", 0): VersionedState(state(1, 0, (1,)), 0)}
    assert partitions_needing_state(topics, states) == [("a", 1), ("b", 0)]


brokers = st.integers(1, 6)


@given(
    st.lists(brokers, min_size=1, max_size=4, unique=True),
    st.data(),
    st.sets(brokers),
    st.booleans(),
)
def test_decisions_keep_kafkas_invariants(
    assignment: list[int], data: st.DataObject, live: set[int], unclean: bool
) -> None:
    isr = data.draw(st.lists(st.sampled_from(assignment), min_size=1, unique=True))
    leader = data.draw(st.sampled_from([NO_LEADER, *isr]))
    cur = state(leader, 3, tuple(isr))
    new = broker_change_decision(assignment, cur, live, unclean, 9)
    if new is None:
        # nothing to change: the leader (if any) is live and so is the whole ISR
        assert leader == NO_LEADER or set(isr) <= live
        return
    assert new.leader_epoch == 4 and new.controller_epoch == 9
    assert new.isr, "the ISR never becomes empty"
    if new.leader != NO_LEADER:
        assert new.leader in live and new.leader in assignment
        assert new.leader in new.isr
        if new.leader not in isr:
            assert unclean and new.isr == (new.leader,)
        else:
            assert set(new.isr) <= live
    else:
        assert set(new.isr) <= set(isr) and len(new.isr) >= 1
