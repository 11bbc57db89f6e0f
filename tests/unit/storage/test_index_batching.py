"""The active segment's offset / time index entries reach their files in groups.

`LogSegment.append` queues the entries it makes and writes them once
`segment.INDEX_WRITE_BYTES` are queued, and at roll, truncation and close: two pwrite
calls per indexed batch were a measurable part of an append at many partitions. Lookups
read the in-memory entries; a start after a crash rebuilds the active segment's indexes
from the log (the checkpointed recovery point never passes its base), so entries a
kill -9 loses cost nothing. These tests fail if entries are written at each append
again, if a roll, truncation or close leaves some unwritten, or if a start after a crash
trusts the short file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.storage import segment
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log
from tidegate.storage.segment import LogSegment

from ._support import BASE_TS, batch, open_log

# every batch indexed (interval 1 byte), segments large enough not to roll on their own
DENSE = LogConfig(segment_bytes=1 << 20, index_interval_bytes=1, segment_index_bytes=1 << 16)


def on_disk(seg: LogSegment) -> tuple[int, int]:
    """Entries in each index file: (offset index, time index)."""
    return (seg.offset_index.path.stat().st_size // 8,
            seg.time_index.path.stat().st_size // 12)


def in_memory(seg: LogSegment) -> tuple[int, int]:
    return len(seg.offset_index), len(seg.time_index)


def append_rising(log: Log, count: int, start: int = 0) -> None:
    """`count` one-record batches, timestamps rising (each one gets a time index entry)."""
    for i in range(start, start + count):
        log.append(batch(1, ts=BASE_TS + i))


def test_entries_are_queued_then_written_in_one_group(tmp_path: Path) -> None:
    log = open_log(tmp_path, DENSE)
    try:
        append_rising(log, 20)
        seg = log.segments[-1]
        assert in_memory(seg) == (19, 19)  # the first batch is at position 0: no entry
        assert on_disk(seg) == (0, 0)
        assert log.read(10, 1) and log.offset_for_timestamp(BASE_TS + 12) == (12, BASE_TS + 12)
        # the time index's queue (12-byte entries) reaches the bound first
        n = segment.INDEX_WRITE_BYTES // 12 + 1 - 19
        append_rising(log, n, start=20)
        assert on_disk(seg) == in_memory(seg) == (19 + n, 19 + n)
        append_rising(log, 3, start=20 + n)
        assert on_disk(seg) == (19 + n, 19 + n)  # queued again
    finally:
        log.close()


@pytest.mark.parametrize("how", ["roll", "close", "truncate"])
def test_roll_close_and_truncation_write_what_is_queued(tmp_path: Path, how: str) -> None:
    config = DENSE
    log = open_log(tmp_path, config)
    append_rising(log, 30)
    first = log.segments[0]
    if how == "roll":
        log.update_config(LogConfig(segment_bytes=log.segments[0].size + 10,
                                    index_interval_bytes=1, segment_index_bytes=1 << 16))
        append_rising(log, 1, start=30)
        assert len(log.segments) == 2
        # the final time index entry (on_become_inactive) adds nothing: same max
        assert on_disk(first) == in_memory(first) == (29, 29)
        log.close()
    elif how == "close":
        log.close()
        assert on_disk(first) == (29, 29)
    else:
        log.truncate_to(25)
        assert on_disk(first) == in_memory(first) == (24, 24)
        log.close()
    reopened = open_log(tmp_path, config)  # a clean start trusts the files
    try:
        seg = reopened.segments[0]
        assert not seg.indexes_missing
        assert seg.offset_index.entries() == [(o, o * len(batch(1))) for o in range(1, 25 if
                                              how == "truncate" else 30)]
    finally:
        reopened.close()


def test_a_start_after_a_crash_rebuilds_the_queued_entries(tmp_path: Path) -> None:
    log = open_log(tmp_path, DENSE)
    try:
        append_rising(log, 40)
        log.flush()
        live = log.segments[-1]
        assert on_disk(live) == (0, 0)  # queued: the crash loses them
        expected = (live.offset_index.entries(), live.time_index.entries())
        checkpoint = log.recovery_point_to_checkpoint
        copy = tmp_path / "crashed"
        # what a kill -9 leaves: the files as written, no clean-shutdown marker
        shutil.copytree(tmp_path / "topic-0", copy / "topic-0")
    finally:
        log.close()
    again = Log.open(copy / "topic-0", DENSE, ManualClock(BASE_TS), recovery_point=checkpoint)
    try:
        seg = again.segments[-1]
        assert (seg.offset_index.entries(), seg.time_index.entries()) == expected
        assert again.offset_for_timestamp(BASE_TS + 33) == (33, BASE_TS + 33)
    finally:
        again.close()


def test_deleted_segments_drop_their_queued_entries(tmp_path: Path) -> None:
    log = open_log(tmp_path, DENSE)
    append_rising(log, 10)
    seg = log.segments[-1]
    assert seg.offset_index.pending_bytes and seg.time_index.pending_bytes
    log.truncate_fully_and_start_at(100)  # deletes the segment (its files unlinked)
    assert seg.offset_index.pending_bytes == seg.time_index.pending_bytes == 0
    log.close()
