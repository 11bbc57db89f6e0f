"""Accumulator batching: batch.size, linger.ms, readiness, drain, retries, memory."""

from __future__ import annotations

from tidegate.client.producer.accumulator import (
    RecordAccumulator,
    record_size_upper_bound,
)
from tidegate.client.types import TopicPartition
from tidegate.records.compression import Codec
from tidegate.records.record import decode_records

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def acc(batch_size: int = 1000, linger_ms: int = 5, memory: int = 1 << 20,
        codec: Codec = Codec.NONE) -> RecordAccumulator[int]:
    return RecordAccumulator(batch_size=batch_size, linger_ms=linger_ms,
                             buffer_memory=memory, compression=codec, retry_backoff_ms=100)


def test_records_share_a_batch_until_batch_size() -> None:
    a = acc(batch_size=300)
    sizes = []
    for i in range(10):
        _batch, created, _ = a.append(TP0, 1000 + i, b"k", b"v" * 50, (), i, now_ms=0)
        sizes.append(created)
    batches = a.batches(TP0)
    assert len(batches) > 1 and sizes[0] is True
    for b in batches:
        assert b.builder.estimated_size() <= 300
    assert [t for b in batches for t in b.tokens] == list(range(10))


def test_oversized_record_gets_its_own_batch() -> None:
    a = acc(batch_size=100)
    a.append(TP0, 0, None, b"small", (), 1, 0)
    _, created, full = a.append(TP0, 0, None, b"x" * 500, (), 2, 0)
    assert full
    assert created
    assert [len(b) for b in a.batches(TP0)] == [1, 1]


def test_linger_decides_readiness() -> None:
    a = acc(linger_ms=5)
    a.append(TP0, 0, None, b"v", (), 1, now_ms=100)
    ready, wait = a.ready(now_ms=102)
    assert ready == [] and wait == 3
    ready, wait = a.ready(now_ms=105)
    assert ready == [TP0] and wait is None


def test_full_batch_is_ready_before_linger() -> None:
    a = acc(batch_size=200, linger_ms=10_000)
    for i in range(20):
        a.append(TP0, 0, None, b"v" * 20, (), i, now_ms=0)
    a.append(TP1, 0, None, b"v", (), 99, now_ms=0)
    ready, wait = a.ready(now_ms=1)
    assert ready == [TP0]  # TP0 has a full batch; TP1 lingers
    assert wait == 9_999


def test_linger_zero_is_ready_at_once() -> None:
    a = acc(linger_ms=0)
    a.append(TP0, 0, None, b"v", (), 1, now_ms=50)
    assert a.ready(now_ms=50)[0] == [TP0]


def test_flush_and_close_make_everything_ready() -> None:
    a = acc(linger_ms=10_000)
    a.append(TP0, 0, None, b"v", (), 1, now_ms=0)
    assert a.ready(1)[0] == []
    a.flushing += 1
    assert a.ready(1)[0] == [TP0]
    a.flushing -= 1
    a.closing = True
    assert a.ready(1)[0] == [TP0]


def test_muted_partitions_are_not_ready() -> None:
    a = acc(linger_ms=0)
    a.append(TP0, 0, None, b"v", (), 1, now_ms=0)
    assert a.ready(0, muted={TP0})[0] == []


def test_drain_builds_valid_batches_within_max_request_size() -> None:
    a = acc(batch_size=10_000, linger_ms=0, codec=Codec.GZIP)
    for tp in (TP0, TP1):
        for i in range(3):
            a.append(tp, 1000 + i, b"key%d" % i, b"value" * 20, (("h", b"1"),), i, 0)
    one = a.drain([TP0, TP1], max_request_size=1, now_ms=0)
    assert [b.tp for b in one] == [TP0]  # the first batch is always taken
    rest = a.drain([TP0, TP1], max_request_size=1 << 20, now_ms=0)
    assert [b.tp for b in rest] == [TP1]
    header, records = decode_records(one[0].payload or b"")
    assert header.compression == Codec.GZIP
    assert [(r.offset, r.timestamp, r.key, r.headers) for r in records] == [
        (i, 1000 + i, b"key%d" % i, (("h", b"1"),)) for i in range(3)]
    assert not a.has_unsent()


def test_closed_batch_takes_no_more_records() -> None:
    a = acc(linger_ms=0)
    a.append(TP0, 0, None, b"a", (), 1, 0)
    (sent,) = a.drain([TP0], 1 << 20, 0)
    _, created, _ = a.append(TP0, 0, None, b"b", (), 2, 0)
    assert created and len(sent) == 1


def test_retry_goes_to_the_front_and_backs_off() -> None:
    a = acc(linger_ms=0)
    a.append(TP0, 0, None, b"first", (), 1, 0)
    (batch,) = a.drain([TP0], 1 << 20, now_ms=0)
    a.append(TP0, 0, None, b"second", (), 2, now_ms=1)
    a.reenqueue(batch, now_ms=10)
    assert a.batches(TP0)[0] is batch
    ready, wait = a.ready(now_ms=50)
    assert ready == [] and wait == 60  # backing off until 110
    assert a.drain([TP0], 1 << 20, now_ms=50) == []
    assert a.ready(now_ms=110)[0] == [TP0]
    (again,) = a.drain([TP0], 1 << 20, now_ms=110)
    assert again is batch and again.payload == batch.payload  # same bytes re-sent


def test_memory_accounting_and_release() -> None:
    a = acc(memory=1000, linger_ms=0)
    assert a.has_room(900)
    a.append(TP0, 0, None, b"x" * 800, (), 1, 0)
    assert a.used_memory >= 800
    assert not a.has_room(300)
    (drained,) = a.drain([TP0], 1 << 20, 0)
    assert not a.has_room(300)  # in flight still holds memory
    a.deallocate(drained)
    assert a.used_memory == 0 and a.has_room(900)


def test_expired_batches_are_removed() -> None:
    a = acc(linger_ms=10_000)
    a.append(TP0, 0, None, b"old", (), 1, now_ms=0)
    a.append(TP1, 0, None, b"new", (), 2, now_ms=500)
    expired = a.expired(now_ms=1000, delivery_timeout_ms=1000)
    assert [b.tp for b in expired] == [TP0]
    assert a.partitions() == [TP1]


def test_size_upper_bound_covers_encoding() -> None:
    a = acc()
    key, value, headers = b"k" * 300, b"v" * 70_000, (("name", b"x" * 200),)
    batch, _, _ = a.append(TP0, 2**40, key, value, headers, 1, 0)
    actual = batch.builder.estimated_size() - 61
    assert actual <= record_size_upper_bound(key, value, headers)
