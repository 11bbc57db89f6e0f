"""The leader epoch cache and its `leader-epoch-checkpoint` file (storage/leader_epochs.py),
and the cache kept by a `Log`: lazy writes, recovery's rebuild, cuts at both ends."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.common.clock import ManualClock
from tidegate.common.errors import KafkaStorageError
from tidegate.storage import leader_epochs, log_replica
from tidegate.storage.disk_space import disk_full_error
from tidegate.storage.leader_epochs import (
    CHECKPOINT_FILE,
    UNDEFINED,
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)
from tidegate.storage.log import Log

from ._support import BASE_TS, SMALL, batch


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(None, [EpochEntry(e, o) for e, o in pairs])


def pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


# -- the file -----------------------------------------------------------------------------


def test_checkpoint_has_kafkas_text_format(tmp_path: Path) -> None:
    cache = LeaderEpochCache.load(tmp_path)
    cache.assign(0, 0)
    cache.assign(3, 1200)
    assert (tmp_path / CHECKPOINT_FILE).read_bytes() == b"0\n2\n0 0\n3 1200\n"
    assert not list(tmp_path.glob("*.tmp"))
    assert pairs(LeaderEpochCache.load(tmp_path)) == [(0, 0), (3, 1200)]


def test_empty_cache_writes_an_empty_checkpoint(tmp_path: Path) -> None:
    cache = LeaderEpochCache.load(tmp_path)
    cache.assign(1, 5)
    cache.clear_and_flush()
    assert (tmp_path / CHECKPOINT_FILE).read_bytes() == b"0\n0\n"
    assert LeaderEpochCache.load(tmp_path).entries == ()


def test_absent_file_is_an_empty_cache(tmp_path: Path) -> None:
    assert read_leader_epoch_checkpoint(tmp_path / CHECKPOINT_FILE) == []
    assert LeaderEpochCache.load(tmp_path).latest_epoch is None


@pytest.mark.parametrize(
    "text",
    [
        "1\n1\n0 0\n",  # unknown version
        "0\n2\n0 0\n",  # count says 2, one line
        "0\nx\n",  # count not a number
        "0\n1\n0\n",  # one field
        "0\n1\n0 zero\n",  # not an int
        "0\n",  # no count
    ],
)
def test_malformed_checkpoint_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / CHECKPOINT_FILE).write_text(text)
    with pytest.raises(ValueError):
        LeaderEpochCache.load(tmp_path)


def test_non_monotonic_file_is_repaired_on_load(tmp_path: Path) -> None:
    """Loading applies the assignment rule, as Kafka's constructor does."""
    write_leader_epoch_checkpoint(
        tmp_path / CHECKPOINT_FILE, [EpochEntry(1, 0), EpochEntry(4, 50), EpochEntry(2, 60)]
    )
    assert pairs(LeaderEpochCache.load(tmp_path)) == [(1, 0), (2, 60)]


def test_no_op_assign_does_not_rewrite_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[object] = []
    real = leader_epochs.write_leader_epoch_checkpoint

    def counting(path: Path, entries: object) -> None:
        writes.append(entries)
        real(path, entries)  # type: ignore[arg-type]

    monkeypatch.setattr(leader_epochs, "write_leader_epoch_checkpoint", counting)
    cache = LeaderEpochCache.load(tmp_path)
    assert cache.assign(2, 10)
    for offset in (10, 11, 50):  # every later batch of epoch 2
        assert not cache.assign(2, offset)
    cache.truncate_from_end(100)  # nothing starts at or after 100
    cache.truncate_from_start(5)  # nothing starts at or before 5
    assert len(writes) == 1
    assert cache.assign(3, 60, flush=False)  # memory only until flush()
    assert len(writes) == 1
    cache.flush()
    assert len(writes) == 2
    assert pairs(LeaderEpochCache.load(tmp_path)) == [(2, 10), (3, 60)]


