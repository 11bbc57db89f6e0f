"""The producer state inside `Log`: de-duplication, snapshots, reopen, truncation, expiry.

Batches are real (built with `build_batch`) and go through `Log.append`, so these tests
cover the wiring the sequence-rule tests cannot: validation before offsets, the
duplicate answer, snapshots at roll and close, rebuilding at open, and the producer
state following truncation, retention and DeleteRecords.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.common.config import BrokerConfig
from tidegate.common.errors import InvalidRecordError
from tidegate.records.builder import build_batch
from tidegate.records.record import iter_batches
from tidegate.server.broker import Broker
from tidegate.storage.config import LogConfig
from tidegate.storage.errors import InvalidTimestampError
from tidegate.storage.log import Log
from tidegate.storage.producer_snapshot import list_snapshots, snapshot_path
from tidegate.storage.producer_state import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)

TS = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096)


def pbatch(pid: int, seq: int, count: int = 2, *, epoch: int = 0, ts: int = TS) -> bytes:
    """An idempotent batch whose values are its sequence numbers."""
    records = [(ts + i, None, b"v%06d" % (seq + i) + b"x" * 40) for i in range(count)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def plain(count: int = 1) -> bytes:
    return build_batch([(TS + i, None, b"plain") for i in range(count)])


def open_log(tmp: Path, config: LogConfig = SMALL, clock: ManualClock | None = None) -> Log:
    return Log.open(tmp / "t-0", config, clock or ManualClock(TS))


def values(lg: Log) -> list[bytes]:
    return [
        r.value or b""
        for seg in lg.segments
        for _h, records in iter_batches(seg.log_path.read_bytes())
        for r in records
    ]


def test_a_retried_batch_is_answered_with_its_original_offsets_and_not_written(
    tmp_path: Path,
) -> None:
    lg = open_log(tmp_path)
    first = [lg.append(pbatch(7, seq)) for seq in range(0, 12, 2)]
    end = lg.log_end_offset
    for seq, info in zip(range(2, 12, 2), first[1:]):
        dup = lg.append(pbatch(7, seq))
        assert dup.duplicate and not info.duplicate
        assert (dup.first_offset, dup.last_offset) == (info.first_offset, info.last_offset)
        assert dup.batches == [] and dup.record_count == 0
    assert lg.log_end_offset == end
    with pytest.raises(DuplicateSequenceError):  # the first batch left the cache of 5
        lg.append(pbatch(7, 0))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(pbatch(7, 20))
    assert lg.log_end_offset == end
    assert len(values(lg)) == 12


def test_duplicate_is_recognised_before_the_timestamp_check(tmp_path: Path) -> None:
    clock = ManualClock(TS)
    cfg = LogConfig(message_timestamp_before_max_ms=60_000)
    lg = open_log(tmp_path, cfg, clock)
    info = lg.append(pbatch(1, 0))
    clock.advance(120_000)
    assert lg.append(pbatch(1, 0)).duplicate  # Kafka checks the producer state first
    with pytest.raises(InvalidTimestampError):
        lg.append(pbatch(1, 2))
    assert lg.log_end_offset == info.last_offset + 1


def test_log_append_time_duplicate_reports_the_original_append_time(tmp_path: Path) -> None:
    clock = ManualClock(TS)
    lg = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock)
    info = lg.append(pbatch(1, 0))
    clock.advance(5_000)
    dup = lg.append(pbatch(1, 0))
    assert dup.duplicate and dup.log_append_time == info.log_append_time == TS


def test_idempotent_batches_must_come_alone_and_carry_a_sequence(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        lg.append(pbatch(1, 0) + pbatch(1, 2))
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        lg.append(plain() + pbatch(1, 0))
    with pytest.raises(InvalidRecordError, match="Invalid sequence number"):
        lg.append(pbatch(1, -1))
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        lg.append(plain() + plain(), single_batch=True)
    assert lg.append(plain() + plain()).record_count == 2  # internal callers may
    assert lg.log_end_offset == 2


def test_snapshots_at_roll_keep_two_and_flush_syncs_them(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for seq in range(0, 80, 2):
        lg.append(pbatch(3, seq))
        lg.append(plain())
    bases = [s.base_offset for s in lg.segments]
    assert len(bases) > 4
    snaps = [off for off, _ in list_snapshots(lg.directory)]
    assert snaps == bases[-2:]  # one per roll, at the new segment's base; newest two kept
    os.unlink(snapshot_path(lg.directory, snaps[-2]))  # deleted before the flush: fine
    assert lg.flush() == lg.log_end_offset
    lg.close()


def test_clean_close_snapshots_the_log_end_and_reopen_needs_no_replay(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    infos = [lg.append(pbatch(5, seq)) for seq in range(0, 10, 2)]
    end = lg.log_end_offset
    lg.close()
    assert snapshot_path(lg.directory, end).exists()
    lg = open_log(tmp_path)
    assert lg.producer_state.map_end_offset == end
    dup = lg.append(pbatch(5, 8))  # the last batch survives in the snapshot
    assert dup.duplicate and dup.first_offset == infos[-1].first_offset
    with pytest.raises(DuplicateSequenceError):  # older ones: delivered, offsets unknown
        lg.append(pbatch(5, 4))
    assert lg.append(pbatch(5, 10)).first_offset == end


def test_unclean_reopen_replays_the_tail_after_the_newest_snapshot(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for seq in range(0, 60, 2):
        lg.append(pbatch(9, seq))
    infos = {seq: lg.append(pbatch(9, seq)) for seq in range(60, 70, 2)}
    lg.flush()
    snaps = [off for off, _ in list_snapshots(lg.directory)]
    assert snaps and snaps[-1] <= infos[60].first_offset  # the tail is after the snapshot
    # a snapshot "from the future" (data lost in a crash) must not be loaded
    (lg.directory / f"{lg.log_end_offset + 100:020d}.snapshot").write_bytes(b"junk")
    del lg  # no close: no clean-shutdown marker, no snapshot at the end
    lg = open_log(tmp_path)
    assert not snapshot_path(lg.directory, lg.log_end_offset + 100).exists()
    for seq, info in infos.items():  # all five cached again, from the replay
        dup = lg.append(pbatch(9, seq))
        assert dup.duplicate and dup.first_offset == info.first_offset
    # 5 batches replayed: below Log's SNAPSHOT_AFTER_REPLAY, so no snapshot is written at
    # open (tests/unit/storage/test_recovery_sync.py covers a long replay)
    assert not snapshot_path(lg.directory, lg.log_end_offset).exists()


def test_truncation_rewinds_the_producer_state(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    infos = [lg.append(pbatch(2, seq)) for seq in range(0, 40, 2)]
    cut = infos[15].first_offset
    lg.truncate_to(cut)
    assert lg.producer_state.map_end_offset == cut
    assert lg.append(pbatch(2, 28)).duplicate  # still below the cut
    again = lg.append(pbatch(2, 30))  # was truncated: written anew, where it belongs
    assert not again.duplicate and again.first_offset == cut
    lg.truncate_to(0)  # below the first segment: start over
    assert lg.producer_state.producers == {} and not list_snapshots(lg.directory)
    assert lg.append(pbatch(2, 32)).first_offset == 0  # unknown producer: any sequence


def test_retention_and_delete_records_keep_producers(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for seq in range(0, 60, 2):
        lg.append(pbatch(4, seq))
        lg.append(plain())
    lg.update_high_watermark(lg.log_end_offset)
    last = lg.append(pbatch(4, 60))
    lg.update_high_watermark(lg.log_end_offset)
    lg.delete_records_before(last.first_offset)
    assert lg.log_start_offset == last.first_offset
    assert all(off >= lg.log_start_offset for off, _ in list_snapshots(lg.directory))
    assert list_snapshots(lg.directory)
    assert lg.append(pbatch(4, 60)).duplicate
    with pytest.raises(OutOfOrderSequenceError):  # still known: a gap is a gap
        lg.append(pbatch(4, 70))
    lg.close()
    lg = open_log(tmp_path)
    assert lg.append(pbatch(4, 62)).first_offset == last.last_offset + 1


def test_expiry_forgets_idle_producers(tmp_path: Path) -> None:
    clock = ManualClock(TS)
    lg = open_log(tmp_path, clock=clock)
    lg.append(pbatch(1, 0))
    clock.advance(1000)
    lg.append(pbatch(2, 0))
    assert lg.remove_expired_producers(clock.now_ms(), 1000) == 1
    assert set(lg.producer_state.producers) == {2}
    assert lg.append(pbatch(1, 50)).first_offset == 4  # forgotten: any sequence again


def test_control_appends_still_check_epochs(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    lg.append(pbatch(6, 0, epoch=3))
    coordinator_batch = build_batch(
        [(TS, None, b"c")], producer_id=6, producer_epoch=2, base_sequence=-1
    )
    with pytest.raises(InvalidProducerEpochError):
        lg.append_control(coordinator_batch)


def test_broker_expires_producers_in_every_log(tmp_path: Path) -> None:
    clock = ManualClock(TS)
    config = BrokerConfig({"log.dirs": str(tmp_path), "producer.id.expiration.ms": "1000"})
    broker = Broker(config, clock)
    broker.load()
    broker.create_topic("a", 2, {})
    for p in range(2):
        lg = broker.get_log("a", p)
        assert lg is not None
        lg.append(pbatch(10 + p, 0))
    clock.advance(999)
    assert broker.expire_producers() == 0
    clock.advance(1)
    assert broker.expire_producers() == 2
    assert broker.producer_ids.next_id() == 0
    assert (tmp_path / "tidegate-producer-ids").exists()
    broker.close()


def test_index_write_failure_does_not_fail_an_append_already_in_the_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Disk full between the log write and the index write: the batch is in the log, so
    the append succeeds (the producer state learns it) and the producer's retry is a
    duplicate, not a second copy; the index entries are written with the next append."""
    from tidegate.storage import segment
    from tidegate.storage.index_file import IndexFile

    monkeypatch.setattr(segment, "INDEX_WRITE_BYTES", 1)  # write the entries at each append
    lg = open_log(tmp_path, LogConfig(segment_bytes=1 << 20, index_interval_bytes=1))
    lg.append(pbatch(7, 0))
    real = IndexFile.write_pending
    failures = [OSError(28, "No space left on device")]

    def full_once(self: IndexFile) -> None:
        if failures and self._pending:
            raise failures.pop()
        real(self)

    monkeypatch.setattr(IndexFile, "write_pending", full_once)
    first = lg.append(pbatch(7, 2))
    assert not failures, "the index write was not attempted"
    assert not first.duplicate and first.first_offset == 2
    retry = lg.append(pbatch(7, 2))
    assert retry.duplicate and retry.first_offset == 2
    lg.append(pbatch(7, 4))
    assert values(lg) == [b"v%06d" % i + b"x" * 40 for i in range(6)]
    lg.close()
    reopened = open_log(tmp_path, LogConfig(segment_bytes=1 << 20, index_interval_bytes=1))
    assert values(reopened) == [b"v%06d" % i + b"x" * 40 for i in range(6)]
    seg = reopened.segments[0]
    assert len(seg.offset_index) == 2  # batches 2 and 3 (the first needs none): none lost
