"""Producer snapshot files: format, round trip, corruption, fallback, retention."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.storage.producer_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    decode_snapshot,
    delete_snapshots_below,
    encode_snapshot,
    keep_latest,
    list_snapshots,
    read_snapshot,
    write_snapshot,
)
from tidegate.storage.producer_state import DuplicateBatch, ProducerStateManager

from ._support import at, header

i16 = st.integers(-(1 << 15), (1 << 15) - 1)
i32 = st.integers(-(1 << 31), (1 << 31) - 1)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)
entries_st = st.lists(st.builds(SnapshotEntry, i64, i16, i32, i64, i32, i64, i32, i64), max_size=20)


def test_layout_is_kafkas_pid_snapshot_v1() -> None:
    e = SnapshotEntry(2000, 1, 95769511, 235947654, 1, 1541325156503, 4, -1)
    data = encode_snapshot([e])
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", *e)
    assert data == struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    assert len(data) == 6 + 4 + 46


@settings(deadline=None)  # the first example imports and warms up: slow on a loaded machine
@given(entries_st)
def test_round_trip(entries: list[SnapshotEntry]) -> None:
    assert decode_snapshot(encode_snapshot(entries)) == entries


@given(entries_st.filter(bool), st.data())
def test_any_flipped_byte_or_truncation_is_detected(
    entries: list[SnapshotEntry], data: st.DataObject
) -> None:
    raw = bytearray(encode_snapshot(entries))
    pos = data.draw(st.integers(0, len(raw) - 1))
    flipped = bytearray(raw)
    flipped[pos] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(flipped))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(raw[:pos]))


def test_write_list_read_and_retention(tmp_path: Path) -> None:
    e = [SnapshotEntry(1, 0, 4, 9, 4, 100, -1, -1)]
    for off in (30, 10, 20):
        write_snapshot(tmp_path, off, e)
    (tmp_path / f"{40:020d}.snapshot.tmp").write_bytes(b"torn")  # crash leftovers ignored
    (tmp_path / f"{0:020d}.log").write_bytes(b"")
    assert [off for off, _ in list_snapshots(tmp_path)] == [10, 20, 30]
    assert read_snapshot(tmp_path / f"{20:020d}.snapshot") == e
    assert keep_latest(tmp_path, 2) == 1
    assert [off for off, _ in list_snapshots(tmp_path)] == [20, 30]
    assert delete_snapshots_below(tmp_path, 30) == 1
    assert [off for off, _ in list_snapshots(tmp_path)] == [30]


def _broker_with_snapshots(tmp_path: Path) -> tuple[ProducerStateManager, list[int]]:
    psm = ProducerStateManager()
    end = 0
    for seq in range(0, 9, 3):
        h = at(header(7, 2, seq, 3, transactional=seq == 6), end)
        psm.validate(h)
        psm.update(h, 5_000)
        end = h.next_offset
        psm.take_snapshot(tmp_path, end, keep=None)
    return psm, [off for off, _ in list_snapshots(tmp_path)]


def test_state_round_trips_through_a_snapshot(tmp_path: Path) -> None:
    psm, snaps = _broker_with_snapshots(tmp_path)
    assert snaps == [3, 6, 9]
    fresh = ProducerStateManager()
    assert fresh.load_latest_snapshot(tmp_path, 9) == 9
    a, b = psm.last_entry(7), fresh.last_entry(7)
    assert a is not None and b is not None
    # Kafka's format keeps the last batch only, and one timestamp (ours: the append time)
    assert b.batches == [a.batches[-1]._replace(timestamp=5_000)]
    assert b.last_timestamp == a.last_timestamp == 5_000
    assert (b.producer_epoch, b.current_txn_first_offset) == (2, 6)
    assert fresh.first_undecided_offset() == 6
    assert fresh.map_end_offset == fresh.last_snapshot_offset == 9
    assert fresh.validate(header(7, 2, 6, 3, transactional=True)) == DuplicateBatch(6, 8, 5_000)


def test_corrupt_newest_snapshot_falls_back_to_older_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _broker_with_snapshots(tmp_path)
    newest = tmp_path / f"{9:020d}.snapshot"
    raw = bytearray(newest.read_bytes())
    raw[-1] ^= 0xFF
    newest.write_bytes(bytes(raw))
    fresh = ProducerStateManager()
    with caplog.at_level(logging.WARNING):
        assert fresh.load_latest_snapshot(tmp_path, 100) == 6
    assert "corrupt producer snapshot" in caplog.text
    assert not newest.exists()
    entry = fresh.last_entry(7)
    assert entry is not None and entry.last_seq == 5


def test_snapshot_bounds_max_offset_and_log_start(tmp_path: Path) -> None:
    _broker_with_snapshots(tmp_path)
    assert ProducerStateManager().load_latest_snapshot(tmp_path, 8) == 6
    psm = ProducerStateManager()
    # snapshots older than the log start are unusable: replay from the log start instead
    assert psm.load_latest_snapshot(tmp_path, 5, log_start_offset=4) is None
    assert psm.map_end_offset == 4 and not psm.producers


def test_truncate_tail_deletes_newer_snapshots_and_reloads(tmp_path: Path) -> None:
    psm, _ = _broker_with_snapshots(tmp_path)
    assert psm.truncate_tail(tmp_path, 7) == 6  # replay [6, 7) from the log
    assert [off for off, _ in list_snapshots(tmp_path)] == [3, 6]
    entry = psm.last_entry(7)
    assert entry is not None and entry.last_seq == 5
    assert psm.truncate_tail(tmp_path, 6) == 6  # already there: nothing to do


def test_take_snapshot_keeps_two_and_rejects_a_wrong_offset(tmp_path: Path) -> None:
    psm = ProducerStateManager()
    for i in range(4):
        h = at(header(1, 0, i), i)
        psm.update(h, 0)
        psm.take_snapshot(tmp_path)
    assert [off for off, _ in list_snapshots(tmp_path)] == [3, 4]
    with pytest.raises(ValueError):
        psm.take_snapshot(tmp_path, 3)


def test_expired_producers_are_not_loaded(tmp_path: Path) -> None:
    psm = ProducerStateManager(producer_id_expiration_ms=1000)
    psm.update(at(header(1, 0, 0), 0), 0)
    psm.update(at(header(2, 0, 0), 1), 900)
    psm.update(at(header(3, 0, 0, transactional=True), 2), 0)
    psm.take_snapshot(tmp_path)
    fresh = ProducerStateManager(producer_id_expiration_ms=1000)
    fresh.load_latest_snapshot(tmp_path, 3, now_ms=1000)
    assert set(fresh.producers) == {2, 3}
