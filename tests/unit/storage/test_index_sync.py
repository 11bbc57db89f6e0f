"""A flush fsyncs the `.log` only; offset and time indexes are fsynced for closed segments.

`Log.flush` leaves the active segment's `.index` / `.timeindex` unsynced (as Kafka does),
so a power loss may leave them short or garbled. That is safe only because the
recovery point checkpointed (`Log.recovery_point_to_checkpoint`, what
`LogManager.checkpoint_recovery_points` writes) never passes the base of a segment whose
indexes may be unsynced (the active one, or one rolled since the last flush), and a start
after a crash rebuilds the indexes of every segment from the one holding that point on.
These tests fail if a flush syncs the active segment's indexes again (the cost this
removed), if a rolled segment's indexes are not synced before the checkpoint passes it,
or if a start trusts an index the crash left stale.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.storage.config import topic_defaults_from_broker
from tidegate.storage.files import read_offset_checkpoint
from tidegate.storage.log import Log
from tidegate.storage.log_manager import RECOVERY_CHECKPOINT, LogManager

from ._support import BASE_TS, SMALL, batch, fill, open_log

INDEX_ENTRY, TIME_ENTRY = 8, 12  # bytes per entry: (rel offset, position), (ts, rel offset)


def crash(log: Log) -> None:
    """Drop the log as a power loss would: descriptors closed, no flush, no marker."""
    for seg in log.segments:
        seg.close()


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Names of the files each os.fdatasync was called on, in order."""
    names: list[str] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        names.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    yield names


def lie_about(timeindex: Path, ts: int) -> None:
    """Append a time index entry that passes the sanity checks: a later timestamp at the
    last entry's offset."""
    last_rel = timeindex.read_bytes()[-4:]
    with open(timeindex, "ab") as f:
        f.write(ts.to_bytes(8, "big") + last_rel)


def observed(log: Log) -> tuple[list[bytes], list[tuple[int, int] | None], list[int]]:
    """Reads at every offset, a timestamp query at every timestamp (and around them), and
    each segment's largest timestamp (what time-based retention reads)."""
    by_offset = [log.read(o, 1) for o in range(log.log_start_offset, log.log_end_offset)]
    last = BASE_TS + 10 * log.log_end_offset
    by_time = [log.offset_for_timestamp(ts) for ts in range(BASE_TS - 1, last, 3)]
    return by_offset, by_time, [seg.largest_timestamp for seg in log.segments]


def reference(path: Path) -> tuple[object, ...]:
    """What a start that re-reads every segment from the log sees (copied directory)."""
    copy = path.parent / (path.name + "-ref")
    shutil.copytree(path / "topic-0", copy / "topic-0")
    log = Log.open(copy / "topic-0", SMALL, ManualClock(BASE_TS), recovery_point=None)
    try:
        return (*observed(log), [(s.offset_index.entries(), s.time_index.entries())
                                 for s in log.segments])
    finally:
        log.close()


def state(log: Log) -> tuple[object, ...]:
    return (*observed(log), [(s.offset_index.entries(), s.time_index.entries())
                             for s in log.segments])


def test_flush_syncs_the_active_segments_log_but_not_its_indexes(
    tmp_path: Path, synced: list[str]
) -> None:
    log = open_log(tmp_path)
    fill(log, 30)
    assert len(log.segments) >= 3
    active = log.segments[-1]
    assert active.offset_index.entries()  # the flush has index entries it could sync
    synced.clear()
    log.flush()
    assert active.log_path.name in synced
    stem = active.log_path.stem
    assert f"{stem}.index" not in synced and f"{stem}.timeindex" not in synced
    assert log.recovery_point == log.log_end_offset  # the data is durable all the same
    assert log.recovery_point_to_checkpoint == active.base_offset
    log.close()


