"""A Produce waiting on the group commit holds no request buffer.

The listener reads a big request into a buffer of its own pool and the hand decoder
(protocol/produce_request.py) hands the records on as views of it; the pool reuses a
buffer only once nothing exports it. The handler drops those views once every append is
done, before its fsync wait: these tests hold the data log's fsync and check that the
request's buffer is free (resizable) while the answer still waits, and that the answer
and the request metrics are unchanged. They fail if the handler keeps the views.

An in-process broker, no sockets: light.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.unit.server.held_flush import hold_fsync

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode
from tidegate.protocol import produce_request
from tidegate.protocol.messages import build, encode, request_class
from tidegate.records.builder import build_batch
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers import produce


def _exported(buf: bytearray) -> bool:
    """Whether a view of `buf` is alive (CPython refuses to resize an exported one)."""
    try:
        buf.append(0)
    except BufferError:
        return True
    del buf[-1:]
    return False



def _request_buffer(version: int, n_parts: int) -> bytearray:
    now = int(time.time() * 1000)
    body = encode(build(request_class(0, version), {
        "acks": -1, "timeout": 30000, "topic_data": [{"name": "t", "partition_data": [
            {"index": i, "records": build_batch([(now, b"k", b"v" * 1000)] * 10)}
            for i in range(n_parts)]}]}))
    return bytearray(body)


def test_the_request_buffer_is_free_while_the_answer_waits_for_the_fsync(
        tmp_path: Path) -> None:
    async def main() -> None:
        b = Broker(BrokerConfig({"log.dirs": str(tmp_path)}))
        b.load()
        b.create_topic("t", 2, {})
        gates = [hold_fsync(b.replicas.leader("t", i).log) for i in range(2)]
        try:
            buf = _request_buffer(9, 2)
            req, _ = produce_request.decode(memoryview(buf), 0, 9)
            assert _exported(buf)  # the records are views of the request's buffer
            released: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            ctx = RequestContext(0, 9, 1, "c", "peer", released)
            sent = asyncio.ensure_future(produce.handle(b, ctx, req))
            await asyncio.wait_for(released, 5)  # every append is done
            await asyncio.sleep(0.05)
            assert not sent.done(), "answered before the fsync"
            assert b.replicas.leader("t", 0).log.log_end_offset == 10
            # `req` is still referenced (here, as by the listener): its records are gone
            assert not _exported(buf), "a request waiting on the fsync holds its buffer"
            for gate in gates:
                gate.set()
            resp = await asyncio.wait_for(sent, 10)
            parts = resp.responses[0].partition_responses
            assert [(p.index, p.error_code, p.base_offset) for p in parts] == [
                (0, ErrorCode.none, 0), (1, ErrorCode.none, 0)]
        finally:
            for gate in gates:
                gate.set()
            b.close()

    asyncio.run(main())
