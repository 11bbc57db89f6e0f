"""The producer's sender task: drains ready batches into Produce requests per broker.

One asyncio task loops: expire batches older than ``delivery.timeout.ms``, ask the
accumulator which partitions are ready, group them by leader, and for each broker, while
it has fewer than ``max.in.flight.requests.per.connection`` requests outstanding, drain
one batch per ready partition (up to ``max.request.size``) into a Produce request, so
requests to a broker are pipelined. A request goes out at once on an open connection
(`BrokerConnection.send_encoded`, the body encoded by `wire.encode_produce` around the
batches' bytes, which are not copied) and its response is handled in a callback; only
opening a connection (or, with acks=0, waiting for the socket to drain) takes a task.

Responses: success completes every record's token with its offset (`completion`); a retriable error
puts the batch back at the front of its queue after ``retry.backoff.ms`` while
``retries`` and ``delivery.timeout.ms`` allow (refreshing metadata first for
leadership errors); anything else fails the batch's records.

Ordering: with ``max.in.flight.requests.per.connection=1`` a partition is *muted*
while a batch of it is in flight, so retries cannot reorder records. With more in
flight and no idempotence a retried batch can land after a later one, exactly as in
Kafka.

Idempotence (``enable.idempotence``, see `idempotence` for the rules): before anything
is sent, and again whenever the `IdempotenceManager` asks for a new producer id (once
no request is in flight), a task sends InitProducerId, retrying retriable errors
(`producer_id`). The
manager gates and stamps what the accumulator drains and judges idempotence errors in
responses; after a fatal one every queued record fails with it.

Transactions (`txn_manager`): Produce requests carry ``transactional.id``, at most
`produce_version_max` (11 under transaction version 1: v12+ would make the broker add
partitions implicitly); `before_drain` runs at each pass (it starts AddPartitionsToTxn
for new partitions), `on_failed` hears of every batch that fails for good, and
`drop_unsent` fails what is queued without stopping the sender (an abort).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.client.config import ProducerConfig
from tidegate.client.errors import KafkaConnectionError, KafkaTimeoutError, fatal_error
from tidegate.client.metadata import REFRESH_ERRORS, ZERO_UUID, MetadataClient
from tidegate.client.net import BrokerConnection, NetworkClient
from tidegate.client.producer.accumulator import ProducerBatch, RecordAccumulator
from tidegate.client.producer.completion import Completion, complete_tokens, fail_tokens
from tidegate.client.producer.idempotence import IdempotenceManager, Verdict
from tidegate.client.producer.producer_id import init_producer_id
from tidegate.client.producer.wire import TopicData, encode_produce
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError, error_for_code
from tidegate.protocol.messages import ms

__all__ = ["Completion", "Sender"]

log = logging.getLogger("tidegate.client.producer")

PRODUCE = 0


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Sender:
    """See the module docstring."""

    def __init__(self, config: ProducerConfig, acc: RecordAccumulator[Completion],
                 net: NetworkClient, metadata: MetadataClient,
                 on_batch_done: Callable[[ProducerBatch[Completion]], None],
                 idempotence: IdempotenceManager | None = None) -> None:
        self.config = config
        self.idem = idempotence
        self._init: asyncio.Task[None] | None = None
        self.acc = acc
        self.net = net
        self.metadata = metadata
        self._on_batch_done = on_batch_done
        # The run loop's wait: a future that `wakeup` completes (see `_run`).
        self._waiter: asyncio.Future[None] | None = None
        self._woken = False
        self._in_flight: dict[int, int] = {}
        # Batches of the requests in flight, by request number (failed by `abort`).
        self._requests: dict[int, list[ProducerBatch[Completion]]] = {}
        self._request_no = 0
        self._aborted: BaseException | None = None
        self._muted: set[TopicPartition] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._refresh: asyncio.Task[Any] | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        # Transactions (see the module docstring).
        self.transactional_id: str | None = None
        self.produce_version_max = 13
        self.before_drain: Callable[[], None] | None = None
        self.on_failed: Callable[[ProducerBatch[Completion], BaseException], None] | None = None
        self.on_sent: Callable[[list[ProducerBatch[Completion]]], None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def wakeup(self) -> None:
        if not self._woken:
            self._woken = True
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    @property
    def in_flight(self) -> int:
        return sum(self._in_flight.values())

    async def stop(self) -> None:
        """Return once everything queued has been sent and answered (or failed)."""
        self._stopping = True
        self.wakeup()
        if self._task is not None:
            await self._task

    async def abort(self, exc: BaseException) -> None:
        """Fail everything queued and in flight; stop the task."""
        self._aborted = exc
        for batch in self.acc.abort_all():
            self._fail(batch, exc)
        for batches in list(self._requests.values()):
            for batch in batches:
                if not batch.done:
                    self._fail(batch, exc)
        for task in list(self._tasks):
            task.cancel()
        if self._init is not None:
            self._init.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def drop_unsent(self, exc: BaseException) -> int:
        """Fail every queued (unsent) batch with `exc`; return how many."""
        batches = self.acc.abort_all()
        for batch in batches:
            self._fail(batch, exc)
        return len(batches)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._woken = False
                timeout = self._run_once()
                # In-flight counts drop (in `_finish_request`) before the wakeup.
                if self._stopping and not self.acc.has_unsent() and self.in_flight == 0:
                    break
                if self._woken:
                    await asyncio.sleep(0)  # woken while sending: look again, after others
                    continue
                waiter = self._waiter = loop.create_future()
                timer = None if timeout is None else \
                    loop.call_later(timeout, _set_done, waiter)
                try:
                    await waiter
                finally:
                    self._waiter = None
                    if timer is not None:
                        timer.cancel()
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here would hang every send(): fail loudly instead
            log.exception("producer sender task crashed")
            for batch in self.acc.abort_all():
                self._fail(batch, KafkaError("the producer's sender crashed; see the log"))
            raise

    def _run_once(self) -> float | None:
        """Send what is ready; return seconds until there may be more (None: wait for
        a wakeup)."""
        now = _now_ms()
        cfg = self.config
        acc = self.acc
        for batch in acc.expired(now, cfg.delivery_timeout_ms):
            self._fail(batch, self._expiry_error(batch, now))
        idem = self.idem
        if idem is not None:
            if idem.fatal is not None:
                for batch in acc.abort_all():
                    self._fail(batch, idem.fatal)
            elif idem.needs_producer_id and self.in_flight == 0 and acc.has_unsent() \
                    and (self._init is None or self._init.done()):
                self._init = asyncio.get_running_loop().create_task(self._init_producer_id())
        if self.before_drain is not None:
            self.before_drain()
        self._maybe_refresh_metadata()
        ready, next_ms = acc.ready(now, self._muted)
        by_node: dict[int, list[TopicPartition]] = {}
        unknown_leader = False
        cache = self.metadata.cache
        for tp in ready:
            leader = cache.leader_for(tp)
            if leader is None:
                unknown_leader = True
                continue
            by_node.setdefault(leader, []).append(tp)
        if unknown_leader:
            cache.request_update()
            self._maybe_refresh_metadata()
            next_ms = min(next_ms or cfg.retry_backoff_ms, cfg.retry_backoff_ms)
        max_in_flight = cfg.max_in_flight_requests_per_connection
        for node, tps in by_node.items():
            # Fill the pipeline: requests while the broker may take more and partitions
            # have ready batches (each request: one batch per partition).
            while self._in_flight.get(node, 0) < max_in_flight:
                batches = acc.drain(tps, cfg.max_request_size, now, idem)
                if not batches:
                    break
                self._send(node, batches)
                tps = acc.ready_among(tps, now, self._muted)
                if not tps:
                    break
        if next_ms is None:
            # Nothing is waiting; still wake up for delivery timeouts of queued batches.
            return None if not acc.has_unsent() else cfg.retry_backoff_ms / 1000
        return max(next_ms, 1) / 1000

    def _send(self, node: int, batches: list[ProducerBatch[Completion]]) -> None:
        """Send one Produce request of `batches` to `node`; its outcome comes to
        `_finish_request`."""
        for b in batches:
            b.attempts += 1
        if self.on_sent is not None:
            self.on_sent(batches)
        if self.config.max_in_flight_requests_per_connection == 1:
            self._muted.update(b.tp for b in batches)
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        self._request_no += 1
        no = self._request_no
        self._requests[no] = batches
        conn = self.net.connection_if_open(node)
        if conn is None:
            task = asyncio.get_running_loop().create_task(self._connect_and_send(node, no))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._send_on(conn, node, no)

    async def _connect_and_send(self, node: int, no: int) -> None:
        try:
            conn = await self.net.connect(node)
        except BaseException as e:
            self._finish_request(node, no, None, e)
            if not isinstance(e, Exception):
                raise
            return
        self._send_on(conn, node, no)

    def _send_on(self, conn: BrokerConnection, node: int, no: int) -> None:
        cfg = self.config
        acks0 = cfg.acks == 0
        try:
            version = min(conn.version(PRODUCE), self.produce_version_max)
            body = encode_produce(version, cfg.acks, cfg.request_timeout_ms,
                                  self._topic_data(self._requests[no]), self.transactional_id)
            fut = conn.send_encoded(PRODUCE, version, body, expect_response=not acks0)
        except Exception as e:
            self._finish_request(node, no, None, e)
            return
        if fut is not None:
            fut.add_done_callback(functools.partial(self._on_response, node, no))
        elif not conn.write_buffered():
            self._finish_request(node, no, None, None)  # acks=0: written is done
        else:  # acks=0 and the socket is behind: done once it caught up (back-pressure)
            task = asyncio.get_running_loop().create_task(self._drain(conn, node, no))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _drain(self, conn: BrokerConnection, node: int, no: int) -> None:
        try:
            await conn.drain()
        except BaseException as e:
            self._finish_request(node, no, None, e)
            if not isinstance(e, Exception):
                raise
            return
        self._finish_request(node, no, None, None)

    def _on_response(self, node: int, no: int, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            self._finish_request(node, no, None, KafkaConnectionError("request cancelled"))
        elif (exc := fut.exception()) is not None:
            self._finish_request(node, no, None, exc)
        else:
            self._finish_request(node, no, fut.result(), None)

    def _finish_request(self, node: int, no: int, resp: Any,
                        exc: BaseException | None) -> None:
        """A request's outcome: `resp` (None with acks=0) or `exc`."""
        sent = self._requests.pop(no, [])
        batches = [b for b in sent if not b.done]
        try:
            if not batches:
                pass
            elif self._aborted is not None:
                for b in batches:
                    self._fail(b, self._aborted)
            elif exc is None:
                if resp is None:
                    for b in batches:
                        self._complete(b, -1, -1)
                else:
                    self._handle_response(batches, resp)
            elif isinstance(exc, KafkaError):
                self.metadata.cache.request_update()
                for b in batches:
                    if not b.done:
                        self._retry_or_fail(b, exc)
            else:
                if isinstance(exc, Exception):  # unexpected: fail, leave no future hanging
                    log.error("produce request failed unexpectedly", exc_info=exc)
                for b in batches:
                    if not b.done:
                        self._fail(b, exc)
        except Exception as e:
            log.exception("handling a produce response failed unexpectedly")
            for b in batches:
                if not b.done:
                    self._fail(b, e)
        finally:
            self._in_flight[node] -= 1
            if self._muted:
                for b in sent:
                    self._muted.discard(b.tp)
            self.wakeup()

    def _maybe_refresh_metadata(self) -> None:
        if self._refresh is not None and not self._refresh.done():
            return
        if self.metadata.cache.needs_update(_now_ms()) and self.metadata.tracked:
            self._refresh = asyncio.get_running_loop().create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        try:
            await self.metadata.refresh()
        except KafkaError as e:
            log.debug("metadata refresh failed: %s", e)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self.wakeup()

    async def _init_producer_id(self) -> None:
        """`init_producer_id` (producer_id.py), then a look at what can be sent."""
        assert self.idem is not None
        try:
            if not await init_producer_id(self.config, self.net, self.acc, self.idem):
                self.idem = None  # the broker cannot: producing without idempotence
        finally:
            self.wakeup()

    def _expiry_error(self, batch: ProducerBatch[Completion], now: int) -> KafkaTimeoutError:
        return KafkaTimeoutError(
            f"expiring {len(batch)} record(s) for {batch.tp.topic}-{batch.tp.partition}: "
            f"{now - batch.created_ms} ms have passed since batch creation "
            f"(delivery.timeout.ms={self.config.delivery_timeout_ms})")

    def _topic_data(self, batches: list[ProducerBatch[Completion]]) -> list[TopicData]:
        """The request's batches by topic, for `encode_produce`."""
        topics: dict[str, list[tuple[int, bytes]]] = {}
        for b in batches:
            assert b.payload is not None
            topics.setdefault(b.tp.topic, []).append((b.tp.partition, b.payload))
        topic_id = self.metadata.cache.topic_id
        return [(t, topic_id(t), parts) for t, parts in topics.items()]

    def _handle_response(self, batches: list[ProducerBatch[Completion]], resp: Any) -> None:
        names = self.metadata.cache.names_by_id
        results: dict[TopicPartition, Any] = {}
        for t in resp.responses:
            name = getattr(t, "name", None) or names.get(getattr(t, "topic_id", ZERO_UUID), "")
            for p in t.partition_responses:
                results[TopicPartition(name, int(p.index))] = p
        for b in batches:
            p = results.get(b.tp)
            if p is None:
                self._retry_or_fail(b, KafkaError(
                    f"the produce response has no result for {b.tp.topic}-{b.tp.partition}",
                    code=ErrorCode.unknown_server_error))
                continue
            code = p.error_code
            if code == ErrorCode.none:
                lat = getattr(p, "log_append_time", None)
                self._complete(b, int(p.base_offset), -1 if lat is None else ms(lat))
                continue
            if code == ErrorCode.duplicate_sequence_number and self.idem is not None:
                self._complete(b, -1, -1)  # written before; its offset is unknown (as Java)
                continue
            if code in REFRESH_ERRORS:
                self.metadata.cache.request_update()
            message = getattr(p, "error_message", None) or ""
            err = error_for_code(
                code.value, f"{code.name.upper()} producing to {b.tp.topic}-{b.tp.partition}"
                + (f": {message}" if message else ""))
            verdict = Verdict.FAIL if self.idem is None else self.idem.on_error(b, code)
            if verdict == Verdict.FATAL:
                fatal = fatal_error(code, f"{err}; the producer cannot continue: close it "
                                    "and create a new one")
                assert self.idem is not None
                self.idem.set_fatal(fatal)
                self._fail(b, self.idem.fatal or fatal)
            elif verdict == Verdict.RETRY:
                self._retry(b, err)
            else:
                self._retry_or_fail(b, err)

    def _retry_or_fail(self, batch: ProducerBatch[Completion], exc: KafkaError) -> None:
        if not exc.retriable or batch.attempts > self.config.retries:
            self._fail(batch, exc)
        else:
            self._retry(batch, exc)

    def _retry(self, batch: ProducerBatch[Completion], exc: KafkaError) -> None:
        now = _now_ms()
        if now + self.config.retry_backoff_ms >= batch.created_ms + \
                self.config.delivery_timeout_ms:
            self._fail(batch, self._expiry_error(batch, now))
            return
        log.debug("retrying %r after %s (attempt %d)", batch, exc, batch.attempts)
        if self.idem is not None:
            if self.idem.fatal is not None:
                self._fail(batch, self.idem.fatal)
                return
            self.idem.on_retry(batch)
        self.acc.reenqueue(batch, now)

    def _complete(self, batch: ProducerBatch[Completion], base_offset: int,
                  log_append_ms: int) -> None:
        complete_tokens(batch, base_offset, log_append_ms)
        if self.idem is not None:
            self.idem.on_complete(batch)
        self._finish(batch)

    def _fail(self, batch: ProducerBatch[Completion], exc: BaseException) -> None:
        fail_tokens(batch, exc)
        if self.idem is not None:
            self.idem.on_fail(batch)
        if self.on_failed is not None:
            self.on_failed(batch, exc)
        self._finish(batch)

    def _finish(self, batch: ProducerBatch[Completion]) -> None:
        batch.done = True
        self.acc.deallocate(batch)
        self._on_batch_done(batch)
