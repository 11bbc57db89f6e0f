"""The Jepsen-style history checker (tests/integration/history.py) on hand-made
histories: a clean one passes, and each anomaly kind is found — the checker can fail."""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.history import ANOMALIES, History, Op, Read, Report, Send, Write, check


class H:
    """Builds histories tersely: h.txn(proc, "ok", (p, off, value), ...)."""

    def __init__(self) -> None:
        self.h = History()

    def txn(self, proc: int, outcome: str, *writes: tuple[int, int | None, str]) -> H:
        self.h.invoke(proc, "txn", [Send(p, v) for p, _o, v in writes])
        self.h.add(proc, outcome, "txn", [Write(p, o, v) for p, o, v in writes])  # type: ignore[arg-type]
        return self

    def open_txn(self, proc: int, *sends: tuple[int, str]) -> H:
        self.h.invoke(proc, "txn", [Send(p, v) for p, v in sends])
        return self

    def poll(self, proc: int, *reads: tuple[int, int, str]) -> H:
        self.h.invoke(proc, "poll")
        self.h.add(proc, "ok", "poll", [Read(*r) for r in reads])
        return self

    def reset(self, proc: int) -> H:
        self.h.add(proc, "ok", "reset")
        return self

    def final(self, *reads: tuple[int, int, str]) -> Report:
        self.h.add("final", "ok", "final-read", [Read(*r) for r in reads])
        return check(self.h.ops)


def only(report: Report, kind: str) -> list[Any]:
    others = {k: v for k, v in report.counts.items() if v and k != kind}
    assert not others, report.summary()
    assert report.counts[kind] > 0, report.summary()
    assert not report.valid
    return report.anomalies[kind]


def clean() -> H:
    """Two committed txns over two partitions, an aborted one (its records hold
    offsets 0 and 1 of partition 1, then its marker at 2), and polls that see exactly
    the committed values in order."""
    return (H()
            .txn(1, "ok", (0, 0, "a"), (0, 1, "b"))
            .txn(2, "fail", (1, 0, "x"), (1, 1, "y"))
            .txn(2, "ok", (1, 3, "c"))
            .poll(3, (0, 0, "a"))
            .poll(3, (0, 1, "b"), (1, 3, "c")))


def test_clean_history_is_valid() -> None:
    report = clean().final((0, 0, "a"), (0, 1, "b"), (1, 3, "c"))
    assert report.valid, report.summary()
    assert report.stats["ok"] == 2 and report.stats["fail"] == 1
    assert set(report.counts) == set(ANOMALIES)


def test_lost_committed_write() -> None:
    found = only(clean().final((0, 0, "a"), (1, 3, "c")), "lost")
    assert [e["value"] for e in found] == ["b"]


def test_lost_polled_value_of_unknown_txn() -> None:
    h = H().open_txn(1, (0, "u")).poll(2, (0, 0, "u"))
    assert [e["value"] for e in only(h.final(), "lost")] == ["u"]


def test_duplicate_value_at_two_offsets() -> None:
    found = only(clean().final((0, 0, "a"), (0, 1, "b"), (1, 3, "c"), (1, 4, "c")),
                 "duplicated")
    assert found[0]["value"] == "c" and found[0]["positions"] == [(1, 3), (1, 4)]


def test_duplicate_against_delivery_report() -> None:
    h = H().txn(1, "ok", (0, 5, "a"))
    assert only(h.final((0, 0, "a")), "duplicated")[0]["positions"] == [(0, 0), (0, 5)]


def test_aborted_read_in_poll() -> None:
    h = clean().poll(4, (1, 1, "y"))
    found = only(h.final((0, 0, "a"), (0, 1, "b"), (1, 3, "c")), "aborted_read")
    assert found == [{"value": "y", "process": 2, "in_final": False, "polled": True}]


def test_aborted_read_in_final_read() -> None:
    found = only(clean().final((0, 0, "a"), (0, 1, "b"), (1, 0, "x"), (1, 3, "c")),
                 "aborted_read")
    assert [e["value"] for e in found] == ["x"]


@pytest.mark.parametrize("outcome", ["info", None])
def test_unknown_txn_all_or_nothing(outcome: str | None) -> None:
    def hist() -> H:
        h = H()
        if outcome is None:  # the history ended before the txn completed
            return h.open_txn(1, (0, "p"), (1, "q"))
        return h.txn(1, outcome, (0, None, "p"), (1, None, "q"))

    assert hist().final().valid
    assert hist().final((0, 0, "p"), (1, 0, "q")).valid
    found = only(hist().final((1, 0, "q")), "torn_txn")
    assert found[0]["missing_from_final"] == ["p"] and found[0]["in_final"] == ["q"]


