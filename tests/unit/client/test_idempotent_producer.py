"""The idempotent producer: sequence assignment, retry order, KIP-360 resets, fatal errors.

The first half drives `IdempotenceManager` and `RecordAccumulator` directly (no event
loop); the second runs `AsyncProducer` against `FakeIdempotentBroker`, which checks
sequences like the real broker and can drop connections after writing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from tidegate.client import AsyncProducer, TopicPartition
from tidegate.client.producer.accumulator import ProducerBatch, RecordAccumulator
from tidegate.client.producer.idempotence import (
    MAX_IN_FLIGHT_PER_PARTITION,
    SEQUENCE_MODULUS,
    FatalProducerError,
    IdempotenceManager,
    Verdict,
)
from tidegate.common.errors import ErrorCode
from tidegate.records.batch import validate_batch

from .fake_idempotent_broker import FakeIdempotentBroker

T = TypeVar("T")
TP = TopicPartition("t", 0)


# -- sans-IO: manager + accumulator -------------------------------------------------------


def make(pid: int = 7) -> tuple[IdempotenceManager, RecordAccumulator[Any]]:
    idem = IdempotenceManager()
    idem.set_producer_id(pid, 0, [])
    acc: RecordAccumulator[Any] = RecordAccumulator(
        batch_size=100, linger_ms=0, buffer_memory=1 << 20, retry_backoff_ms=0
    )
    return idem, acc


def fill(
    acc: RecordAccumulator[Any], batches: int, per_batch: int = 3, tp: TopicPartition = TP
) -> None:
    """Append `batches` full batches of `per_batch` records each."""
    # 61-byte header, 17 bytes per 10-byte record, room checked with the upper bound (31).
    acc.batch_size = 61 + 17 * (per_batch - 1) + 31
    for i in range(batches * per_batch):
        acc.append(tp, 0, None, b"v%08d" % i, (), object(), 0)


def drain1(
    acc: RecordAccumulator[Any], idem: IdempotenceManager, tp: TopicPartition = TP
) -> ProducerBatch[Any] | None:
    out = acc.drain([tp], 1 << 20, 0, idem)
    return out[0] if out else None


def test_sequences_are_assigned_when_drained_and_stamped_into_the_batch() -> None:
    idem, acc = make()
    fill(acc, 3)
    queued = acc.batches(TP)
    assert len(queued) == 3 and all(b.base_sequence == -1 for b in queued)
    first = drain1(acc, idem)
    assert first is not None and first.base_sequence == 0
    assert queued[1].base_sequence == -1  # still queued: no sequence yet
    second = drain1(acc, idem)
    assert second is not None and second.base_sequence == len(first)
    assert idem.next_sequence(TP) == len(first) + len(second)
    assert second.payload is not None
    h = validate_batch(bytearray(second.payload))  # CRC redone
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 0, len(first))


def test_sequences_wrap_after_int32_max() -> None:
    idem, acc = make()
    fill(acc, 2)
    idem._part(TP).next_sequence = SEQUENCE_MODULUS - 2
    a = drain1(acc, idem)
    assert a is not None and a.base_sequence == SEQUENCE_MODULUS - 2
    assert idem.next_sequence(TP) == len(a) - 2
    b = drain1(acc, idem)
    assert b is not None and b.base_sequence == len(a) - 2
    assert b.payload is not None
    assert validate_batch(bytearray(b.payload)).base_sequence == len(a) - 2


def test_retries_keep_their_sequence_and_go_out_first_in_order_one_at_a_time() -> None:
    idem, acc = make()
    fill(acc, 6)
    sent = [drain1(acc, idem) for _ in range(4)]
    assert all(b is not None for b in sent)
    b0, b1, b2, b3 = (b for b in sent if b is not None)
    seqs = [b.base_sequence for b in (b0, b1, b2, b3)]
    payloads = [b.payload for b in (b0, b1, b2, b3)]
    idem.on_complete(b0)
    # A lost connection fails the rest, in any order: they return in sequence order.
    for b in (b3, b1, b2):
        idem.on_retry(b)
        acc.reenqueue(b, 0)
    assert acc.batches(TP)[:3] == [b1, b2, b3]
    assert acc.batches(TP)[3].base_sequence == -1  # the fresh ones wait behind
    # Only the oldest unfinished batch may go; its bytes and sequence are unchanged.
    assert drain1(acc, idem) is b1
    assert drain1(acc, idem) is None  # b2 waits until b1 is answered
    idem.on_complete(b1)
    assert drain1(acc, idem) is b2
    idem.on_complete(b2)
    assert drain1(acc, idem) is b3
    assert [b.base_sequence for b in (b1, b2, b3)] == seqs[1:]
    assert [b.payload for b in (b1, b2, b3)] == payloads[1:]
    fresh = drain1(acc, idem)  # new batches follow the retries, not before
    assert fresh is not None and fresh.base_sequence == b3.base_sequence + len(b3)


def test_at_most_five_unfinished_batches_per_partition() -> None:
    idem, acc = make()
    fill(acc, MAX_IN_FLIGHT_PER_PARTITION + 2)
    sent = [drain1(acc, idem) for _ in range(MAX_IN_FLIGHT_PER_PARTITION + 1)]
    assert sent[-1] is None and all(b is not None for b in sent[:-1])
    first = sent[0]
    assert first is not None
    idem.on_complete(first)
    assert drain1(acc, idem) is not None


def test_out_of_order_resets_only_for_the_oldest_batch_then_sequences_restart() -> None:
    idem, acc = make()
    fill(acc, 4)
    b0, b1, b2 = (drain1(acc, idem) for _ in range(3))
    assert b0 is not None and b1 is not None and b2 is not None
    oosn = ErrorCode.out_of_order_sequence_number
    # Not the oldest: fallout from an earlier failure, retried as it is.
    assert idem.on_error(b2, oosn) == Verdict.RETRY and not idem.needs_producer_id
    idem.on_retry(b2)
    acc.reenqueue(b2, 0)
    assert b2.base_sequence != -1
    # The oldest: a real gap -> new producer id; nothing drains until it comes.
    assert idem.on_error(b0, oosn) == Verdict.RETRY and idem.needs_producer_id
    idem.on_retry(b0)
    acc.reenqueue(b0, 0)
    assert drain1(acc, idem) is None
    idem.on_fail(b1)  # failed meanwhile (e.g. expired): nothing more to do
    idem.set_producer_id(8, 0, acc.queued_batches())
    assert idem.resets == 1 and not idem.needs_producer_id
    assert acc.batches(TP)[:2] == [b0, b2]
    again = drain1(acc, idem)
    assert again is b0 and b0.base_sequence == 0 and b0.producer_id == 8
    assert b0.payload is not None
    assert validate_batch(bytearray(b0.payload)).producer_id == 8
    nxt = drain1(acc, idem)
    assert nxt is b2 and b2.base_sequence == len(b0)


def test_unknown_producer_id_and_failed_batches_ask_for_a_new_id() -> None:
    idem, acc = make()
    fill(acc, 2)
    a, b = drain1(acc, idem), drain1(acc, idem)
    assert a is not None and b is not None
    assert idem.on_error(b, ErrorCode.unknown_producer_id) == Verdict.RETRY
    assert idem.reset_reason is not None and "UNKNOWN_PRODUCER_ID" in idem.reset_reason
    idem2, acc2 = make()
    fill(acc2, 1)
    c = drain1(acc2, idem2)
    assert c is not None
    idem2.on_fail(c)  # expired or failed for good with a sequence: outcome unknown
    assert idem2.needs_producer_id


def test_fatal_codes() -> None:
    idem, acc = make()
    fill(acc, 1)
    b = drain1(acc, idem)
    assert b is not None
    for code in (ErrorCode.invalid_producer_epoch, ErrorCode.cluster_authorization_failed):
        assert idem.on_error(b, code) == Verdict.FATAL
    assert idem.on_error(b, ErrorCode.message_too_large) == Verdict.FAIL


# -- AsyncProducer against a fake broker ---------------------------------------------------


def run(fn: Callable[[FakeIdempotentBroker], Awaitable[T]], **kw: Any) -> T:
    async def main() -> T:
        broker = FakeIdempotentBroker(topics={"t": 2}, **kw)
        await broker.start()
        try:
            return await asyncio.wait_for(fn(broker), 20)
        finally:
            await broker.stop()

    return asyncio.run(main())


def producer(broker: FakeIdempotentBroker, kw: dict[str, object] | None = None) -> AsyncProducer:
    cfg: dict[str, object] = {
        "bootstrap.servers": broker.bootstrap,
        "linger.ms": 0,
        "batch.size": 200,
        "retry.backoff.ms": 1,
        "reconnect.backoff.ms": 1,
        "reconnect.backoff.max.ms": 5,
    }
    cfg.update(kw or {})
    return AsyncProducer(cfg)


async def send_all(p: AsyncProducer, n: int, partitions: int = 2) -> list[Any]:
    futs = [await p.send("t", b"%d" % i, partition=i % partitions) for i in range(n)]
    await p.flush()
    return futs


def test_lost_responses_are_retried_with_the_same_sequences_exactly_once_in_order() -> None:
    async def body(broker: FakeIdempotentBroker) -> None:
        broker.drop_after_write = set(range(2, 200, 3))
        async with producer(broker) as p:
            futs = await send_all(p, 2000)
            assert all(f.exception() is None for f in futs)
            idem = p._idem
            assert idem is not None and idem.resets == 0
        assert broker.produce_requests > 50
        for part in (0, 1):
            assert broker.values("t", part) == [b"%d" % i for i in range(part, 2000, 2)]
            # Every (producer, sequence) the broker saw again was the same batch.
            sent: dict[tuple[int, int], int] = {}
            for key, pid, _epoch, seq, count in broker.seen:
                if key == ("t", part):
                    assert sent.setdefault((pid, seq), count) == count
        assert len(broker.init_requests) == 1

    run(body)


def test_duplicate_sequence_number_is_success_with_unknown_offset() -> None:
    async def body(broker: FakeIdempotentBroker) -> None:
        broker.produce_errors[("t", 0)] = [46]
        async with producer(broker) as p:
            md = await (await p.send("t", b"x", partition=0))
        assert md.offset == -1 and md.partition == 0

    run(body)


def test_out_of_order_for_the_first_batch_gets_a_new_producer_id() -> None:
    async def body(broker: FakeIdempotentBroker) -> None:
        broker.produce_errors[("t", 0)] = [45]
        async with producer(broker) as p:
            futs = await send_all(p, 10, partitions=1)
            assert all(f.exception() is None for f in futs)
            assert p._idem is not None and p._idem.resets == 1
        assert len(broker.init_requests) == 2
        # KIP-360: the second InitProducerId carries the current id and epoch.
        assert broker.init_requests[1] == (1000, 0)
        assert broker.values("t", 0) == [b"%d" % i for i in range(10)]

    run(body)


def test_invalid_producer_epoch_is_fatal_for_unfinished_records_and_later_sends() -> None:
    async def body(broker: FakeIdempotentBroker) -> None:
        broker.produce_errors[("t", 0)] = [47]
        p = producer(broker, {"linger.ms": 50})
        await p.start()
        futs = [await p.send("t", b"%d" % i, partition=0) for i in range(5)]
        await p.flush()
        for f in futs:
            assert isinstance(f.exception(), FatalProducerError)
        assert "INVALID_PRODUCER_EPOCH" in str(futs[0].exception())
        with pytest.raises(FatalProducerError, match="close it and create a new one"):
            await p.send("t", b"late", partition=1)
        await p.close()

    run(body)


def test_broker_without_init_producer_id() -> None:
    async def body(broker: FakeIdempotentBroker) -> None:
        del broker.versions[22]
        # Idempotence only by default: carry on without it.
        async with producer(broker) as p:
            md = await (await p.send("t", b"x", partition=0))
            assert md.offset == 0
        # Asked for explicitly: every record fails with a clear error.
        async with producer(broker, {"enable.idempotence": True}) as p:
            fut = await p.send("t", b"y", partition=0)
            with pytest.raises(FatalProducerError, match="does not support InitProducerId"):
                await fut

    run(body)
