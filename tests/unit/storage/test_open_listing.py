"""A partition's open lists its directory once (`recovery.open_partition_dir`): what the
names decide (leftovers, orphan indexes, snapshots, the epoch checkpoint) and the txn
index shortcut for a recovered tail without control batches."""

from __future__ import annotations

import os
from pathlib import Path

from tidegate.common.clock import ManualClock
from tidegate.records.builder import build_batch
from tidegate.storage.log import Log
from tidegate.storage.producer_state import ProducerStateManager
from tidegate.storage.recovery import load_producer_state
from tidegate.storage.txn_index import AbortedTxn

from ._support import BASE_TS, SMALL, batch, open_log

SEG0 = "00000000000000000000"


def txn(pid: int, n: int = 2, seq: int = 0) -> bytes:
    return build_batch([(BASE_TS + i, b"k", b"v") for i in range(n)], producer_id=pid,
                       producer_epoch=0, base_sequence=seq, is_transactional=True)  # fmt: skip


def reopen_unclean(log: Log) -> Log:
    """As after kill -9: no clean-shutdown marker, no recovery point (all recovered)."""
    log.flush()
    return Log.open(log.directory, SMALL, ManualClock(BASE_TS))


def test_recovered_tail_without_control_batches_gets_an_empty_txn_index(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(3))
    txn_path = log.directory / f"{SEG0}.txnindex"
    # a bogus entry (as a stale file might hold): recovery must not keep it
    txn_path.write_bytes(bytes(34))
    again = reopen_unclean(log)
    assert again.segments[0].recovered_controls is False
    assert txn_path.read_bytes() == b""
    assert again.aborted_transactions(0, again.log_end_offset) == []


def test_recovered_tail_with_an_abort_marker_still_rebuilds_its_entry(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn(1))
    log.append_marker(1, 0, 0, commit=False)
    log.append(batch(2))
    (log.directory / f"{SEG0}.txnindex").write_bytes(b"")  # lost before the crash
    again = reopen_unclean(log)
    assert again.segments[0].recovered_controls is True
    assert again.aborted_transactions(0, again.log_end_offset) == [AbortedTxn(1, 0)]


def test_leftovers_and_orphan_indexes_go_and_the_snapshot_is_found(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(build_batch([(BASE_TS, b"k", b"v")], producer_id=7, producer_epoch=0,
                           base_sequence=0))  # fmt: skip
    log.close()  # clean: a snapshot at the log end, the marker
    d = log.directory
    orphan = d / f"{99:020d}.index"
    orphan.write_bytes(b"")
    (d / f"{SEG0}.log.tmp").write_bytes(b"x")
    (d / f"{SEG0}.index.deleted").write_bytes(b"")
    again = Log.open(d, SMALL, ManualClock(BASE_TS))
    names = set(os.listdir(d))
    assert orphan.name not in names
    assert not any(n.endswith((".tmp", ".deleted")) for n in names)
    assert ".clean_shutdown" not in names
    assert 7 in again.producer_state.producers
    # the snapshot is found in the names given, not by another listing: without it in
    # them the whole log is replayed (one batch), with it nothing is
    segs = list(again.segments)
    snap = next(n for n in names if n.endswith(".snapshot"))
    assert load_producer_state(ProducerStateManager(), d, segs, 0, BASE_TS, names) == 0
    assert load_producer_state(
        ProducerStateManager(), d, segs, 0, BASE_TS, names - {snap}) == 1
