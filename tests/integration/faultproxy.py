"""A fault-injecting TCP proxy between Kafka clients and a broker, for idempotence tests.

Clients connect to the proxy (127.0.0.1 only) and every connection is relayed to the
broker frame by frame. The proxy reads just enough of each frame to know what it is:
the request header's api key and correlation id, the response's correlation id. Faults
touch Produce (api key 0) only; everything else passes through untouched.

- Drop: every `drop_every`-th Produce request (counted over all connections), or each
  with probability `drop_rate` from a seeded generator, is forwarded to the broker; the
  proxy then waits for the broker's response (so the batch is known to be in the log),
  throws it away and closes both sockets. The client sees a broken connection after a
  successful write, and retries: without idempotence that is a duplicate.
- Swallow: while `swallow_responses` is set, Produce responses are not forwarded (the
  connection stays up). Used to leave acknowledged-by-the-broker batches unacknowledged
  to the client just before the broker is killed.

The proxy runs its own asyncio loop in a daemon thread so blocking clients can be used
from the test thread. It is bounded: at most `max_connections` client connections and
frames of at most `max_frame` bytes (larger ones close the connection). `stats` counts
what happened.
"""

from __future__ import annotations

import asyncio
import random
import struct
import threading
from dataclasses import dataclass

PRODUCE = 0


@dataclass
class ProxyStats:
    connections: int = 0
    produce_requests: int = 0
    dropped: int = 0  # produce requests whose (successful) response was never delivered
    swallowed: int = 0  # produce responses withheld while swallow_responses was set
    upstream_failures: int = 0  # the broker could not be reached


class FaultProxy:
    def __init__(
        self,
        upstream_port: int,
        *,
        port: int = 0,
        drop_every: int = 0,
        drop_rate: float = 0.0,
        seed: int = 0,
        max_connections: int = 64,
        max_frame: int = 64 << 20,
        response_wait: float = 10.0,
    ) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.port = port
        self.drop_every = drop_every
        self.drop_rate = drop_rate
        self.faults_enabled = True
        self.swallow_responses = False
        self.max_connections = max_connections
        self.max_frame = max_frame
        self.response_wait = response_wait
        self.stats = ProxyStats()
        self._rng = random.Random(seed)
        self._active = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> int:
        """Listen (on `port`, or a free one); returns the port."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self.port

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._close_all(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- inside the proxy's loop ------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _close_all(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()

    def should_drop(self) -> bool:
        """Count a Produce request and decide whether to drop its connection."""
        self.stats.produce_requests += 1
        if not self.faults_enabled:
            return False
        if self.drop_every and self.stats.produce_requests % self.drop_every == 0:
            return True
        return self.drop_rate > 0 and self._rng.random() < self.drop_rate

    async def _accept(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        if self._active >= self.max_connections:
            cwriter.close()
            return
        self._active += 1
        self.stats.connections += 1
        self._writers.add(cwriter)
        uwriter: asyncio.StreamWriter | None = None
        try:
            try:
                ureader, uwriter = await asyncio.wait_for(
                    asyncio.open_connection(*self.upstream), 5
                )
            except (OSError, TimeoutError):
                self.stats.upstream_failures += 1
                return
            self._writers.add(uwriter)
            await _Relay(self, creader, cwriter, ureader, uwriter).run()
        finally:
            self._active -= 1
            for w in (cwriter, uwriter):
                if w is not None:
                    self._writers.discard(w)
                    w.close()


class _Relay:
    """One client connection and its broker connection."""

    def __init__(
        self,
        proxy: FaultProxy,
        creader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        ureader: asyncio.StreamReader,
        uwriter: asyncio.StreamWriter,
    ) -> None:
        self.proxy = proxy
        self.creader, self.cwriter = creader, cwriter
        self.ureader, self.uwriter = ureader, uwriter
        self.api_keys: dict[int, int] = {}  # correlation id -> api key, in flight
        self.doomed: int | None = None
        self.doomed_answered = asyncio.Event()

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self._requests()),
            asyncio.create_task(self._responses()),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read_frame(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            head = await reader.readexactly(4)
            (size,) = struct.unpack(">i", head)
            if size < 0 or size > self.proxy.max_frame:
                return None
            return head + await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            return None

    async def _requests(self) -> None:
        while True:
            frame = await self._read_frame(self.creader)
            if frame is None:
                return
            doom = False
            if len(frame) >= 12:
                api_key, _version, correlation = struct.unpack_from(">hhi", frame, 4)
                self.api_keys[correlation] = api_key
                if api_key == PRODUCE and self.proxy.should_drop():
                    doom, self.doomed = True, correlation
            try:
                self.uwriter.write(frame)
                await self.uwriter.drain()
            except (ConnectionError, OSError):
                return
            if doom:  # read nothing more; close once the broker has answered
                try:
                    await asyncio.wait_for(self.doomed_answered.wait(), self.proxy.response_wait)
                except TimeoutError:
                    pass
                return

    async def _responses(self) -> None:
        while True:
            frame = await self._read_frame(self.ureader)
            if frame is None or len(frame) < 8:
                return
            (correlation,) = struct.unpack_from(">i", frame, 4)
            api_key = self.api_keys.pop(correlation, None)
            if correlation == self.doomed:
                self.proxy.stats.dropped += 1
                self.doomed_answered.set()
                return
            if api_key == PRODUCE and self.proxy.swallow_responses:
                self.proxy.stats.swallowed += 1
                continue
            try:
                self.cwriter.write(frame)
                await self.cwriter.drain()
            except (ConnectionError, OSError):
                return
