"""A follower `Log` fed its leader's bytes (storage/log_replica.py): byte-identical
segments, the same producer state, `.txnindex`, LSO and epochs; truncation of a divergent
tail; the follower's HW and log start; the HW checkpoint of `LogManager` in cluster mode."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.common.errors import CorruptRecordError
from tidegate.records.batch import NO_PARTITION_LEADER_EPOCH, iter_headers
from tidegate.storage.config import LogConfig
from tidegate.storage.errors import UnexpectedAppendOffsetError
from tidegate.storage.files import read_offset_checkpoint
from tidegate.storage.leader_epochs import CHECKPOINT_FILE, UNDEFINED, EpochEndOffset
from tidegate.storage.log import Log
from tidegate.storage.log_manager import (
    RECOVERY_CHECKPOINT,
    REPLICATION_CHECKPOINT,
    LogManager,
)
from tidegate.storage.txn_index import AbortedTxn

from ._replica import (
    advance_hw,
    assert_converged,
    epochs,
    fetch_into,
    files,
    follow_new_leader,
    idem,
    open_replica,
    plain,
    producer_rows,
    txn,
)
from ._support import BASE_TS, SMALL


def workload(leader: Log, epoch: int, tag: int) -> None:
    """Client batches of every kind, as a leader at `epoch` appends them one at a time."""
    seq = leader.producer_state.last_entry(7)
    s = 0 if seq is None else seq.last_seq + 1
    leader.append(plain(3, tag=tag), leader_epoch=epoch)
    leader.append(idem(7, s, 3, tag=tag), leader_epoch=epoch)
    leader.append(txn(20 + tag, 0, 2, tag=tag), leader_epoch=epoch)
    leader.append(txn(40 + tag, 0, 3, tag=tag), leader_epoch=epoch)
    leader.append(idem(7, s + 3, 2, tag=tag), leader_epoch=epoch)
    leader.append_marker(20 + tag, 0, 1, commit=False, leader_epoch=epoch)  # aborted
    leader.append(plain(2, tag=tag, size=400), leader_epoch=epoch)
    leader.append_marker(40 + tag, 0, 1, commit=True, leader_epoch=epoch)
    leader.append(txn(60 + tag, 0, 1, tag=tag), leader_epoch=epoch)  # left open


def test_follower_copy_is_byte_identical(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS)
    leader = open_replica(tmp_path, "leader", clock=clock)
    follower = open_replica(tmp_path, "follower", clock=clock)
    assert leader.assign_leader_epoch(0)
    for tag in range(4):
        workload(leader, 0, tag)
        fetch_into(leader, follower, max_bytes=700, rounds=2)  # a lagging follower
        advance_hw(leader, follower)
    leader.assign_leader_epoch(3)  # a leader change with nothing lost
    for tag in range(4, 7):
        workload(leader, 3, tag)
    fetch_into(leader, follower, max_bytes=500)
    assert len(leader.segments) > 5
    stored = b"".join(files(leader, ".log").values())
    assert {h.partition_leader_epoch for h in iter_headers(stored)} == {0, 3}
    assert any(files(leader, ".txnindex").values())  # aborted transactions indexed
    assert epochs(follower) == epochs(leader) == [(0, 0), (3, epochs(leader)[1][1])]
    assert_converged(leader, follower)
    for lg in (leader, follower):
        lg.close()


def test_follower_lso_follows_the_leaders_hw(tmp_path: Path) -> None:
    leader = open_replica(tmp_path, "leader")
    follower = open_replica(tmp_path, "follower")
    leader.append(plain(2), leader_epoch=1)  # 0..1
    leader.append(txn(5, 0, 2), leader_epoch=1)  # 2..3, open
    fetch_into(leader, follower)
    advance_hw(leader, follower)
    assert follower.high_watermark == 4 and follower.last_stable_offset == 2
    leader.append_marker(5, 0, 0, commit=False, leader_epoch=1)  # 4
    fetch_into(leader, follower)
    assert follower.log_end_offset == 5 and follower.high_watermark == 4
    assert follower.last_stable_offset == 2  # the marker is not below the HW yet
    assert follower.aborted_transactions(0, 5) == [AbortedTxn(5, 2)]
    # Never above the log end, never back.
    assert not follower.set_high_watermark_as_follower(3)
    assert follower.set_high_watermark_as_follower(99)
    assert follower.high_watermark == 5 == follower.last_stable_offset


def test_log_append_time_is_not_restamped(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, message_timestamp_type="LogAppendTime")
    leader = open_replica(tmp_path, "leader", config, ManualClock(BASE_TS + 5000))
    follower = open_replica(tmp_path, "follower", config, ManualClock(BASE_TS + 99_000))
    info = leader.append(plain(3), leader_epoch=2)
    assert info.log_append_time == BASE_TS + 5000
    fetch_into(leader, follower)
    assert files(follower, ".log") == files(leader, ".log")
    assert follower.max_timestamp_and_offset() == (BASE_TS + 5000, 0)


def test_follower_refuses_what_does_not_continue_its_log(tmp_path: Path) -> None:
    leader = open_replica(tmp_path, "leader")
    follower = open_replica(tmp_path, "follower")
    for i in range(3):
        leader.append(plain(2, tag=i), leader_epoch=0)
    data = leader.read(0, 1 << 20)
    first = next(iter_headers(data))
    corrupt = bytearray(data)
    corrupt[first.size + 70] ^= 0xFF  # a record byte of the second batch: CRC mismatch
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(bytes(corrupt))
    assert follower.log_end_offset == 0  # checked before anything is written
    assert follower.append_as_follower(b"").first_offset == -1
    assert follower.append_as_follower(data[: first.size + 30]).last_offset == 1  # partial tail
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(data)  # starts below the log end
    second = data[first.size :]
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(second + second)  # overlapping batches
    assert follower.log_end_offset == 2
    info = follower.append_as_follower(leader.read(4, 1 << 20))  # a gap, as compaction leaves
    assert (info.first_offset, follower.log_end_offset) == (4, 6)


def test_follower_takes_batches_larger_than_segment_bytes(tmp_path: Path) -> None:
    leader = open_replica(tmp_path, "leader", LogConfig(segment_bytes=1 << 20))
    follower = open_replica(tmp_path, "follower")  # segment.bytes 2048
    for i in range(3):
        leader.append(plain(5, tag=i, size=1000), leader_epoch=0)  # ~5 KB each
    fetch_into(leader, follower)
    assert len(follower.segments) == 3
    assert follower.read(0, 1 << 20) + follower.read(5, 1 << 20) + follower.read(10, 1 << 20) \
        == leader.read(0, 1 << 20)


def test_follower_applies_producer_state_without_client_checks(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS)
    leader = open_replica(tmp_path, "leader", clock=clock)
    follower = open_replica(tmp_path, "follower", clock=clock)
    leader.append(idem(7, 0, 2), leader_epoch=0)
    fetch_into(leader, follower)
    # The leader forgets the producer (expiry), then accepts it at any sequence; the
    # follower still remembers it and would call that a gap. Replication does not check.
    clock.advance(10_000)
    assert leader.remove_expired_producers(clock.now_ms(), 5_000) == 1
    leader.append(idem(7, 50, 2), leader_epoch=0)
    leader.append(idem(7, 0, 2, epoch=3), leader_epoch=0)
    leader.append_marker(7, 3, 9, commit=True, leader_epoch=0)
    fetch_into(leader, follower)
    entry = follower.producer_state.last_entry(7)
    assert entry is not None and (entry.producer_epoch, entry.coordinator_epoch) == (3, 9)
    assert producer_rows(follower) == producer_rows(leader)


def test_divergent_tail_is_truncated_then_converges(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS)
    a = open_replica(tmp_path, "a", clock=clock)
    b = open_replica(tmp_path, "b", clock=clock)
    a.assign_leader_epoch(1)
    workload(a, 1, 0)
    fetch_into(a, b)
    advance_hw(a, b)
    agreed = a.log_end_offset
    # A's tail that B never fetched: an open transaction, an aborted one, idempotence.
    a.append(txn(90, 0, 2), leader_epoch=1)
    a.append(idem(7, 5, 4), leader_epoch=1)
    a.append(txn(91, 0, 2), leader_epoch=1)
    a.append_marker(91, 0, 1, commit=False, leader_epoch=1)
    for i in range(8):
        a.append(plain(3, tag=i, size=200), leader_epoch=1)
    assert a.ongoing_transactions()[90] == agreed
    assert a.aborted_transactions(agreed, a.log_end_offset)
    a.update_high_watermark(agreed)  # only B's end is committed
    a.flush()
    assert a.recovery_point > agreed
    # B leads at epoch 2 and writes its own batches; A follows it.
    b.assign_leader_epoch(2)
    b.append(idem(7, 5, 1), leader_epoch=2)  # the same producer, other data
    workload(b, 2, 1)
    truncated: list[Log] = []
    a.on_truncated = truncated.append
    assert follow_new_leader(b, a) == agreed
    assert truncated == [a]
    assert a.log_end_offset == agreed == a.recovery_point
    assert 90 not in a.ongoing_transactions()
    assert a.aborted_transactions(agreed, 1 << 30) == []
    assert epochs(a) == [(1, 0)]
    assert a.high_watermark == agreed and a.last_stable_offset <= agreed
    fetch_into(b, a, max_bytes=600)
    assert epochs(a) == [(1, 0), (2, agreed)]
    assert_converged(b, a, snapshots=False)  # A keeps its snapshot at the cut
    assert files(a, ".snapshot").items() >= files(b, ".snapshot").items()


def test_truncation_at_a_segment_boundary_keeps_segments_identical(tmp_path: Path) -> None:
    """A rolled at T for a big batch B never got; B leads and appends a small one at T,
    which fits its segment. A's segment at T must go, not stay empty, or A would put B's
    batch there and the replicas' segment files would differ for good."""
    a = open_replica(tmp_path, "a")
    b = open_replica(tmp_path, "b")
    while a.size_bytes < 1500:
        a.append(plain(2, tag=a.log_end_offset), leader_epoch=0)
    fetch_into(a, b)
    advance_hw(a, b)
    cut = a.log_end_offset
    a.append(plain(2, size=900), leader_epoch=0)
    assert a.segments[-1].base_offset == cut
    b.assign_leader_epoch(1)
    b.append(plain(1, size=10), leader_epoch=1)
    assert b.segments[-1].base_offset < cut
    assert follow_new_leader(b, a) == cut
    fetch_into(b, a)
    assert_converged(b, a, snapshots=False)


