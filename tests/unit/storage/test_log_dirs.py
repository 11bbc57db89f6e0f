"""Several log.dirs (JBOD): placement, per-directory meta.properties, checkpoints and
locks, a failed directory taken offline, moving a partition, a move cut short."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.common.errors import KafkaStorageError, LogDirNotFoundError
from tidegate.storage.dir_lock import LogDirLock, LogDirLockedError, LogDirLocks
from tidegate.storage.errors import InconsistentClusterIdError, LogDirectoryError
from tidegate.storage.files import read_offset_checkpoint, read_properties, write_properties
from tidegate.storage.log_dirs import copy_partition_dir
from tidegate.storage.log_manager import LogManager

from ._support import BASE_TS, batch
from .test_log_manager import DEFAULTS


def manager(dirs: list[Path], **kw: object) -> LogManager:
    m = LogManager(dirs, DEFAULTS, ManualClock(BASE_TS), **kw)  # type: ignore[arg-type]
    m.load()
    return m


def where(m: LogManager, topic: str, n: int) -> list[str]:
    return [str(m.dir_of(topic, p)) for p in range(n)]


def test_partitions_spread_over_the_least_loaded_dir_and_reload_where_they_are(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager([a, b])
    m.create_topic("t", 4, {})
    assert where(m, "t", 4) == [str(a), str(b), str(a), str(b)]
    m.create_topic("u", 1, {})  # a tie again: the first listed
    m.create_partitions("u", 2)  # a has 3 now: the new one goes to b
    assert where(m, "u", 2) == [str(a), str(b)]
    for p in range(4):
        lg = m.get_log("t", p)
        assert lg is not None
        lg.append(batch(3, tag=p))
    props_a = read_properties(a / "meta.properties")
    props_b = read_properties(b / "meta.properties")
    assert props_a == props_b and props_a is not None and props_a["node.id"] == "1"
    m.close()
    # each directory's checkpoint names exactly the partitions it holds
    assert set(read_offset_checkpoint(a / "recovery-point-offset-checkpoint")) == {
        ("t", 0), ("t", 2), ("u", 0)}
    assert set(read_offset_checkpoint(b / "recovery-point-offset-checkpoint")) == {
        ("t", 1), ("t", 3), ("u", 1)}
    assert (a / "tidegate-topics.json").exists() and not (b / "tidegate-topics.json").exists()
    m2 = manager([a, b])
    assert where(m2, "t", 4) == [str(a), str(b), str(a), str(b)]
    for p in range(4):
        lg = m2.get_log("t", p)
        assert lg is not None and lg.log_end_offset == 3
        assert lg.directory.parent == (a if p % 2 == 0 else b)
    m2.close()


def test_one_dir_keeps_its_layout(tmp_path: Path) -> None:
    m = manager([tmp_path / "only"])
    m.create_topic("t", 2, {})
    m.close()
    names = sorted(os.listdir(tmp_path / "only"))
    assert names == ["meta.properties", "recovery-point-offset-checkpoint", "t-0", "t-1",
                     "tidegate-topics.json"]


def test_a_new_second_dir_takes_the_cluster_id_and_foreign_dirs_are_refused(
    tmp_path: Path,
) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    manager([a]).close()
    m = manager([b, a])  # the new one is listed first: it still gets a's cluster id
    cid = m.cluster_id
    m.close()
    assert read_properties(b / "meta.properties") == read_properties(a / "meta.properties")
    c.mkdir()
    props = {"version": "1", "node.id": "2", "cluster.id": cid}
    write_properties(c / "meta.properties", props, "another broker's")
    with pytest.raises(LogDirectoryError, match=r"node\.id 2"):
        manager([a, c])
    write_properties(c / "meta.properties", {**props, "node.id": "1", "cluster.id": "x"},
                     "another cluster's")
    with pytest.raises(InconsistentClusterIdError):
        manager([a, c])
    with pytest.raises(LogDirectoryError, match="twice"):
        LogManager([a, tmp_path / "b" / ".." / "a"], DEFAULTS, ManualClock(BASE_TS))


def test_the_same_partition_in_two_dirs_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager([a, b])
    m.create_topic("t", 1, {})
    m.close()
    shutil.copytree(a / "t-0", b / "t-0")
    with pytest.raises(LogDirectoryError, match="Duplicate log directories"):
        manager([a, b])


def _eio() -> OSError:
    return OSError(errno.EIO, os.strerror(errno.EIO))


def test_an_io_error_takes_its_dir_offline_and_the_other_keeps_serving(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager([a, b])
    m.create_topic("t", 2, {})
    m.write_failed("t", 1, _eio(), "appending to t-1")
    assert m.is_offline("t", 1) and not m.is_offline("t", 0)
    assert m.get_log("t", 1) is None and b in m.dirs.offline
    lg = m.get_log("t", 0)
    assert lg is not None
    lg.append(batch(2))
    m.create_topic("v", 2, {})  # new partitions only go to online directories
    assert where(m, "v", 2) == [str(a), str(a)]
    with pytest.raises(KafkaStorageError):
        m.move("t", 0, b)
    m.checkpoint_recovery_points()
    assert ("t", 0) in read_offset_checkpoint(a / "recovery-point-offset-checkpoint")
    m.close()
    # a full disk is not a failed directory, and one directory never goes offline
    m2 = manager([a, b])
    m2.write_failed("t", 0, OSError(errno.ENOSPC, "full"), "appending to t-0")
    assert not m2.dirs.offline and m2.space.full
    m2.close()
    single = manager([tmp_path / "s"])
    single.create_topic("t", 1, {})
    single.write_failed("t", 0, _eio(), "appending to t-0")
    assert not single.dirs.offline and single.get_log("t", 0) is not None
    single.close()


def test_move_keeps_the_data_and_survives_a_restart(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager([a, b])
    m.create_topic("t", 1, {})
    lg = m.get_log("t", 0)
    assert lg is not None
    for i in range(20):
        lg.append(batch(5, tag=i))  # several segments (4 KB each)
    assert m.move("t", 0, b)
    moved = m.get_log("t", 0)
    assert moved is not None and moved is not lg and moved.directory == b / "t-0"
    assert moved.log_end_offset == 100 and not (a / "t-0").exists()
    assert not m.move("t", 0, b)  # already there
    with pytest.raises(LogDirNotFoundError):
        m.move("t", 0, tmp_path / "c")
    moved.append(batch(1))
    m.close()
    m2 = manager([a, b])
    again = m2.get_log("t", 0)
    assert again is not None and again.directory == b / "t-0" and again.log_end_offset == 101
    first = batch(5, tag=0)
    assert again.read(0, len(first)) == first  # the first batch, byte for byte
    m2.close()


@pytest.mark.parametrize("source_renamed", [False, True])
def test_a_move_cut_short_is_undone_or_finished_at_load(tmp_path: Path,
                                                         source_renamed: bool) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager([a, b])
    m.create_topic("t", 1, {})
    lg = m.get_log("t", 0)
    assert lg is not None
    lg.append(batch(4))
    m.close()
    future = copy_partition_dir(a / "t-0", b)
    if source_renamed:
        os.replace(a / "t-0", a / "t-0.0123-delete")
    m2 = manager([a, b])
    home = b if source_renamed else a
    lg2 = m2.get_log("t", 0)
    assert lg2 is not None and lg2.directory == home / "t-0" and lg2.log_end_offset == 4
    assert not future.exists() and sorted(p.name for p in b.iterdir() if p.is_dir()) == (
        ["t-0"] if source_renamed else [])
    m2.close()


def test_background_jobs_take_a_failed_dir_offline(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    m = manager([a, b, c])
    m.create_topic("t", 3, {})
    logs = [m.get_log("t", p) for p in range(3)]
    assert all(lg is not None for lg in logs)

    def fail(*_args: object) -> int:
        raise _eio()

    monkeypatch.setattr(logs[0], "flush", fail)
    m.flush_all()  # a's log fails its fsync: a goes offline, b and c are flushed
    monkeypatch.setattr(logs[1], "apply_retention", fail)
    m.run_retention(BASE_TS)
    assert set(m.dirs.offline) == {a, b}
    os.rename(c, tmp_path / "gone")  # the directory vanishes: its checkpoint fails
    m.checkpoint_recovery_points()
    assert set(m.dirs.offline) == {a, b, c} and m.is_offline("t", 2)
    m.close()


def test_every_dir_is_locked_and_a_refused_lock_releases_the_others(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    held_b = LogDirLock.acquire(b)  # another broker holds b
    with pytest.raises(LogDirLockedError):
        LogDirLocks.acquire([a, b])
    LogDirLock.acquire(a).release()  # a was released on the way out
    held_b.release()
    locks = LogDirLocks.acquire([a, b])
    assert locks.held
    with pytest.raises(LogDirLockedError):
        LogDirLock.acquire(b)
    locks.release()
    assert not locks.held
    with pytest.raises(LogDirectoryError, match="twice"):
        LogDirLocks.acquire([a, b / ".." / "a"])
