"""The leader's replication state: HW, ISR shrink/expand, acks=all (replica_state.py)."""

from __future__ import annotations

import pytest

from tidegate.common.errors import ErrorCode, OffsetOutOfRangeError
from tidegate.replication.replica_state import (
    UNKNOWN_OFFSET,
    IsrChangeInFlightError,
    IsrChangeKind,
    LeaderReplicaState,
    UnknownReplicaError,
    diverging_epoch,
)
from tidegate.storage.leader_epochs import UNDEFINED, EpochEndOffset, EpochEntry, LeaderEpochCache

LAG = 30_000


def leader(
    *, isr: tuple[int, ...] = (1, 2, 3), leo: int = 10, hw: int = 10, now: int = 0,
    epochs: LeaderEpochCache | None = None, log_start: int = 0,
) -> LeaderReplicaState:
    return LeaderReplicaState(
        leader_id=1, leader_epoch=5, replicas=(1, 2, 3), isr=isr, zk_version=7,
        log_end_offset=leo, log_start_offset=log_start, high_watermark=hw, now_ms=now,
        epochs=epochs,
    )


def test_new_leader_holds_its_hw_until_every_isr_member_fetched() -> None:
    st = leader(leo=10, hw=4)
    assert st.high_watermark == 4
    assert st.followers[2].log_end_offset == UNKNOWN_OFFSET
    assert not st.on_leader_append(12)
    assert st.high_watermark == 4  # followers unknown
    r = st.on_follower_fetch(2, 11, None, 10, 12)
    assert not r.high_watermark_advanced and st.high_watermark == 4
    r = st.on_follower_fetch(3, 9, None, 10, 12)
    assert r.high_watermark_advanced and st.high_watermark == 9
    st.on_follower_fetch(3, 12, None, 20, 12)
    assert st.high_watermark == 11


def test_hw_never_moves_backwards() -> None:
    st = leader(isr=(1, 2), leo=10, hw=0)
    st.on_follower_fetch(2, 10, None, 0, 10)
    assert st.high_watermark == 10
    st.on_follower_fetch(2, 6, None, 1, 10)  # a follower that truncated
    assert st.high_watermark == 10
    assert st.followers[2].log_end_offset == 6


def test_leader_alone_in_isr_commits_on_append() -> None:
    assert leader(isr=(1,), leo=10, hw=4).high_watermark == 10  # at election already
    st = leader(isr=(1,), leo=10, hw=10)
    assert st.on_leader_append(15)
    assert st.high_watermark == 15


def test_last_caught_up_time_follows_kafkas_rule() -> None:
    st = leader(isr=(1, 2), leo=10, hw=10, now=0)
    f = st.followers[2]
    assert f.last_caught_up_time_ms == 0
    st.on_follower_fetch(2, 10, None, 100, 10)  # at the leader's LEO: caught up now
    assert f.last_caught_up_time_ms == 100
    st.on_follower_fetch(2, 10, None, 200, 20)  # behind the LEO of this fetch
    assert f.last_caught_up_time_ms == 100
    # Reaches the LEO the leader had at the previous fetch (20): caught up as of then.
    st.on_follower_fetch(2, 20, None, 300, 30)
    assert f.last_caught_up_time_ms == 200
    st.on_follower_fetch(2, 25, None, 400, 40)  # reached neither 40 nor 30
    assert f.last_caught_up_time_ms == 200


def test_shrink_after_the_lag_time_but_never_the_leader_nor_a_follower_at_the_leo() -> None:
    st = leader(isr=(1, 2, 3), leo=10, hw=0, now=0)
    st.on_follower_fetch(2, 10, None, 0, 10)
    st.on_follower_fetch(3, 5, None, 0, 10)
    assert st.maybe_shrink_isr(LAG, LAG) is None  # exactly at the limit: still in sync
    assert st.maybe_shrink_isr(LAG + 1, LAG) == (1, 2)  # 2 is at the LEO: never out
    assert st.out_of_sync_replicas(LAG + 1, LAG) == [3]
    lonely = leader(isr=(1,))
    assert lonely.maybe_shrink_isr(10**9, LAG) is None


def test_pending_shrink_keeps_waiting_for_the_removed_follower_until_committed() -> None:
    st = leader(isr=(1, 2, 3), leo=10, hw=0, now=0)
    st.on_follower_fetch(2, 10, None, 0, 10)
    st.on_follower_fetch(3, 4, None, 0, 10)
    assert st.high_watermark == 4
    proposal = st.maybe_shrink_isr(LAG + 1, LAG)
    assert proposal == (1, 2)
    pending = st.begin_isr_change(proposal)
    assert pending.kind is IsrChangeKind.SHRINK and pending.expected_zk_version == 7
    assert st.maximal_isr == (1, 2, 3) and st.high_watermark == 4
    assert st.maybe_shrink_isr(LAG + 1, LAG) is None  # one change at a time
    with pytest.raises(IsrChangeInFlightError):
        st.begin_isr_change((1,))
    assert st.apply_committed_isr(proposal, 8)
    assert st.isr == (1, 2) and st.zk_version == 8 and st.pending is None
    assert st.high_watermark == 10


