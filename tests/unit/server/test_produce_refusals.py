"""The Produce handler's answers per partition when a topic or the request is refused.

The handler decides a topic's refusal once for all its partitions (an unknown topic, an
internal one, a bad acks value) and answers each partition, in the request's order,
beside the partitions of other topics that it appends. An in-process broker, no
sockets: light.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode
from tidegate.protocol import produce_request
from tidegate.protocol.messages import build, encode, request_class
from tidegate.records.builder import build_batch
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers import produce


def _answers(tmp_path: Path, acks: int, topics: list[tuple[str, list[int]]],
             relaxed: bool = False) -> list[tuple[str, list[tuple[int, ErrorCode, int]]]]:
    async def main() -> Any:
        b = Broker(BrokerConfig({"log.dirs": str(tmp_path)}))
        b.load()
        b.create_topic("t", 3, {"flush.messages": "1000000"} if relaxed else {})
        b.create_topic("__consumer_offsets", 1, {})
        now = int(time.time() * 1000)
        body = bytearray(encode(build(request_class(0, 9), {
            "acks": acks, "timeout": 30000, "topic_data": [
                {"name": name, "partition_data": [
                    {"index": i, "records": build_batch([(now, b"k", b"v")])} for i in parts]}
                for name, parts in topics]})))
        req, _ = produce_request.decode(memoryview(body), 0, 9)
        loop = asyncio.get_running_loop()
        ctx = RequestContext(0, 9, 1, "test", "peer", loop.create_future())
        try:
            resp = await produce.handle(b, ctx, req)
        finally:
            b.close()
        return [(t.name, [(p.index, p.error_code, p.base_offset)
                          for p in t.partition_responses]) for t in resp.responses]

    return asyncio.run(main())  # type: ignore[no-any-return]


def test_refused_topics_answer_each_partition_beside_appended_ones(tmp_path: Path) -> None:
    for relaxed in (False, True):
        got = _answers(tmp_path / str(relaxed), -1, [
            ("nope", [0, 5]), ("t", [2, 0, 7]), ("__consumer_offsets", [0]), ("t", [1])],
            relaxed)
        assert got == [
            ("nope", [(0, ErrorCode.unknown_topic_or_partition, -1),
                      (5, ErrorCode.unknown_topic_or_partition, -1)]),
            ("t", [(2, ErrorCode.none, 0), (0, ErrorCode.none, 0),
                   (7, ErrorCode.unknown_topic_or_partition, -1), (1, ErrorCode.none, 0)]),
            ("__consumer_offsets", [(0, ErrorCode.invalid_topic_exception, -1)]),
        ]


def test_bad_acks_refuses_every_partition(tmp_path: Path) -> None:
    got = _answers(tmp_path, 2, [("t", [0, 1]), ("nope", [3])])
    assert got == [("t", [(0, ErrorCode.invalid_required_acks, -1),
                          (1, ErrorCode.invalid_required_acks, -1)]),
                   ("nope", [(3, ErrorCode.invalid_required_acks, -1)])]