def test_write_failure_is_a_storage_error_with_the_os_error_as_cause(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "missing-dir" / CHECKPOINT_FILE)
    with pytest.raises(KafkaStorageError) as info:
        cache.assign(0, 0)
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.ENOENT
    assert disk_full_error(info.value) is None  # not mistaken for a full disk


# -- assign -------------------------------------------------------------------------------


def test_assign_ignores_the_current_epoch_at_later_offsets() -> None:
    cache = cache_of((0, 0), (2, 10))
    assert not cache.assign(2, 15)
    assert pairs(cache) == [(0, 0), (2, 10)]


def test_assign_same_epoch_at_an_earlier_offset_moves_its_start() -> None:
    cache = cache_of((0, 0), (2, 10))
    assert cache.assign(2, 7)
    assert pairs(cache) == [(0, 0), (2, 7)]


def test_assign_removes_entries_it_contradicts() -> None:
    # A newer epoch starting before the latest entry's start: the log was truncated below
    # it without the cache (Kafka warns and keeps the cache consistent with the log).
    cache = cache_of((0, 0), (2, 10), (3, 20))
    assert cache.assign(4, 15)
    assert pairs(cache) == [(0, 0), (2, 10), (4, 15)]
    # An older epoch than the latest one: everything from that epoch on goes.
    assert cache.assign(1, 30)
    assert pairs(cache) == [(0, 0), (1, 30)]


def test_assign_refuses_negative_values() -> None:
    cache = LeaderEpochCache()
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


# -- queries ------------------------------------------------------------------------------


def test_end_offset_for() -> None:
    cache = cache_of((1, 0), (3, 10), (6, 25))
    leo = 40
    assert cache.end_offset_for(-1, leo) == UNDEFINED
    assert cache.end_offset_for(6, leo) == (6, 40)  # latest: the log end
    assert cache.end_offset_for(7, leo) == UNDEFINED  # above every epoch
    assert cache.end_offset_for(3, leo) == (3, 25)
    assert cache.end_offset_for(4, leo) == (3, 25)  # largest epoch <= 4 is 3
    assert cache.end_offset_for(5, leo) == (3, 25)
    assert cache.end_offset_for(1, leo) == (1, 10)
    assert cache.end_offset_for(2, leo) == (1, 10)
    # Below the earliest epoch: Kafka answers the requested epoch and the first start.
    assert cache.end_offset_for(0, leo) == EpochEndOffset(0, 0)
    assert LeaderEpochCache().end_offset_for(0, 5) == UNDEFINED
    assert UNDEFINED.undefined and not EpochEndOffset(0, 0).undefined


def test_epoch_for_offset() -> None:
    cache = cache_of((1, 5), (3, 10))
    assert cache.epoch_for_offset(4) is None
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(10) == 3
    assert cache.epoch_for_offset(1000) == 3
    assert LeaderEpochCache().epoch_for_offset(0) is None


def test_truncate_from_end() -> None:
    cache = cache_of((1, 0), (3, 10), (6, 25))
    cache.truncate_from_end(25)  # the entry starting at 25 goes
    assert pairs(cache) == [(1, 0), (3, 10)]
    cache.truncate_from_end(11)
    assert pairs(cache) == [(1, 0), (3, 10)]
    cache.truncate_from_end(3)
    assert pairs(cache) == [(1, 0)]
    cache.truncate_from_end(0)
    assert pairs(cache) == []


def test_truncate_from_start() -> None:
    cache = cache_of((1, 0), (3, 10), (6, 25))
    cache.truncate_from_start(12)  # epoch 3 now starts at the log start
    assert pairs(cache) == [(3, 12), (6, 25)]
    cache.truncate_from_start(25)  # exactly at a start: that entry is kept as is
    assert pairs(cache) == [(6, 25)]
    cache.truncate_from_start(3)  # below every start: nothing
    assert pairs(cache) == [(6, 25)]


