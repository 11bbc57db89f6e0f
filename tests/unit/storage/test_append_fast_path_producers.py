"""The one-batch append (`Log.append(single_batch=True)`'s fast case, `_append_one`)
against the general steps AND against the producer rules themselves
(`producer_rules.classify`), over generated producer histories: idempotent and
transactional batches, the next sequence, gaps, retries of earlier batches (inside the
open transaction; after a COMMIT or ABORT marker ended it, which is
REUSED_AFTER_MARKER; behind the five cached batches), older and bumped epochs, markers,
two producers. Each history runs on two logs in lockstep, one with the fast case turned
off; every client batch must take the fast case on the first, get the same answer on
both, and get the answer `classify` decides on the producer state before it (its error,
the cached original's offsets for a duplicate, else written); the LSO after each step is
the rule's (min of the first unstable offset and the high watermark). A duplicate or sequence
check on the fast path that does not go through `classify` (a mirror missing a rule, or
a shortcut taken before it) makes a history tell them apart."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from tidegate.common.clock import ManualClock
from tidegate.records import _accel
from tidegate.records.batch import parse_header
from tidegate.records.builder import build_batch
from tidegate.records.control import ControlType, build_control_batch
from tidegate.storage import log_append
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log
from tidegate.storage.log_append import AppendInfo
from tidegate.storage.producer_rules import _RULES, InvalidTxnStateError, Verdict, classify

from ._support import BASE_TS, all_batches, open_log

pytestmark = pytest.mark.skipif(_accel.check_batch is None, reason="needs the C extension")

PIDS = (7, 8)

# An op: ("next", pid, n, txn) the producer's next sequence at its newest epoch;
# ("again", k, 0, txn) the client batch sent k before the last one (modulo their count)
# sent again, as it was if `txn` is None, else with that transactional flag;
# ("seq", pid, delta, txn) last sequence + delta (gaps, overlaps); ("bump", pid, 0, None)
# a newer epoch from now on; ("old", pid, 0, txn) a batch at the epoch before the
# newest; ("marker", pid, commit, None) a COMMIT (1) or ABORT (0) at the newest epoch.
Op = tuple[str, int, int, bool | None]

_next = st.tuples(st.just("next"), st.sampled_from(PIDS), st.integers(1, 3), st.booleans())
_again = st.tuples(st.just("again"), st.integers(0, 8), st.just(0),
                   st.sampled_from([None, None, True, False]))
_marker = st.tuples(st.just("marker"), st.sampled_from(PIDS), st.integers(0, 1), st.none())
_ops = st.one_of(  # (weighted: runs of batches, markers, retries of recent batches)
    _next, _next, _next, _again, _again, _marker,
    st.tuples(st.just("seq"), st.sampled_from(PIDS), st.integers(-4, 4), st.booleans()),
    st.tuples(st.just("bump"), st.sampled_from(PIDS), st.just(0), st.none()),
    st.tuples(st.just("old"), st.sampled_from(PIDS), st.just(0), st.booleans()),
)

# librdkafka after a kill -9 (NOTES, session 18): a transaction's batch written, its
# answer lost, the transaction aborted, the next one's batch sent with the same sequences
LIBRDKAFKA_REUSE: list[Op] = [("next", 7, 2, True), ("next", 7, 2, True), ("marker", 7, 0, None),
                              ("again", 0, 0, None), ("again", 2, 0, None)]
# a retry inside the open transaction after an earlier one committed (a duplicate), then
# one of the committed transaction's batches (a reuse); then behind the cache
RETRY_IN_NEXT_TXN: list[Op] = [("next", 7, 1, True), ("marker", 7, 1, None),
                               ("next", 7, 1, True), ("again", 0, 0, None),
                               ("again", 2, 0, None)] + [("next", 7, 1, True)] * 5 + [
                               ("again", 5, 0, None), ("marker", 7, 0, None),
                               ("again", 7, 0, None)]


def _batch(pid: int, epoch: int, seq: int, n: int, txn: bool) -> bytes:
    return build_batch([(BASE_TS + i, b"k", b"%d:%d" % (seq, i)) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=txn)


def _outcome(call: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    try:
        info = call(*args, **kw)
    except Exception as e:  # as the handler would answer it
        return (type(e).__name__, str(e))
    return info


def _expected(lg: Log, data: bytes) -> tuple[Verdict, Any]:
    """`classify`'s verdict on `data` given `lg`'s producer state now, and the answer it
    decides: an error class, the cached original's (first, last) offsets, or "written"."""
    header = parse_header(data, 0)
    psm = lg.producer_state
    entry = psm.last_entry(header.producer_id)
    verdict = classify(entry, header, strict_unknown_producer=psm.strict_unknown_producer)
    error = _RULES[verdict]
    if error is not None:
        return verdict, error.__name__
    if verdict is Verdict.DUPLICATE:
        assert entry is not None
        dup = entry.find_duplicate(header.producer_epoch, header.base_sequence,
                                   header.last_sequence)
        assert dup is not None
        return verdict, (dup.first_offset, dup.last_offset)
    if (entry is not None and entry.current_txn_first_offset is not None
            and not header.is_transactional):
        return verdict, InvalidTxnStateError.__name__  # validate's rule after classify
    return verdict, "written"


