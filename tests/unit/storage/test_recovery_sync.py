"""Start after a crash: recovery first, one file-system sync, then checkpoints and service.

`LogManager.load` opens every partition without fsyncing what recovery repaired (a cut
torn tail, rebuilt indexes, producer snapshots, removed clean-shutdown markers) and then
syncs each log directory's file system once (`files.sync_filesystem`). These tests fail
if a torn tail is no longer cut before the log is used, if the sync moves after the
recovery-point checkpoint (which would vouch for unsynced repairs), or if per-partition
fsyncs come back (the cost that made a start after kill -9 slow at 10,000 partitions).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.records.batch import iter_headers
from tidegate.storage import files, log_manager_jobs, log_manager_loading
from tidegate.storage import log as log_module
from tidegate.storage.config import topic_defaults_from_broker
from tidegate.storage.log_manager import LogManager
from tidegate.storage.producer_snapshot import snapshot_path

from ._support import BASE_TS, batch

DEFAULTS = topic_defaults_from_broker({"log.segment.bytes": "1048576"})
PARTITIONS = 20


def crashed_broker(path: Path) -> bytes:
    """A broker that wrote 3 records to each partition, fsynced them, and was killed
    (no close: no clean-shutdown markers, recovery points still 0) while writing a
    4th batch to partition 0: half of it is in the file. Returns that half batch."""
    m = LogManager(path, DEFAULTS, ManualClock(BASE_TS))
    m.load()
    m.create_topic("t", PARTITIONS, {})
    for p in range(PARTITIONS):
        lg = m.get_log("t", p)
        assert lg is not None
        lg.append(batch(3))
        lg.flush()
    torn = batch(2, tag=9)[:40]
    seg = path / "t-0" / "00000000000000000000.log"
    with open(seg, "ab") as f:
        f.write(torn)
    return torn


def test_torn_tail_is_cut_before_sync_checkpoint_and_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed_broker(tmp_path)
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    whole = len(batch(3))
    assert seg.stat().st_size == whole + 40
    events: list[str] = []
    real_sync = files.sync_filesystem
    real_checkpoint = log_manager_jobs.write_offset_checkpoint  # type: ignore[attr-defined]

    def sync(d: Path) -> None:
        # recovery has already cut the torn tail when the sync makes it durable
        events.append(f"sync size={seg.stat().st_size}")
        real_sync(d)

    def checkpoint(p: Path, values: dict[tuple[str, int], int]) -> None:
        events.append(f"checkpoint {p.name}")
        real_checkpoint(p, values)

    monkeypatch.setattr(log_manager_loading, "sync_filesystem", sync)
    monkeypatch.setattr(log_manager_jobs, "write_offset_checkpoint", checkpoint)
    m = LogManager(tmp_path, DEFAULTS, ManualClock(BASE_TS), recovery_threads=4)
    m.load()
    assert events[0] == f"sync size={whole}"
    assert events[1] == "checkpoint recovery-point-offset-checkpoint"
    lg = m.get_log("t", 0)
    assert lg is not None
    assert lg.log_end_offset == 3 and lg.high_watermark == 3
    assert [h.last_offset for h in iter_headers(lg.read(0, 1 << 20))] == [2]
    assert lg.append(batch(1)).first_offset == 3  # right after the last whole batch
    m.close()


def test_load_makes_no_fsync_per_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed_broker(tmp_path)
    calls: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        calls.append("fdatasync")
        real_fdatasync(fd)

    synced: list[Path] = []
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)

    def sync_and_note(d: Path) -> None:
        synced.append(d)
        files.sync_filesystem(d)

    monkeypatch.setattr(log_manager_loading, "sync_filesystem", sync_and_note)
    m = LogManager(tmp_path, DEFAULTS, ManualClock(BASE_TS), recovery_threads=4)
    m.load()
    # every partition was recovered (CRC-checked, txn index rebuilt, snapshot written),
    # yet only the recovery-point checkpoint is fsynced (file + directory): ~8 per
    # partition before, 160 here
    assert len(calls) <= 2, calls
    assert synced == [tmp_path]
    for p in range(PARTITIONS):
        lg = m.get_log("t", p)
        assert lg is not None and lg.log_end_offset == 3
    m.close()


def test_sync_filesystem_failure_is_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system that cannot write back (EIO) fails the start, as a failed fsync would:
    serving repaired data that may not be durable is not an option."""
    monkeypatch.setattr(files, "_libc_syncfs", lambda: (lambda _fd: -1))
    monkeypatch.setattr(ctypes, "get_errno", lambda: 5)
    with pytest.raises(OSError, match="syncfs"):
        files.sync_filesystem(tmp_path)


