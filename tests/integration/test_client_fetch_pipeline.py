"""Tidegate's consumer fetching ahead (client/consumer/fetcher.py) on a real broker:
records fetched before a seek, a revocation or a pause are never returned after it.

The topic holds `PER_PARTITION` records per partition, each value naming its partition
and offset. The consumer reads with small fetches (``max.partition.fetch.bytes`` of a
few batches) so that nearly every poll finds a fetch ahead waiting or in flight, and
checks every record it gets: the right partition and offset, and, per partition,
exactly the offset after the last one returned or sought to. Meanwhile it seeks
(backwards and forwards), pauses and resumes, and drops and re-adds partitions at
random (seeded). A group member checks the same after a second member joins and takes
partitions from it. One broker, no timing assertions: a light module.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess

from tidegate.client import AsyncConsumer, ConsumerRecord, TopicPartition

pytestmark = pytest.mark.interop

PARTITIONS = 3
PER_PARTITION = 4000
SMALL_FETCH: dict[str, object] = {"max.partition.fetch.bytes": 8192, "max.poll.records": 50,
                                  "auto.offset.reset": "earliest"}


@pytest.fixture(scope="module")
def topic_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    b = BrokerProcess(tmp_path_factory.mktemp("pipeline") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    try:
        topic = "pipelined"
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        p = ConfluentProducer({"bootstrap.servers": b.bootstrap, "linger.ms": 5,
                               "batch.size": 4096})
        for i in range(PER_PARTITION):
            for part in range(PARTITIONS):
                p.produce(topic, b"%d:%d:" % (part, i) + b"x" * 100, partition=part)
            if i % 500 == 0:
                p.poll(0)
        assert p.flush(30) == 0
        yield b.bootstrap, topic
    finally:
        b.stop()


class Checker:
    """Per partition, the offset the next returned record must have."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.expected: dict[int, int] = {}
        self.returned = 0

    def check(self, records: list[ConsumerRecord], assigned: set[TopicPartition],
              paused: set[TopicPartition]) -> None:
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            assert tp in assigned, f"record of unassigned {tp} at {r.offset}"
            assert tp not in paused, f"record of paused {tp} at {r.offset}"
            assert r.value is not None
            part, offset = r.value.split(b":")[:2]
            assert (int(part), int(offset)) == (r.partition, r.offset)
            want = self.expected.get(r.partition)
            assert want is None or r.offset == want, \
                f"partition {r.partition}: got offset {r.offset}, expected {want}"
            self.expected[r.partition] = r.offset + 1
            self.returned += 1


def test_seeks_pauses_and_reassignments_never_see_stale_fetches(
        topic_broker: tuple[str, str]) -> None:
    bootstrap, topic = topic_broker
    rng = random.Random(20)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    async def main() -> None:
        async with AsyncConsumer(SMALL_FETCH, bootstrap_servers=bootstrap) as c:
            c.assign(tps)
            for tp in tps:
                c.seek(tp, 0)
            checker = Checker(topic)
            checker.expected = {tp.partition: 0 for tp in tps}
            assigned, paused = set(tps), set[TopicPartition]()
            ahead_at_change = empty = 0
            # 400 rounds, and more (up to 2,400) until enough changes landed while fetches
            # were ahead or in flight: a loaded machine has fewer of those per round (at a
            # load average of 15, 1,200 rounds gave 10-15, before and after session 8)
            rounds = 0
            while rounds < 400 or (ahead_at_change <= 20 and rounds < 2400):
                rounds += 1
                for tp in assigned:  # at the end: start over somewhere
                    if checker.expected.get(tp.partition, 0) >= PER_PARTITION:
                        offset = rng.randrange(PER_PARTITION)
                        c.seek(tp, offset)
                        checker.expected[tp.partition] = offset
                records = await c.poll(timeout_ms=5000)
                empty += not records  # something unpaused always has records left
                checker.check(records, assigned, paused)
                fetcher = c._fetcher
                assert fetcher is not None
                if rng.random() > 0.15:
                    continue
                ahead_at_change += bool(fetcher._ahead or fetcher._in_flight)
                action = rng.choice(["seek", "seek", "pause", "resume", "drop", "add"])
                tp = rng.choice(tps)
                if action == "seek" and tp in assigned:
                    offset = rng.randrange(PER_PARTITION)
                    c.seek(tp, offset)
                    checker.expected[tp.partition] = offset
                elif action == "pause" and tp in assigned and len(assigned - paused) > 1:
                    c.pause(tp)
                    paused.add(tp)
                elif action == "resume" and tp in paused:
                    c.resume(tp)
                    paused.discard(tp)
                elif action == "drop" and tp in assigned and assigned - paused - {tp}:
                    assigned.discard(tp)
                    paused.discard(tp)
                    c.assign(assigned)
                    checker.expected.pop(tp.partition, None)
                elif action == "add" and tp not in assigned:
                    assigned.add(tp)
                    c.assign(assigned)
                    offset = rng.randrange(PER_PARTITION)
                    c.seek(tp, offset)
                    checker.expected[tp.partition] = offset
                if rng.random() < 0.1:  # a position read back must match too
                    some = rng.choice(sorted(assigned))
                    want = checker.expected.get(some.partition)
                    if want is not None:
                        assert await c.position(some) == want
            assert empty == 0, f"{empty} polls found nothing to return"
            assert checker.returned > 5000
            # The changes landed while fetches were ahead or in flight (what is tested).
            assert ahead_at_change > 20

    asyncio.run(main())


def test_a_group_member_returns_nothing_of_a_revoked_partition(
        topic_broker: tuple[str, str]) -> None:
    bootstrap, topic = topic_broker
    group = "pipeline-group"

    async def main() -> None:
        cfg = {**SMALL_FETCH, "group.id": group, "enable.auto.commit": False,
               "partition.assignment.strategy": "range"}
        revoked: list[set[TopicPartition]] = []
        checker = Checker(topic)

        class Listener:
            def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
                revoked.append(set(partitions))

            def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
                for tp in partitions:  # nothing committed: read again from the start
                    checker.expected.pop(tp.partition, None)

        async with AsyncConsumer(cfg, bootstrap_servers=bootstrap) as a, \
                AsyncConsumer(cfg, bootstrap_servers=bootstrap) as b:
            a.subscribe([topic], Listener())
            polls = 0
            while len(a.assignment()) < PARTITIONS or checker.returned < 500:
                checker.check(await a.poll(timeout_ms=2000), a.assignment(), set())
                polls += 1
                assert polls < 500, "the first member never read its partitions"
            b.subscribe([topic])

            async def b_polls() -> None:
                while True:
                    await b.poll(timeout_ms=200)

            second = asyncio.get_running_loop().create_task(b_polls())
            try:
                while len(a.assignment()) == PARTITIONS:
                    checker.check(await a.poll(timeout_ms=500), a.assignment(), set())
                    polls += 1
                    assert polls < 2000, "the second member never took partitions"
                assert revoked, "no revocation was reported"
                for _ in range(100):  # the survivor keeps reading only its own
                    checker.check(await a.poll(timeout_ms=200), a.assignment(), set())
            finally:
                second.cancel()
                await asyncio.gather(second, return_exceptions=True)

    asyncio.run(main())
