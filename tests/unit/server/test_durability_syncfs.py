"""Group commit with syncfs (server/durability.py, storage/flush_together.py): a round of
at least `log.flush.syncfs.threshold` logs is made durable with one syncfs per log
directory and no fsync of any file, and every log's recovery point reaches what was
appended before the round; a round below it fsyncs each file; a failed syncfs falls back
to fsyncing each file, so only the logs whose own fsync fails fail their writes."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.records.builder import build_batch
from tidegate.server.durability import GroupCommit
from tidegate.storage import flush_together as ft
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log

TS = 1_700_000_000_000
LOGS = 10
THRESHOLD = 4


def _logs(root: Path, n: int) -> list[Log]:
    return [Log.open(root / f"t-{i}", LogConfig(), ManualClock(TS)) for i in range(n)]


def _append(lg: Log, n: int = 1) -> int:
    info = lg.append(build_batch([(TS + i, b"k", b"v" * 100) for i in range(n)]))
    return info.last_offset + 1


class Calls:
    """Counts syncfs and fdatasync calls; makes either fail on demand."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.syncfs = 0
        self.fdatasync: list[str] = []
        self.syncfs_error: OSError | None = None
        self.fail_file: str | None = None  # a path fragment whose fdatasync fails
        self.during_syncfs: Callable[[], None] | None = None
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            self.fdatasync.append(path)
            if self.fail_file is not None and self.fail_file in path:
                raise OSError(errno.EIO, "Input/output error")
            real(fd)

        def syncfs(fd: int) -> None:
            self.syncfs += 1
            if self.during_syncfs is not None:
                self.during_syncfs()
            if self.syncfs_error is not None:
                raise self.syncfs_error

        monkeypatch.setattr(os, "fdatasync", fdatasync)
        monkeypatch.setattr(ft, "syncfs_reporting_errors", lambda: syncfs)


def _round(tmp_path: Path, calls: Calls, n: int,
           before: Callable[[list[Log]], None] | None = None,
           ) -> tuple[list[Log], list[int], list[BaseException | None]]:
    logs = _logs(tmp_path, n)
    for lg in logs:  # a first round makes the segment files' creation durable
        lg.flush()
    calls.fdatasync.clear()
    outcomes: list[BaseException | None] = []

    async def main() -> None:
        gc = GroupCommit(lambda _t, _rp: None)
        assert gc.use_syncfs([tmp_path], THRESHOLD)
        if before is not None:
            before(logs)
        ends = [_append(lg, 3) for lg in logs]
        got = await asyncio.gather(*(gc.wait_durable(lg, end) for lg, end in zip(logs, ends)),
                                   return_exceptions=True)
        outcomes.extend(g if isinstance(g, BaseException) else None for g in got)
        gc.close()

    asyncio.run(main())
    points = [lg.recovery_point for lg in logs]
    return logs, points, outcomes


def test_a_round_at_the_threshold_is_one_syncfs_and_no_fsync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    logs, points, outcomes = _round(tmp_path, calls, LOGS)
    assert outcomes == [None] * LOGS
    assert calls.syncfs == 1
    assert calls.fdatasync == []
    assert points == [lg.log_end_offset for lg in logs] == [3] * LOGS
    # the segments' own dirty flags stay set: a later per-file flush still fsyncs
    for lg in logs:
        _append(lg)
        lg.flush()
    assert len(calls.fdatasync) == LOGS


def test_a_round_below_the_threshold_fsyncs_each_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    _, points, outcomes = _round(tmp_path, calls, THRESHOLD - 1)
    assert outcomes == [None] * (THRESHOLD - 1)
    assert calls.syncfs == 0
    assert len([p for p in calls.fdatasync if p.endswith(".log")]) == THRESHOLD - 1
    assert points == [3] * (THRESHOLD - 1)


def test_the_recovery_point_stops_at_what_was_captured_before_the_syncfs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append that lands while syncfs runs was not covered by it: the recovery point
    must not pass it (a later round makes it durable)."""
    calls = Calls(monkeypatch)
    logs: list[Log] = []

    def append_more() -> None:
        for lg in logs:
            _append(lg, 2)

    def keep(found: list[Log]) -> None:
        logs.extend(found)
        calls.during_syncfs = append_more

    _, points, outcomes = _round(tmp_path, calls, LOGS, before=keep)
    assert outcomes == [None] * LOGS
    assert points == [3] * LOGS  # not 5: those 2 records came after the capture
    assert all(lg.log_end_offset == 5 for lg in logs)


def test_a_failed_syncfs_falls_back_to_fsyncing_each_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """syncfs reports a lost write: each log is fsynced on its own; only the log whose
    file's fsync fails fails its writers and keeps its recovery point."""
    calls = Calls(monkeypatch)
    calls.syncfs_error = OSError(errno.EIO, "Input/output error")
    calls.fail_file = "/t-3/"
    _, points, outcomes = _round(tmp_path, calls, LOGS)
    assert calls.syncfs == 1
    assert isinstance(outcomes[3], OSError) and outcomes[3].errno == errno.EIO
    assert [o for i, o in enumerate(outcomes) if i != 3] == [None] * (LOGS - 1)
    assert points[3] == 0
    assert [p for i, p in enumerate(points) if i != 3] == [3] * (LOGS - 1)
    # every log's data file was fsynced on its own after the failed syncfs
    assert {Path(p).parent.name for p in calls.fdatasync if p.endswith(".log")} == {
        f"t-{i}" for i in range(LOGS)}


def test_after_a_failed_syncfs_the_directory_is_fsynced_file_by_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed syncfs may have lost the pages of a log in no round then, and the next
    syncfs would not report it again: later rounds fsync each file, whose own descriptor
    still reports the lost write."""
    calls = Calls(monkeypatch)
    calls.syncfs_error = OSError(errno.EIO, "Input/output error")
    logs = _logs(tmp_path, LOGS)
    for lg in logs:
        lg.flush()
    calls.fdatasync.clear()

    async def main() -> list[object]:
        gc = GroupCommit(lambda _t, _rp: None)
        assert gc.use_syncfs([tmp_path], THRESHOLD)
        first = [_append(lg) for lg in logs]
        await asyncio.gather(*(gc.wait_durable(lg, e) for lg, e in zip(logs, first)),
                             return_exceptions=True)
        assert calls.syncfs == 1
        calls.syncfs_error = None  # the disk "recovered": syncfs would now say nothing
        calls.fdatasync.clear()
        calls.fail_file = "/t-5/"  # t-5's lost write shows only on its own descriptor
        again = [_append(lg) for lg in logs]
        got = await asyncio.gather(*(gc.wait_durable(lg, e) for lg, e in zip(logs, again)),
                                   return_exceptions=True)
        gc.close()
        return list(got)

    got = asyncio.run(main())
    assert calls.syncfs == 1  # never called again for this directory
    assert isinstance(got[5], OSError)
    assert [g for i, g in enumerate(got) if i != 5] == [None] * (LOGS - 1)
    assert {Path(p).parent.name for p in calls.fdatasync if p.endswith(".log")} == {
        f"t-{i}" for i in range(LOGS)}


def test_off_when_syncfs_cannot_report_errors(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ft, "syncfs_reporting_errors", lambda: None)

    async def main() -> bool:
        return GroupCommit(lambda _t, _rp: None).use_syncfs([tmp_path], THRESHOLD)

    assert asyncio.run(main()) is False
