"""`FakePeer`: an in-process broker socket that answers inter-broker requests from a
test's handler, for the batching channel's tests (server/cluster/broker_channel.py).

It speaks the real framing and headers (tidegate.protocol) over a real TCP socket on
127.0.0.1, records every request it decodes, and can hold answers back (`gate`) so a
test can queue more items while a request is in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tidegate.protocol.framing import encode_frame
from tidegate.protocol.headers import encode_response_header, parse_request_header
from tidegate.protocol.messages import (
    build,
    decode,
    encode,
    is_flexible,
    request_class,
    response_class,
)

Handler = Callable[[int, int, Any], dict[str, Any] | None]  # None: never answer


class FakePeer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[tuple[int, int, Any]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.received = asyncio.Event()  # set at each request
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self._conns: set[asyncio.Task[None]] = set()
        self.connections = 0  # accepted so far
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port,
                                                 reuse_address=True)
        self.port = int(self.server.sockets[0].getsockname()[1])

    @property
    def endpoint(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        # closing the sockets ends the serving tasks (cancelling them makes asyncio's
        # stream callback log an error on Python 3.11)
        for w in list(self._writers):
            w.close()
        if self._conns:
            await asyncio.wait(set(self._conns), timeout=5)
        if self.server is not None:
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = await reader.readexactly(size)
                key, version = int.from_bytes(frame[0:2], "big"), int.from_bytes(frame[2:4], "big")
                flexible = is_flexible(key, version)
                header, pos = parse_request_header(frame, flexible)
                req = decode(request_class(key, version), frame, pos)
                self.requests.append((key, version, req))
                self.received.set()
                await self.gate.wait()
                answer = self.handler(key, version, req)
                if answer is None:
                    continue  # silent: the sender times out
                body = encode(build(response_class(key, version), answer))
                writer.write(encode_frame(
                    encode_response_header(header.correlation_id, flexible) + body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self._writers.discard(writer)
            self._conns.discard(task)
