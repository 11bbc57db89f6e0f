"""connections.max.idle.ms: the listener closes a connection that sends nothing for that
long, and only such a connection (server/listener.py's one idle timer per connection)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

from tidegate.common.config import BrokerConfig
from tidegate.protocol.framing import encode_frame
from tidegate.protocol.headers import encode_request_header
from tidegate.protocol.messages import build, encode, request_class
from tidegate.server.broker import Broker
from tidegate.server.listener import Listener

IDLE_MS = 300


def _api_versions(correlation_id: int) -> bytes:
    cls = request_class(18, 3)
    return encode_frame(encode_request_header(18, 3, correlation_id, "idle-test", True)
                        + encode(build(cls, {"client_software_name": "t",
                                             "client_software_version": "1"})))


@contextlib.asynccontextmanager
async def _listening(tmp_path: Path) -> AsyncIterator[int]:
    """A broker's listener with connections.max.idle.ms = IDLE_MS; its port."""
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path), "node.id": "0",
                                  "listeners": "PLAINTEXT://127.0.0.1:0",
                                  "connections.max.idle.ms": str(IDLE_MS)}))
    broker.load()
    listener = Listener(broker)
    [(_, port)] = await listener.start()
    try:
        yield port
    finally:
        await listener.stop()
        broker.close()


async def _answer(reader: asyncio.StreamReader) -> int:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    body = await reader.readexactly(size)
    return int(struct.unpack_from(">i", body)[0])


def test_idle_connections_close_and_busy_ones_stay(tmp_path: Path) -> None:
    async def main() -> None:
        async with _listening(tmp_path) as port:
            quiet_r, quiet_w = await asyncio.open_connection("127.0.0.1", port)
            busy_r, busy_w = await asyncio.open_connection("127.0.0.1", port)
            start = time.monotonic()
            # the busy one sends a request every 100 ms for 3 idle periods: never closed
            for cid in range(9):
                busy_w.write(_api_versions(cid))
                await busy_w.drain()
                assert await asyncio.wait_for(_answer(busy_r), 5) == cid
                await asyncio.sleep(0.1)
            # the quiet one was closed after about one idle period, not before
            assert await asyncio.wait_for(quiet_r.read(), 5) == b""
            # then the busy one goes quiet: closed one idle period after its last answer
            quiet_from = time.monotonic()
            assert await asyncio.wait_for(busy_r.read(), 5) == b""
            took = time.monotonic() - quiet_from
            assert IDLE_MS / 1000 - 0.15 <= took <= IDLE_MS / 1000 + 1.0, took
            assert time.monotonic() - start >= 0.9  # the busy phase really ran
            for w in (quiet_w, busy_w):
                w.close()

    asyncio.run(main())


def test_an_idle_connection_closes_on_time(tmp_path: Path) -> None:
    async def main() -> None:
        async with _listening(tmp_path) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_api_versions(7))
            await writer.drain()
            assert await asyncio.wait_for(_answer(reader), 5) == 7
            answered = time.monotonic()
            assert await asyncio.wait_for(reader.read(), 5) == b""
            took = time.monotonic() - answered
            assert IDLE_MS / 1000 - 0.15 <= took <= IDLE_MS / 1000 + 1.0, took
            writer.close()

    asyncio.run(main())
