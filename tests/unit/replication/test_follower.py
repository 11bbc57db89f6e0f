"""The follower's truncation point and high watermark (replication/follower.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegate.replication.follower import (
    OutOfRangeAction,
    TruncationPoint,
    first_request_epoch,
    follower_high_watermark,
    out_of_range_action,
    truncation_offset,
)
from tidegate.storage.leader_epochs import UNDEFINED_EPOCH, EpochEntry, LeaderEpochCache


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(None, [EpochEntry(e, o) for e, o in pairs])


def dialogue(
    follower: LeaderEpochCache, follower_leo: int, follower_hw: int,
    leader: LeaderEpochCache, leader_leo: int,
) -> tuple[int, int]:
    """Run OffsetForLeaderEpoch rounds to the end, truncating the follower's cache as the
    fetcher would. Returns (final log end, number of requests)."""
    asked = first_request_epoch(follower)
    if asked is None:
        return min(follower_hw, follower_leo), 0
    rounds = 0
    leo = follower_leo
    while True:
        rounds += 1
        answer = leader.end_offset_for(asked, leader_leo)
        point = truncation_offset(follower, leo, answer.epoch, answer.end_offset,
                                  high_watermark=follower_hw)
        if point.offset < leo:
            leo = point.offset
            follower.truncate_from_end(leo)
            follower_hw = min(follower_hw, leo)
        if point.complete:
            return leo, rounds
        assert point.ask_again_with is not None and point.ask_again_with < asked
        asked = point.ask_again_with


def test_kip101_scenario_1_no_truncation_to_a_stale_high_watermark() -> None:
    # A (leader) and B both hold m1, m2 of epoch 0; B's HW is still 1 when it restarts.
    # Truncating to the HW would lose m2 if A then died; epochs keep it.
    leo, rounds = dialogue(cache_of((0, 0)), 2, 1, cache_of((0, 0)), 2)
    assert (leo, rounds) == (2, 1)


def test_kip101_scenario_2_divergent_tail_is_cut() -> None:
    # A wrote m2 at offset 1 in epoch 0 and crashed; B became leader (epoch 1) and wrote
    # m3 at offset 1. A rejoins: its m2 goes.
    leo, _ = dialogue(cache_of((0, 0)), 2, 1, cache_of((0, 0), (1, 1)), 2)
    assert leo == 1


def test_kip279_multiple_rounds_after_fast_leader_changes() -> None:
    # Follower: epoch 0 at 0..4, epoch 2 at 5..9. Leader: epoch 0 at 0..2, 1 at 3..6, 3 at 7..
    follower = cache_of((0, 0), (2, 5))
    leo, rounds = dialogue(follower, 10, 0, cache_of((0, 0), (1, 3), (3, 7)), 12)
    assert (leo, rounds) == (3, 2)
    assert [(e.epoch, e.start_offset) for e in follower.entries] == [(0, 0)]


def test_first_round_answer_for_an_unknown_epoch() -> None:
    point = truncation_offset(cache_of((0, 0), (2, 5)), 10, 1, 7, high_watermark=0)
    assert point == TruncationPoint(5, ask_again_with=0)
    assert not point.complete


def test_undefined_answers() -> None:
    # The leader knows no epoch <= the one asked: fall back to the HW.
    assert truncation_offset(cache_of((4, 0)), 10, UNDEFINED_EPOCH, -1, high_watermark=6) == (
        TruncationPoint(6)
    )
    # An old leader answering an offset without an epoch.
    assert truncation_offset(cache_of((4, 0)), 10, UNDEFINED_EPOCH, 8, high_watermark=6) == (
        TruncationPoint(8)
    )
    # The follower has no epoch <= the leader's: trust the leader's offset.
    assert truncation_offset(LeaderEpochCache(), 10, 2, 7, high_watermark=0) == TruncationPoint(7)


def test_leader_epoch_below_the_followers_earliest() -> None:
    # The follower's log starts inside epoch 5 (retention); the leader's epoch 3 ended at 12.
    assert truncation_offset(cache_of((5, 10)), 20, 3, 12, high_watermark=0) == (
        TruncationPoint(10)
    )


def test_never_above_the_local_log_end() -> None:
    assert truncation_offset(cache_of((0, 0)), 4, 0, 9, high_watermark=0) == TruncationPoint(4)


def test_no_epochs_means_truncate_to_the_high_watermark() -> None:
    assert first_request_epoch(LeaderEpochCache()) is None
    assert dialogue(LeaderEpochCache(), 5, 3, cache_of((0, 0)), 9) == (3, 0)


def test_follower_high_watermark() -> None:
    assert follower_high_watermark(10, 7) == 7
    assert follower_high_watermark(5, 7) == 5
    assert follower_high_watermark(2, 7, log_start_offset=4) == 4


def test_out_of_range_below_the_leaders_log_start_restarts_there() -> None:
    # the follower was away while retention deleted offsets 0..899 on the leader
    assert out_of_range_action(100, 900, 1000) == OutOfRangeAction(900, start_at=900)


def test_out_of_range_past_the_leaders_end_truncates_to_it() -> None:
    # an unclean election: the new leader's log is shorter than the follower's
    assert out_of_range_action(120, 0, 80) == OutOfRangeAction(80, truncate_to=80)
    # checked before the log start, as in Kafka: an empty leader log at 80
    assert out_of_range_action(120, 80, 80) == OutOfRangeAction(80, truncate_to=80)


def test_out_of_range_no_longer_out_of_range_fetches_again() -> None:
    assert out_of_range_action(500, 400, 600) == OutOfRangeAction(500)
    assert out_of_range_action(400, 400, 400) == OutOfRangeAction(400)


@given(leo=st.integers(0, 10_000), start=st.integers(0, 10_000), length=st.integers(0, 10_000))
def test_out_of_range_always_lands_inside_the_leaders_log(leo: int, start: int,
                                                          length: int) -> None:
    """Whatever the positions, the next fetch offset is within [leader start, leader end],
    and the follower cuts nothing unless its end is outside the leader's log."""
    end = start + length
    action = out_of_range_action(leo, start, end)
    assert start <= action.fetch_offset <= end
    if action.truncate_to is not None:
        assert action.truncate_to == end < leo and action.start_at is None
    elif action.start_at is not None:
        assert action.start_at == start > leo
    else:
        assert start <= leo <= end and action.fetch_offset == leo
