"""asyncio broker connections: connect, negotiate versions, pipeline requests, reconnect.

`BrokerConnection` owns one TCP stream (`stream.ResponseStream`, which reads response
frames in place) and a sans-IO `ClientConnection`. Opening it
sends ApiVersions and keeps, per API, the highest version both sides speak, so callers
build request bodies from plain dicts without choosing versions. Requests are
pipelined: each `request()` writes at once and waits for its own response, which a
single reader task matches by correlation id. A request that times out closes the
connection (as Kafka's NetworkClient does) and fails everything in flight on it.

`NetworkClient` maps node ids to connections, bootstraps from ``bootstrap.servers``
and reconnects with exponential backoff from ``reconnect.backoff.ms`` to
``reconnect.backoff.max.ms`` (with 20% jitter), as Kafka's clients do.

On a secured listener (``security.protocol`` SSL, SASL_PLAINTEXT or SASL_SSL) opening
a connection also does the TLS handshake and, after ApiVersions, the SASL login
(client/security.py, imported only then). A refused login or an untrusted certificate is an
`AuthenticationError`, never retried. When the broker limits the SASL session
(``connections.max.reauth.ms``), a connection is retired at 85% of its lifetime, as
Kafka's clients re-authenticate between 85% and 95%: new requests open a fresh
connection and the old one closes once its in-flight requests are answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import ssl
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tidegate import __version__
from tidegate.client.config import ClientConfig
from tidegate.client.connection import API_VERSIONS, ClientConnection, negotiate_versions
from tidegate.client.errors import (
    AuthenticationError,
    KafkaConnectionError,
    ProtocolError,
    RequestTimedOutError,
    SslHandshakeError,
)
from tidegate.client.stream import ResponseStream
from tidegate.client.tasks import cancel_and_wait
from tidegate.client.types import BrokerInfo
from tidegate.common.errors import KafkaError, UnsupportedVersionError, error_for_code
from tidegate.protocol.messages import build, request_class

if TYPE_CHECKING:
    from tidegate.client.security import ClientSecurity

__all__ = ["BrokerConnection", "NetworkClient", "parse_address"]

# A kio response entity. Its fields depend on the negotiated version, so callers read
# them with attribute access or `protocol.messages.view`.
Response = Any


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    return host.strip("[]"), int(port)


class BrokerConnection:
    """One connection to one broker; see the module docstring."""

    def __init__(self, host: str, port: int, stream: ResponseStream, *,
                 client_id: str | None, request_timeout_ms: int, node_id: int = -1) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.request_timeout_ms = request_timeout_ms
        self._writer = stream  # reads too: frames land in place (client/stream.py)
        self._proto = ClientConnection(client_id)
        self._waiters: dict[int, asyncio.Future[Response]] = {}
        self._closed: BaseException | None = None
        self.versions: dict[int, int] = {}
        self.broker_versions: dict[int, tuple[int, int]] = {}
        # monotonic time after which new requests should use a fresh connection (the
        # SASL session is about to end); None: no limit.
        self.retire_at: float | None = None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node {self.node_id})"

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str | None = "tidegate",
                   request_timeout_ms: int = 30_000, connect_timeout_ms: int = 10_000,
                   node_id: int = -1, security: ClientSecurity | None = None,
                   ) -> BrokerConnection:
        """Connect (TLS if `security` says so), negotiate API versions, log in with
        SASL if configured. KafkaConnectionError if unreachable, AuthenticationError
        (SslHandshakeError for TLS) if refused."""
        tls = security.tls if security is not None else None
        loop = asyncio.get_running_loop()
        try:
            _, stream = await asyncio.wait_for(
                loop.create_connection(lambda: ResponseStream(loop, f"{host}:{port}"),
                                       host, port, ssl=tls,
                                       server_hostname=host if tls else None),
                connect_timeout_ms / 1000)
        except ssl.SSLError as e:  # only with TLS, so client.security is loaded
            from tidegate.client.security import describe_tls_failure
            raise SslHandshakeError(describe_tls_failure(e, f"{host}:{port}")) from e
        except (TimeoutError, OSError) as e:
            if isinstance(e, TimeoutError):
                why = f"no answer within {connect_timeout_ms} ms"
            elif e.errno:
                why = os.strerror(e.errno).lower()
            else:
                why = str(e)
            raise KafkaConnectionError(f"cannot reach {host}:{port} ({why})") from e
        conn = cls(host, port, stream, client_id=client_id,
                   request_timeout_ms=request_timeout_ms, node_id=node_id)
        try:
            await conn._negotiate()
            if security is not None and security.sasl is not None:
                from tidegate.client.security import sasl_login
                lifetime_ms = await sasl_login(conn, security.sasl)
                if lifetime_ms > 0:
                    conn.retire_at = time.monotonic() + 0.85 * lifetime_ms / 1000
        except KafkaConnectionError as e:
            await conn.close()
            if tls is not None and "closed the connection" in str(e):
                # A TLS listener that refuses our certificate (or has none of ours)
                # closes right after the handshake, so the first read fails.
                raise SslHandshakeError(
                    f"{host}:{port} closed the TLS connection right after the handshake: "
                    "it may require a client certificate this client does not have or "
                    "trust (ssl.certificate.location / ssl.key.location)") from e
            raise
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _negotiate(self) -> None:
        version = 4
        while True:
            resp = await self.request(API_VERSIONS, {
                "client_software_name": "tidegate-python",
                "client_software_version": __version__,
            }, version=version)
            ranges = {int(a.api_key): (int(a.min_version), int(a.max_version))
                      for a in resp.api_keys}
            if resp.error_code.value == 0:
                break
            ours = ranges.get(API_VERSIONS)
            if resp.error_code.value == 35 and ours and ours[1] < version:
                version = ours[1]  # UNSUPPORTED_VERSION: retry at the broker's max
                continue
            raise error_for_code(resp.error_code.value, "ApiVersions failed")
        self.broker_versions = ranges
        self.versions = negotiate_versions(ranges)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def usable(self) -> bool:
        """Open and, on a SASL session with a lifetime, not yet due for retirement."""
        return self._closed is None and (
            self.retire_at is None or time.monotonic() < self.retire_at)

    async def close_when_idle(self, limit_s: float = 60.0) -> None:
        """Close once nothing is in flight (or after `limit_s`): a retired connection."""
        deadline = time.monotonic() + limit_s
        while self._waiters and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await self.close()

    @property
    def in_flight(self) -> int:
        return len(self._waiters)

    def version(self, api_key: int) -> int:
        v = self.versions.get(api_key)
        if v is None:
            theirs = self.broker_versions.get(api_key)
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} does not support API {api_key} at a "
                f"version this client speaks (broker: {theirs or 'none'})")
        return v

    async def request(self, api_key: int, data: Mapping[str, Any], *,
                      version: int | None = None, timeout_ms: int | None = None,
                      expect_response: bool = True) -> Response:
        """Send one request built from `data`; return the response (None if none is
        expected). Raises KafkaConnectionError / RequestTimedOutError."""
        if self._closed is not None:
            raise KafkaConnectionError(
                f"connection to {self.host}:{self.port} is closed: {self._closed}")
        v = self.version(api_key) if version is None else version
        request = build(request_class(api_key, v), data)
        cid, frame = self._proto.send_request(request, expect_response=expect_response)
        fut: asyncio.Future[Response] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._waiters[cid] = fut
        self._writer.write(frame)
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as e:
            self._fail(KafkaConnectionError(f"lost connection to {self.host}:{self.port}: {e}"))
        if fut is None:
            return None
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            self._fail(RequestTimedOutError(
                f"no response from {self.host}:{self.port} to API {api_key} within "
                f"{int(timeout * 1000)} ms (request.timeout.ms); connection closed"))
            raise RequestTimedOutError(
                f"request to {self.host}:{self.port} timed out after "
                f"{int(timeout * 1000)} ms") from None

    def send_encoded(self, api_key: int, version: int, body: list[bytes], *,
                     timeout_ms: int | None = None, expect_response: bool = True,
                     ) -> asyncio.Future[Response] | None:
        """`request` without waiting, for a body the caller encoded at `version` as
        parts (the producer's sender: see `ClientConnection.send_parts`). The request is
        written now and its response's future returned (None if no response is
        expected); the future fails as `request` raises, and after
        ``request.timeout.ms`` (or `timeout_ms`) the connection is closed, failing
        everything in flight on it. The write does not wait for the socket buffer to
        drain: the caller bounds what it has in flight (see `drain`)."""
        if self._closed is not None:
            raise KafkaConnectionError(
                f"connection to {self.host}:{self.port} is closed: {self._closed}")
        cid, parts = self._proto.send_parts(api_key, version, body,
                                            expect_response=expect_response)
        self._writer.writelines(parts)
        if not expect_response:
            return None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Response] = loop.create_future()
        self._waiters[cid] = fut
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        timer = loop.call_later(timeout, self._expire, fut, api_key, timeout)
        fut.add_done_callback(lambda _: timer.cancel())
        return fut

    def write_buffered(self) -> int:
        """Bytes written but not yet handed to the socket."""
        tr = self._writer.transport
        return tr.get_write_buffer_size() if tr is not None else 0

    async def drain(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark (as
        `request` does after each write); KafkaConnectionError if the connection broke."""
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as e:
            self._fail(KafkaConnectionError(f"lost connection to {self.host}:{self.port}: {e}"))
            raise KafkaConnectionError(
                f"lost connection to {self.host}:{self.port}: {e}") from e

    def _expire(self, fut: asyncio.Future[Response], api_key: int, timeout: float) -> None:
        if not fut.done():
            self._fail(RequestTimedOutError(
                f"no response from {self.host}:{self.port} to API {api_key} within "
                f"{int(timeout * 1000)} ms (request.timeout.ms); connection closed"))

    async def _read_loop(self) -> None:
        try:
            while True:
                frames = await self._writer.read_frames()
                for req, resp in self._proto.receive_frames(frames):
                    fut = self._waiters.pop(req.correlation_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(resp)
        except asyncio.CancelledError:
            self._fail(KafkaConnectionError(f"connection to {self.host}:{self.port} closed"))
            raise
        except (KafkaConnectionError, ProtocolError) as e:
            self._fail(e)
        except (OSError, KafkaError) as e:
            self._fail(KafkaConnectionError(f"lost connection to {self.host}:{self.port}: {e}"))

    def _fail(self, exc: BaseException) -> None:
        if self._closed is None:
            self._closed = exc
            self._writer.close()
        self._proto.fail_all()
        waiters, self._waiters = self._waiters, {}
        for fut in waiters.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # mark retrieved: a timed-out caller has gone away

    async def close(self) -> None:
        self._fail(KafkaConnectionError(f"connection to {self.host}:{self.port} closed"))
        await cancel_and_wait(self._read_task)
        with contextlib.suppress(OSError, RuntimeError):
            await self._writer.wait_closed()


class NetworkClient:
    """Connections to the cluster's brokers by node id, with reconnect backoff."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.bootstrap = [parse_address(a) for a in config.bootstrap_servers]
        self.security: ClientSecurity | None = None  # PLAINTEXT: no TLS, no SASL, and
        if config.security_protocol != "PLAINTEXT":  # client.security (~0.1 s) unloaded
            from tidegate.client.security import ClientSecurity
            self.security = ClientSecurity.from_config(config)
        self._retiring: set[asyncio.Task[None]] = set()
        self.nodes: dict[int, BrokerInfo] = {}
        self._conns: dict[object, BrokerConnection] = {}
        self._locks: dict[object, asyncio.Lock] = {}
        self._failures: dict[object, tuple[int, float]] = {}
        self._closed = False

    def _backoff_s(self, failures: int) -> float:
        cfg = self.config
        base = cfg.reconnect_backoff_ms * (2 ** max(0, failures - 1))
        ms = min(base, max(cfg.reconnect_backoff_max_ms, cfg.reconnect_backoff_ms))
        return float(ms * random.uniform(0.8, 1.2) / 1000)

    def _retire(self, conn: BrokerConnection) -> None:
        task = asyncio.get_running_loop().create_task(conn.close_when_idle())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _open(self, key: object, host: str, port: int, node_id: int) -> BrokerConnection:
        conn = self._conns.get(key)
        if conn is not None and conn.usable:
            return conn
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self._conns.get(key)
            if conn is not None and conn.usable:
                return conn
            if conn is not None and not conn.closed:
                self._retire(conn)  # its SASL session is ending: log in afresh
            if self._closed:
                raise KafkaConnectionError("the client is closed")
            failures, not_before = self._failures.get(key, (0, 0.0))
            delay = not_before - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                conn = await BrokerConnection.open(
                    host, port, client_id=self.config.client_id,
                    request_timeout_ms=self.config.request_timeout_ms,
                    connect_timeout_ms=self.config.socket_connection_setup_timeout_ms,
                    node_id=node_id, security=self.security)
            except (KafkaConnectionError, AuthenticationError):
                failures += 1
                self._failures[key] = (failures, time.monotonic() + self._backoff_s(failures))
                raise
            self._failures.pop(key, None)
            self._conns[key] = conn
            return conn

    async def connect(self, node_id: int) -> BrokerConnection:
        """A ready connection to broker `node_id` (known from metadata)."""
        info = self.nodes.get(node_id)
        if info is None:
            raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        conn = self._conns.get(node_id)
        if conn is None or not conn.usable:
            # Adopt a bootstrap connection to the same address instead of opening another.
            for key, other in list(self._conns.items()):
                if isinstance(key, tuple) and other.usable and \
                        (other.host, other.port) == (info.host, info.port):
                    del self._conns[key]
                    other.node_id = node_id
                    self._conns[node_id] = other
                    return other
        return await self._open(node_id, info.host, info.port, node_id)

    async def any_connection(self) -> BrokerConnection:
        """A connection to some broker: an open one, else known brokers, else the
        bootstrap servers in order. KafkaConnectionError if none can be reached."""
        for conn in self._conns.values():
            if conn.usable:
                return conn
        errors: list[str] = []
        candidates: list[tuple[object, str, int, int]] = [
            (n.node_id, n.host, n.port, n.node_id) for n in self.nodes.values()]
        candidates += [(("bootstrap", h, p), h, p, -1) for h, p in self.bootstrap]
        for key, host, port, node_id in candidates:
            try:
                return await self._open(key, host, port, node_id)
            except KafkaConnectionError as e:
                errors.append(str(e))
            # AuthenticationError propagates: another broker would refuse us too.
        raise KafkaConnectionError("; ".join(dict.fromkeys(errors)) or "no brokers known")

    async def request(self, node_id: int | None, api_key: int, data: Mapping[str, Any], *,
                      timeout_ms: int | None = None) -> Response:
        """Send to `node_id` (None: any broker) and return the response."""
        conn = await (self.any_connection() if node_id is None else self.connect(node_id))
        return await conn.request(api_key, data, timeout_ms=timeout_ms)

    def connection_if_open(self, node_id: int) -> BrokerConnection | None:
        conn = self._conns.get(node_id)
        return conn if conn is not None and not conn.closed else None

    async def close(self) -> None:
        self._closed = True
        conns, self._conns = list(self._conns.values()), {}
        await asyncio.gather(*(c.close() for c in conns), *self._retiring,
                             return_exceptions=True)
