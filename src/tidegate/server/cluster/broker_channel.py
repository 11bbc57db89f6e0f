"""Batched requests to other brokers: per destination one queue, one sender, one request
in flight.

Kafka's transaction marker channel (`TransactionMarkerChannelManager`) and its KIP-890
`AddPartitionsToTxnManager` both work this way, and so do their Tidegate counterparts
(server/cluster/marker_channel.py, server/cluster/txn_verify.py), through this one
mechanism. Callers hand in small items (one marker for some partitions, one partition to
verify) with `send(broker_id, item)`; the destination's sender takes everything queued
and sends it as ONE request; what arrives while that request is in flight waits and
leaves together in the next. Under load requests get bigger, not more numerous; idle, an
item leaves at once (no linger).

What a request looks like is a `RequestKind`:

- `joins(batch, item)`: whether the item may join the batch being built. Requests key
  their entries (WriteTxnMarkers by producer id, AddPartitionsToTxn by transactional
  id), so an item whose key is already taken by a different entry waits for the next
  request instead of being merged into it;
- `request(items)`: the api key, version and body to send;
- `results(items, response)`: one result per item, in order;
- `failed(item, code)`: the result when there was no answer — no endpoint for the
  broker or a connection failure (NETWORK_EXCEPTION), no answer in time
  (REQUEST_TIMED_OUT), an unreadable answer (UNKNOWN_SERVER_ERROR). The channel never
  retries by itself: its callers retry with their own backoff (and may by then send to
  another broker, metadata having moved).

Failures are logged once per episode — the first failure after a success, and once the
destination answers again — not per item: a dead broker with many markers pending gives
two lines. A caller cancelled while its item waits is skipped; one cancelled while its
request is in flight just does not get the answer. The connection follows
`endpoint(broker_id)`: a broker registered again at a new address is reached there. A
connection the other broker closed since the last request (it restarted, or closed it
as idle) is replaced and the request sent once more at once, without a failure; one
idle for 9 minutes is replaced before use (brokers close theirs after 10).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kio.static.protocol import Entity

from tidegate.common.errors import ErrorCode
from tidegate.server.cluster.inter_broker import InterBrokerConnection, InterBrokerError

__all__ = ["BrokerChannel", "Endpoint", "RequestKind"]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
Endpoint = Callable[[int], "tuple[str, int] | None"]

# A request carries at most this many items; the rest leave in the next one.
MAX_BATCH = 500
# A connection idle this long is replaced before its next request: brokers close
# connections idle for connections.max.idle.ms (10 min); Kafka's clients give up theirs
# after 9.
IDLE_CLOSE_S = 540.0


class RequestKind(ABC, Generic[T, R]):
    """How items of one kind become a request and its answer results (module docstring)."""

    name = "requests"  # for log lines: "markers", "verifications"

    def joins(self, batch: Sequence[T], item: T) -> bool:
        return True

    @abstractmethod
    def request(self, items: Sequence[T]) -> tuple[int, int, Entity]: ...

    @abstractmethod
    def results(self, items: Sequence[T], response: Any) -> list[R]: ...

    @abstractmethod
    def failed(self, item: T, code: ErrorCode) -> R: ...


@dataclass(eq=False)
class _Pending(Generic[T, R]):
    item: T
    future: asyncio.Future[R]


class _Destination(Generic[T, R]):
    """One destination broker: its queue, its sender task and its connection."""

    def __init__(self, channel: BrokerChannel[T, R], broker_id: int) -> None:
        self.channel = channel
        self.broker_id = broker_id
        self.queue: deque[_Pending[T, R]] = deque()
        self.wake = asyncio.Event()
        self.conn: InterBrokerConnection | None = None
        self.failing = False  # an episode of failures is under way (logged once)
        self.requests = 0  # sent, answered or not (tests and logs)
        self.in_flight: list[_Pending[T, R]] = []
        self.last_used = 0.0  # loop time of the last request
        self.task = asyncio.create_task(
            self._run(), name=f"{channel.client_id}-to-broker-{broker_id}")

    async def _run(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                self.wake.clear()
                await self.wake.wait()
                continue
            self.in_flight = batch
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug in a kind: answer, keep the sender alive
                log.exception("%s to broker %d failed", self.channel.kind.name,
                              self.broker_id)
                self._fail(batch, ErrorCode.unknown_server_error, repr(e))
            self.in_flight = []

    def _take(self) -> list[_Pending[T, R]]:
        """The next request's items, oldest first; the others keep their order."""
        kind = self.channel.kind
        batch: list[_Pending[T, R]] = []
        items: list[T] = []
        keep: deque[_Pending[T, R]] = deque()
        while self.queue:
            p = self.queue.popleft()
            if p.future.done():
                continue  # its caller was cancelled
            if len(batch) < MAX_BATCH and kind.joins(items, p.item):
                batch.append(p)
                items.append(p.item)
            else:
                keep.append(p)
        self.queue = keep
        return batch

    async def _connection(self) -> InterBrokerConnection | None:
        ep = self.channel.endpoint(self.broker_id)
        conn = self.conn
        if ep is None:
            return None
        if conn is None or (conn.host, conn.port) != ep:
            if conn is not None:
                await conn.close()  # the broker registered again elsewhere
            conn = self.conn = InterBrokerConnection(
                ep[0], ep[1], self.channel.client_id, timeout=self.channel.timeout_s)
        return conn

    async def _send(self, batch: list[_Pending[T, R]]) -> None:
        kind = self.channel.kind
        conn = await self._connection()
        if conn is None:
            self._fail(batch, ErrorCode.network_exception, "the broker is not registered")
            return
        items = [p.item for p in batch]
        api_key, version, body = kind.request(items)
        loop = asyncio.get_running_loop()
        if conn.connected and loop.time() - self.last_used > IDLE_CLOSE_S:
            await conn.close()  # the other broker closes idle connections itself
        for attempt in (1, 2):
            reused = conn.connected
            self.requests += 1
            try:
                response = await conn.request(api_key, version, body,
                                              timeout=self.channel.timeout_s)
                break
            except InterBrokerError as e:
                timed_out = isinstance(e.__cause__, TimeoutError)
                if reused and not timed_out and attempt == 1:
                    # closed by the other side since our last request (it restarted, or
                    # dropped us): once more on a new connection, as a client would.
                    # Both kinds are safe to repeat (a repeated marker ends nothing twice)
                    continue
                self._fail(batch, ErrorCode.request_timed_out if timed_out
                           else ErrorCode.network_exception, str(e))
                return
            finally:
                self.last_used = loop.time()
        results = kind.results(items, response)
        if self.failing:
            self.failing = False
            log.info("%s to broker %d: answered again", kind.name, self.broker_id)
        for p, result in zip(batch, results, strict=True):
            if not p.future.done():
                p.future.set_result(result)

    def _fail(self, batch: list[_Pending[T, R]], code: ErrorCode, why: str) -> None:
        if not self.failing:
            self.failing = True
            log.warning("%s to broker %d not delivered (%s): %s; retried by their senders, "
                        "quietly until it answers again", self.channel.kind.name,
                        self.broker_id, code.name.upper(), why)
        for p in batch:
            if not p.future.done():
                p.future.set_result(self.channel.kind.failed(p.item, code))

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        pending = self.in_flight + list(self.queue)
        self.in_flight, self.queue = [], deque()
        for p in pending:
            if not p.future.done():
                p.future.set_result(self.channel.kind.failed(p.item,
                                                             ErrorCode.network_exception))
        if self.conn is not None:
            await self.conn.close()


