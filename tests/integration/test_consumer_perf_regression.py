"""Consumer performance regressions against a real broker.

- One partition with a backlog next to caught-up partitions on the same broker: the
  fetch for the caught-up ones must not park the broker's connection in a long poll
  (``fetch.max.wait.ms``) while the backlog waits behind it. Before the fix this read
  one fetch per 500 ms (about 2,000 msgs/s of 1 KiB); the bound below is an order of
  magnitude above what the fixed consumer needs and far below what the old one took.
- The caught-up partitions are still read: a record written to one of them while the
  backlog is being read arrives within the bounded hold-back, not after the backlog.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from tests.integration.conftest import BrokerProcess

from tidegate.client import AsyncConsumer, TopicPartition

N = 50_000
PARTITIONS = 3
# 64 KiB per partition per fetch: about 600 records of 100 B, so the backlog takes ~80
# fetches; at one per fetch.max.wait.ms (the old stall) that is ~40 s.
FETCH_BYTES = 65_536
BOUND_S = 5.0


def _fill(bootstrap: str, topic: str, n: int, partition: int) -> None:
    """Create `topic` and write `n` 100-byte records to `partition` only (with
    confluent-kafka, so the data does not depend on Tidegate's producer)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 65_536,
            "enable.idempotence": False,
        }
    )
    value = b"v" * 100
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, key=str(i).encode(), partition=partition)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0


def _send_one(bootstrap: str, topic: str, partition: int, value: bytes) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1})
    p.produce(topic, value, partition=partition)
    assert p.flush(30) == 0


def test_backlog_next_to_caught_up_partitions_is_not_throttled(
    shared_broker: BrokerProcess,
) -> None:
    bs = shared_broker.bootstrap
    topic = f"stall-{uuid.uuid4().hex[:8]}"
    _fill(bs, topic, N, partition=0)

    async def main() -> tuple[float, list[int], float]:
        async with AsyncConsumer(
            bootstrap_servers=bs,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=FETCH_BYTES,
        ) as c:
            c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            offsets: list[int] = []
            start = time.monotonic()
            deadline = start + BOUND_S
            sent_late = False
            late_at: float | None = None
            late_seen = -1.0
            while len(offsets) < N and time.monotonic() < deadline:
                for r in await c.poll(timeout_ms=200):
                    if r.partition == 0:
                        offsets.append(r.offset)
                    elif r.value == b"late":
                        assert late_at is not None
                        late_seen = time.monotonic() - late_at
                if not sent_late and len(offsets) >= N // 10:
                    # A record for a caught-up partition while the backlog is read.
                    sent_late = True
                    await asyncio.to_thread(_send_one, bs, topic, 2, b"late")
                    late_at = time.monotonic()
            elapsed = time.monotonic() - start
            while late_seen < 0 and late_at is not None and time.monotonic() < late_at + 5:
                for r in await c.poll(timeout_ms=200):
                    if r.value == b"late":
                        late_seen = time.monotonic() - late_at
            return elapsed, offsets, late_seen

    elapsed, offsets, late_seen = asyncio.run(main())
    assert offsets == list(range(N)), (
        f"read {len(offsets)} of {N} records in {elapsed:.1f} s (bound {BOUND_S} s): "
        "a caught-up partition's long poll is throttling the backlog"
    )
    assert elapsed < BOUND_S
    # Held back at most fetch.max.wait.ms (500 ms), then one long poll: well under 2 s.
    assert 0 <= late_seen < 2.0, f"record in a caught-up partition took {late_seen:.2f} s"
