"""A Produce is answered only once every partition of it is fsynced, and no high
watermark passes what is fsynced, when a flush round ends in one call
(`ReplicaManager._on_round_flushed`) while one of its logs was appended to again during
the round (the later append's data is past that round's flush, so its request must wait
for the next one, and the high watermark must stay at the round's recovery point).

An in-process broker on one node (fsync per write): a Produce over two partitions, the
second's fsync held; meanwhile a second Produce appends to the first partition (its own
flush held too).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tests.unit.server.held_flush import hold_fsync

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode
from tidegate.protocol.messages import build, request_class
from tidegate.records.builder import build_batch
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers import produce
from tidegate.storage.log import Log

HELD_S = 0.3  # how long an fsync is held: whatever waits for it must still wait


def _produce(partitions: list[int], n: int = 1) -> Any:
    now = int(time.time() * 1000)
    parts = [{"index": p, "records": build_batch([(now, b"k", b"v")] * n)} for p in partitions]
    return build(request_class(0, 9), {
        "acks": -1, "timeout": 30000,
        "topic_data": [{"name": "t", "partition_data": parts}]})


def _offsets(resp: Any) -> dict[int, int]:
    out = {}
    for p in resp.responses[0].partition_responses:
        assert p.error_code == ErrorCode.none
        out[int(p.index)] = int(p.base_offset)
    return out


def _durable_and_visible(lg: Log, end: int) -> None:
    """`end` (exclusive) is fsynced; the HW and LSO do not pass what is fsynced."""
    assert lg.recovery_point >= end
    assert lg.last_stable_offset <= lg.high_watermark <= lg.recovery_point


def test_a_log_appended_to_during_its_round_keeps_its_later_request_waiting(
        tmp_path: Path) -> None:
    async def main() -> None:
        b = Broker(BrokerConfig({"log.dirs": str(tmp_path)}))
        b.load()
        b.create_topic("t", 2, {})
        p0, p1 = b.get_log("t", 0), b.get_log("t", 1)
        assert p0 is not None and p1 is not None and p0.syncs_every_write
        try:
            gate = hold_fsync(p1)  # p1's flush (in the same round as p0's) waits
            gate0 = hold_fsync(p0, from_end=4)  # and p0's flush after the second append
            first = asyncio.ensure_future(produce.handle(
                b, RequestContext(0, 9, 1, "c", "peer"), _produce([0, 1], 3)))
            await asyncio.sleep(HELD_S)
            assert not first.done(), "answered before its second partition was fsynced"
            assert p1.high_watermark == 0
            # p0 is appended to again while its round (held by p1) is not over
            second = asyncio.ensure_future(produce.handle(
                b, RequestContext(0, 9, 2, "c", "peer"), _produce([0], 2)))
            await asyncio.sleep(0.05)
            assert p0.log_end_offset == 5
            gate.set()
            offsets = _offsets(await asyncio.wait_for(first, 10))
            assert offsets == {0: 0, 1: 0}
            # answered: both partitions fsynced past the request's records, no HW ahead
            _durable_and_visible(p0, 3)
            _durable_and_visible(p1, 3)
            await asyncio.sleep(HELD_S)
            assert not second.done(), "answered by a flush that did not cover it"
            assert p0.high_watermark == 3
            gate0.set()
            assert _offsets(await asyncio.wait_for(second, 10)) == {0: 3}
            _durable_and_visible(p0, 5)
            assert p0.high_watermark == 5 and p1.high_watermark == 3
        finally:
            b.close()

    asyncio.run(main())
