"""The blocking consumer's staged polls against a real broker's faults: a corrupt batch
on disk and a log start moved past the position (DeleteRecords) while good records of
the partition wait staged (`client/consumer/staging.py`, `Assignment.held`).

As Kafka's consumer: the application gets every good record first, in order, once;
position() and commits count exactly those; the error (or the reset per
``auto.offset.reset``) comes only when the application's position reaches it.
tests/unit/client/test_sync_staged_errors.py has the same cases (and
NOT_LEADER_OR_FOLLOWER) on a fake broker with exact batch boundaries.

The corrupt batch is a real fault: one byte of a record value flipped in the segment
file of the stopped broker (clean shutdown, so the restart trusts the segment and
serves it as it is; the client's ``check.crcs`` finds the CRC mismatch).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.conftest import BrokerProcess

from tidegate.client import Admin, Consumer, Producer, TopicPartition
from tidegate.common.errors import CorruptRecordError
from tidegate.records.batch import peek_size

N, BATCH = 400, 10  # records per topic, records per produced batch
WANT_BAD = 200  # the corrupted batch is the one holding this offset
BATCH_BYTES = 260  # about one produced batch (10 records of ~12 bytes)
BASE = {"retry_backoff_ms": 20, "max_poll_records": 7, "enable_auto_commit": False,
        "auto_offset_reset": "earliest"}


def produce(bootstrap: str, topic: str) -> None:
    with Producer(bootstrap_servers=bootstrap, linger_ms=5_000, compression_type="none",
                  enable_idempotence=False) as p:
        for base in range(0, N, BATCH):  # one batch per flush
            for i in range(base, base + BATCH):
                p.send(topic, b"value-%05d" % i, partition=0)
            p.flush()


def corrupt_batch_holding(segment: Path, offset: int) -> int:
    """Flip a byte of the last record of the batch holding `offset`; its base offset."""
    data = bytearray(segment.read_bytes())
    pos = 0
    while (size := peek_size(data, pos)) is not None:
        base = int.from_bytes(data[pos:pos + 8], "big")
        last = base + int.from_bytes(data[pos + 23:pos + 27], "big")
        if base <= offset <= last:
            data[pos + size - 2] ^= 0x01  # inside the last value: CRC mismatch
            segment.write_bytes(bytes(data))
            return base
        pos += size
    raise AssertionError(f"no batch holds offset {offset} in {segment}")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    """A broker with topics "crc" (a corrupt batch on disk; yields its offset) and
    "oor", N records each in batches of BATCH."""
    b = BrokerProcess(tmp_path_factory.mktemp("staged") / "data")
    b.start()
    try:
        with Admin(bootstrap_servers=b.bootstrap) as admin:
            for topic in ("crc", "oor"):
                admin.create_topic(topic, 1)
        for topic in ("crc", "oor"):
            produce(b.bootstrap, topic)
        b.stop()
        bad = corrupt_batch_holding(b.data_dir / "crc-0" / ("0" * 20 + ".log"), WANT_BAD)
        b.start()
        yield b, bad
    finally:
        b.stop()


@pytest.mark.parametrize("fetch_bytes", [1 << 20, 2 * BATCH_BYTES],
                         ids=["same-answer", "later-fetch"])
def test_corrupt_batch_on_disk_surfaces_after_every_good_record(
        broker: tuple[BrokerProcess, int], fetch_bytes: int) -> None:
    b, bad = broker
    tp = TopicPartition("crc", 0)
    group = f"g-crc-{fetch_bytes}"
    with Consumer(bootstrap_servers=b.bootstrap, group_id=group,
                  max_partition_fetch_bytes=fetch_bytes, **BASE) as c:
        c.assign([tp])
        got: list[int] = []
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, f"no CorruptRecordError; got {len(got)}"
            try:
                got += [r.offset for r in c.poll(timeout_ms=100)]
            except CorruptRecordError as e:
                assert f"offset {bad}" in str(e)
                break
            time.sleep(0.002)  # a little slower than the loop stages
        assert got == list(range(bad)), got[-20:]  # every good record, once, in order
        assert c.position(tp) == bad
        c.commit()
        assert c.committed([tp])[tp].offset == bad  # type: ignore[union-attr]
        c.seek(tp, bad + BATCH)
        rest: list[int] = []
        while len(rest) < N - bad - BATCH and time.monotonic() < deadline:
            rest += [r.offset for r in c.poll(timeout_ms=100)]
        assert rest == list(range(bad + BATCH, N))


def test_log_start_moved_past_staged_records_resets_at_the_position(
        broker: tuple[BrokerProcess, int]) -> None:
    """DeleteRecords moves the log start past what the consumer fetched: the records
    already fetched (staged or buffered) are all handed out, then the fetch at the end
    of them is out of range and the position resets to the new log start. A 1 KiB
    ``queued.max.messages.kbytes`` stops the fetcher a few fetches ahead (staged polls
    count), so where it stopped is where the first out-of-range fetch is."""
    b, _ = broker
    tp = TopicPartition("oor", 0)
    cut = 300
    with Consumer(bootstrap_servers=b.bootstrap, max_partition_fetch_bytes=2 * BATCH_BYTES,
                  queued_max_messages_kbytes=1, **BASE) as c:
        c.assign([tp])
        got: list[int] = []
        deadline = time.monotonic() + 20
        while not got:
            assert time.monotonic() < deadline
            got += [r.offset for r in c.poll(timeout_ms=100)]
        fetcher = c._async._fetcher
        assert fetcher is not None
        st = c._async._assignment.partitions[tp]

        def fetched() -> int | None:  # the end of what was fetched, once nothing is in flight
            assert fetcher is not None
            return None if fetcher._fetching else fetcher._fetch_offset(tp, st)

        stopped: list[int | None] = [None]
        while True:  # until the fetcher has stopped (budget full, nothing in flight)
            time.sleep(0.2)
            now = c._loop.call(fetched)
            if now is not None and now == stopped[-1]:
                break
            stopped.append(now)
            assert time.monotonic() < deadline
        end_fetched = stopped[-1]
        assert end_fetched is not None and got[-1] < end_fetched < cut
        assert c._staged._staged  # records wait staged
        with Admin(bootstrap_servers=b.bootstrap) as admin:
            admin.delete_records({tp: cut})
        while not got or got[-1] != N - 1:
            assert time.monotonic() < deadline, got[-20:]
            got += [r.offset for r in c.poll(timeout_ms=50)]
            time.sleep(0.002)
        assert c.position(tp) == N
        # everything fetched was handed out, then the reset to the new log start
        assert got == list(range(end_fetched)) + list(range(cut, N)), got[-120:]