@pytest.mark.parametrize("threshold", [1, 1000])
def test_producer_snapshot_at_open_only_after_a_long_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threshold: int
) -> None:
    """After a crash the replayed tail is snapshotted at open only when it was long
    (`SNAPSHOT_AFTER_REPLAY` batches): a snapshot file per partition was a fifth of a
    start at 10,000 partitions, and a short tail costs less to replay again."""
    monkeypatch.setattr(log_module, "SNAPSHOT_AFTER_REPLAY", threshold)
    crashed_broker(tmp_path)
    m = LogManager(tmp_path, DEFAULTS, ManualClock(BASE_TS))
    m.load()
    lg = m.get_log("t", 1)
    assert lg is not None and lg.log_end_offset == 3
    assert snapshot_path(lg.directory, 3).exists() == (threshold == 1)
    m.close()


def test_clean_start_writes_leader_epoch_checkpoints_unsynced_then_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client's batches carry leader epoch 0 (librdkafka's), which the single-node
    broker never tracks: the first start after they were written rebuilds every
    partition's leader-epoch-checkpoint. It must not be an fsynced write per partition
    (80 % of a clean start at 10,000 partitions), yet be on disk, and synced by the
    load's syncfs."""
    from tidegate.records.builder import build_batch
    from tidegate.storage.leader_epochs import CHECKPOINT_FILE, read_leader_epoch_checkpoint

    m = LogManager(tmp_path, DEFAULTS, ManualClock(BASE_TS))
    m.load()
    m.create_topic("t", PARTITIONS, {})
    for p in range(PARTITIONS):
        lg = m.get_log("t", p)
        assert lg is not None
        lg.append(build_batch([(BASE_TS, b"k", b"v")] * 2, partition_leader_epoch=0))
    m.close()
    for p in range(PARTITIONS):
        (tmp_path / f"t-{p}" / CHECKPOINT_FILE).unlink(missing_ok=True)
    calls: list[str] = []
    order: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def sync_filesystem(d: Path) -> None:
        order.append(f"sync {len(calls)}")
        files.sync_filesystem(d)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(log_manager_loading, "sync_filesystem", sync_filesystem)
    m = LogManager(tmp_path, DEFAULTS, ManualClock(BASE_TS), recovery_threads=4)
    m.load()
    for p in range(PARTITIONS):
        entries = read_leader_epoch_checkpoint(tmp_path / f"t-{p}" / CHECKPOINT_FILE)
        assert [(e.epoch, e.start_offset) for e in entries] == [(0, 0)]
    assert len(calls) <= 2, calls  # the recovery-point checkpoint only
    assert order == ["sync 0"]  # nothing fsynced before the one syncfs
    m.close()


def test_empty_leader_epoch_checkpoint_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    """An unsynced checkpoint write cut short by a crash may leave an empty file: it must
    be rebuilt from the batches, never read as "no epochs"."""
    from tidegate.records.builder import build_batch
    from tidegate.storage.leader_epochs import CHECKPOINT_FILE, read_leader_epoch_checkpoint

    m = LogManager(tmp_path, DEFAULTS, ManualClock(BASE_TS))
    m.load()
    m.create_topic("t", 1, {})
    lg = m.get_log("t", 0)
    assert lg is not None
    lg.append(build_batch([(BASE_TS, b"k", b"v")], partition_leader_epoch=3))
    m.close()
    path = tmp_path / "t-0" / CHECKPOINT_FILE
    path.write_bytes(b"")
    m = LogManager(tmp_path, DEFAULTS, ManualClock(BASE_TS))
    m.load()
    lg = m.get_log("t", 0)
    assert lg is not None and lg.latest_epoch == 3
    assert [(e.epoch, e.start_offset) for e in read_leader_epoch_checkpoint(path)] == [(3, 0)]
    m.close()