# -- against a reference: the epochs of a log ---------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 3), st.integers(1, 4)),  # epoch bump, count
        st.tuples(st.just("truncate_end"), st.integers(0, 60), st.just(0)),
        st.tuples(st.just("truncate_start"), st.integers(0, 60), st.just(0)),
    ),
    max_size=30,
)


def _reference(log: list[int], start: int) -> list[tuple[int, int]]:
    """Where each epoch starts in `log` (offset -> epoch), from the log start."""
    out: list[tuple[int, int]] = []
    for offset in range(start, len(log)):
        if not out or out[-1][0] != log[offset]:
            out.append((log[offset], offset))
    return out


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_cache_follows_the_log_it_describes(ops: list[tuple[str, int, int]]) -> None:
    """Appends (assign per batch), truncations at either end: the cache always equals the
    epoch starts of the log, and its answers match a brute-force reading of the log."""
    log: list[int] = []  # offset -> epoch
    start = 0
    epoch = 0
    cache = LeaderEpochCache()
    for op, a, b in ops:
        if op == "append":
            epoch += a
            cache.assign(epoch, len(log))
            log.extend([epoch] * b)
        elif op == "truncate_end" and a >= start:
            del log[a:]
            cache.truncate_from_end(a)
            epoch = log[-1] if len(log) > start else epoch
        elif op == "truncate_start" and a <= len(log):
            start = max(start, a)
            cache.truncate_from_start(start)
        ref = _reference(log, start)
        if not ref and cache.entries:  # epochs of an emptied tail are kept (Kafka too)
            assert all(e.start_offset >= len(log) or e.start_offset == start
                       for e in cache.entries)
            continue
        assert pairs(cache) == ref, (ops, log, start)
        leo = len(log)
        for asked in range(-1, epoch + 2):
            got = cache.end_offset_for(asked, leo)
            at_or_below = [(e, o) for e, o in ref if e <= asked]
            above = [(e, o) for e, o in ref if e > asked]
            if asked < 0 or not ref or (not above and not at_or_below):
                assert got == UNDEFINED
            elif ref[-1][0] == asked:
                assert got == (asked, leo)
            elif not above:
                assert got == UNDEFINED
            elif not at_or_below:
                assert got == (asked, above[0][1])
            else:
                assert got == (at_or_below[-1][0], above[0][1])
        for offset in range(start, leo):
            assert cache.epoch_for_offset(offset) == log[offset]


# -- the cache in a Log: lazy writes, recovery -------------------------------------------


def _log_at(root: Path, recovery_point: int | None = None) -> Log:
    return Log.open(root / "t-0", SMALL, ManualClock(BASE_TS), recovery_point=recovery_point)


def _append_epochs(lg: Log, epochs: list[int]) -> list[tuple[int, int]]:
    for i, epoch in enumerate(epochs):
        lg.append(batch(3, tag=i, value_size=150), leader_epoch=epoch)
    return pairs(lg.leader_epoch_cache)


def test_appends_write_the_checkpoint_lazily(tmp_path: Path) -> None:
    lg = _log_at(tmp_path)
    expected = _append_epochs(lg, [0, 0, 2, 2, 5])
    assert expected == [(0, 0), (2, 6), (5, 12)]
    path = lg.directory / CHECKPOINT_FILE
    assert not path.exists()  # no fsync on the append path
    lg.flush()
    assert read_leader_epoch_checkpoint(path) == [EpochEntry(e, o) for e, o in expected]
    lg.append(batch(1), leader_epoch=6)
    lg.close()  # a clean close writes it too
    assert pairs(LeaderEpochCache.load(lg.directory)) == [*expected, (6, 15)]


def test_crash_before_any_flush_rebuilds_from_the_batches(tmp_path: Path) -> None:
    lg = _log_at(tmp_path)
    expected = _append_epochs(lg, [1, 1, 1, 4, 4, 7] * 3)
    assert len(lg.segments) > 2
    again = _log_at(tmp_path)  # a crash: the first log was never flushed nor closed
    assert pairs(again.leader_epoch_cache) == expected == [(1, 0), (4, 9), (7, 15)]
    assert read_leader_epoch_checkpoint(again.directory / CHECKPOINT_FILE)  # persisted now


