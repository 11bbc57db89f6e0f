"""Errors behind the blocking consumer's staged polls (`consumer/staging.py`): a fetch
that fails (corrupt data, OFFSET_OUT_OF_RANGE, NOT_LEADER_OR_FOLLOWER) while good
records of the same partition wait staged must behave as in Kafka's consumer: the
application gets every good record first, in order, once; positions and commits count
exactly those; the error surfaces (or the reset / the metadata refresh takes effect)
only when the application's position reaches it.

The broker is `FakeGroupBroker` over TCP (the real protocol), whose log the tests write
directly so batch boundaries and the bad batch are known; the application polls a
little slower than the loop stages, so the bad fetch comes back while records are held
(`Assignment.held`). tests/integration/test_client_staged_errors.py does the same
against a real broker with a corrupted segment file and DeleteRecords.

The last test, on the same exact batches, bounds the memory of staged polls: they
count against ``queued.max.messages.kbytes``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tidegate.client import Consumer, TopicPartition
from tidegate.client.errors import NoOffsetForPartitionError
from tidegate.common.errors import CorruptRecordError, OffsetOutOfRangeError
from tidegate.records.builder import build_batch

from .fake_broker import Partition, serve_on_loop_thread
from .fake_group import FakeGroupBroker

N, BATCH, BAD = 400, 10, 200  # records, records per batch, first offset of the bad batch
NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE = 6, 1
BASE = {"retry_backoff_ms": 20, "auto_offset_reset": "earliest", "max_poll_records": 7,
        "enable_auto_commit": False}
BATCH_BYTES = len(build_batch([(0, b"k", b"v%05d" % 0)] * BATCH))


class ErrorBroker(FakeGroupBroker):
    """Answers a fetch of a partition at an offset in [`fail_at[tp][0]`, N) with the
    error code `fail_at[tp][1]`, `fail_at[tp][2]` times."""

    fail_at: dict[tuple[str, int], list[int]]
    fetches_at: dict[tuple[str, int], list[int]]  # every fetch offset asked, per partition

    def _api_1(self, req: Any) -> dict[str, Any]:
        """`FakeBroker._api_1` without decoding the batches (one is corrupt), then the
        injected errors."""
        responses = []
        for t in req.topics:
            name = self._name(t, "topic")
            parts = []
            for p in t.partitions:
                key = (name, p.partition)
                self.fetches_at.setdefault(key, []).append(p.fetch_offset)
                part = self.log[key]
                out = b""
                for b in part.batches:  # base offset + last offset delta (header bytes)
                    end = int.from_bytes(b[:8], "big") + int.from_bytes(b[23:27], "big")
                    if end >= p.fetch_offset and len(out) < p.partition_max_bytes:
                        out += b
                answer = {"partition_index": p.partition, "error_code": 0,
                          "high_watermark": part.next_offset,
                          "last_stable_offset": part.next_offset, "log_start_offset": 0,
                          "aborted_transactions": [], "records": out}
                fail = self.fail_at.get(key)
                if fail and fail[2] > 0 and fail[0] <= p.fetch_offset < N:
                    fail[2] -= 1
                    answer.update(error_code=fail[1], records=None)
                parts.append(answer)
            responses.append({"topic": name, "topic_id": self.topic_ids.get(name),
                              "partitions": parts})
        return {"throttle_time": 0, "error_code": 0, "responses": responses}


@pytest.fixture(scope="module")
def broker() -> Iterator[ErrorBroker]:
    b = ErrorBroker(topics={"crc": 1, "crc-small": 1, "oor": 1, "oor-latest": 1, "nl": 1,
                            "tight": 1})
    b.fail_at, b.fetches_at = {}, {}
    for topic in b.topics:
        part = b.log[(topic, 0)] = Partition()
        for base in range(0, N, BATCH):
            part.batches.append(build_batch(
                [(1000 + i, b"k", b"v%05d" % i) for i in range(base, base + BATCH)],
                base_offset=base))
        part.next_offset = N
    with serve_on_loop_thread(b):
        yield b


def corrupt(b: ErrorBroker, topic: str) -> None:
    batches = b.log[(topic, 0)].batches
    bad = bytearray(batches[BAD // BATCH])
    bad[-2] ^= 0x01  # a byte of the last value: CRC mismatch
    batches[BAD // BATCH] = bytes(bad)


def read_until_error(c: Consumer, tp: TopicPartition, error: type[Exception]
                     ) -> tuple[list[int], Exception]:
    """Poll (a little slower than the loop stages) until `error` is raised."""
    got: list[int] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            got += [r.offset for r in c.poll(timeout_ms=100) if r.partition == tp.partition]
        except error as e:
            if not isinstance(e, NoOffsetForPartitionError):  # (before the first seek)
                return got, e
        time.sleep(0.002)
    raise AssertionError(f"no {error.__name__}; got {len(got)} records")


def consumer(b: ErrorBroker, group: str, **overrides: Any) -> Consumer:
    return Consumer(**{"bootstrap_servers": b.bootstrap, "group_id": group, **BASE,
                       **overrides})


@pytest.mark.parametrize("topic, fetch_bytes", [
    ("crc", 1 << 20),  # the good records and the corrupt batch in the same answer
    ("crc-small", 2 * BATCH_BYTES),  # the corrupt batch in a later fetch
])
def test_corrupt_batch_surfaces_after_every_good_record(
        broker: ErrorBroker, topic: str, fetch_bytes: int) -> None:
    corrupt(broker, topic)
    tp = TopicPartition(topic, 0)
    with consumer(broker, f"g-{topic}", max_partition_fetch_bytes=fetch_bytes) as c:
        c.assign([tp])
        got, e = read_until_error(c, tp, CorruptRecordError)
        assert got == list(range(BAD)), got[-20:]  # every good record, once, in order
        assert f"offset {BAD}" in str(e)
        assert c.position(tp) == BAD
        c.commit()
        assert broker.committed[(f"g-{topic}", topic, 0)][0] == BAD
        for _ in range(2):  # as Kafka's consumer: the same error each poll until a seek
            with pytest.raises(CorruptRecordError, match=f"offset {BAD}"):
                c.poll(timeout_ms=300)
            assert c.position(tp) == BAD
        c.seek(tp, BAD + BATCH)
        rest: list[int] = []
        deadline = time.monotonic() + 10
        while len(rest) < N - BAD - BATCH and time.monotonic() < deadline:
            rest += [r.offset for r in c.poll(timeout_ms=100)]
        assert rest == list(range(BAD + BATCH, N))


def test_offset_out_of_range_surfaces_after_every_good_record(broker: ErrorBroker) -> None:
    """auto.offset.reset=none: OffsetOutOfRangeError, at the position it was met."""
    broker.fail_at[("oor", 0)] = [BAD, OFFSET_OUT_OF_RANGE, 1 << 30]  # as truncated
    tp = TopicPartition("oor", 0)
    with consumer(broker, "g-oor", auto_offset_reset="none",
                  max_partition_fetch_bytes=2 * BATCH_BYTES) as c:
        c.assign([tp])
        c.seek(tp, 0)
        got, e = read_until_error(c, tp, OffsetOutOfRangeError)
        assert got == list(range(BAD)), got[-20:]
        assert f"offset {BAD}" in str(e)
        assert c.position(tp) == BAD
        c.commit()
        assert broker.committed[("g-oor", "oor", 0)][0] == BAD
        for _ in range(2):  # again each poll until a seek, as Kafka's consumer
            with pytest.raises(OffsetOutOfRangeError, match=f"offset {BAD}"):
                c.poll(timeout_ms=300)
        c.seek(tp, 0)  # a seek clears it: records again
        deadline = time.monotonic() + 10
        first: list[int] = []
        while not first and time.monotonic() < deadline:
            first = [r.offset for r in c.poll(timeout_ms=100)]
        assert first[:1] == [0]


def test_offset_out_of_range_resets_only_at_the_position(broker: ErrorBroker) -> None:
    """auto.offset.reset=latest: the reset happens when the application gets there, so
    nothing before it is skipped; after it the position is the end."""
    broker.fail_at[("oor-latest", 0)] = [BAD, OFFSET_OUT_OF_RANGE, 1 << 30]
    tp = TopicPartition("oor-latest", 0)
    with consumer(broker, "g-oor-latest", auto_offset_reset="latest",
                  max_partition_fetch_bytes=2 * BATCH_BYTES) as c:
        c.assign([tp])
        c.seek(tp, 0)
        got: list[int] = []
        deadline = time.monotonic() + 15
        while c.position(tp) != N:
            assert time.monotonic() < deadline, got[-20:]
            got += [r.offset for r in c.poll(timeout_ms=50)]
            time.sleep(0.002)
        got += [r.offset for r in c.poll(timeout_ms=200)]
        assert got == list(range(BAD))


def test_not_leader_is_retried_behind_staged_records(broker: ErrorBroker) -> None:
    """NOT_LEADER_OR_FOLLOWER (a metadata refresh, then the fetch again): every record
    once, in order, and the fetch at the failed offset is asked again."""
    broker.fail_at[("nl", 0)] = [BAD, NOT_LEADER_OR_FOLLOWER, 2]
    tp = TopicPartition("nl", 0)
    metadata_before = sum(1 for k, _ in broker.requests if k == 3)
    with consumer(broker, "g-nl", max_partition_fetch_bytes=2 * BATCH_BYTES) as c:
        c.assign([tp])
        got: list[int] = []
        deadline = time.monotonic() + 15
        while len(got) < N and time.monotonic() < deadline:
            got += [r.offset for r in c.poll(timeout_ms=100)]
            time.sleep(0.002)
        assert got == list(range(N))
        c.commit()
        assert broker.committed[("g-nl", "nl", 0)][0] == N
    assert broker.fail_at[("nl", 0)][2] == 0
    assert sum(1 for k, _ in broker.requests if k == 3) > metadata_before


def test_staged_polls_count_against_queued_max_messages_kbytes(broker: ErrorBroker) -> None:
    """With 1 KiB of budget and 20-record fetches, the consumer holds about three
    fetches ahead of the application, staged or buffered, not 8 polls of 50 records
    (the whole topic); and nothing is lost on the way."""
    tp = TopicPartition("tight", 0)
    with consumer(broker, "g-tight", max_poll_records=50, queued_max_messages_kbytes=1,
                  max_partition_fetch_bytes=2 * BATCH_BYTES) as c:
        c.assign([tp])
        got: list[int] = []
        deadline = time.monotonic() + 15
        while not got:
            assert time.monotonic() < deadline
            got += [r.offset for r in c.poll(timeout_ms=100)]
        time.sleep(0.5)  # the loop stages and fetches ahead as far as it may
        fetcher = c._async._fetcher
        assert fetcher is not None
        st = c._async._assignment.partitions[tp]
        end = c._loop.call(lambda: fetcher._fetch_offset(tp, st))  # fetched up to here
        assert end is not None
        assert 0 < end - c.position(tp) <= 120, (end, c.position(tp))
        while len(got) < N and time.monotonic() < deadline:
            got += [r.offset for r in c.poll(timeout_ms=100)]
        assert got == list(range(N))
        assert c._loop.call(lambda: fetcher.staged_bytes) == 0  # all taken, none left