def _answer(outcome: Any, end_before: int) -> Any:
    if not isinstance(outcome, AppendInfo):  # (an AppendInfo is a tuple too)
        return outcome[0]
    if outcome.duplicate:
        return (outcome.first_offset, outcome.last_offset)
    assert outcome.first_offset == end_before
    return "written"


def _settle(*logs: Log) -> None:
    """The high watermark to the log end (the flush round's end), on each log alike; the
    LSO as the rule says (`_advance_hw_locked` decides it without asking the producer
    state when no transaction is unstable: checked here over transactional histories)."""
    for lg in logs:
        lg.update_high_watermark(lg.log_end_offset)
        first, hw = lg.producer_state.first_unstable_offset(), lg.high_watermark
        assert lg.last_stable_offset == max(hw if first is None else min(first, hw),
                                            lg.log_start_offset)
    assert len({(lg.log_end_offset, lg.high_watermark, lg.last_stable_offset)
                for lg in logs}) == 1


def _run(tmp: Path, ops: list[Op]) -> list[Verdict]:
    fast, general = (open_log(tmp / side, LogConfig(), ManualClock(BASE_TS))
                     for side in ("fast", "general"))
    taken: list[int] = []
    real_one = Log._append_one

    def spy(self: Log, *args: Any) -> Any:
        taken.append(1)
        return real_one(self, *args)

    epochs = dict.fromkeys(PIDS, 0)
    sent: list[tuple[int, int, int, int, bool]] = []  # (pid, epoch, seq, n, txn)
    verdicts: list[Verdict] = []
    try:
        for kind, a, b, txn in ops:
            if kind == "marker":
                data = build_control_batch(producer_id=a, producer_epoch=epochs[a],
                                           control_type=ControlType(b), coordinator_epoch=0,
                                           timestamp=BASE_TS)
                got = [_outcome(lg.append_control, data, coordinator_epoch=0)
                       for lg in (fast, general)]
                assert got[0] == got[1]
                _settle(fast, general)
                continue
            if kind == "bump":
                epochs[a] += 1
                continue
            if kind == "again":
                if not sent:
                    continue
                pid, epoch, seq, n, was_txn = sent[-1 - a % len(sent)]
                txn = was_txn if txn is None else txn
            else:
                pid, n = a, (b if kind == "next" else 1)
                epoch = epochs[pid] - 1 if kind == "old" else epochs[pid]
                entry = fast.producer_state.last_entry(pid)
                last = -1 if entry is None or entry.producer_epoch != epoch else entry.last_seq
                seq = max(0, last + (1 if kind == "next" else b))
            assert txn is not None
            data = _batch(pid, epoch, seq, n, txn)
            verdict, expected = _expected(fast, data)
            verdicts.append(verdict)
            end = fast.log_end_offset
            with mock.patch.object(Log, "_append_one", spy):
                one = _outcome(fast.append, data, single_batch=True)
            with mock.patch.object(log_append, "check_produce_batch", lambda *_: None):
                steps = _outcome(general.append, data, single_batch=True)
            assert one == steps, (verdict, one, steps)
            assert _answer(one, end) == expected, (verdict, one)
            sent.append((pid, epoch, seq, n, txn))
            _settle(fast, general)
        assert len(taken) == len(verdicts)  # every client batch took the fast case
        assert all_batches(fast) == all_batches(general)
        assert fast.producer_state.describe() == general.producer_state.describe()
    finally:
        fast.close()
        general.close()
    return verdicts


@settings(max_examples=150, deadline=None)
@given(st.lists(_ops, max_size=32))
@example(LIBRDKAFKA_REUSE)
@example(RETRY_IN_NEXT_TXN)
def test_the_fast_case_answers_as_the_producer_rules(ops: list[Op]) -> None:
    with tempfile.TemporaryDirectory(prefix="fast-producers-") as tmp:
        for verdict in _run(Path(tmp), ops):
            event(verdict.name)


def test_the_examples_reach_the_reuse_rule() -> None:
    """The two explicit histories do reach what they are there for (so the property
    above always checks the fast case against REUSED_AFTER_MARKER)."""
    with tempfile.TemporaryDirectory(prefix="fast-producers-") as tmp:
        first = _run(Path(tmp) / "a", LIBRDKAFKA_REUSE)
        second = _run(Path(tmp) / "b", RETRY_IN_NEXT_TXN)
    assert first[2:] == [Verdict.REUSED_AFTER_MARKER] * 2
    assert second[2:4] == [Verdict.DUPLICATE, Verdict.REUSED_AFTER_MARKER]
    assert second[-2:] == [Verdict.OLD_RETRY, Verdict.REUSED_AFTER_MARKER]
