"""The notifier's bookkeeping (patterns/notify/tracker.py): retry times, dead after the
schedule, and which offsets may be committed while notifications are outstanding."""

from __future__ import annotations

import pytest

from tidegate.client import ConsumerRecord, TopicPartition
from tidegate.patterns.notify import Tracker, notification_id

TP = TopicPartition("t", 0)


def rec(offset: int, partition: int = 0) -> ConsumerRecord:
    return ConsumerRecord("t", partition, offset, 0, 0, b"k", b"v", ())


def test_retry_schedule_then_dead() -> None:
    t = Tracker((1.0, 5.0))
    n = t.add(rec(0), "http://x")
    assert t.result(n, False, 100.0, "HTTP 500").retry_at == 101.0
    assert t.due(100.5, 10) == []
    assert t.due(101.0, 10) == [n]
    assert t.result(n, False, 101.0).retry_at == 106.0
    assert t.due(106.0, 10) == [n]
    out = t.result(n, False, 106.0, "timed out")
    assert out.kind == "dead" and n.attempts == 3 == t.max_attempts
    assert t.next_due() is None


def test_offsets_stop_at_the_lowest_outstanding() -> None:
    t = Tracker((1.0,))
    a, b, c = (t.add(rec(i), "u") for i in range(3))
    assert t.to_commit() == {TP: 0}
    t.committed({TP: 0})
    assert t.to_commit() == {}
    t.result(b, True, 0.0)
    t.finish(b)
    t.finish(c)
    assert t.to_commit() == {}  # offset 0 still outstanding: nothing moves
    t.finish(a)
    assert t.to_commit() == {TP: 3}
    t.skip(rec(3))
    assert t.to_commit() == {TP: 4}
    other = t.add(rec(7, partition=1), "u")
    assert t.to_commit() == {TP: 4, TopicPartition("t", 1): 7}
    t.finish(other)
    assert t.to_commit()[TopicPartition("t", 1)] == 8


def test_due_respects_the_limit_and_order() -> None:
    t = Tracker((2.0,))
    ns = [t.add(rec(i), "u") for i in range(3)]
    for i, n in enumerate(reversed(ns)):
        t.result(n, False, float(i))
    assert [n.record.offset for n in t.due(10.0, 2)] == [2, 1]
    assert t.waiting == 1


def test_bad_schedule_and_ids() -> None:
    with pytest.raises(ValueError):
        Tracker((-1.0,))
    assert notification_id(rec(5, 2)) == "t:2:5"
