"""Log compaction: latest value per key, tombstone horizon, offsets kept, crash safety."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tidegate.common.clock import ManualClock
from tidegate.records.builder import build_batch
from tidegate.records.record import Record, decode_records
from tidegate.storage.cleaner import clean
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log

from ._support import BASE_TS, all_batches, keyed

COMPACT = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=1024,
    index_interval_bytes=64,
    delete_retention_ms=10_000,
)


def records(log: Log) -> list[Record]:
    return [r for _, raw in all_batches(log) for r in decode_records(raw)[1]]


def open_compact(tmp_path: Path, cfg: LogConfig = COMPACT) -> tuple[Log, ManualClock]:
    clock = ManualClock(BASE_TS)
    return Log.open(tmp_path / "compacted-0", cfg, clock), clock


def write_rounds(log: Log, rounds: int, keys: int = 5) -> dict[bytes, tuple[int, bytes]]:
    """Each round writes every key once; returns key -> (offset, value) of the latest."""
    latest: dict[bytes, tuple[int, bytes]] = {}
    for r in range(rounds):
        for k in range(keys):
            key, value = b"key-%d" % k, b"round-%d-%s" % (r, b"v" * 30)
            info = log.append(keyed([(key, value)], ts=BASE_TS + r))
            latest[key] = (info.first_offset, value)
    log.update_high_watermark(log.log_end_offset)
    return latest


def test_keeps_latest_value_per_key_at_original_offsets(tmp_path: Path) -> None:
    log, clock = open_compact(tmp_path)
    latest = write_rounds(log, 20)
    before = records(log)
    active = log.segments[-1]
    n_segments = len(log.segments)
    stats = clean(log, clock.now_ms())
    assert stats.cleaned and stats.records_kept < stats.records_in
    after = records(log)
    # Closed segments keep exactly one record per key; the active one is untouched.
    closed = [r for r in after if r.offset < active.base_offset]
    assert len({r.key for r in closed}) == len(closed)
    last_closed = {r.key: r.offset for r in before if r.offset < active.base_offset}
    assert sorted(r.offset for r in closed) == sorted(last_closed.values())
    # Every surviving record is the one originally at that offset.
    original = {r.offset: r for r in before}
    assert all(original[r.offset] == r for r in after)
    # The latest value of every key is still readable.
    assert {r.key: r.value for r in after} == {k: v for k, (_, v) in latest.items()}
    assert log.segments[-1] is active
    # Reads at any offset still work (gaps go to the next surviving batch).
    for o in range(log.log_end_offset):
        assert log.read(o, 1)
    # Nothing new is dirty: a second pass does nothing.
    assert not clean(log, clock.now_ms()).cleaned
    # Groups are chosen by size before cleaning (as Kafka does), so the emptied
    # segments merge on the next pass.
    latest = write_rounds(log, 20)
    n_segments = len(log.segments)
    assert clean(log, clock.now_ms()).cleaned
    assert len(log.segments) < n_segments - 5
    after = records(log)
    assert {r.key: r.value for r in after} == {k: v for k, (_, v) in latest.items()}
    # The result survives a restart unchanged.
    log.close()
    log, _ = open_compact(tmp_path)
    assert records(log) == after
    assert not list((tmp_path / "compacted-0").glob("*.cleaned"))
    log.close()


def test_dirty_ratio_is_honoured(tmp_path: Path) -> None:
    cfg = dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=0.9)
    log, clock = open_compact(tmp_path, cfg)
    write_rounds(log, 20)
    assert clean(log, clock.now_ms()).cleaned  # all dirty: ratio 1.0
    write_rounds(log, 3)  # a little new data: ratio well below 0.9
    stats = clean(log, clock.now_ms())
    assert not stats.cleaned and "ratio" in stats.reason


def test_tombstones_are_dropped_after_delete_retention(tmp_path: Path) -> None:
    log, clock = open_compact(tmp_path)
    log.append(keyed([(b"gone", b"value")]))
    log.append(keyed([(b"gone", None)]))  # tombstone
    write_rounds(log, 10)
    clean(log, clock.now_ms())
    gone = [r for r in records(log) if r.key == b"gone"]
    assert [r.value for r in gone] == [None]  # the value went, the tombstone stays
    clock.advance(9_999)
    assert not clean(log, clock.now_ms()).cleaned
    assert [r.key for r in records(log)].count(b"gone") == 1
    clock.advance(1)
    stats = clean(log, clock.now_ms())  # due by the horizon, although nothing is dirty
    assert stats.cleaned and stats.tombstones_removed == 1
    assert b"gone" not in {r.key for r in records(log)}
    # The horizon survives restarts (it is persisted with the cleaner state).
    log.close()
    log, clock2 = open_compact(tmp_path)
    log.append(keyed([(b"late", None)]))
    write_rounds(log, 10)
    clock2.advance(20_000)
    clean(log, clock2.now_ms())
    assert b"late" in {r.key for r in records(log)}
    log.close()


def test_keyless_records_and_min_compaction_lag(tmp_path: Path) -> None:
    cfg = dataclasses.replace(COMPACT, min_compaction_lag_ms=60_000)
    # Written while the topic was not compacted: a compacted topic refuses keyless records.
    log, _ = open_compact(tmp_path, dataclasses.replace(cfg, cleanup_policy=("delete",)))
    log.append(keyed([(None, b"no key")], ts=BASE_TS - 120_000))
    log.update_config(cfg)
    write_rounds(log, 10)
    stats = clean(log, BASE_TS)  # everything is younger than the lag
    assert not stats.cleaned
    stats = clean(log, BASE_TS + 120_000)
    assert stats.cleaned
    assert None not in {r.key for r in records(log)}


def test_rebuilt_batches_keep_producer_fields(tmp_path: Path) -> None:
    log, clock = open_compact(tmp_path)
    data = build_batch(
        [(BASE_TS, b"a", b"1"), (BASE_TS, b"b", b"1"), (BASE_TS, b"c", b"1")],
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        is_transactional=True,
    )
    log.append(data)
    log.append(keyed([(b"b", b"2")]))  # supersedes offset 1: the batch splits in two
    ctrl = build_batch(
        [(BASE_TS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        producer_id=42,
        producer_epoch=3,
        is_transactional=True,
        is_control=True,
    )
    log.append_control(ctrl)
    write_rounds(log, 10)
    clean(log, clock.now_ms())
    batches = [h for h, _ in all_batches(log) if h.producer_id == 42]
    data_batches = [h for h in batches if not h.is_control]
    assert [(h.base_offset, h.base_sequence) for h in data_batches] == [(0, 10), (2, 12)]
    assert all(h.is_transactional and h.producer_epoch == 3 for h in batches)
    assert any(h.is_control for h in batches)  # control batches are kept


def test_failed_swap_leaves_the_log_untouched(tmp_path: Path) -> None:
    log, clock = open_compact(tmp_path)
    write_rounds(log, 20)
    before = records(log)
    original = log.replace_segments

    def truncating_swap(*args: object, **kwargs: object) -> bool:
        log.truncate_to(log.log_end_offset - 1)  # the log changes under the cleaner
        return original(*args, **kwargs)  # type: ignore[arg-type]

    log.replace_segments = truncating_swap  # type: ignore[method-assign]
    stats = clean(log, clock.now_ms())
    assert not stats.cleaned and "changed" in stats.reason
    assert records(log) == before[:-1]
    assert not list((tmp_path / "compacted-0").glob("*.cleaned"))


def test_delete_policy_is_not_compacted(tmp_path: Path) -> None:
    log, clock = open_compact(tmp_path, LogConfig(segment_bytes=1024))
    write_rounds(log, 10)
    assert not clean(log, clock.now_ms()).cleaned