@pytest.mark.parametrize("damage", ["short", "partial", "zeros", "garbage", "empty"])
def test_power_loss_leaves_active_indexes_stale_and_the_start_rebuilds_them(
    tmp_path: Path, damage: str
) -> None:
    """Write, flush, lose power: the active segment's unsynced index files are cut short,
    cut mid-entry, extended with zeros or with plausible garbage (entries that pass the
    sanity checks but lie). The start from the checkpointed recovery point rebuilds them:
    reads by offset and by timestamp, and the index entries, are as a full rebuild has."""
    log = open_log(tmp_path)
    fill(log, 30)
    log.flush()
    checkpoint = log.recovery_point_to_checkpoint
    active = log.segments[-1]
    index, timeindex = active.offset_index.path, active.time_index.path
    last_ts = active.max_timestamp
    assert len(active.offset_index.entries()) >= 2
    crash(log)
    want = reference(tmp_path)
    if damage == "short":  # the last entries never reached the disk
        os.truncate(index, index.stat().st_size - INDEX_ENTRY)
        os.truncate(timeindex, timeindex.stat().st_size - TIME_ENTRY)
    elif damage == "partial":
        os.truncate(index, index.stat().st_size - 3)
        os.truncate(timeindex, timeindex.stat().st_size - 5)
    elif damage == "zeros":  # the size reached the disk, the data did not
        with open(index, "ab") as f:
            f.write(bytes(2 * INDEX_ENTRY))
        with open(timeindex, "ab") as f:
            f.write(bytes(TIME_ENTRY))
    elif damage == "garbage":  # increasing, in range: passes the sanity checks
        lie_about(timeindex, last_ts + 10**9)
        raw = index.read_bytes()
        os.truncate(index, 0)
        entries = [raw[i : i + INDEX_ENTRY] for i in range(0, len(raw), INDEX_ENTRY)]
        # the first entry's offset with the second's position: a lie only a rebuild fixes
        lie = entries[0][:4] + entries[1][4:]
        index.write_bytes(lie + b"".join(entries[2:]))
    else:
        os.truncate(index, 0)
        os.truncate(timeindex, 0)
    log = Log.open(tmp_path / "topic-0", SMALL, ManualClock(BASE_TS), recovery_point=checkpoint)
    assert state(log) == want
    log.close()


def manager(path: Path) -> LogManager:
    defaults = topic_defaults_from_broker(
        {"log.segment.bytes": "2048", "log.index.interval.bytes": "128"}
    )
    m = LogManager(path, defaults, ManualClock(BASE_TS))
    m.load()
    return m


def test_rolled_segments_indexes_are_synced_before_the_checkpoint_passes_it(
    tmp_path: Path, synced: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A roll makes the active segment a closed one at the recovery point (all of it was
    flushed), with indexes no flush has synced. Until the next flush syncs them, the
    checkpoint stays at its base, so a power loss meanwhile gets it rebuilt; had the
    checkpoint said `recovery_point`, the start would trust the stale time index (here a
    plausible entry far in the future: retention and timestamp lookups would be wrong)."""
    m = manager(tmp_path)
    m.create_topic("topic", 1, {})
    lg = m.get_log("topic", 0)
    assert lg is not None
    while True:  # each append flushed, as the produce path does
        nxt = BASE_TS + 10 * lg.log_end_offset
        lg.append(batch(3, ts=nxt, value_size=40, tag=lg.log_end_offset))
        if len(lg.segments) > 1:
            break
        lg.flush()
        m.checkpoint_recovery_points()
    rolled = lg.segments[0]  # rolled with all of it flushed: recovery point = its end
    assert lg.recovery_point == rolled.next_offset == lg.segments[1].base_offset
    m.checkpoint_recovery_points()  # the periodic checkpoint, before the next flush
    checkpoint = read_offset_checkpoint(tmp_path / RECOVERY_CHECKPOINT)[("topic", 0)]
    assert checkpoint <= rolled.base_offset
    true_max = rolled.max_timestamp
    timeindex = rolled.time_index.path
    assert rolled.offset_index.path.name not in synced and timeindex.name not in synced

    # power loss now: the unsynced time index got a plausible lie
    crash(lg)
    lie_about(timeindex, true_max + 10**9)
    shutil.copytree(tmp_path / "topic-0", tmp_path / "trusting" / "topic-0")
    trusting = Log.open(tmp_path / "trusting" / "topic-0", SMALL, ManualClock(BASE_TS),
                        recovery_point=lg.recovery_point)  # what the old checkpoint said
    assert trusting.segments[0].largest_timestamp == true_max + 10**9  # the lie is kept
    trusting.close()
    m2 = manager(tmp_path)  # starts from the checkpoint: rebuilds the rolled segment's
    lg2 = m2.get_log("topic", 0)
    assert lg2 is not None
    assert lg2.segments[0].largest_timestamp == true_max
    second = lg2.segments[1]
    first_ts = BASE_TS + 10 * second.base_offset  # its first record's
    assert lg2.offset_for_timestamp(true_max + 1) == (second.base_offset, first_ts)

    # no power loss: the next flush syncs a rolled segment's indexes, and only then does
    # the checkpoint move past it
    lg2.flush()
    while len(lg2.segments) == 2:
        lg2.append(batch(3, ts=BASE_TS + 10 * lg2.log_end_offset, tag=8))
    rolled2 = lg2.segments[1]
    at_sync: dict[str, int] = {}
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        at_sync[name] = lg2.recovery_point_to_checkpoint
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    assert lg2.recovery_point_to_checkpoint <= rolled2.base_offset
    lg2.flush()
    stem = rolled2.log_path.stem
    assert at_sync[f"{stem}.index"] <= rolled2.base_offset
    assert at_sync[f"{stem}.timeindex"] <= rolled2.base_offset
    assert lg2.recovery_point_to_checkpoint == lg2.segments[-1].base_offset
    assert lg2.segments[-1].base_offset > rolled2.base_offset
    m2.close()