def test_expansion_needs_hw_and_epoch_start_and_counts_for_hw_while_pending() -> None:
    st = LeaderReplicaState(
        leader_id=1, leader_epoch=5, replicas=(1, 2, 3), isr=(1, 2), zk_version=7,
        log_end_offset=20, log_start_offset=0, high_watermark=12, now_ms=0,
    )
    assert st.epoch_start_offset == 20
    r = st.on_follower_fetch(3, 15, None, 0, 20)  # >= HW but below the epoch start
    assert not r.expand_isr
    st.on_leader_append(30)
    st.on_follower_fetch(2, 30, None, 0, 30)
    assert st.high_watermark == 30  # 3 is not in the ISR: not waited for
    r = st.on_follower_fetch(3, 29, None, 0, 30)  # >= epoch start, < HW
    assert not r.expand_isr
    r = st.on_follower_fetch(3, 30, None, 0, 30)
    assert r.expand_isr
    pending = st.begin_isr_change(st.expanded_isr(3))
    assert pending.kind is IsrChangeKind.EXPAND and pending.proposed_isr == (1, 2, 3)
    assert not st.can_expand_isr(3)  # in flight
    st.on_leader_append(40)
    st.on_follower_fetch(2, 40, None, 1, 40)
    assert st.high_watermark == 30  # the pending addition holds it back
    assert not st.min_isr_satisfied(3)  # committed ISR still (1, 2)
    st.apply_committed_isr((1, 2, 3), 8)
    assert st.min_isr_satisfied(3)
    st.on_follower_fetch(3, 40, None, 2, 40)
    assert st.high_watermark == 40


def test_aborted_change_is_forgotten() -> None:
    st = leader(isr=(1, 2), leo=10, hw=10)
    st.on_follower_fetch(3, 10, None, 0, 10)
    st.begin_isr_change((1, 2, 3))
    st.abort_isr_change()
    assert st.pending is None and st.isr == (1, 2) and st.maximal_isr == (1, 2)
    assert st.can_expand_isr(3)


def test_begin_isr_change_refuses_malformed_proposals() -> None:
    st = leader(isr=(1, 2))
    for bad in ((2,), (1, 2, 9), (1, 3, 2, 3), (1, 2), (1, 3)):
        with pytest.raises(ValueError):
            st.begin_isr_change(bad)
    two_more = leader(isr=(1,))
    with pytest.raises(ValueError):
        two_more.begin_isr_change((1, 2, 3))  # expansions are one replica at a time
    with pytest.raises(ValueError):
        st.apply_committed_isr((2,), 9)


def test_min_isr_and_acks_all_use_the_committed_isr() -> None:
    st = leader(isr=(1, 2, 3), leo=10, hw=0, now=0)
    for rid in (2, 3):
        st.on_follower_fetch(rid, 10, None, 0, 10)
    st.begin_isr_change((1, 2))
    assert st.min_isr_satisfied(3)  # the shrink is not committed yet
    assert st.acks_all_status(10, 3).done and st.acks_all_status(10, 3).error == ErrorCode.none
    assert not st.acks_all_status(11, 3).done
    st.apply_committed_isr((1, 2), 8)
    assert not st.min_isr_satisfied(3)
    assert st.acks_all_status(10, 3).error == ErrorCode.not_enough_replicas_after_append
    assert st.acks_all_status(10, 2).error == ErrorCode.none


def test_new_epoch_for_the_same_leader_keeps_positions_and_drops_pending() -> None:
    st = leader(isr=(1, 2, 3), leo=10, hw=0, now=0)
    st.on_follower_fetch(2, 10, None, 0, 10)
    st.on_follower_fetch(3, 3, None, 0, 10)
    st.begin_isr_change((1, 2))
    advanced = st.on_new_leader_epoch(
        leader_epoch=6, replicas=(1, 2, 3), isr=(1, 2), zk_version=9, now_ms=50
    )
    assert advanced and st.high_watermark == 10
    assert st.pending is None and st.leader_epoch == 6 and st.zk_version == 9
    assert st.followers[2].log_end_offset == 10
    assert st.followers[2].last_caught_up_time_ms == 50
    assert st.followers[3].last_caught_up_time_ms == 0
    with pytest.raises(ValueError):
        st.on_new_leader_epoch(leader_epoch=6, replicas=(1, 2), isr=(1,), zk_version=10,
                               now_ms=60)


