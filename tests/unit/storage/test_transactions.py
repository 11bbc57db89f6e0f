"""The partition side of transactions: LSO, .txnindex, markers, recovery, KIP-890 guards."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.common.clock import ManualClock
from tidegate.common.errors import InvalidRecordError
from tidegate.records.builder import build_batch
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log
from tidegate.storage.producer_state import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerInfo,
    TransactionCoordinatorFencedError,
)
from tidegate.storage.txn_index import AbortedTxn

from ._support import BASE_TS, SMALL, batch, open_log


def txn(pid: int, n: int = 2, *, epoch: int = 0, seq: int = 0, value: bytes = b"v",
        key: bytes | None = b"k") -> bytes:  # fmt: skip
    return build_batch(
        [(BASE_TS + i, key, value) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def entry_bytes(pid: int, first: int, last: int, lso: int) -> bytes:
    return struct.pack(">hqqqq", 0, pid, first, last, lso)


def txn_file(log: Log, index: int = 0) -> Path:
    return log.segments[index].txn_index.path


def test_open_transaction_pins_lso_until_hw_passes_the_marker(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(3))  # 0..2
    assert log.last_stable_offset == 0  # HW still 0
    assert log.update_high_watermark(3) and log.last_stable_offset == 3
    log.append(txn(1, 2))  # 3..4
    log.append(batch(2))  # 5..6
    assert log.ongoing_transactions() == {1: 3}
    log.update_high_watermark(7)
    assert log.high_watermark == 7 and log.last_stable_offset == 3
    info = log.append_marker(1, 0, 0, commit=True)
    assert info.first_offset == 7
    assert log.ongoing_transactions() == {}
    assert log.last_stable_offset == 3  # the marker is not below the HW yet
    assert not log.update_high_watermark(7)
    assert log.update_high_watermark(100)  # clamped to the log end
    assert log.high_watermark == 8 == log.last_stable_offset
    assert txn_file(log).read_bytes() == b""  # a commit is not indexed
    assert log.aborted_transactions(0, 8) == []


def test_abort_writes_kafkas_txnindex_entry(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS + 60_000)
    log = open_log(tmp_path, clock=clock)
    log.append(txn(7, 2))  # 0..1
    log.append(txn(8, 1))  # 2: pid 8 stays open
    log.append_marker(7, 0, 5, commit=False)  # 3
    assert txn_file(log).name == "00000000000000000000.txnindex"
    assert txn_file(log).read_bytes() == entry_bytes(7, 0, 3, 2)  # LSO: pid 8's start
    log.append_marker(8, 0, 5, commit=False)  # 4: nothing else open -> marker + 1
    assert txn_file(log).read_bytes() == entry_bytes(7, 0, 3, 2) + entry_bytes(8, 2, 4, 5)
    assert log.aborted_transactions(0, 5) == [AbortedTxn(7, 0), AbortedTxn(8, 2)]
    # Kafka's lastTimestamp: the abort marker's (the broker's clock), not the last
    # record's (BASE_TS + 1)
    assert log.describe_producers()[0] == ProducerInfo(7, 0, 1, BASE_TS + 60_000, 5, -1)


def test_aborted_transactions_over_ranges(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    expected: list[tuple[int, int, int]] = []  # (pid, first, marker)
    for round_ in range(12):
        pid = 100 + round_ % 3
        first = log.append(txn(pid, 3, seq=3 * (round_ // 3), value=b"x" * 60)).first_offset
        log.append(batch(2, value_size=60))
        marker = log.append_marker(pid, 0, 0, commit=round_ % 2 == 1).first_offset
        if round_ % 2 == 0:
            expected.append((pid, first, marker))
    assert len(log.segments) > 3  # entries spread over several .txnindex files
    leo = log.log_end_offset
    for start in range(0, leo, 3):
        for upper in range(start + 1, leo + 1, 4):
            want = [AbortedTxn(p, f) for p, f, m in expected if m >= start and f < upper]
            assert log.aborted_transactions(start, upper) == want, (start, upper)


def test_marker_epoch_checks_and_empty_markers(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn(3, 1, epoch=2))
    log.append_marker(3, 2, 4, commit=True)
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(3, 1, 4, commit=True)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(3, 2, 3, commit=False)
    end = log.log_end_offset
    info = log.append_marker(3, 2, 4, commit=False)  # no open txn: written, completes nothing
    assert info.first_offset == end and log.log_end_offset == end + 1
    assert log.aborted_transactions(0, log.log_end_offset) == []
    info = log.append_marker(99, 0, 0, commit=False)  # unknown producer: written too
    assert info.first_offset == end + 1
    with pytest.raises(InvalidRecordError):  # a control batch that is not a marker
        log.append_control(build_batch([(BASE_TS, b"\x00\x00\x00\x02", b"\x00" * 6)],
                                       producer_id=5, producer_epoch=0, is_transactional=True,
                                       is_control=True))  # fmt: skip


def test_kill9_reopen_restores_ongoing_transactions_lso_and_txnindex(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    log.append(txn(1, 2, value=b"a" * 100))  # pid 1 opens at 0
    log.append_marker(1, 0, 0, commit=False)  # aborted, first segment
    log.append(txn(2, 1, value=b"b" * 100))  # pid 2 opens and stays open
    open_at = 3
    for i in range(30):  # several rolls (snapshots at each), pid 3 aborts in between
        log.append(batch(2, value_size=100, tag=i))
        if i % 10 == 0:
            log.append(txn(3, 1, seq=i // 10, value=b"c" * 100))
            log.append_marker(3, 0, 0, commit=False)
    assert len(log.segments) > 3
    log.update_high_watermark(log.log_end_offset)
    lso, ongoing = log.last_stable_offset, log.ongoing_transactions()
    assert lso == open_at and ongoing == {2: open_at}
    aborted = log.aborted_transactions(0, log.log_end_offset)
    files = {p.name: p.read_bytes() for p in log.directory.glob("*.txnindex")}
    assert sum(len(b) for b in files.values()) == 34 * 4
    # kill -9: no close, no flush; open the directory again.
    again = Log.open(log.directory, SMALL, ManualClock(BASE_TS))
    assert again.ongoing_transactions() == ongoing
    assert again.last_stable_offset == lso and again.high_watermark == log.log_end_offset
    assert again.aborted_transactions(0, again.log_end_offset) == aborted
    assert {p.name: p.read_bytes() for p in log.directory.glob("*.txnindex")} == files
    again.close()
    # Clean shutdown, then an index deleted and another torn: both rebuilt.
    names = sorted(n for n, b in files.items() if b)
    (log.directory / names[0]).unlink()
    with open(log.directory / names[-1], "r+b") as f:
        f.truncate(20)
    third = Log.open(log.directory, SMALL, ManualClock(BASE_TS))
    assert {p.name: p.read_bytes() for p in log.directory.glob("*.txnindex")} == files
    assert third.aborted_transactions(0, third.log_end_offset) == aborted
    assert third.ongoing_transactions() == ongoing and third.last_stable_offset == lso
    # The transaction still open across restarts can end.
    third.append_marker(2, 0, 0, commit=True)
    third.update_high_watermark(third.log_end_offset)
    assert third.last_stable_offset == third.log_end_offset


def test_unclean_open_rebuilds_missing_txnindex_without_a_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    log.append(txn(1, 2, value=b"a" * 400))
    for i in range(8):  # the transaction spans segments before its abort
        log.append(txn(1, 1, seq=2 + i, value=b"a" * 400))
    log.append_marker(1, 0, 0, commit=False)
    assert len(log.segments) > 2
    want = log.aborted_transactions(0, log.log_end_offset)
    assert want == [AbortedTxn(1, 0)]
    for p in log.directory.glob("*.snapshot"):
        p.unlink()
    for p in log.directory.glob("*.txnindex"):
        p.unlink()
    again = Log.open(log.directory, SMALL, ManualClock(BASE_TS))
    assert again.aborted_transactions(0, again.log_end_offset) == want
    assert again.segments[-1].txn_index.entries[0].first_offset == 0


def test_truncate_drops_txnindex_entries_and_reopens_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn(1, 2))  # 0..1
    log.append_marker(1, 0, 0, commit=False)  # 2
    log.append(txn(2, 2))  # 3..4
    log.append_marker(2, 0, 0, commit=False)  # 5
    log.update_high_watermark(6)
    assert len(log.segments[0].txn_index.entries) == 2
    log.truncate_to(5)  # the second marker goes
    assert txn_file(log).read_bytes() == entry_bytes(1, 0, 2, 3)
    assert log.ongoing_transactions() == {2: 3}
    assert log.high_watermark == 5 and log.last_stable_offset == 3
    log.truncate_to(2)
    assert txn_file(log).read_bytes() == b"" and log.ongoing_transactions() == {1: 0}
    assert log.last_stable_offset == 0


def test_retention_and_delete_remove_the_txnindex(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS)
    cfg = LogConfig(segment_bytes=2048, retention_ms=60_000)
    log = open_log(tmp_path, cfg, clock)
    log.append(txn(1, 1, value=b"x" * 100))
    log.append_marker(1, 0, 0, commit=False)
    first = txn_file(log)
    for i in range(40):
        log.append(batch(3, ts=BASE_TS + 100_000 + i, value_size=100))
    log.update_high_watermark(log.log_end_offset)
    assert first.exists() and len(log.segments) > 2
    assert log.apply_retention(BASE_TS + 10**9) >= 1
    assert not first.exists()
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == []
    d = log.directory
    log.delete()
    assert not d.exists()


def test_verification_guard_cleared_by_a_marker(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.needs_verification(1)
    with pytest.raises(InvalidTxnStateError):
        log.append(txn(1, 1), verification_guard=None)
    guard = log.begin_verification(1, 0)
    assert log.begin_verification(1, 0) is guard  # concurrent requests share it
    log.append_marker(1, 0, 0, commit=False)  # e.g. a timeout abort, meanwhile
    with pytest.raises(InvalidTxnStateError):
        log.append(txn(1, 1), verification_guard=guard)  # the late batch is refused
    guard = log.begin_verification(1, 0)
    log.append(txn(1, 1), verification_guard=guard)
    assert not log.needs_verification(1)
    log.append(txn(1, 1, seq=1), verification_guard=None)  # continuing needs none
    log.append_marker(1, 0, 0, commit=True)
    assert log.needs_verification(1)
    old = log.begin_verification(1, 0)
    log.append(txn(1, 1, epoch=1))  # an epoch bump written without the keyword
    log.append_marker(1, 1, 0, commit=True)
    log.begin_verification(1, 1)
    with pytest.raises(InvalidTxnStateError):
        log.append(txn(1, 1, epoch=1, seq=1), verification_guard=old)
    log.append(txn(1, 1, epoch=1, seq=1))  # without the keyword: today's behaviour
    assert log.ongoing_transactions() == {1: log.log_end_offset - 1}


def test_delete_records_moves_lso_to_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn(1, 2))
    log.append(batch(3))
    log.update_high_watermark(5)
    assert log.last_stable_offset == 0
    log.delete_records_before(4)
    assert log.last_stable_offset == 4


def test_txnindex_survives_clean_reopen_without_rebuild(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn(1, 2))
    log.append_marker(1, 0, 0, commit=False)
    log.close()
    path = tmp_path / "topic-0" / "00000000000000000000.txnindex"
    stamp = os.stat(path).st_mtime_ns
    again = open_log(tmp_path)
    assert os.stat(path).st_mtime_ns == stamp  # trusted, not rewritten
    assert again.aborted_transactions(0, 10) == [AbortedTxn(1, 0)]


# -- property: LSO and aborted ranges against a simple model ---------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("txn"), st.integers(1, 3), st.integers(1, 3)),
        st.tuples(st.just("plain"), st.just(0), st.integers(1, 3)),
        st.tuples(st.sampled_from(["commit", "abort"]), st.integers(1, 4), st.just(0)),
        st.tuples(st.just("hw"), st.integers(0, 100), st.just(0)),
    ),
    max_size=40,
)


class _Model:
    def __init__(self) -> None:
        self.ongoing: dict[int, int] = {}
        self.done: list[tuple[int, int, int, bool]] = []  # pid, first, marker, aborted
        self.hw = 0
        self.leo = 0

    def lso(self) -> int:
        firsts = list(self.ongoing.values())
        firsts += [f for _, f, m, _ in self.done if m >= self.hw]
        return min([*firsts, self.hw])

    def aborted(self, start: int, upper: int) -> list[AbortedTxn]:
        hits = [(f, p) for p, f, m, a in self.done if a and m >= start and f < upper]
        return [AbortedTxn(p, f) for f, p in sorted(hits)]


@settings(max_examples=60, deadline=None)
@given(ops=_OPS)
def test_lso_and_aborted_ranges_match_a_model(ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = open_log(Path(tmp), SMALL)
        model = _Model()
        seqs = {1: 0, 2: 0, 3: 0}
        for op, arg, n in ops:
            if op == "txn":
                log.append(txn(arg, n, seq=seqs[arg], value=b"t" * 50))
                seqs[arg] += n
                model.ongoing.setdefault(arg, model.leo)
                model.leo += n
            elif op == "plain":
                log.append(batch(n, value_size=50))
                model.leo += n
            elif op in ("commit", "abort"):
                log.append_marker(arg, 0, 0, commit=op == "commit")
                if arg in model.ongoing:
                    model.done.append((arg, model.ongoing.pop(arg), model.leo, op == "abort"))
                model.leo += 1
            else:
                target = model.hw + arg * (model.leo - model.hw) // 100
                assert log.update_high_watermark(target) == (target > model.hw)
                model.hw = target
            assert log.log_end_offset == model.leo and log.high_watermark == model.hw
            assert log.last_stable_offset == model.lso()
            assert log.ongoing_transactions() == model.ongoing
        for start in range(0, model.leo + 1, 3):
            for upper in range(start + 1, model.leo + 2, 5):
                assert log.aborted_transactions(start, upper) == model.aborted(start, upper)
        again = Log.open(log.directory, SMALL, ManualClock(BASE_TS))  # kill -9
        model.hw = model.leo
        assert again.ongoing_transactions() == model.ongoing
        assert again.last_stable_offset == model.lso()
        assert again.aborted_transactions(0, model.leo + 1) == model.aborted(0, model.leo + 1)
        again.close()
        log.close()


def test_interrupted_cleaner_swap_rebuilds_the_merged_txnindex(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    for i in range(12):  # aborted transactions spread over the first segments
        log.append(txn(1, 1, seq=i, value=b"a" * 300))
        log.append_marker(1, 0, 0, commit=False)
    assert len(log.segments) > 2
    segs = log.segments
    want = log.aborted_transactions(0, segs[2].base_offset)
    assert len(want) > 1 and segs[1].txn_index.entries
    log.close()
    d = tmp_path / "topic-0"
    merged = segs[0].log_path.read_bytes() + segs[1].log_path.read_bytes()
    (d / "00000000000000000000.log.swap").write_bytes(merged)  # the commit point
    (d / "00000000000000000000.txnindex.cleaned").write_bytes(b"junk")
    again = Log.open(d, SMALL, ManualClock(BASE_TS))
    assert [s.base_offset for s in again.segments][:2] == [0, segs[2].base_offset]
    assert again.aborted_transactions(0, segs[2].base_offset) == want
    assert not list(d.glob("*.cleaned")) and not list(d.glob("*.swap"))


def test_a_bumped_epoch_needs_verification_while_the_old_transaction_is_open(
        tmp_path: Path) -> None:
    """Transaction version 2 bumps the epoch at every end: a batch of the next
    transaction arriving before the previous one's marker must be verified, not taken
    as a continuation of the open transaction (it would be committed with it)."""
    log = open_log(tmp_path)
    guard = log.begin_verification(1, 0)
    log.append(txn(1, 1), verification_guard=guard)
    assert not log.needs_verification(1, 0)  # the same transaction goes on
    assert log.needs_verification(1, 1)  # the next one, marker not landed yet
    log.append_marker(1, 1, 0, commit=True)
    assert log.needs_verification(1, 1)
