"""A partition log on a full disk: an append is all or nothing, and memory agrees with disk.

`Disk` (disk_faults.py) makes the file writes of the storage layer (`os.write`,
`os.pwrite`) fail the way a full tmpfs does: a write larger than what is left writes what
fits (a short write), the next one fails with ENOSPC. Every failure point of an append
is reached that way: the `.log` write (whole or half-way), the offset / time index
writes, the `.txnindex` entry of an abort, the producer snapshot and the new segment of
a roll.

The rules checked: an append that raised left the log and its producer state exactly as
they were; one that returned is in both. And what the live log answers (open
transactions, last stable offset, aborted transactions for read_committed fetches)
is what the log on disk says: the same answers after a clean close and reopen, and after
a crash (reopen without close).
"""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.common.clock import ManualClock
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log
from tidegate.storage.txn_index import AbortedTxn

from ._support import BASE_TS, all_batches, batch, open_log
from .disk_faults import Disk
from .test_transactions import txn

ROLLING = LogConfig(segment_bytes=1024, index_interval_bytes=64, segment_index_bytes=4096)


def state(lg: Log) -> tuple[object, ...]:
    """What the log tells readers and producers, independent of timing."""
    leo = lg.log_end_offset
    producers = [(p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
                 for p in lg.describe_producers()]
    return (leo, [(h.base_offset, h.last_offset, h.producer_id) for h, _ in all_batches(lg)],
            lg.ongoing_transactions(), lg.aborted_transactions(0, leo + 1), producers)


def stable(lg: Log) -> int:
    lg.update_high_watermark(lg.log_end_offset)
    return lg.last_stable_offset


# -- single failure points ------------------------------------------------------------


def test_a_log_write_cut_half_way_leaves_no_bytes_past_the_end(tmp_path: Path) -> None:
    disk = Disk(tmp_path)
    lg = open_log(tmp_path)
    lg.append(batch(2))
    size = lg.segments[-1].size
    with disk.installed():
        disk.free = 0  # what fits in the last page goes in, then ENOSPC
        with pytest.raises(OSError):
            lg.append(batch(3, value_size=200))
    assert lg.segments[-1].log_path.stat().st_size == size == lg.segments[-1].size
    lg.append(batch(1))
    lg.close()
    again = open_log(tmp_path)
    assert [h.base_offset for h, _ in all_batches(again)] == [0, 2]


def test_an_abort_whose_txnindex_write_fails_is_still_reported_aborted(tmp_path: Path) -> None:
    """The marker is in the log: the append succeeds, the entry is in memory for read_
    committed fetches, and the flush writes the file (failing until it can), so neither
    a clean restart nor a crash loses it."""
    disk = Disk(tmp_path)
    lg = open_log(tmp_path)
    lg.append(txn(7, 2))
    with disk.installed():
        lg.flush()
        disk.free = 0  # the marker fits in the log's last page; the empty .txnindex needs one
        info = lg.append_marker(7, 0, 0, commit=False)
        assert disk.refused
        assert info.first_offset == 2
        assert lg.aborted_transactions(0, 3) == [AbortedTxn(7, 0)]
        assert lg.ongoing_transactions() == {}
        with pytest.raises(OSError):
            lg.flush()  # the entry is not on disk yet: the segment is not durable
        assert lg.recovery_point <= 2
        disk.free = None
        lg.flush()
    assert lg.segments[-1].txn_index.path.stat().st_size == 34
    crashed = open_log(tmp_path)  # no close
    assert crashed.aborted_transactions(0, 3) == [AbortedTxn(7, 0)]
    crashed.close()
    lg.close()
    again = open_log(tmp_path)
    assert again.aborted_transactions(0, 3) == [AbortedTxn(7, 0)]
    assert stable(again) == 3


def test_a_roll_that_fails_leaves_no_segment_behind(tmp_path: Path) -> None:
    """A roll whose snapshot or index write fails must not leave the new segment's
    files: the next start would take the empty `<end>.log` for the active segment and
    cut what the old one received since (here a marker ending a transaction)."""
    disk = Disk(tmp_path)
    lg = open_log(tmp_path, ROLLING)
    lg.append(txn(3, 1, value=b"a" * 300))
    lg.append(batch(2, value_size=300))
    end = lg.log_end_offset
    files = sorted(p.name for p in lg.directory.iterdir())
    with disk.installed():
        disk.free = 0
        with pytest.raises(OSError):
            lg.append(batch(2, value_size=400))  # due to roll; the roll fails
        assert sorted(p.name for p in lg.directory.iterdir()) == files
        disk.free = 1  # enough for a marker into the old segment, not for a roll
        lg.append_marker(3, 0, 0, commit=True)
    assert lg.log_end_offset == end + 1 and stable(lg) == end + 1
    lg.close()
    again = open_log(tmp_path, ROLLING)
    assert again.log_end_offset == end + 1
    assert again.ongoing_transactions() == {} and stable(again) == end + 1


# -- random runs against the disk's word ----------------------------------------------


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("txn"), st.integers(1, 3), st.integers(1, 3)),
        st.tuples(st.just("plain"), st.just(0), st.integers(1, 3)),
        st.tuples(st.sampled_from(["commit", "abort"]), st.integers(1, 3), st.just(0)),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
        # free pages: none (full), a few (writes cut half-way), plenty
        st.tuples(st.just("space"), st.sampled_from([0, 0, 1, 1, 2, 3, -1]), st.just(0)),
    ),
    min_size=5,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=_OPS)
def test_appends_on_a_filling_disk_are_all_or_nothing(ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        disk = Disk(Path(tmp))
        lg = open_log(Path(tmp), ROLLING)
        seqs = {1: 0, 2: 0, 3: 0}
        with disk.installed():
            for op, arg, n in ops:
                if op == "space":
                    disk.free = None if arg < 0 else arg
                    continue
                before = state(lg)
                try:
                    if op == "txn":
                        lg.append(txn(arg, n, seq=seqs[arg], value=b"t" * 60))
                        seqs[arg] += n
                    elif op == "plain":
                        lg.append(batch(n, value_size=60))
                    elif op in ("commit", "abort"):
                        lg.append_marker(arg, 0, 0, commit=op == "commit")
                    else:
                        lg.update_high_watermark(lg.flush())
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    assert state(lg) == before, f"{op} failed half-way"
                    files = lg.segments[-1].log_path.stat().st_size
                    assert files == lg.segments[-1].size, "bytes left past the end"
            disk.free = None
            lg.update_high_watermark(lg.flush())
        live, lso = state(lg), stable(lg)
        crashed = Log.open(lg.directory, ROLLING, ManualClock(BASE_TS))  # kill -9
        assert state(crashed) == live and stable(crashed) == lso
        crashed.close()
        lg.close()
        again = Log.open(lg.directory, ROLLING, ManualClock(BASE_TS))
        assert state(again) == live and stable(again) == lso
        again.close()
