"""The hanging-transaction check (server/hanging.py) against hand-made views."""

from __future__ import annotations

import logging

import pytest

from tidegate.server.hanging import HangingCheck, coordinator_view, find_hanging

TP = ("orders", 0)
TP2 = ("orders", 1)


def test_known_transactions_are_not_hanging() -> None:
    seen: dict[tuple[tuple[str, int], int, int], int] = {}
    known = coordinator_view([(7, frozenset({TP, TP2}))])
    assert find_hanging({TP: {7: 10}}, known, seen, 0, 100) == []
    assert find_hanging({TP: {7: 10}}, known, seen, 10_000, 100) == []


def test_unknown_transaction_hangs_only_after_the_max_timeout() -> None:
    seen: dict[tuple[tuple[str, int], int, int], int] = {}
    assert find_hanging({TP: {9: 5}}, {}, seen, 1_000, 500) == []  # first seen now
    assert find_hanging({TP: {9: 5}}, {}, seen, 1_500, 500) == []  # not yet over
    found = find_hanging({TP: {9: 5}}, {}, seen, 1_501, 500)
    assert [(h.topic, h.partition, h.producer_id, h.first_offset) for h in found] == [
        ("orders", 0, 9, 5)]


def test_a_transaction_open_in_another_partition_does_not_count() -> None:
    seen: dict[tuple[tuple[str, int], int, int], int] = {}
    known = coordinator_view([(9, frozenset({TP2}))])
    find_hanging({TP: {9: 5}}, known, seen, 0, 10)
    assert len(find_hanging({TP: {9: 5}}, known, seen, 100, 10)) == 1


def test_closed_transactions_are_forgotten() -> None:
    seen: dict[tuple[tuple[str, int], int, int], int] = {}
    find_hanging({TP: {9: 5}}, {}, seen, 0, 10)
    find_hanging({}, {}, seen, 5, 10)
    assert seen == {}
    # a new transaction of the same producer starts its own clock
    assert find_hanging({TP: {9: 50}}, {}, seen, 100, 10) == []


def test_each_hanging_transaction_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    check = HangingCheck(max_timeout_ms=10)
    caplog.set_level(logging.WARNING, logger="tidegate.server.hanging")
    check.run({TP: {9: 5}}, {}, 0)
    for now in (100, 200, 300):
        assert len(check.run({TP: {9: 5}}, {}, now)) == 1
    lines = [r for r in caplog.records if "hanging transaction" in r.getMessage()]
    assert len(lines) == 1
    command = "tidegate txn abort --topic orders --partition 0 --producer-id 9"
    assert command in lines[0].getMessage()
