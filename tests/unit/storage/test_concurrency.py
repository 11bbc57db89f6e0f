"""flush() from another thread while appending; retention/cleaning threads vs reads."""

from __future__ import annotations

import threading
from itertools import pairwise
from pathlib import Path

from tidegate.common.clock import ManualClock
from tidegate.storage.cleaner import clean
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log

from ._support import BASE_TS, batch, headers_of, keyed


def test_concurrent_flush_while_appending(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=8192, index_interval_bytes=256)
    log = Log.open(tmp_path / "busy-0", cfg, ManualClock(BASE_TS))
    stop = threading.Event()
    points: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def flusher(mine: list[int]) -> None:
        try:
            while not stop.is_set():
                mine.append(log.flush())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=flusher, args=(p,)) for p in points]
    for t in threads:
        t.start()
    ends = []
    for i in range(400):
        info = log.append(batch(2, value_size=100, tag=i))
        ends.append(info.last_offset + 1)
        if i % 50 == 0:
            log.update_high_watermark(log.log_end_offset)
            log.apply_retention(BASE_TS + 10**10)  # deletes segments under the flushers
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    for mine in points:  # each flusher sees the recovery point only grow...
        assert mine and all(a <= b for a, b in pairwise(mine))
        assert set(mine) <= set(ends) | {0}  # ...and always at a request boundary
    assert log.flush() == log.log_end_offset == 800
    log.close()
    log = Log.open(tmp_path / "busy-0", cfg, ManualClock(BASE_TS))
    assert log.log_end_offset == 800
    log.close()


def test_cleaner_thread_while_reading_and_appending(tmp_path: Path) -> None:
    cfg = LogConfig(cleanup_policy=("compact",), segment_bytes=1024, index_interval_bytes=64)
    log = Log.open(tmp_path / "cmp-0", cfg, ManualClock(BASE_TS))
    for i in range(200):
        log.append(keyed([(b"k%d" % (i % 7), b"v" * 40)]))
    log.update_high_watermark(log.log_end_offset)
    done = threading.Event()
    failures: list[BaseException] = []

    def cleaner() -> None:
        try:
            for _ in range(5):
                clean(log, BASE_TS)
        except BaseException as exc:
            failures.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=cleaner)
    t.start()
    while not done.is_set():
        log.append(keyed([(b"k1", b"new")]))
        for offset in range(log.log_start_offset, log.log_end_offset, 37):
            assert headers_of(log.read(offset, 1))
    t.join()
    assert not failures
    log.close()


def test_truncation_during_flush_does_not_raise_the_recovery_point(tmp_path: Path) -> None:
    """Deterministic version of the race: the log is truncated while fsync runs."""
    log = Log.open(tmp_path / "race-0", LogConfig(), ManualClock(BASE_TS))
    for i in range(10):
        log.append(batch(1, tag=i))
    active = log.segments[-1]
    real_sync = active.sync

    def sync_then_truncate(*, indexes: bool = True) -> None:
        real_sync(indexes=indexes)
        log.truncate_to(4)  # happens "concurrently", after the target was captured

    active.sync = sync_then_truncate  # type: ignore[method-assign]
    assert log.flush() <= 4
    assert log.recovery_point <= log.log_end_offset == 4
    active.sync = real_sync  # type: ignore[method-assign]
    assert log.flush() == 4
