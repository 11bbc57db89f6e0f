"""Helpers for the replication tests: a leader and a follower `Log` in two directories,
the fetch loop a replica fetcher runs, and the checks that two replicas converged."""

from __future__ import annotations

from pathlib import Path

from tidegate.common.clock import ManualClock
from tidegate.records.builder import build_batch
from tidegate.replication.follower import truncation_offset
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log
from tidegate.storage.producer_snapshot import SnapshotEntry

from ._support import BASE_TS, SMALL


def open_replica(root: Path, name: str, config: LogConfig = SMALL,
                 clock: ManualClock | None = None) -> Log:  # fmt: skip
    return Log.open(root / name / "t-0", config, clock or ManualClock(BASE_TS))


def records(n: int, tag: int, size: int = 30) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(BASE_TS + i, b"k%d" % (i % 3), b"%d:%d:" % (tag, i) + b"x" * size) for i in range(n)]


def idem(pid: int, seq: int, n: int = 2, *, epoch: int = 0, tag: int = 0) -> bytes:
    return build_batch(records(n, tag), producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def txn(pid: int, seq: int, n: int = 2, *, epoch: int = 0, tag: int = 0) -> bytes:
    return build_batch(records(n, tag), producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)  # fmt: skip


def plain(n: int = 3, *, tag: int = 0, size: int = 30) -> bytes:
    return build_batch(records(n, tag, size))


def fetch_into(leader: Log, follower: Log, max_bytes: int = 1 << 20,
               rounds: int | None = None) -> int:  # fmt: skip
    """What a replica fetcher does: read the leader from the follower's log end, append,
    then take the HW and log start the fetch response carries. Returns fetches made."""
    done = 0
    while follower.log_end_offset < leader.log_end_offset and (rounds is None or done < rounds):
        data = leader.read(follower.log_end_offset, max_bytes)
        assert data, "the leader has data beyond the follower's end"
        follower.append_as_follower(data)
        done += 1
    follower.set_high_watermark_as_follower(leader.high_watermark)
    follower.maybe_increment_log_start_as_follower(leader.log_start_offset)
    return done


def advance_hw(leader: Log, *followers: Log) -> None:
    """The leader's HW is the smallest log end of its in-sync replicas."""
    leader.update_high_watermark(min(lg.log_end_offset for lg in (leader, *followers)))
    for f in followers:
        f.set_high_watermark_as_follower(leader.high_watermark)


def follow_new_leader(leader: Log, follower: Log) -> int:
    """The follower's side of a leader change: the OffsetForLeaderEpoch dialogue
    (`replication.follower`), then the truncation. Returns the truncation offset."""
    epoch = follower.latest_epoch
    if epoch is None:
        offset = follower.high_watermark
    else:
        while True:
            answer = leader.end_offset_for_epoch(epoch)
            point = truncation_offset(
                follower.leader_epoch_cache, follower.log_end_offset, answer.epoch,
                answer.end_offset, high_watermark=follower.high_watermark,
            )
            if point.complete:
                offset = point.offset
                break
            follower.truncate_to(point.offset)
            assert point.ask_again_with is not None
            epoch = point.ask_again_with
    follower.truncate_to(offset)
    return offset


def files(lg: Log, ext: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(lg.directory.glob(f"*{ext}"))}


def producer_rows(lg: Log) -> list[SnapshotEntry]:
    """The producer state as a snapshot would store it, without the local idle clock."""
    return sorted(e._replace(timestamp=0) for e in lg.producer_state.to_snapshot_entries())


def epochs(lg: Log) -> list[tuple[int, int]]:
    """Epoch starts of the data in the log (a new leader's entry at its end, before its
    first write, is not in its followers' caches yet)."""
    return [(e.epoch, e.start_offset) for e in lg.leader_epoch_cache.entries
            if e.start_offset < lg.log_end_offset]  # fmt: skip


def assert_converged(leader: Log, follower: Log, *, snapshots: bool = True) -> None:
    assert follower.log_end_offset == leader.log_end_offset
    assert files(follower, ".log") == files(leader, ".log")
    assert files(follower, ".txnindex") == files(leader, ".txnindex")
    if snapshots:
        assert files(follower, ".snapshot") == files(leader, ".snapshot")
    assert producer_rows(follower) == producer_rows(leader)
    assert follower.ongoing_transactions() == leader.ongoing_transactions()
    assert epochs(follower) == epochs(leader)
    advance_hw(leader, follower)
    assert follower.high_watermark == leader.high_watermark == leader.log_end_offset
    assert follower.last_stable_offset == leader.last_stable_offset
    start, end = leader.log_start_offset, leader.log_end_offset
    assert follower.aborted_transactions(start, end) == leader.aborted_transactions(start, end)