def test_fetches_from_strangers_and_out_of_range() -> None:
    st = leader(leo=10, hw=10, log_start=3)
    with pytest.raises(UnknownReplicaError) as info:
        st.on_follower_fetch(1, 10, None, 0, 10)  # the leader itself
    assert info.value.code == ErrorCode.not_leader_or_follower
    with pytest.raises(UnknownReplicaError):
        st.on_follower_fetch(9, 10, None, 0, 10)
    with pytest.raises(OffsetOutOfRangeError):
        st.on_follower_fetch(2, 11, None, 0, 10)
    with pytest.raises(OffsetOutOfRangeError):
        st.on_follower_fetch(2, 2, None, 0, 10)


def test_diverging_follower_gets_the_leaders_epoch_and_moves_nothing() -> None:
    epochs = LeaderEpochCache(None, [EpochEntry(3, 0), EpochEntry(5, 8)])
    st = leader(isr=(1, 2, 3), leo=12, hw=0, epochs=epochs)
    # Follower 2 fetched epoch 4 records up to 10: the leader's epoch 3 ended at 8.
    r = st.on_follower_fetch(2, 10, 4, 0, 12)
    assert r.diverging_epoch == EpochEndOffset(3, 8)
    assert st.followers[2].log_end_offset == UNKNOWN_OFFSET
    # Follower 3 fetched epoch 5 up to 11: in agreement.
    r = st.on_follower_fetch(3, 11, 5, 0, 12)
    assert r.diverging_epoch is None and st.followers[3].log_end_offset == 11


def test_diverging_epoch_rules() -> None:
    assert diverging_epoch(EpochEndOffset(3, 8), 3, 8, 0) is None
    assert diverging_epoch(EpochEndOffset(3, 8), 3, 9, 0) == (3, 8)
    assert diverging_epoch(EpochEndOffset(2, 8), 3, 5, 0) == (2, 8)
    with pytest.raises(OffsetOutOfRangeError):
        diverging_epoch(UNDEFINED, 3, 5, 0)
    with pytest.raises(OffsetOutOfRangeError):
        diverging_epoch(EpochEndOffset(3, 8), 3, 5, 6)


def test_constructor_checks() -> None:
    with pytest.raises(ValueError):
        LeaderReplicaState(leader_id=1, leader_epoch=0, replicas=(2, 3), isr=(2,),
                           zk_version=0, log_end_offset=0, log_start_offset=0,
                           high_watermark=0, now_ms=0)
    with pytest.raises(ValueError):
        LeaderReplicaState(leader_id=1, leader_epoch=0, replicas=(1, 2), isr=(2,),
                           zk_version=0, log_end_offset=0, log_start_offset=0,
                           high_watermark=0, now_ms=0)
    # A HW above the log end (a stale checkpoint) is capped at the log end.
    assert leader(leo=5, hw=9).high_watermark == 5


def test_idle_fetch_is_only_a_follower_already_recorded_at_the_log_end() -> None:
    st = leader(leo=10, hw=10, isr=(1, 2))
    assert not st.is_idle_in_sync(2, 10, 10)  # never fetched under this leader
    st.on_follower_fetch(2, 10, None, 0, 10)
    assert st.is_idle_in_sync(2, 10, 10)
    assert not st.is_idle_in_sync(2, 10, 11)  # the leader has more: read it
    assert not st.is_idle_in_sync(2, 9, 10)  # a moved position: the full path
    st.on_follower_fetch(3, 10, None, 0, 10)  # 3 is outside the ISR and may join it
    assert not st.is_idle_in_sync(3, 10, 10)


def test_idle_fetches_keep_a_follower_caught_up_through_a_long_quiet_spell() -> None:
    """Skipping idle partitions' reads must not let a quiet partition's follower look
    lagging the moment the leader appends after more than replica.lag.time.max.ms."""
    st = leader(leo=10, hw=10, isr=(1, 2))
    st.on_follower_fetch(2, 10, None, 0, 10)
    for now in range(10_000, 60_001, 10_000):  # the follower fetches, nothing moves
        assert st.is_idle_in_sync(2, 10, 10)
        st.on_idle_fetch(2, now, 10)
    st.on_leader_append(11)  # new data at 60 s; the follower has not fetched it yet
    assert st.maybe_shrink_isr(60_500, LAG) is None
    assert st.maybe_shrink_isr(90_001, LAG) == (1,)  # and then it really lags