def test_torn_txn_seen_only_by_poll_is_lost_and_torn() -> None:
    h = H().txn(1, "info", (0, None, "p"), (1, None, "q")).poll(2, (0, 0, "p"))
    report = h.final((1, 0, "q"))
    assert report.counts["torn_txn"] == 1 and report.counts["lost"] == 1, report.summary()


def test_inconsistent_offset() -> None:
    h = H().txn(1, "ok", (0, 0, "a")).txn(2, "ok", (0, 1, "b")).poll(3, (0, 0, "b"))
    report = h.final((0, 0, "a"), (0, 1, "b"))
    assert report.counts["inconsistent_offset"] == 1, report.summary()
    assert report.anomalies["inconsistent_offset"][0] == {
        "partition": 0, "offset": 0, "values": ["a", "b"]}
    assert report.counts["duplicated"] == 1  # "b" also appears at two offsets


def test_inconsistent_offset_between_ack_and_final_read() -> None:
    # an aborted record's acknowledged offset may not be reused by another value
    h = H().txn(1, "fail", (0, 0, "x")).txn(2, "ok", (0, 0, "a"))
    found = only(h.final((0, 0, "a")), "inconsistent_offset")
    assert found[0]["values"] == ["a", "x"]


def test_wrong_partition() -> None:
    h = H().txn(1, "ok", (0, None, "a"))
    assert only(h.final((2, 0, "a")), "wrong_partition") == [
        {"value": "a", "read_from": 2, "sent_to": 0}]


def test_unexpected_value() -> None:
    assert only(clean().final((0, 0, "a"), (0, 1, "b"), (1, 3, "c"), (2, 0, "zz")),
                "unexpected") == [{"value": "zz"}]


def test_nonmonotonic_poll_across_ops() -> None:
    h = clean().poll(3, (0, 0, "a"))  # process 3 already read offset 1 of partition 0
    found = only(h.final((0, 0, "a"), (0, 1, "b"), (1, 3, "c")), "nonmonotonic")
    assert found[0]["from"] == 1 and found[0]["to"] == 0


def test_nonmonotonic_within_one_poll() -> None:
    h = clean().poll(4, (0, 1, "b"), (0, 1, "b"))
    assert only(h.final((0, 0, "a"), (0, 1, "b"), (1, 3, "c")), "nonmonotonic")


def test_reset_allows_going_back() -> None:
    h = clean().reset(3).poll(3, (0, 0, "a"), (0, 1, "b"))
    assert h.final((0, 0, "a"), (0, 1, "b"), (1, 3, "c")).valid


def test_sessions_are_per_process() -> None:
    h = clean().poll(4, (0, 0, "a"))  # process 4 reads from the start: fine
    assert h.final((0, 0, "a"), (0, 1, "b"), (1, 3, "c")).valid


def test_skipped_committed_offset() -> None:
    h = (H().txn(1, "ok", (0, 0, "a"), (0, 1, "b"), (0, 2, "c"))
         .poll(2, (0, 0, "a")).poll(2, (0, 2, "c")))
    found = only(h.final((0, 0, "a"), (0, 1, "b"), (0, 2, "c")), "skipped")
    assert found[0]["missed_offset"] == 1


def test_gaps_of_aborted_records_and_markers_are_not_skips() -> None:
    h = (H().txn(1, "ok", (0, 0, "a")).txn(1, "fail", (0, 2, "x"))
         .txn(1, "ok", (0, 5, "b")).poll(2, (0, 0, "a")).poll(2, (0, 5, "b")))
    assert h.final((0, 0, "a"), (0, 5, "b")).valid


def test_counts_and_summary_name_every_found_kind() -> None:
    h = clean().poll(4, (1, 0, "x"))
    report = h.final((0, 0, "a"), (1, 3, "c"))
    assert report.counts["lost"] == 1 and report.counts["aborted_read"] == 1
    text = report.summary()
    assert text.startswith("INVALID") and "lost: 1" in text and "aborted_read: 1" in text


def test_history_requires_one_final_read() -> None:
    with pytest.raises(ValueError):
        check(clean().h.ops)


def test_double_invoke_is_a_malformed_history() -> None:
    h = History()
    h.invoke(1, "txn", [])
    h.invoke(1, "txn", [])
    h.add("final", "ok", "final-read", [])
    with pytest.raises(ValueError):
        check(h.ops)


def test_ops_are_indexed_in_order() -> None:
    h = History()
    ops: list[Op] = [h.invoke(1, "poll"), h.add(1, "ok", "poll", [])]
    assert [o.index for o in ops] == [0, 1] == [o.index for o in h.ops]