def test_truncating_below_the_hw_warns_and_clamps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lg = open_replica(tmp_path, "a")
    lg.append(plain(2), leader_epoch=0)
    lg.append(txn(5, 0, 2), leader_epoch=0)  # 2..3
    lg.append_marker(5, 0, 0, commit=True, leader_epoch=0)  # 4
    lg.append(plain(2), leader_epoch=1)  # 5..6
    lg.update_high_watermark(7)
    assert lg.last_stable_offset == 7
    with caplog.at_level(logging.WARNING):
        assert lg.truncate_to(4) == 4
    assert "below the high watermark" in caplog.text
    assert lg.high_watermark == 4 and lg.last_stable_offset == 2  # the LSO moves back
    assert lg.ongoing_transactions() == {5: 2}
    assert epochs(lg) == [(0, 0)] and lg.end_offset_for_epoch(1) == UNDEFINED
    caplog.clear()
    lg.append(plain(3), leader_epoch=2)  # 4..6
    with caplog.at_level(logging.WARNING):
        assert lg.truncate_to(4) == 4  # at the HW: nothing committed goes
    assert "below the high watermark" not in caplog.text
    assert epochs(lg) == [(0, 0)]


def test_log_start_follows_the_leader(tmp_path: Path) -> None:
    lg = open_replica(tmp_path, "f")
    for i in range(20):
        lg.append(plain(3, tag=i, size=100), leader_epoch=i // 10)
    assert lg.high_watermark == 0 and len(lg.segments) > 3
    # Above the local HW (a lagging follower's), unlike DeleteRecords.
    assert lg.maybe_increment_log_start_as_follower(33) == 33
    assert lg.high_watermark == 33 == lg.last_stable_offset
    assert lg.segments[0].base_offset <= 33 < lg.segments[1].base_offset
    assert epochs(lg) == [(1, 33)]  # epoch 0 ended at 30
    assert lg.maybe_increment_log_start_as_follower(10) == 33  # never back
    assert lg.maybe_increment_log_start_as_follower(10**6) == 60  # clamped to the log end
    lg.close()
    again = open_replica(tmp_path, "f")
    # An entry at the log end is dropped at load, as Kafka's truncateFromEnd does.
    assert again.log_start_offset == 60 and again.leader_epoch_cache.entries == ()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    lg = open_replica(tmp_path, "f")
    lg.append(txn(5, 0, 2), leader_epoch=4)
    lg.append(plain(2), leader_epoch=4)
    assert lg.truncate_fully_and_start_at(500) == 500
    assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark) == (500, 500, 500)
    assert lg.last_stable_offset == 500 and lg.ongoing_transactions() == {}
    assert lg.leader_epoch_cache.entries == () and [s.base_offset for s in lg.segments] == [500]
    assert lg.append_as_follower(b"").first_offset == -1
    lg.truncate_fully_and_start_at(500)  # a segment already at that base is emptied
    assert lg.log_end_offset == 500
    lg.close()
    assert open_replica(tmp_path, "f").log_end_offset == 500


