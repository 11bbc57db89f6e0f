"""Which fetches the consumer's fetcher sends, per broker (no network: `_fetch` is
replaced by a recorder).

The case that matters: one partition still being read from the buffer and the other
partitions of its broker caught up. A fetch for the caught-up ones alone would wait
``fetch.max.wait.ms`` in the broker and hold back the buffered partition's next fetch,
so it is deferred (for at most ``fetch.max.wait.ms``) and sent together with the
buffered partition once that one is drained.

`buffer` models a partition whose buffered records reach its high watermark (nothing
to fetch ahead); fetching ahead itself is tested in test_fetcher_pipeline.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.fetcher import Fetcher
from tidegate.client.consumer.state import Assignment, PartitionRecords
from tidegate.client.types import TopicPartition

T = [TopicPartition("t", p) for p in range(4)]
LEADERS = {T[0]: 1, T[1]: 1, T[2]: 1, T[3]: 2}


class Cache:
    def leader_for(self, tp: TopicPartition) -> int | None:
        return LEADERS.get(tp)

    def needs_update(self, now_ms: int) -> bool:
        return False

    def request_update(self) -> None:
        pass

    def topic_id(self, topic: str) -> object:  # the request is built as the fetch is sent
        return None


class Metadata:
    def __init__(self) -> None:
        self.cache = Cache()
        self.tracked: set[str] = set()

    def now_ms(self) -> int:
        return 0


def make(**overrides: Any) -> tuple[Fetcher, list[tuple[int, list[TopicPartition]]]]:
    assignment = Assignment()
    assignment.assign(T)
    for st in assignment.partitions.values():
        st.position = 10
    fetcher = Fetcher(
        ConsumerConfig.from_dict(None, **overrides),
        Metadata(),  # type: ignore[arg-type]
        assignment,
    )
    sent: list[tuple[int, list[TopicPartition]]] = []

    async def fake_fetch(node: int, tps: list[TopicPartition], *_: object) -> None:
        sent.append((node, sorted(tps)))

    fetcher._fetch = fake_fetch  # type: ignore[method-assign]
    return fetcher, sent


def caught_up(fetcher: Fetcher, *tps: TopicPartition) -> None:
    for tp in tps:
        st = fetcher.assignment.partitions[tp]
        st.high_watermark = st.position or 0


def buffer(fetcher: Fetcher, tp: TopicPartition) -> None:
    """`tp` has records 10-19 buffered, and the broker nothing beyond them."""
    fetcher.buffered[tp] = PartitionRecords(tp, 10, [], 20)
    st = fetcher.assignment.partitions[tp]
    st.high_watermark = st.last_stable_offset = 20


async def settle(fetcher: Fetcher, sent: list[tuple[int, list[TopicPartition]]]
                 ) -> float | None:
    """Send what the fetcher wants to; the fetches to one broker (it may split them
    in two, see `Fetcher._split`) are recorded as one."""
    before = len(sent)
    delay = fetcher._send_fetches()
    await asyncio.sleep(0)  # let the recorded "fetches" run
    merged: dict[int, list[TopicPartition]] = {}
    for node, tps in sent[before:]:
        merged.setdefault(node, []).extend(tps)
    sent[before:] = [(node, sorted(tps)) for node, tps in merged.items()]
    for node in list(fetcher._in_flight):
        fetcher._in_flight.pop(node)
    fetcher._fetching.clear()
    return delay


def test_first_fetch_covers_every_partition_of_a_broker() -> None:
    async def main() -> None:
        fetcher, sent = make()
        assert await settle(fetcher, sent) is None
        assert sorted(sent) == [(1, T[:3]), (2, [T[3]])]

    asyncio.run(main())


def test_caught_up_partitions_wait_for_a_buffered_sibling_then_go_together() -> None:
    async def main() -> None:
        fetcher, sent = make()
        buffer(fetcher, T[0])
        caught_up(fetcher, T[1], T[2], T[3])
        delay = await settle(fetcher, sent)
        # Broker 2 has nothing buffered: its long poll goes out. Broker 1 waits.
        assert sent == [(2, [T[3]])]
        assert delay is not None and 0 < delay <= 0.5
        sent.clear()
        del fetcher.buffered[T[0]]  # the application drained it
        assert await settle(fetcher, sent) is None
        assert (1, T[:3]) in sent

    asyncio.run(main())


def test_partitions_with_data_are_fetched_at_once() -> None:
    async def main() -> None:
        fetcher, sent = make()
        buffer(fetcher, T[0])
        caught_up(fetcher, T[1])
        fetcher.assignment.partitions[T[2]].high_watermark = 50  # data waiting
        await settle(fetcher, sent)
        # T[0] goes along (fetched ahead: the broker may have more by now).
        assert (1, T[:3]) in sent

    asyncio.run(main())


def test_paused_buffered_partition_does_not_hold_back_its_broker() -> None:
    async def main() -> None:
        fetcher, sent = make()
        buffer(fetcher, T[0])
        fetcher.assignment.partitions[T[0]].paused = True
        caught_up(fetcher, T[1], T[2])
        await settle(fetcher, sent)
        assert (1, [T[1], T[2]]) in sent

    asyncio.run(main())


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_read_committed_is_caught_up_at_the_last_stable_offset(isolation: str) -> None:
    async def main() -> None:
        fetcher, sent = make(isolation_level=isolation)
        buffer(fetcher, T[0])
        for tp in (T[1], T[2]):
            st = fetcher.assignment.partitions[tp]
            st.high_watermark = 50  # beyond the position, but an open transaction
            st.last_stable_offset = 10  # keeps read_committed at the position
        await settle(fetcher, sent)
        held = (1, T[:3]) not in sent
        assert held == (isolation == "read_committed")

    asyncio.run(main())


def test_the_hold_back_is_bounded_by_fetch_max_wait() -> None:
    async def main() -> None:
        fetcher, sent = make(fetch_max_wait_ms=0)
        buffer(fetcher, T[0])
        caught_up(fetcher, T[1], T[2])
        await settle(fetcher, sent)
        assert (1, T[:3]) in sent

    asyncio.run(main())
