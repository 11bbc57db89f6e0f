"""A follower's fetch round (server/cluster/fetcher.py): every partition of one answer is
appended before any fsync is awaited (side by side, not one after another), and the
round ends, so that the next fetch reports the new positions, only once all of them are
durable; the follower's high watermark follows only durable data."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from tidegate.common.config import BrokerConfig
from tidegate.server.cluster.fetcher import ReplicaFetcher


class FakeLog:
    def __init__(self) -> None:
        self.log_end_offset = self.log_start_offset = self.high_watermark = 0
        self.latest_epoch = 0
        self.leader_epoch_cache = None

    def append_as_follower(self, data: bytes) -> None:
        self.log_end_offset += 1

    def set_high_watermark_as_follower(self, hw: int) -> None:
        self.high_watermark = hw

    def maybe_increment_log_start_as_follower(self, offset: int) -> None:
        pass


class FakeReplicas:
    """Durability that waits until the test releases it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.waiting: list[FakeLog] = []

    async def wait_local_durable(self, lg: FakeLog, offset: int) -> None:
        self.waiting.append(lg)
        await self.release.wait()

    def notify(self, tp: tuple[str, int]) -> None:
        pass


def _partition(index: int) -> Any:
    return SimpleNamespace(tp=("t", index), topic="t", index=index, leader_epoch=1,
                           is_leader=False, log=FakeLog())


def _answer(*indexes: int) -> Any:
    parts = [SimpleNamespace(partition_index=i, error_code=0, diverging_epoch=None,
                             records=b"batch", high_watermark=1, log_start_offset=0)
             for i in indexes]
    return SimpleNamespace(error_code=0, session_id=0,
                           responses=[SimpleNamespace(topic="t", partitions=parts)])


def test_one_answer_is_appended_whole_then_fsynced_side_by_side() -> None:
    async def scenario() -> None:
        replicas = FakeReplicas()
        manager: Any = SimpleNamespace(config=BrokerConfig({}), replicas=replicas,
                                       node_id=2)
        fetcher = ReplicaFetcher(manager, leader_id=1)
        p0, p1 = _partition(0), _partition(1)
        fetcher.partitions = {p0.tp: p0, p1.tp: p1}

        async def request(*_args: Any, **_kw: Any) -> Any:
            return _answer(0, 1)

        fetcher._connection = lambda: SimpleNamespace(request=request)  # type: ignore[method-assign]
        task = asyncio.create_task(fetcher._round([p0, p1]))
        for _ in range(20):
            await asyncio.sleep(0)
        assert (p0.log.log_end_offset, p1.log.log_end_offset) == (1, 1)  # both appended
        assert replicas.waiting == [p0.log, p1.log]  # both fsyncs under way at once
        assert not task.done()  # no next fetch before they are durable
        assert (p0.log.high_watermark, p1.log.high_watermark) == (0, 0)
        replicas.release.set()
        await task
        assert (p0.log.high_watermark, p1.log.high_watermark) == (1, 1)

    asyncio.run(scenario())
