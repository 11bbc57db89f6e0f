"""The asyncio TCP listener: one `Connection` per client socket.

A connection's requests run one after another, in the order sent, as on Kafka (whose
broker mutes a channel until its in-flight request is answered): request N+1's handler
starts only once request N's has finished, so N+1 sees everything N did — ListOffsets
the log start DeleteRecords moved, Metadata the topic CreateTopics made, OffsetFetch
what OffsetCommit wrote. Requests are still read and decoded ahead (up to
`queued.max.requests` unanswered ones, then reading pauses); only their handlers wait.
Different connections run concurrently. Bytes come in through `FrameProtocol`
(server/frame_stream.py), which reads big requests straight into their own buffers.

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

Security (server/security.py): a listener may wrap its connections in TLS (the
handshake runs here, with the listener's current certificates) and may require SASL;
each connection has a `Session` whose principal goes into every `RequestContext`.
Until a SASL connection has authenticated — and again once its session has expired
(`connections.max.reauth.ms`) — any request but ApiVersions, SaslHandshake and
SaslAuthenticate closes it. A failed handshake or authentication closes that
connection only, logged once.

Client quotas (server/quotas/throttle.py): when any is configured, each handler runs
under its client's quotas; a throttled client's response carries `throttle_time_ms`
and its next request waits until the throttle time is over (Kafka's mute, KIP-219).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from tidegate.protocol.flexible import skip_tagged_fields
from tidegate.protocol.framing import FrameError
from tidegate.protocol.headers import (
    API_VERSIONS_KEY,
    HeaderError,
    parse_request_header_prefix,
)
from tidegate.protocol.messages import (
    DecodeError,
    build,
    decode,
    request_class,
    response_class,
)
from tidegate.protocol.sasl import SaslState
from tidegate.server.answer_queue import AnswerQueue
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.dispatch import Api
from tidegate.server.frame_stream import BufferPool, Frame, FrameProtocol
from tidegate.server.handlers.api_versions import api_keys_payload
from tidegate.server.handlers.sasl import authenticate
from tidegate.server.quotas.throttle import Mute, run_throttled
from tidegate.server.security import ListenerSecurityRuntime, Session

log = logging.getLogger(__name__)


class ProtocolViolation(Exception):
    pass


class Connection:
    def __init__(
        self,
        broker: Broker,
        stream: FrameProtocol,
        session: Session | None = None,
    ) -> None:
        self.broker = broker
        self.session = session
        self.reader = self.writer = stream  # server/frame_stream.py: both sides
        peer = stream.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.closed = False
        # Requests started and not finished, and the API key and release future of the
        # newest: what the next request waits for (`_gate`). `failed`: a handler raised,
        # the connection is closing and no later handler may run.
        self.running: set[asyncio.Task[Any]] = set()
        self.newest: tuple[int, asyncio.Future[None]] | None = None
        self.failed = False
        self.mute = Mute()  # a throttled client's next request waits (server/quotas/)
        # The loop's own methods, not asyncio's module functions: those look the running
        # loop up (and ensure_future checks its argument's type) on every call.
        self.loop = asyncio.get_running_loop()
        limit = broker.config.get_int("queued.max.requests", 500) or 500
        self.pending = AnswerQueue(limit, self.loop, self)  # writes the answers too
        # connections.max.idle.ms: when the current wait for data began (None while
        # requests are being read), the connection's one idle timer, and whether it
        # found the connection idle (`_wait_or_idle`)
        self.waiting_since: float | None = None
        self.idle_timer: asyncio.TimerHandle | None = None
        self.idle_expired = False

    async def run(self) -> None:
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        idle = (self.broker.config.get_int("connections.max.idle.ms", 600000) or 600000) / 1000
        stream = self.reader
        try:
            while not self.closed:
                if not stream.ready() and not await self._wait_or_idle(idle):
                    log.info("closing idle connection from %s", self.peer)
                    break
                try:
                    frames = stream.take()  # complete frames, read in place
                except FrameError as e:
                    log.warning("closing connection from %s: %s", self.peer, e)
                    break
                if not frames:
                    break
                for frame in frames:
                    try:
                        if self.session is not None and self.session.raw_tokens:
                            self._raw_token(bytes(frame))
                            continue
                        await self._start(frame)
                    except ProtocolViolation as e:
                        log.warning("closing connection from %s: %s", self.peer, e)
                        self.closed = True
                        break
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed = True
            if self.idle_timer is not None:
                self.idle_timer.cancel()
            await self.pending.close()  # the answers due are written first
            self.writer.close()

    async def _wait_or_idle(self, idle: float) -> bool:
        """Wait until the stream is ready; False if no data came for `idle` seconds.

        One timer per connection, re-armed only when it fires (`_idle_check`), instead
        of asyncio.wait_for's Task and timer for each wait: those were about a tenth of
        the broker's cost of a small request sent on its own (bench/requests.py)."""
        stream = self.reader
        self.waiting_since = self.loop.time()
        if self.idle_timer is None:
            self.idle_timer = self.loop.call_at(self.waiting_since + idle, self._idle_check,
                                                idle)
        try:
            while True:
                await stream.wait()  # until ready, or interrupted by `_idle_check`
                if stream.ready():
                    return True
                if self.idle_expired:
                    return False
        finally:
            self.waiting_since = None

    def _idle_check(self, idle: float) -> None:
        """The idle timer: close a connection that has waited `idle` seconds for data,
        else fire again when the current wait (or, while busy, a wait starting now)
        would reach `idle`."""
        self.idle_timer = None
        if self.closed:
            return
        now = self.loop.time()
        since = self.waiting_since
        due = now + idle if since is None else since + idle
        if since is not None and now >= due - 0.001:  # loop timers may fire a bit early
            self.idle_expired = True
            self.reader.interrupt()
            return
        self.idle_timer = self.loop.call_at(due, self._idle_check, idle)

    async def _start(self, frame: Frame) -> None:
        try:
            header, pos = parse_request_header_prefix(frame)
        except HeaderError as e:
            raise ProtocolViolation(f"malformed request header: {e}") from e
        dispatcher = self.broker.dispatcher
        api = dispatcher.apis.get(header.api_key)
        if api is None:
            raise ProtocolViolation(f"unknown API key {header.api_key}")
        session = self.session
        if session is not None and not session.allows(header.api_key, self.broker.clock.now_ms()):
            state = "expired" if session.sasl and session.sasl.user else "not authenticated"
            raise ProtocolViolation(f"{api.name} request on a SASL connection {state} "
                                    f"(listener {session.listener})")
        if session is not None and session.close_after_answer:
            raise ProtocolViolation("request after a failed SASL exchange")
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
            if flexible:  # request header v2: the v1 part's tagged fields follow
                pos = skip_tagged_fields(frame, pos, len(frame), HeaderError)
            request = decode(cls, frame, pos)
        except (HeaderError, DecodeError) as e:
            raise ProtocolViolation(
                f"cannot parse {api.name} v{header.api_version} request: {e}"
            ) from e
        gate = self._gate(header.api_key)
        released: asyncio.Future[None] = self.loop.create_future()
        ctx = RequestContext(
            header.api_key,
            header.api_version,
            header.correlation_id,
            header.client_id,
            self.peer,
            released,
            session.principal if session is not None else "User:ANONYMOUS",
            session.listener if session is not None else "",
            session,
        )
        task: asyncio.Task[Any] = self.loop.create_task(self._run(gate, api, ctx, request))
        self.running.add(task)
        task.add_done_callback(functools.partial(self._finished, released))
        self.newest = (header.api_key, released)
        # ApiVersions responses always use header v0 (KIP-511).
        resp_flexible = flexible and header.api_key != API_VERSIONS_KEY
        item = (header.correlation_id, resp_flexible, task)
        if self.pending.full():  # queued.max.requests unanswered: reading waits
            await self.pending.put(item)
        else:  # no coroutine for a put that cannot wait
            self.pending.put_nowait(item)

    def _raw_token(self, frame: bytes) -> None:
        """A bare SASL token after SaslHandshake v0 (KIP-43): answered as a bare frame."""
        session = self.session
        assert session is not None and session.sasl is not None

        async def run() -> bytes | None:
            body, ok = await authenticate(self.broker, session, self.peer, frame)
            sasl = session.sasl
            assert sasl is not None
            session.raw_tokens = ok and sasl.state in (SaslState.SCRAM_FINAL,
                                                       SaslState.OAUTH_ERROR)
            return bytes(body["auth_bytes"]) if ok else None

        session.raw_tokens = False  # until this token is answered (clients wait)
        task: asyncio.Task[bytes | None] = asyncio.ensure_future(run())
        task.add_done_callback(self.pending.task_done)
        self.pending.put_nowait((None, False, task))

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
        arrived = time.perf_counter()
        if len(gate) == 1 and not isinstance(gate[0], asyncio.Task):
            # The newest request's release (`_gate`): a future only ever given a result,
            # awaited directly rather than through asyncio.wait's waiter and callbacks.
            if not gate[0].done():
                await gate[0]
        else:
            waiting = [f for f in gate if not f.done()]
            if waiting:
                await asyncio.wait(waiting)  # a failed handler does not raise here
        if self.failed:
            return None
        # -- client quotas (server/quotas/throttle.py): measure, throttle, mute; a single
        # check when no quota is configured
        if self.broker.quotas.active:
            return await run_throttled(self.broker, self.mute, ctx, request,
                                       functools.partial(self._call, api, arrived))
        return await self._call(api, arrived, ctx, request)

    async def _call(self, api: Api, arrived: float, ctx: RequestContext, request: Any) -> Any:
        # -- request metrics (server/metrics/requests.py); None when http.listeners is off
        if self.broker.request_metrics is not None:
            return await self.broker.request_metrics.run(
                api.handler, self.broker, ctx, request, arrived)
        return await api.handler(self.broker, ctx, request)

    def _finished(self, released: asyncio.Future[None], task: asyncio.Task[Any]) -> None:
        self.running.discard(task)
        if not released.done():
            released.set_result(None)
        if not task.cancelled() and task.exception() is not None:
            # The answer queue logs it and closes the connection when its answer is
            # due; the requests behind it answer nothing and run no handler.
            self.failed = True
        self.pending.task_done(task)  # its answer is written now if it is the head

    def _close_now(self) -> None:
        """A failed SASL exchange: its error is written; nothing more is read or run."""
        self.closed = True
        self.failed = True
        self.writer.close()


