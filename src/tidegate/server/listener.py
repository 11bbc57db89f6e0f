"""The asyncio TCP listener: one `Connection` per client socket.

A connection's requests run one after another, in the order sent, as on Kafka (whose
broker mutes a channel until its in-flight request is answered): request N+1's handler
starts only once request N's has finished, so N+1 sees everything N did — ListOffsets
the log start DeleteRecords moved, Metadata the topic CreateTopics made, OffsetFetch
what OffsetCommit wrote. Requests are still read and decoded ahead (up to
`queued.max.requests` unanswered ones, then reading pauses); only their handlers wait.
Different connections run concurrently.

One exception keeps group commit working: a handler whose effects are done and that
only waits before answering calls `RequestContext.release()` (Produce does, after its
appends, while it waits for the fsync that moves the high watermark). Then a next
request of the same API — a producer's next pipelined Produce — starts at once, and
the pipelined requests share one fsync; a request of any other API still waits until
every earlier handler on the connection has finished (server/context.py). Responses
are written in request order whatever finishes first (Kafka clients match responses
by position as well as by correlation id).

Bad input is answered the way the Java broker answers it: an unsupported ApiVersions
version gets UNSUPPORTED_VERSION with our ranges; an unknown API key, unsupported
version of another API, malformed header or body, or an oversized frame closes the
connection once the answers to the requests before it are written. Each is logged once
with the peer address. A handler that raises closes its connection too (logged with
the traceback) and no later request on it is started. Nothing a client sends can stop
the broker or touch another connection.
"""

from __future__ import annotations

import asyncio
import functools
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
from tidegate.server.dispatch import Api
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
        # Requests started and not finished, and the API key and release future of the
        # newest: what the next request waits for (`_gate`). `failed`: a handler raised,
        # the connection is closing and no later handler may run.
        self.running: set[asyncio.Task[Any]] = set()
        self.newest: tuple[int, asyncio.Future[None]] | None = None
        self.failed = False

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
        gate = self._gate(header.api_key)
        released: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ctx = RequestContext(
            header.api_key,
            header.api_version,
            header.correlation_id,
            header.client_id,
            self.peer,
            released,
        )
        task: asyncio.Task[Any] = asyncio.ensure_future(self._run(gate, api, ctx, request))
        self.running.add(task)
        task.add_done_callback(functools.partial(self._finished, released))
        self.newest = (header.api_key, released)
        # ApiVersions responses always use header v0 (KIP-511).
        resp_flexible = flexible and header.api_key != API_VERSIONS_KEY
        await self.pending.put((header.correlation_id, resp_flexible, task))

    def _gate(self, api_key: int) -> list[asyncio.Future[Any]]:
        """What a new request of `api_key` must wait for (module docstring): the newest
        request's release if it is of the same API, else every request not finished.
        By induction every request before the newest one had been released or had
        finished when the newest started, so its release is all that is left then."""
        if not self.running:
            return []
        if self.newest is not None and self.newest[0] == api_key:
            return [self.newest[1]]
        return list(self.running)

    async def _run(
        self, gate: list[asyncio.Future[Any]], api: Api, ctx: RequestContext, request: Any
    ) -> Any:
        # The task is created at once, not when the gate opens: requests read together
        # (a producer's pipelined Produce requests) then run back to back in one pass of
        # the event loop, each finding the previous one released, with no wake-up in
        # between. That keeps the cost of ordering out of the produce path.
        waiting = [f for f in gate if not f.done()]
        if waiting:
            await asyncio.wait(waiting)  # asyncio.wait: a failed handler does not raise here
        if self.failed:
            return None
        return await api.handler(self.broker, ctx, request)

    def _finished(self, released: asyncio.Future[None], task: asyncio.Task[Any]) -> None:
        self.running.discard(task)
        if not released.done():
            released.set_result(None)
        if not task.cancelled() and task.exception() is not None:
            # The write loop logs it and closes the connection when its answer is due;
            # the requests behind it answer nothing and run no handler.
            self.failed = True

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