def test_crash_after_a_flush_rederives_the_recovered_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lg = _log_at(tmp_path)
    _append_epochs(lg, [1] * 12)
    point = lg.flush()
    expected = _append_epochs(lg, [3, 3, 5] * 4)
    assert expected == [(1, 0), (3, point), (5, point + 6)]
    scanned: list[int] = []
    real = leader_epochs._headers_from

    def spy(segments: list[object], offset: int) -> object:
        scanned.append(offset)
        return real(segments, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(leader_epochs, "_headers_from", spy)
    again = _log_at(tmp_path, recovery_point=point)
    assert pairs(again.leader_epoch_cache) == expected
    assert scanned and 0 < scanned[0] <= point  # only from the first unflushed segment
    again.close()
    scanned.clear()
    third = _log_at(tmp_path)  # after a clean close: the file is trusted, nothing read
    assert pairs(third.leader_epoch_cache) == expected and scanned == []


def test_checkpoint_past_the_log_end_or_malformed_is_rebuilt(tmp_path: Path) -> None:
    lg = _log_at(tmp_path)
    expected = _append_epochs(lg, [2, 2, 3])
    lg.close()
    path = lg.directory / CHECKPOINT_FILE
    write_leader_epoch_checkpoint(path, [EpochEntry(2, 0), EpochEntry(9, 500)])
    assert pairs(_log_at(tmp_path).leader_epoch_cache) == expected
    path.write_text("0\n3\n1 1\n")
    assert pairs(_log_at(tmp_path).leader_epoch_cache) == expected
    assert pairs(LeaderEpochCache.load(lg.directory)) == expected  # repaired on disk


def test_log_start_moves_cut_the_cache(tmp_path: Path) -> None:
    lg = _log_at(tmp_path)
    _append_epochs(lg, [0] * 10 + [1] * 10)
    lg.update_high_watermark(lg.log_end_offset)
    lg.delete_records_before(12)
    assert pairs(lg.leader_epoch_cache) == [(0, 12), (1, 30)]
    assert pairs(LeaderEpochCache.load(lg.directory)) == [(0, 12), (1, 30)]  # at once
    lg.apply_retention(BASE_TS + 10**12)
    start = lg.log_start_offset
    assert start > 30 and pairs(lg.leader_epoch_cache) == [(1, start)]


def test_a_failed_write_is_retried_by_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    real = leader_epochs.write_leader_epoch_checkpoint
    failing = [True]

    def write(path: Path, entries: object, *, sync: bool = True) -> None:
        if failing[0]:
            raise full
        real(path, entries, sync=sync)  # type: ignore[arg-type]

    monkeypatch.setattr(log_replica, "write_leader_epoch_checkpoint", write)
    lg = _log_at(tmp_path)
    _append_epochs(lg, [0, 0, 1])
    with pytest.raises(OSError):
        lg.flush()
    assert lg.recovery_point == 0  # no batch passes the recovery point without its epoch
    assert lg.truncate_to(6) == 6  # a truncation's failed write is logged, not raised
    failing[0] = False
    assert lg.flush() == 6
    assert pairs(LeaderEpochCache.load(lg.directory)) == [(0, 0)]


def test_a_stale_flush_capture_never_overwrites_a_truncation(tmp_path: Path) -> None:
    lg = _log_at(tmp_path)
    _append_epochs(lg, [0, 0, 1, 2])
    captured = lg._epochs_to_write()  # what a flush captured under the lock...
    assert captured is not None
    lg.truncate_to(6)  # ...then a truncation wrote the newer list...
    lg._write_epochs(*captured)  # ...and the flush's write, outside the lock, comes last
    assert pairs(LeaderEpochCache.load(lg.directory)) == [(0, 0)]
