"""Compaction with transactions: stop at the LSO, aborted data neither counts nor stays."""

from __future__ import annotations

from pathlib import Path

from tidegate.records.builder import build_batch
from tidegate.records.record import Record, decode_records
from tidegate.storage.cleaner import clean
from tidegate.storage.log import Log
from tidegate.storage.txn_index import AbortedTxn

from ._support import BASE_TS, all_batches
from .test_cleaner import open_compact, write_rounds


def records(log: Log) -> list[Record]:
    return [r for _, raw in all_batches(log) for r in decode_records(raw)[1]]


def txn(pid: int, key: bytes, value: bytes, seq: int = 0) -> bytes:
    return build_batch([(BASE_TS, key, value)], producer_id=pid, producer_epoch=0,
                       base_sequence=seq, is_transactional=True)  # fmt: skip


def test_aborted_values_do_not_hide_committed_ones_and_are_removed(tmp_path: Path) -> None:
    log, clock = open_compact(tmp_path)
    log.append(txn(1, b"key-0", b"committed"))
    log.append_marker(1, 0, 0, commit=True)
    aborted_at = log.append(txn(2, b"key-0", b"aborted" + b"!" * 40)).first_offset
    log.append_marker(2, 0, 0, commit=False)
    for i in range(40):  # rolls segments; other keys
        log.append(build_batch([(BASE_TS, b"other-%d" % (i % 4), b"x" * 40)]))
    log.update_high_watermark(log.log_end_offset)
    stats = clean(log, clock.now_ms())
    assert stats.cleaned and stats.aborted_removed == 1
    after = records(log)
    assert aborted_at not in {r.offset for r in after}
    # key-0's committed value survives: the aborted one did not supersede it.
    assert [r.value for r in after if r.key == b"key-0"] == [b"committed"]
    # Markers are kept, and so is the aborted transaction's txn index entry.
    assert sum(1 for h, _ in all_batches(log) if h.is_control) == 2
    assert log.aborted_transactions(0, log.log_end_offset) == [AbortedTxn(2, aborted_at)]
    log.close()
    again, _ = open_compact(tmp_path)
    assert again.aborted_transactions(0, again.log_end_offset) == [AbortedTxn(2, aborted_at)]


def test_compaction_stops_at_the_last_stable_offset(tmp_path: Path) -> None:
    log, clock = open_compact(tmp_path)
    write_rounds(log, 2)
    open_at = log.append(txn(1, b"key-0", b"open")).first_offset  # stays open
    write_rounds(log, 20)
    assert log.last_stable_offset == open_at
    stats = clean(log, clock.now_ms())
    assert stats.end_offset <= open_at
    # Nothing at or after the open transaction was rewritten.
    assert any(r.offset == open_at and r.value == b"open" for r in records(log))
    log.append_marker(1, 0, 0, commit=False)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset
    stats = clean(log, clock.now_ms())
    assert stats.cleaned and stats.end_offset > open_at
    assert not any(r.offset == open_at for r in records(log))
