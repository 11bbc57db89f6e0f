"""The pipelined fetcher never stalls: whatever seeks, pauses, resumes, resets and
re-assignments race with fetches in flight, once the application stops changing
things every assigned partition is read to its end, in order, without a gap.

A stall is a partition that is fetchable but neither buffered, fetched ahead, nor in
flight, while the fetcher's loop waits on its wake-up event with no timer: `poll()` then
waits for data that never comes (the WATCH item of NOTES.md: docs/client.md's asyncio
snippet once hit its own 30 s timeout).

No broker process: the real `Fetcher` task and the real `AsyncConsumer.poll` run against
`FakeNet`, which answers Fetch and ListOffsets requests from an in-memory log after a
random delay, in order per broker as a real connection does, sometimes with a retriable
error, a refresh error or an empty long poll. A seeded random schedule of application
actions runs meanwhile; each seed is one run, and a failure names its seed. A fetch task
that dies of an exception of its own fails the run too.
"""

from __future__ import annotations

import asyncio
import gc
import random
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tidegate.client.consumer.consumer import AsyncConsumer
from tidegate.client.consumer.fetcher import FETCH, Fetcher
from tidegate.client.offsets import LIST_OFFSETS
from tidegate.client.types import TopicPartition
from tidegate.records.builder import build_batch

TOPIC = "t"
PARTS = [TopicPartition(TOPIC, p) for p in range(3)]
NODES = 2  # partition p is led by node p % NODES: two brokers, one with two partitions
LOG_END = 200  # records per partition
LOG_START = 0


class Cache:
    names_by_id: dict[object, str] = {}

    def leader_for(self, tp: TopicPartition) -> int | None:
        return tp.partition % NODES

    def needs_update(self, now_ms: int) -> bool:
        return False

    def request_update(self) -> None:
        pass

    def topic_id(self, topic: str) -> object:
        return None

    def topic_error(self, topic: str) -> None:
        return None

    def topic(self, topic: str) -> None:
        return None


