"""LogDirSpace (a full disk logged once, low space warned) and LogDirLock (one broker per
log directory)."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.common.errors import KafkaStorageError
from tidegate.storage.dir_lock import LogDirLock, LogDirLockedError
from tidegate.storage.disk_space import CLEAR_AFTER_S, LogDirSpace, disk_full_error

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


def test_disk_full_error_follows_the_cause_chain() -> None:
    assert disk_full_error(ENOSPC) is ENOSPC
    quota = OSError(errno.EDQUOT, "Disk quota exceeded")
    try:
        try:
            raise quota
        except OSError as e:
            raise KafkaStorageError("cannot write") from e
    except KafkaStorageError as wrapped:
        assert disk_full_error(wrapped) is quota
    assert disk_full_error(OSError(errno.EIO, "I/O error")) is None
    assert disk_full_error(ValueError("x")) is None
    assert disk_full_error(None) is None


def test_full_disk_logged_once_then_cleared_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    space = LogDirSpace(tmp_path, clock=clock)
    caplog.set_level(logging.INFO)
    for i in range(50):
        assert space.write_failed(ENOSPC, f"appending to t-{i % 3}")
        clock.advance(10)
    assert space.full and space.refused == 50
    full = _lines(caplog, "disk full:")
    assert len(full) == 1 and full[0].levelno == logging.ERROR
    assert str(tmp_path) in full[0].getMessage()

    space.write_succeeded()  # too soon after the last refusal: may be a small write
    assert space.full and not _lines(caplog, "no longer full")
    clock.advance(int(CLEAR_AFTER_S * 1000))
    space.write_succeeded()
    space.write_succeeded()
    assert not space.full
    cleared = _lines(caplog, "disk no longer full:")
    assert len(cleared) == 1 and "50 refused" in cleared[0].getMessage()

    assert space.write_failed(ENOSPC, "checkpointing")  # full again: a new line
    assert len(_lines(caplog, "disk full:")) == 2


def test_other_io_errors_are_logged_every_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    space = LogDirSpace(tmp_path)
    eio = OSError(errno.EIO, "Input/output error")
    assert not space.write_failed(eio, "appending to t-0")
    assert not space.write_failed(eio, "appending to t-0")
    assert len(_lines(caplog, "storage error")) == 2
    assert not space.full


def test_low_space_warned_once_each_way(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    space = LogDirSpace(tmp_path, warn_bytes=1 << 62)  # more than any disk
    usage = space.check()
    assert usage is not None and usage.total_bytes > 0 and usage.usable_bytes >= 0
    space.check()
    warned = _lines(caplog, "under log.dir.free.space.warn.bytes")
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING and space.low
    space.warn_bytes = 0  # disabled
    space.check()
    space.check()
    assert not space.low and len(_lines(caplog, "free again")) == 1


def test_dir_lock_is_exclusive_and_names_the_holder(tmp_path: Path) -> None:
    d = tmp_path / "data"
    first = LogDirLock.acquire(d)
    assert (d / ".lock").read_text().strip() == str(os.getpid())
    with pytest.raises(LogDirLockedError) as info:
        LogDirLock.acquire(d)
    msg = str(info.value)
    assert msg.startswith(f"Failed to acquire lock on file .lock in {d.resolve()}. A Kafka "
                          "instance in another process or thread is using this directory.")
    assert info.value.holder == os.getpid() and f"process {os.getpid()}" in msg
    first.release()
    first.release()  # idempotent
    assert (d / ".lock").read_text() == ""
    with LogDirLock.acquire(d) as again:
        assert again.held
    assert not again.held
