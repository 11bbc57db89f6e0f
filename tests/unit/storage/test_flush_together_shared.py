"""Flush rounds share syncfs calls (storage/flush_together.py `SyncfsDirs.sync`): a round
that asks while a call runs waits for the NEXT call to start and end (the running one may
have passed its data already), every round that asked meanwhile shares that one call, and
a failed call fails its own rounds and those that asked while it ran."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path

import pytest

from tidegate.storage.flush_together import SyncfsDirs


class FakeSyncfs:
    """Records each call's start and end; the first call waits for `release`."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.calls: list[tuple[float, float]] = []
        self.fail_first: OSError | None = None
        self.lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        began = time.monotonic()
        first = not self.calls and not self.started.is_set()
        self.started.set()
        if first:
            self.release.wait(5)
        with self.lock:
            self.calls.append((began, time.monotonic()))
        if first and self.fail_first is not None:
            raise self.fail_first


def _sync_in_thread(dirs: SyncfsDirs, log_dir: str,
                    out: dict[str, object], name: str) -> threading.Thread:
    def run() -> None:
        asked = time.monotonic()
        try:
            dirs.sync(log_dir)
            out[name] = (asked, time.monotonic())
        except OSError as e:
            out[name] = e

    t = threading.Thread(target=run)
    t.start()
    return t


def _start(tmp_path: Path, fake: FakeSyncfs) -> tuple[SyncfsDirs, dict[str, object],
                                                      threading.Thread]:
    dirs = SyncfsDirs([tmp_path], syncfs=fake)
    out: dict[str, object] = {}
    first = _sync_in_thread(dirs, str(tmp_path), out, "first")
    assert fake.started.wait(5)
    return dirs, out, first


def test_rounds_that_ask_during_a_call_share_the_next_one(tmp_path: Path) -> None:
    fake = FakeSyncfs()
    dirs, out, first = _start(tmp_path, fake)
    late = [_sync_in_thread(dirs, str(tmp_path), out, f"late{i}") for i in range(5)]
    time.sleep(0.1)
    assert not any(k.startswith("late") for k in out)  # none answered by the running call
    fake.release.set()
    for t in [first, *late]:
        t.join(5)
    dirs.close()
    assert len(fake.calls) == 2  # five rounds, one call for all of them
    second_began, second_ended = fake.calls[1]
    for i in range(5):
        entry = out[f"late{i}"]
        assert isinstance(entry, tuple)
        asked, answered = entry
        # covered by a call that started after the round asked, and answered after it
        assert asked <= second_began and answered >= second_ended


def test_a_failed_call_fails_the_rounds_that_asked_while_it_ran(tmp_path: Path) -> None:
    fake = FakeSyncfs()
    fake.fail_first = OSError(errno.EIO, "Input/output error")
    dirs, out, first = _start(tmp_path, fake)
    late = [_sync_in_thread(dirs, str(tmp_path), out, f"late{i}") for i in range(3)]
    time.sleep(0.1)
    fake.release.set()
    for t in [first, *late]:
        t.join(5)
    # its error is reported once through the shared descriptor, and their data may have
    # been in the writeback that failed: they fall back to per-file fsyncs
    assert all(isinstance(out[k], OSError) for k in ("first", "late0", "late1", "late2"))
    assert len(fake.calls) == 1
    # the directory's syncfs is not trusted again: a later round finds no descriptor and
    # falls back to per-file fsyncs (a test in test_durability_syncfs.py shows the flush)
    with pytest.raises(OSError):
        dirs.sync(str(tmp_path))
    assert len(fake.calls) == 1
    dirs.close()


def test_close_waits_for_the_running_call_and_later_rounds_fail(tmp_path: Path) -> None:
    fake = FakeSyncfs()
    dirs, out, first = _start(tmp_path, fake)
    closer = threading.Thread(target=dirs.close)
    closer.start()
    time.sleep(0.1)
    assert closer.is_alive()  # never frees the descriptor under a running call
    fake.release.set()
    closer.join(5)
    first.join(5)
    assert isinstance(out["first"], tuple)
    with pytest.raises(OSError):
        dirs.sync(str(tmp_path))