def test_epoch_queries(tmp_path: Path) -> None:
    lg = open_replica(tmp_path, "l")
    assert lg.latest_epoch is None and lg.end_offset_for_epoch(0) == UNDEFINED
    assert lg.assign_leader_epoch(2)
    assert not lg.assign_leader_epoch(2) and not lg.assign_leader_epoch(1)
    assert lg.end_offset_for_epoch(2) == EpochEndOffset(2, 0)
    lg.append(plain(3), leader_epoch=2)
    lg.append(plain(3), leader_epoch=1)  # an older epoch than the latest: not recorded
    lg.append(plain(3), leader_epoch=5)
    assert lg.latest_epoch == 5
    assert lg.end_offset_for_epoch(2) == (2, 6)
    assert lg.end_offset_for_epoch(4) == (2, 6)
    assert lg.end_offset_for_epoch(5) == (5, 9)  # the latest: the log end
    assert lg.end_offset_for_epoch(6) == UNDEFINED


def test_embedded_logs_have_no_epochs(tmp_path: Path) -> None:
    """leader_epoch=None (the embedded broker): -1 stamped, no cache, no file."""
    lg = open_replica(tmp_path, "e")
    for i in range(10):
        lg.append(plain(3, tag=i, size=200))
    lg.append(txn(5, 0, 2))
    lg.append_marker(5, 0, 0, commit=False)
    lg.update_high_watermark(lg.log_end_offset)
    lg.flush()
    lg.apply_retention(BASE_TS + 10**12)
    lg.truncate_to(lg.log_end_offset - 1)
    data = b"".join(files(lg, ".log").values())
    assert {h.partition_leader_epoch for h in iter_headers(data)} == {NO_PARTITION_LEADER_EPOCH}
    assert lg.latest_epoch is None
    lg.close()
    assert not (lg.directory / CHECKPOINT_FILE).exists()
    again = open_replica(tmp_path, "e")
    assert again.latest_epoch is None and not (lg.directory / CHECKPOINT_FILE).exists()