class FakeNet:
    """Answers requests per node in the order sent, each after a random delay."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        # a node's last answer: the next one completes after it (in-order connection)
        self._last: dict[int | None, asyncio.Future[None]] = {}
        self.chaos = True  # errors and empty answers; off for the final drain

    async def request(self, node: int | None, api_key: int, data: dict[str, Any],
                      *, timeout_ms: int | None = None) -> Any:
        before = self._last.get(node)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last[node] = mine
        try:
            await asyncio.sleep(self.rng.choice((0, 0, 0.0005, 0.002)))
            if before is not None:
                await asyncio.shield(before)
            if api_key == FETCH:
                return await self._fetch(data)
            assert api_key == LIST_OFFSETS
            return self._list_offsets(data)
        finally:
            mine.set_result(None)

    async def _fetch(self, data: dict[str, Any]) -> Any:
        topics = []
        caught_up = True
        for t in data["topics"]:
            parts = []
            for p in t["partitions"]:
                offset = p["fetch_offset"]
                code = ErrorCode.none
                n = 0
                if self.chaos and self.rng.random() < 0.05:
                    code = self.rng.choice((ErrorCode.not_leader_or_follower,
                                            ErrorCode.unknown_topic_or_partition))
                elif offset > LOG_END or offset < LOG_START:
                    code = ErrorCode.offset_out_of_range
                else:
                    n = min(LOG_END - offset, self.rng.choice((1, 7, 50)))
                    if self.chaos and self.rng.random() < 0.05:
                        n = 0  # an empty answer although data is there
                caught_up &= n == 0
                # a batch that starts before the fetch offset, as a real log's may
                first = max(LOG_START, offset - self.rng.choice((0, 0, 3)))
                records = build_batch(
                    [(1000 + i, None, b"v%d" % i) for i in range(first, offset + n)],
                    base_offset=first) if n else b""
                parts.append(SimpleNamespace(
                    partition_index=p["partition"], error_code=code,
                    high_watermark=LOG_END, last_stable_offset=LOG_END,
                    log_start_offset=LOG_START, records=records,
                    aborted_transactions=None))
            topics.append(SimpleNamespace(topic=t["topic"], partitions=parts))
        if caught_up:  # a long poll: nothing new arrives while the broker waits
            await asyncio.sleep(data["max_wait"] / 1000)
        return SimpleNamespace(error_code=ErrorCode.none, responses=topics)

    def _list_offsets(self, data: dict[str, Any]) -> Any:
        topics = []
        for t in data["topics"]:
            parts = [SimpleNamespace(
                partition_index=p["partition_index"], error_code=ErrorCode.none,
                offset=LOG_START if p["timestamp"] == -2 else LOG_END, timestamp=-1)
                for p in t["partitions"]]
            topics.append(SimpleNamespace(name=t["name"], partitions=parts))
        return SimpleNamespace(topics=topics)


class Metadata:
    def __init__(self, net: FakeNet) -> None:
        self.cache = Cache()
        self.net = net
        self.tracked: set[str] = set()

    def now_ms(self) -> int:
        return 0

    async def refresh(self, topics: object = None) -> None:
        pass


async def _run_seed(seed: int, **overrides: Any) -> None:
    rng = random.Random(seed)
    net = FakeNet(rng)
    consumer = AsyncConsumer(bootstrap_servers="127.0.0.1:1", fetch_max_wait_ms=20,
                             max_poll_records=rng.choice((1, 5, 40)), **overrides)
    fetcher = Fetcher(consumer.config, Metadata(net), consumer._assignment)  # type: ignore[arg-type]
    consumer._fetcher = fetcher
    fetcher.start()
    # next offset each partition must deliver: set by seeks, advanced by records
    expect: dict[TopicPartition, int | None] = {}
    # One partition in some runs: nothing else (another partition's long polls) wakes
    # the fetcher's loop then, as for docs/client.md's asyncio snippet.
    parts = PARTS[:1] if seed % 3 == 0 else PARTS

    def check(records: list[Any]) -> None:
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            assert tp in consumer._assignment.partitions, f"seed {seed}: {tp} not assigned"
            want = expect.get(tp)
            if want is not None:
                assert r.offset == want, f"seed {seed}: {tp} gave {r.offset}, wanted {want}"
            expect[tp] = r.offset + 1

    async def work() -> None:
        """The application works on what it got: the fetches in flight are answered
        meanwhile (a poll that finds data returns without yielding to the loop)."""
        await asyncio.sleep(rng.choice((0, 0, 0.001)))

    # A fetch task that fails outside its own error handling (a bug: the fetcher once
    # built a request from partitions unassigned or reset after it decided to send)
    # is reported here when the task is collected.
    loop_errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, ctx: loop_errors.append(ctx))
    try:
        consumer.assign(parts)
        for tp in parts:
            consumer.seek(tp, 0)
            expect[tp] = 0
        for _ in range(rng.randint(20, 60)):  # the application changes things
            roll = rng.random()
            tp = rng.choice(parts)
            assigned = tp in consumer._assignment.partitions
            if roll < 0.15 and assigned:
                where = rng.randint(0, LOG_END)
                consumer.seek(tp, where)
                expect[tp] = where
            elif roll < 0.22 and assigned:
                consumer.seek_to_beginning(tp)
                expect[tp] = LOG_START
            elif roll < 0.27 and assigned:
                consumer.seek_to_end(tp)
                expect[tp] = LOG_END
            elif roll < 0.37 and assigned:
                consumer.pause(tp)
            elif roll < 0.47 and assigned:
                consumer.resume(tp)
            elif roll < 0.55:
                keep = [p for p in parts if rng.random() < 0.7] or [tp]
                consumer.assign(keep)
                for p in keep:  # a newly assigned partition starts from a seek
                    if consumer._assignment.partitions[p].position is None and \
                            consumer._assignment.partitions[p].reset_to is None:
                        consumer.seek(p, rng.randint(0, LOG_END))
                        expect[p] = consumer._assignment.partitions[p].position
                for p in parts:
                    if p not in keep:
                        expect.pop(p, None)
            else:
                check(await consumer.poll(timeout_ms=rng.choice((0, 1, 5))))
            await work()
        # Liveness: everything resumed, no more chaos; every partition must reach the end.
        net.chaos = False
        consumer.resume(*consumer._assignment.partitions)
        try:
            async with asyncio.timeout(10):
                while any(st.position != LOG_END or tp in fetcher.buffered
                          for tp, st in consumer._assignment.partitions.items()):
                    check(await consumer.poll(timeout_ms=100))
                    await work()
        except TimeoutError:
            state = {tp: (st.position, st.paused, st.reset_to, tp in fetcher.buffered,
                          tp in fetcher._ahead, tp in fetcher._fetching,
                          tp in fetcher._no_ahead)
                     for tp, st in consumer._assignment.partitions.items()}
            pytest.fail(f"seed {seed}: the fetcher stalled; (position, paused, reset_to, "
                        f"buffered, ahead, fetching, no_ahead): {state}, in flight: "
                        f"{fetcher._in_flight}")
    finally:
        await fetcher.close()
    gc.collect()
    assert not loop_errors, f"seed {seed}: {loop_errors}"


SEEDS = range(24)


@pytest.mark.parametrize("seed", SEEDS)
def test_no_partition_is_left_unfetched(seed: int) -> None:
    asyncio.run(_run_seed(seed))


@pytest.mark.parametrize("seed", range(6))
def test_no_partition_is_left_unfetched_without_fetching_ahead(seed: int) -> None:
    asyncio.run(_run_seed(seed, queued_max_messages_kbytes=0))