def _start_server(
    accept: Callable[[FrameProtocol], Coroutine[Any, Any, None]],
    max_frame_bytes: int,
    **kwargs: Any,
) -> Awaitable[asyncio.base_events.Server]:
    """asyncio.start_server, with a `FrameProtocol` (server/frame_stream.py) for each
    connection instead of a StreamReader and StreamWriter: requests are read in place."""
    loop = asyncio.get_running_loop()
    pool = BufferPool()  # big request buffers reused across this server's connections

    def factory() -> FrameProtocol:
        return FrameProtocol(accept, loop, max_frame_bytes=max_frame_bytes, pool=pool)

    return loop.create_server(factory, **kwargs)


class Listener:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.servers: list[asyncio.base_events.Server] = []
        self.connections: set[asyncio.Task[None]] = set()
        self.open_by_listener: dict[str, int] = {}  # listener name -> connections (metrics)

    async def start(self) -> list[tuple[str, int]]:
        bound = []
        self.bound_by_listener: dict[str, list[tuple[str, int]]] = {}
        for lis in self.broker.config.listeners():
            runtime = self.broker.listener_security[lis.name]
            server = await _start_server(
                functools.partial(self._accept, runtime),
                self.broker.config.get_int("socket.request.max.bytes", 104857600) or 104857600,
                host=lis.host or None,
                port=lis.port,
                reuse_address=True,
                # The loop runs the TLS handshake before _accept; a failed one closes the
                # socket without reaching it.
                ssl=runtime.tls.server_context() if runtime.tls is not None else None,
                ssl_handshake_timeout=10.0 if runtime.tls is not None else None,
            )
            self.servers.append(server)
            for sock in server.sockets:
                addr = sock.getsockname()
                bound.append((str(addr[0]), int(addr[1])))
                self.bound_by_listener.setdefault(lis.name, []).append(bound[-1])
        self.broker.config.bind_ports(
            {name: addrs[0][1] for name, addrs in self.bound_by_listener.items()})
        return bound

    async def _accept(
        self,
        runtime: ListenerSecurityRuntime,
        stream: FrameProtocol,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        name = runtime.sec.name
        self.open_by_listener[name] = self.open_by_listener.get(name, 0) + 1
        try:
            session = await self._secure(runtime, stream)
            if session is None:
                stream.close()
                return
            await Connection(self.broker, stream, session).run()
        except asyncio.CancelledError:
            stream.close()  # broker shutdown: close quietly
        finally:
            self.connections.discard(task)
            self.open_by_listener[name] -= 1

    async def _secure(
        self, runtime: ListenerSecurityRuntime, writer: FrameProtocol
    ) -> Session | None:
        """The connection's session (after the TLS handshake, on TLS listeners); None
        if the client certificate's subject maps to no principal (logged once)."""
        session = runtime.session()
        if runtime.tls is None:
            return session
        peer = writer.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        try:
            session.with_peer_certificate(writer.get_extra_info("peercert"))
        except ValueError as e:
            log.warning("closing TLS connection from %s on listener %s: %s", where,
                        runtime.sec.name, e)
            return None
        return session

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self.connections):
            task.cancel()
        for server in self.servers:
            await server.wait_closed()