# -- LogManager: the HW checkpoint, truncation checkpoints --------------------------------


def manager(root: Path, *, cluster: bool) -> LogManager:
    lm = LogManager(root, SMALL, ManualClock(BASE_TS), cluster=cluster)
    lm.load()
    return lm


def test_hw_checkpoint_round_trip(tmp_path: Path) -> None:
    lm = manager(tmp_path, cluster=True)
    lm.create_topic("t", 3, {})
    for p, hw in ((0, 4), (1, 99)):
        lg = lm.get_log("t", p)
        assert lg is not None and lg.high_watermark == 0
        for i in range(5):
            lg.append(plain(2, tag=i), leader_epoch=0)
        lg.update_high_watermark(hw)
    lm.checkpoint_high_watermarks()
    assert read_offset_checkpoint(tmp_path / REPLICATION_CHECKPOINT) == {
        ("t", 0): 4, ("t", 1): 10, ("t", 2): 0}
    lm.get_log("t", 2).append(plain(2))  # type: ignore[union-attr]
    # A crash: nothing closed. The HW comes back from the checkpoint, not the log end.
    lm2 = manager(tmp_path, cluster=True)
    assert [lm2.get_log("t", p).high_watermark for p in range(3)] == [4, 10, 0]  # type: ignore[union-attr]
    lm2.close()
    (tmp_path / REPLICATION_CHECKPOINT).write_text("0\n1\nt 1 7\n")  # others missing
    lm3 = manager(tmp_path, cluster=True)
    assert [lm3.get_log("t", p).high_watermark for p in range(3)] == [0, 7, 0]  # type: ignore[union-attr]
    lm3.close()
    (tmp_path / REPLICATION_CHECKPOINT).write_text("garbage")
    lm4 = manager(tmp_path, cluster=True)  # unreadable: every HW at its log start
    assert lm4.get_log("t", 1).high_watermark == 0  # type: ignore[union-attr]
    lm4.close()
    # Embedded: HW = log end, the file is neither read nor written.
    (tmp_path / REPLICATION_CHECKPOINT).unlink()
    lm5 = manager(tmp_path, cluster=False)
    assert [lm5.get_log("t", p).high_watermark for p in range(3)] == [10, 10, 2]  # type: ignore[union-attr]
    lm5.close()
    assert not (tmp_path / REPLICATION_CHECKPOINT).exists()


