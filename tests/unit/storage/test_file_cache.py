"""The bounded LRU of segment file descriptors (file_cache), and logs living under it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.storage.config import topic_defaults_from_broker
from tidegate.storage.file_cache import FILES, FileCache
from tidegate.storage.log import Log
from tidegate.storage.log_manager import LogManager

from ._support import BASE_TS, batch


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_bound_holds_and_evicted_files_reopen_with_their_data(tmp_path: Path) -> None:
    cache = FileCache(16)
    before = open_fds()
    files = []
    for i in range(100):
        f = cache.open(tmp_path / f"{i}.log", os.O_RDWR | os.O_CREAT)
        with f as fd:
            os.pwrite(fd, f"file {i}".encode(), 0)
        files.append(f)
    assert cache.open_count == 16
    assert open_fds() - before <= 16
    for i, f in enumerate(files):  # every one readable again, through a reopened fd
        with f as fd:
            assert os.pread(fd, 20, 0) == f"file {i}".encode()
    assert cache.reopens >= 84
    for f in files:
        f.close()
    assert cache.open_count == 0 and open_fds() == before


def test_a_pinned_descriptor_survives_other_threads_evictions(tmp_path: Path) -> None:
    cache = FileCache(16)
    a = cache.open(tmp_path / "a", os.O_RDWR | os.O_CREAT)
    with a as fd:
        inode = os.fstat(fd).st_ino

        def churn() -> None:
            for i in range(200):
                with cache.open(tmp_path / f"x{i}", os.O_RDWR | os.O_CREAT):
                    pass

        t = threading.Thread(target=churn)
        t.start()
        t.join()
        # still our file: eviction skipped it while pinned (a closed number could
        # have been handed to one of the churned files)
        assert os.fstat(fd).st_ino == inode
    assert cache.open_count <= 16


def test_held_file_stays_usable_after_unlink_and_a_deleted_one_is_not_recreated(
    tmp_path: Path,
) -> None:
    cache = FileCache(16)
    held = cache.open(tmp_path / "held", os.O_RDWR | os.O_CREAT)
    gone = cache.open(tmp_path / "gone", os.O_RDWR | os.O_CREAT)
    with held as fd:
        os.pwrite(fd, b"still here", 0)
    held.hold()
    os.unlink(tmp_path / "held")
    os.unlink(tmp_path / "gone")
    for i in range(40):  # evict everything not held
        cache.open(tmp_path / f"y{i}", os.O_RDWR | os.O_CREAT)
    with held as fd:
        assert os.pread(fd, 10, 0) == b"still here"
    assert not gone.is_open
    with pytest.raises(FileNotFoundError), gone:
        pass
    assert not (tmp_path / "gone").exists()  # a reopen never creates
    held.close()
    with pytest.raises(OSError), held:
        pass


def test_logs_work_under_a_tiny_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """60 partitions x 3+ files each, 16 descriptors: appends, reads, flushes, retention
    and reopening all still right, and the process never holds more than the bound."""
    monkeypatch.setattr(FILES, "max_open", 16)
    defaults = topic_defaults_from_broker({"log.segment.bytes": "2048"})
    before = open_fds()
    m = LogManager(tmp_path, defaults, ManualClock(BASE_TS))
    m.load()
    m.create_topic("t", 60, {})
    for _ in range(5):
        for p in range(60):
            lg = m.get_log("t", p)
            assert lg is not None
            lg.append(batch(3, value_size=200))
            assert open_fds() - before <= 16 + 4  # + the few a roll opens transiently
    m.flush_all()
    for p in range(60):
        lg = m.get_log("t", p)
        assert lg is not None and lg.recovery_point == 15
        assert len(lg.segments) > 1
        assert lg.read(0, 1 << 20) and lg.read(12, 1 << 20)  # first and last segments
    m.close()
    m2 = LogManager(tmp_path, defaults, ManualClock(BASE_TS))
    m2.load()
    assert all(lg.log_end_offset == 15 for _, _, lg in m2.logs())
    m2.close()


def test_partitions_load_on_recovery_threads(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = topic_defaults_from_broker({})
    m = LogManager(tmp_path, defaults, ManualClock(BASE_TS), recovery_threads=4)
    m.load()
    m.create_topic("t", 20, {})
    for p in range(20):
        lg = m.get_log("t", p)
        assert lg is not None
        for _ in range(p):
            lg.append(batch(1))
    m.close()
    threads: set[str] = set()
    real_open = Log.open

    def spy(*a: object, **kw: object) -> Log:
        threads.add(threading.current_thread().name)
        return real_open(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Log, "open", spy)
    m2 = LogManager(tmp_path, defaults, ManualClock(BASE_TS), recovery_threads=4)
    m2.load()
    assert all(name.startswith("log-recovery") for name in threads) and len(threads) > 1
    assert [(t, p, lg.log_end_offset) for t, p, lg in m2.logs()] == [
        ("t", p, p) for p in range(20)
    ]
    m2.close()


def test_first_open_and_evicted_close_run_outside_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start opens ~4 files per partition on several threads: an open(2) or close(2)
    under the cache's one lock made them all wait in line."""
    cache = FileCache(max_open=16)
    held: list[str] = []
    real_open, real_close = os.open, os.close

    def checking_open(path: object, flags: int, mode: int = 0o777) -> int:
        if cache._lock.locked():
            held.append(f"open {path}")
        return real_open(path, flags, mode)  # type: ignore[arg-type]

    def checking_close(fd: int) -> None:
        if cache._lock.locked():
            held.append(f"close {fd}")
        real_close(fd)

    monkeypatch.setattr(os, "open", checking_open)
    monkeypatch.setattr(os, "close", checking_close)
    files = [cache.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(40)]
    assert held == []
    assert cache.open_count == 16
    assert not files[0].is_open and files[-1].is_open
    for f in files:  # every one still usable (reopened) and writable
        with f as fd:
            os.pwrite(fd, b"x", 0)
    monkeypatch.setattr(os, "open", real_open)
    monkeypatch.setattr(os, "close", real_close)
    for f in files:
        f.close()
    assert cache.open_count == 0
