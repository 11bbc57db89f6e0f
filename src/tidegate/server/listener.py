"""The asyncio TCP listener: one `Connection` per client socket.

Requests on a connection are started in arrival order and their responses are written
in that same order (Kafka clients match responses by position as well as by
correlation id). Starting request N+1 before N has answered lets a producer's
pipelined requests share one group-commit fsync; their side effects still happen in
order because each handler's synchronous part runs when its task first starts.

Bad input is answered the way the Java broker answers it: an unsupported ApiVersions
version gets UNSUPPORTED_VERSION with our ranges; an unknown API key, unsupported
version of another API, malformed header or body, or an oversized frame closes the
connection. Each is logged once with the peer address. Nothing a client sends can
stop the broker or touch another connection.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from tidegate.protocol.framing import FrameDecoder, FrameError, encode_frame
from tidegate.protocol.headers import (
    API_VERSIONS_KEY,
    HeaderError,
    encode_response_header,
    parse_request_header,
    parse_request_header_prefix,
)
from tidegate.protocol.messages import (
    DecodeError,
    build,
    decode,
    encode,
    request_class,
    response_class,
)
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.api_versions import api_keys_payload

log = logging.getLogger(__name__)

_CLOSE = object()


class ProtocolViolation(Exception):
    pass


class Connection:
    def __init__(
        self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        max_bytes = broker.config.get_int("socket.request.max.bytes", 104857600) or 104857600
        self.decoder = FrameDecoder(max_bytes)
        limit = broker.config.get_int("queued.max.requests", 500) or 500
        self.pending: asyncio.Queue[Any] = asyncio.Queue(maxsize=limit)
        self.closed = False

    async def run(self) -> None:
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        writer_task = asyncio.create_task(self._write_loop())
        idle = (self.broker.config.get_int("connections.max.idle.ms", 600000) or 600000) / 1000
        try:
            while not self.closed:
                try:
                    data = await asyncio.wait_for(self.reader.read(262144), idle)
                except TimeoutError:
                    log.info("closing idle connection from %s", self.peer)
                    break
                if not data:
                    break
                try:
                    frames = self.decoder.feed(data)
                except FrameError as e:
                    log.warning("closing connection from %s: %s", self.peer, e)
                    break
                for frame in frames:
                    try:
                        await self._start(frame)
                    except ProtocolViolation as e:
                        log.warning("closing connection from %s: %s", self.peer, e)
                        self.closed = True
                        break
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed = True
            await self.pending.put(_CLOSE)
            try:
                await writer_task
            except Exception:  # pragma: no cover - defensive
                log.exception("connection writer failed for %s", self.peer)
            self.writer.close()

    async def _start(self, frame: bytes) -> None:
        try:
            header, _ = parse_request_header_prefix(frame)
        except HeaderError as e:
            raise ProtocolViolation(f"malformed request header: {e}") from e
        dispatcher = self.broker.dispatcher
        api = dispatcher.apis.get(header.api_key)
        if api is None:
            raise ProtocolViolation(f"unknown API key {header.api_key}")
        if not dispatcher.supports(header.api_key, header.api_version):
            if header.api_key == API_VERSIONS_KEY:
                # KIP-511: answer at v0 so any client can read our supported ranges.
                body = build(
                    response_class(API_VERSIONS_KEY, 0),
                    {"error_code": 35, "api_keys": api_keys_payload(self.broker)},
                )
                await self.pending.put((header.correlation_id, False, body))
                return
            raise ProtocolViolation(
                f"{api.name} v{header.api_version} is not supported "
                f"(supported: v{api.min_version}-v{api.max_version})"
            )
        cls = request_class(header.api_key, header.api_version)
        flexible = bool(getattr(cls, "__flexible__", False))
        try:
            _, pos = parse_request_header(frame, flexible)
            request = decode(cls, frame, pos)
        except (HeaderError, DecodeError) as e:
            raise ProtocolViolation(
                f"cannot parse {api.name} v{header.api_version} request: {e}"
            ) from e
        ctx = RequestContext(
            header.api_key, header.api_version, header.correlation_id, header.client_id, self.peer
        )
        task: asyncio.Task[Any] = asyncio.ensure_future(api.handler(self.broker, ctx, request))
        # ApiVersions responses always use header v0 (KIP-511).
        resp_flexible = flexible and header.api_key != API_VERSIONS_KEY
        await self.pending.put((header.correlation_id, resp_flexible, task))

    async def _write_loop(self) -> None:
        while True:
            item = await self.pending.get()
            if item is _CLOSE:
                return
            correlation_id, flexible, body = item
            if isinstance(body, asyncio.Task):
                try:
                    body = await body
                except Exception:
                    log.exception("request from %s failed; closing the connection", self.peer)
                    self.closed = True
                    self.writer.close()
                    return
            if body is None:
                continue
            if self.closed and self.writer.is_closing():
                continue
            payload = encode_response_header(correlation_id, flexible) + encode(body)
            try:
                self.writer.write(encode_frame(payload))
                await self.writer.drain()
            except (ConnectionError, OSError):
                self.closed = True
                return


class Listener:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.servers: list[asyncio.base_events.Server] = []
        self.connections: set[asyncio.Task[None]] = set()

    async def start(self) -> list[tuple[str, int]]:
        bound = []
        for lis in self.broker.config.listeners():
            server = await asyncio.start_server(
                self._accept,
                host=lis.host or None,
                port=lis.port,
                reuse_address=True,
                limit=1 << 20,
            )
            self.servers.append(server)
            for sock in server.sockets:
                addr = sock.getsockname()
                bound.append((str(addr[0]), int(addr[1])))
        return bound

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        try:
            await Connection(self.broker, reader, writer).run()
        except asyncio.CancelledError:
            writer.close()  # broker shutdown: close quietly
        finally:
            self.connections.discard(task)

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self.connections):
            task.cancel()
        for server in self.servers:
            await server.wait_closed()