def test_truncation_checkpoints_recovery_point_and_hw_at_once(tmp_path: Path) -> None:
    lm = manager(tmp_path, cluster=True)
    lm.create_topic("t", 1, {})
    lg = lm.get_log("t", 0)
    assert lg is not None
    for i in range(6):  # a segment each: the recovery point checkpointed is capped by
        lg.append(plain(2, tag=i, size=600), leader_epoch=0)  # the active one's base
    lg.flush()
    lg.update_high_watermark(12)
    lm.checkpoint_recovery_points()
    lm.checkpoint_high_watermarks()
    assert [s.base_offset for s in lg.segments] == [0, 2, 4, 6, 8, 10]
    assert read_offset_checkpoint(tmp_path / RECOVERY_CHECKPOINT)[("t", 0)] == 10
    lg.truncate_to(7)  # cuts the batch 6-7: the segment at 6 stays, empty and active
    assert lg.recovery_point == 6 and lg.segments[-1].base_offset == 6
    assert read_offset_checkpoint(tmp_path / RECOVERY_CHECKPOINT)[("t", 0)] == 6
    assert read_offset_checkpoint(tmp_path / REPLICATION_CHECKPOINT)[("t", 0)] == 6
    lm.close()


def test_truncating_fully_checkpoints_recovery_point_and_hw_at_once(tmp_path: Path) -> None:
    """The same for `truncate_fully_and_start_at` below the checkpointed points: a
    stale recovery point left in the file would vouch for data appended later."""
    lm = manager(tmp_path, cluster=True)
    lm.create_topic("t", 1, {})
    lg = lm.get_log("t", 0)
    assert lg is not None
    for i in range(6):
        lg.append(plain(2, tag=i, size=600), leader_epoch=0)
    lg.flush()
    lg.update_high_watermark(12)
    lm.checkpoint_recovery_points()
    lm.checkpoint_high_watermarks()
    assert read_offset_checkpoint(tmp_path / RECOVERY_CHECKPOINT)[("t", 0)] == 10
    assert lg.truncate_fully_and_start_at(3) == 3
    assert lg.recovery_point == 3 == lg.high_watermark == lg.log_start_offset
    assert read_offset_checkpoint(tmp_path / RECOVERY_CHECKPOINT)[("t", 0)] == 3
    assert read_offset_checkpoint(tmp_path / REPLICATION_CHECKPOINT)[("t", 0)] == 3
    lm.close()


def test_a_follower_left_below_the_leaders_log_start_restarts_there(tmp_path: Path) -> None:
    """OFFSET_OUT_OF_RANGE after the leader deleted what a stopped follower missed: the
    fetcher's rule (replication.follower.out_of_range_action) empties the follower's log
    at the leader's log start, and fetching from there converges on the leader."""
    from tidegate.replication.follower import out_of_range_action

    leader, follower = open_replica(tmp_path, "l"), open_replica(tmp_path, "f")
    for _ in range(3):
        leader.append(plain(3), leader_epoch=0)
    fetch_into(leader, follower)
    advance_hw(leader, follower)
    for i in range(10):  # the follower is away meanwhile
        leader.append(idem(7, 2 * i), leader_epoch=1)
    leader.update_high_watermark(leader.log_end_offset)
    assert leader.delete_records_before(25) == 25
    assert follower.log_end_offset == 9 < leader.log_start_offset
    action = out_of_range_action(follower.log_end_offset, leader.log_start_offset,
                                 leader.log_end_offset)
    assert action.start_at == 25 and action.fetch_offset == 25
    follower.truncate_fully_and_start_at(action.start_at)
    fetch_into(leader, follower)
    assert (follower.log_start_offset, follower.log_end_offset) == (25, leader.log_end_offset)
    assert follower.high_watermark == leader.high_watermark
    assert leader.read(25, 1 << 20) == follower.read(25, 1 << 20)
    leader.close()
    follower.close()


def test_an_epoch_led_without_writes_leaves_at_truncation_to_the_end(tmp_path: Path) -> None:
    """A broker that led at epoch 1 without appending, then follows a leader that never
    had epoch 1 (it went 0 -> 3): the leader's diverging epoch says "truncate to your
    log end". Nothing is cut, but epoch 1 must leave the cache, or the follower keeps
    announcing it and never fetches again (Kafka's truncateTo does the same)."""
    lg = open_replica(tmp_path, "f")
    lg.append(plain(3), leader_epoch=0)
    assert lg.assign_leader_epoch(1)  # led at epoch 1, wrote nothing
    assert lg.latest_epoch == 1
    end = lg.log_end_offset
    assert lg.truncate_to(end) == end
    assert lg.latest_epoch == 0 and lg.log_end_offset == end
    lg.close()
    again = open_replica(tmp_path, "f")  # the cut reached the checkpoint file
    assert again.latest_epoch == 0