class BrokerChannel(Generic[T, R]):
    """Items of one `RequestKind` to any broker, batched per destination."""

    def __init__(self, kind: RequestKind[T, R], endpoint: Endpoint, client_id: str,
                 *, timeout_s: float = 30.0) -> None:
        self.kind = kind
        self.endpoint = endpoint
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.destinations: dict[int, _Destination[T, R]] = {}
        self._stopped = False

    async def send(self, broker_id: int, item: T) -> R:
        """Queue `item` for `broker_id` and return its result once the request carrying
        it is answered (or failed: see `RequestKind.failed`)."""
        if self._stopped:
            return self.kind.failed(item, ErrorCode.network_exception)
        dest = self.destinations.get(broker_id)
        if dest is None:
            dest = self.destinations[broker_id] = _Destination(self, broker_id)
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        dest.queue.append(_Pending(item, fut))
        dest.wake.set()
        return await fut

    def requests_sent(self, broker_id: int) -> int:
        dest = self.destinations.get(broker_id)
        return 0 if dest is None else dest.requests

    async def stop(self) -> None:
        """Stop every sender; items queued or in flight get the NETWORK_EXCEPTION result."""
        self._stopped = True
        for dest in list(self.destinations.values()):
            await dest.stop()
        self.destinations.clear()
