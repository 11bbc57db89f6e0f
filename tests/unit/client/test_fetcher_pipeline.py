"""Fetching ahead (consumer/fetcher.py; answers: consumer/fetch_buffer.py): a partition's
next fetch goes out while its last one is still being read, and an answer that a seek,
reset, revocation or pause made stale is never handed to the application.

No network: the fetcher's `_fetch` task is replaced by a recorder, and the broker's
answers are built here and fed to `Fetcher._handle` as the real `_fetch` does, with the
offsets `Fetcher._request` chose. The consumer is a real `AsyncConsumer` (its `seek`,
`assign`, `pause` and `_drain` are what is tested) whose fetcher is never started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.consumer.consumer import AsyncConsumer
from tidegate.client.consumer.fetcher import Fetcher
from tidegate.client.types import TopicPartition
from tidegate.records.builder import build_batch

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


class Cache:
    names_by_id: dict[object, str] = {}

    def leader_for(self, tp: TopicPartition) -> int | None:
        return 1

    def needs_update(self, now_ms: int) -> bool:
        return False

    def request_update(self) -> None:
        pass

    def topic_id(self, topic: str) -> object:
        return None


class Metadata:
    def __init__(self) -> None:
        self.cache = Cache()
        self.tracked: set[str] = set()

    def now_ms(self) -> int:
        return 0


class Rig:
    """A consumer, its fetcher, and the fetches the fetcher sent (not yet answered)."""

    def __init__(self, **overrides: Any) -> None:
        self.consumer = AsyncConsumer(bootstrap_servers="127.0.0.1:1", **overrides)
        self.fetcher = Fetcher(self.consumer.config, Metadata(),  # type: ignore[arg-type]
                               self.consumer._assignment)
        self.consumer._fetcher = self.fetcher
        self.sent: list[list[TopicPartition]] = []

        async def record(node: int, tps: list[TopicPartition], *_: object) -> None:
            self.sent.append(sorted(tps))

        self.fetcher._fetch = record  # type: ignore[method-assign]

    async def send(self) -> dict[TopicPartition, Any]:
        """Let the fetcher send what it wants to; return what those fetches asked for
        (the offsets `_handle` checks the answer against). {} if nothing was sent."""
        self.sent.clear()
        self.fetcher._send_fetches()
        await asyncio.sleep(0)
        self.fetcher._in_flight.clear()
        asked: dict[TopicPartition, Any] = {}
        for tps in self.sent:  # a broker's partitions may go in two fetches
            asked.update(self.fetcher._request(tps)[1])
        return asked

    def answer(self, asked: dict[TopicPartition, Any],
               data: dict[TopicPartition, tuple[int, int]],
               code: ErrorCode = ErrorCode.none, hw: int = 100) -> None:
        """The broker answers `asked` with records [first, first+n) per partition."""
        parts = []
        for tp, (first, n) in data.items():
            records = build_batch([(1000 + i, None, b"v%d" % i) for i in range(first, first + n)],
                                  base_offset=first) if n else b""
            parts.append(SimpleNamespace(
                partition_index=tp.partition, error_code=code, high_watermark=hw,
                last_stable_offset=hw, log_start_offset=0, records=records,
                aborted_transactions=None))
        resp = SimpleNamespace(error_code=ErrorCode.none,
                               responses=[SimpleNamespace(topic="t", partitions=parts)])
        self.fetcher._handle(resp, asked)
        self.fetcher._fetching.difference_update(asked)

    def poll(self, n: int = 1000) -> list[tuple[int, int]]:
        return [(r.partition, r.offset) for r in self.consumer._drain(self.fetcher, n)]


def run(body: Callable[[Rig], Any], **overrides: Any) -> None:
    async def main() -> None:
        rig = Rig(**overrides)
        rig.consumer.assign([T0])
        rig.consumer.seek(T0, 0)
        await body(rig)

    asyncio.run(main())


def offsets(first: int, n: int, p: int = 0) -> list[tuple[int, int]]:
    return [(p, o) for o in range(first, first + n)]


def test_the_next_fetch_starts_where_the_buffer_ends_and_waits_its_turn() -> None:
    async def body(rig: Rig) -> None:
        asked = await rig.send()
        assert asked[T0][0] == 0
        rig.answer(asked, {T0: (0, 10)})
        ahead = await rig.send()  # sent although 0-9 are not read yet
        assert ahead[T0][0] == 10
        rig.answer(ahead, {T0: (10, 10)})
        assert await rig.send() == {}  # one fetch ahead per partition at most
        assert rig.poll(4) == offsets(0, 4)
        assert rig.poll() == offsets(4, 6) + offsets(10, 10)
        assert rig.consumer._assignment.partitions[T0].position == 20

    run(body)


def test_a_seek_discards_a_fetch_in_flight_even_to_the_same_offset() -> None:
    async def body(rig: Rig) -> None:
        asked = await rig.send()
        rig.answer(asked, {T0: (0, 10)})
        ahead = await rig.send()
        rig.consumer.seek(T0, 10)  # where the fetch in flight starts: still stale
        rig.answer(ahead, {T0: (10, 10)})
        assert rig.poll() == []
        again = await rig.send()
        assert again[T0][0] == 10
        rig.answer(again, {T0: (10, 5)})
        assert rig.poll() == offsets(10, 5)

    run(body)


def test_a_seek_back_drops_buffered_and_fetched_ahead_records() -> None:
    async def body(rig: Rig) -> None:
        rig.answer(await rig.send(), {T0: (0, 10)})
        rig.answer(await rig.send(), {T0: (10, 10)})
        assert rig.poll(3) == offsets(0, 3)
        rig.consumer.seek(T0, 1)
        assert rig.poll() == []
        asked = await rig.send()
        assert asked[T0][0] == 1
        rig.answer(asked, {T0: (0, 4)})
        assert rig.poll() == offsets(1, 3)

    run(body)


def test_a_reset_discards_a_fetch_in_flight() -> None:
    async def body(rig: Rig) -> None:
        rig.answer(await rig.send(), {T0: (0, 10)})
        ahead = await rig.send()
        rig.consumer.seek_to_end(T0)
        rig.consumer._assignment.partitions[T0].position = 10  # the lookup's answer
        rig.consumer._assignment.partitions[T0].reset_to = None
        rig.answer(ahead, {T0: (10, 10)})
        assert rig.poll() == []

    run(body)


def test_no_record_of_a_revoked_partition_is_delivered() -> None:
    async def body(rig: Rig) -> None:
        rig.answer(await rig.send(), {T0: (0, 10)})
        ahead = await rig.send()
        rig.consumer.assign([T1])  # T0 revoked while its fetch ahead is in flight
        rig.answer(ahead, {T0: (10, 10)})
        assert rig.poll() == []
        rig.consumer.assign([T0, T1])  # and assigned again: the old answer stays stale
        rig.consumer.seek(T0, 10)
        rig.answer(ahead, {T0: (10, 10)})
        assert rig.poll() == []
        assert not rig.fetcher.buffered and not rig.fetcher._ahead

    run(body)


def test_a_paused_partition_keeps_its_records_until_resumed() -> None:
    async def body(rig: Rig) -> None:
        rig.answer(await rig.send(), {T0: (0, 10)})
        ahead = await rig.send()
        rig.consumer.pause(T0)
        rig.answer(ahead, {T0: (10, 10)})
        assert rig.poll() == []
        assert await rig.send() == {}  # paused partitions are not fetched
        rig.consumer.resume(T0)
        assert rig.poll() == offsets(0, 10) + offsets(10, 10)

    run(body)


def test_an_error_fetched_ahead_waits_for_the_position() -> None:
    async def body(rig: Rig) -> None:
        rig.answer(await rig.send(), {T0: (0, 10)})
        ahead = await rig.send()
        rig.answer(ahead, {T0: (10, 0)}, code=ErrorCode.offset_out_of_range)
        st = rig.consumer._assignment.partitions[T0]
        assert st.position == 0 and st.reset_to is None  # no reset under the reader
        assert not rig.fetcher.errors
        assert await rig.send() == {}  # not fetched ahead again
        assert rig.poll() == offsets(0, 10)
        asked = await rig.send()  # now at the position: the error would count
        assert asked[T0][0] == 10

    run(body)


def test_fetching_ahead_is_bounded_by_queued_max_messages_kbytes() -> None:
    async def body(rig: Rig) -> None:
        rig.answer(await rig.send(), {T0: (0, 10)})
        assert await rig.send() == {}  # 0: never ahead
        rig.poll()
        assert (await rig.send())[T0][0] == 10

    run(body, queued_max_messages_kbytes=0)

    async def small(rig: Rig) -> None:
        rig.consumer.assign([T0, T1])
        rig.consumer.seek(T0, 0)
        rig.consumer.seek(T1, 0)
        rig.answer(await rig.send(), {T0: (0, 10), T1: (0, 10)})
        # 20 small records hold less than 1 KiB: both go ahead.
        assert sorted(await rig.send()) == [T0, T1]
        rig.fetcher._fetching.clear()
        rig.fetcher._ahead.clear()
        rig.fetcher.buffered[T1].nbytes = 1024  # now the consumer holds 1 KiB
        assert await rig.send() == {}

    run(small, queued_max_messages_kbytes=1)


def test_two_fetches_in_flight_per_broker_never_behind_a_long_poll() -> None:
    async def body(rig: Rig) -> None:
        rig.consumer.assign([T0, T1])
        rig.consumer.seek(T0, 0)
        rig.consumer.seek(T1, 0)
        asked = await rig.send()
        assert sorted(rig.sent) == [[T0], [T1]]  # split: the broker answers both at once
        rig.fetcher._fetching.clear()
        rig.answer({T1: asked[T1]}, {T1: (0, 10)}, hw=10)  # T1 now caught up, T0 in flight
        rig.fetcher._in_flight[1] = [(asyncio.ensure_future(asyncio.sleep(0)), True)]
        rig.fetcher._fetching.add(T0)
        rig.poll()  # T1 drained: its next fetch would only long-poll
        rig.sent.clear()
        rig.fetcher._send_fetches()
        await asyncio.sleep(0)
        assert rig.sent == []  # not queued behind T0's fetch
        st = rig.consumer._assignment.partitions[T1]
        st.high_watermark = 50  # the broker has more now: answered at once
        rig.fetcher._send_fetches()
        await asyncio.sleep(0)
        assert rig.sent == [[T1]]

    run(body)

    async def off(rig: Rig) -> None:
        rig.consumer.assign([T0, T1])
        rig.consumer.seek(T0, 0)
        rig.consumer.seek(T1, 0)
        await rig.send()
        assert rig.sent == [[T0, T1]]  # queued.max.messages.kbytes=0: one fetch

    run(off, queued_max_messages_kbytes=0)
