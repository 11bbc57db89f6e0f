"""Counters kept in the request path: requests, errors, times and bytes per API and topic.

`RequestMetrics.run` wraps every handler call (one call site in server/listener.py) when
the HTTP listener is on; with `http.listeners` empty the broker has no `RequestMetrics`
and the listener calls handlers directly, so metrics cost nothing then. Everything here
is plain integer and float arithmetic on dicts and lists owned by the event loop: no
locks, no prometheus-client objects (their per-observation locks cost more than the
counting itself); the scrape (server/metrics/collector.py) turns them into metric
families when Prometheus asks.

What is counted, as Kafka counts it:

- per API and version, requests (Kafka's `RequestMetrics.RequestsPerSec`);
- per API and error code, the error codes of each response (Kafka's `ErrorsPerSec`, from
  the response's `errorCounts()`: every `error_code` field of the response, NONE
  included);
- per API, TotalTimeMs / RequestQueueTimeMs / LocalTimeMs as histograms in milliseconds.
  The queue time is the time a request waited behind the earlier requests of its
  connection (server/listener.py), the local time its handler's; their sum is the total
  (Tidegate has no separate network threads, so no response-queue or send time);
- per topic, `BytesInPerSec` / `MessagesInPerSec` for the record batches of Produce
  partitions answered without error, `BytesOutPerSec` for the records of consumer
  fetches and `ReplicationBytesOutPerSec` for follower fetches.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
import time
import typing
from bisect import bisect_left
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidegate.server.broker import Broker
    from tidegate.server.context import RequestContext

# Latency buckets in milliseconds (upper bounds; +Inf is implicit).
TIME_BUCKETS_MS: tuple[float, ...] = (
    0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
)

log = logging.getLogger(__name__)

_PRODUCE, _FETCH, _END_TXN = 0, 1, 26
_BATCH_HEADER = 61  # RecordBatch v2: baseOffset(8) length(4) ... recordCount at 57
_LENGTH = struct.Struct(">i")


class Histogram:
    """Counts per bucket (the last one is +Inf) and the sum of what was observed."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = TIME_BUCKETS_MS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """(upper bound, cumulative count) pairs as Prometheus histograms want them."""
        out, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
        return out


class ApiStats:
    __slots__ = ("errors", "local", "queue", "requests", "total")

    def __init__(self) -> None:
        self.requests: dict[int, int] = {}  # version -> requests
        self.errors: dict[int, int] = {}  # error code -> occurrences in responses
        self.total = Histogram()
        self.queue = Histogram()
        self.local = Histogram()


class TopicStats:
    __slots__ = ("bytes_in", "bytes_out", "messages_in", "replication_bytes_out")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0
        self.replication_bytes_out = 0


class RequestMetrics:
    def __init__(self, topic_name: Callable[[Any], str | None]) -> None:
        # `topic_name(topic_id)`: a topic's name from its id (Fetch v13+ responses
        # carry ids only); cached here, the lookup scans every topic
        self._topic_name = topic_name
        self._names_by_id: dict[Any, str] = {}
        self.apis: dict[int, ApiStats] = {}
        self.topics: dict[str, TopicStats] = {}
        self.end_txn = {True: 0, False: 0}  # EndTxn answered NONE: committed -> count
        self._failed = False

    async def run(
        self,
        handler: Callable[[Broker, RequestContext, Any], Awaitable[Any]],
        broker: Broker,
        ctx: RequestContext,
        request: Any,
        arrived: float,
    ) -> Any:
        """Run `handler` and count the request; `arrived`: perf_counter() when the
        request was read (its queue time runs from there to now)."""
        start = time.perf_counter()
        # what a Produce carries is read now: the handler drops its records once they
        # are appended (protocol/produce_request.py's drop_records)
        produced = None
        if ctx.api_key == _PRODUCE:
            try:
                produced = _produce_sizes(request)
            except Exception:  # as below: counting never fails a request
                produced = None
        response = await handler(broker, ctx, request)
        end = time.perf_counter()
        try:
            self._count(ctx, request, response, arrived, start, end, produced)
        except Exception:  # a counting bug must never fail a request: logged once
            if not self._failed:
                self._failed = True
                log.exception("request metrics: cannot count a request of API %d",
                              ctx.api_key)
        return response

    def _count(self, ctx: RequestContext, request: Any, response: Any,
               arrived: float, start: float, end: float,
               produced: list[tuple[str, int, int, int]] | None = None) -> None:
        stats = self.apis.get(ctx.api_key)
        if stats is None:
            stats = self.apis[ctx.api_key] = ApiStats()
        stats.requests[ctx.api_version] = stats.requests.get(ctx.api_version, 0) + 1
        stats.queue.observe((start - arrived) * 1000.0)
        stats.local.observe((end - start) * 1000.0)
        stats.total.observe((end - arrived) * 1000.0)
        if response is not None:
            count_errors(response, stats.errors)
        if ctx.api_key == _PRODUCE:
            self._produced(produced or [], response)
        elif ctx.api_key == _FETCH and response is not None:
            self._fetched(request, response)
        elif ctx.api_key == _END_TXN and response is not None and not response.error_code:
            self.end_txn[bool(request.committed)] += 1

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def forget_topic(self, name: str) -> None:
        self.topics.pop(name, None)
        for tid, n in list(self._names_by_id.items()):
            if n == name:
                del self._names_by_id[tid]

    def _produced(self, produced: list[tuple[str, int, int, int]], response: Any) -> None:
        """Count `produced` ((topic, partition, bytes, records) from `_produce_sizes`)
        but for the partitions the response failed."""
        failed: set[tuple[str, int]] = set()
        if response is not None:  # acks=0 answers nothing: every partition counts
            for t in response.responses:
                for p in t.partition_responses:
                    if p.error_code:
                        failed.add((str(t.name), int(p.index)))
        for name, index, size, count in produced:
            if failed and (name, index) in failed:
                continue
            stats = self.topic(name)
            stats.bytes_in += size
            stats.messages_in += count

    def _fetched(self, request: Any, response: Any) -> None:
        state = getattr(request, "replica_state", None)
        replica = (int(state.replica_id) if state is not None
                   else int(getattr(request, "replica_id", -1))) >= 0
        for t in response.responses:
            size = 0
            for p in t.partitions:
                if p.records:
                    size += len(p.records)
            if not size:
                continue
            name = getattr(t, "topic", None) or self._name_of(getattr(t, "topic_id", None))
            if not name:
                continue
            stats = self.topic(str(name))
            if replica:
                stats.replication_bytes_out += size
            else:
                stats.bytes_out += size

    def _name_of(self, topic_id: Any) -> str | None:
        if topic_id is None:
            return None
        name = self._names_by_id.get(topic_id)
        if name is None:
            name = self._topic_name(topic_id)
            if name is not None:
                if len(self._names_by_id) > 100_000:
                    self._names_by_id.clear()
                self._names_by_id[topic_id] = name
        return name


def _produce_sizes(request: Any) -> list[tuple[str, int, int, int]]:
    """(topic, partition, bytes, records) of each partition of a Produce that has records."""
    return [(str(t.name), int(p.index), len(p.records), record_count(p.records))
            for t in request.topic_data for p in t.partition_data if p.records]


def record_count(records: bytes | memoryview) -> int:
    """Records in a run of RecordBatch v2 batches (from their headers; a torn or
    foreign tail counts nothing: the append refused it anyway)."""
    n, pos, end = 0, 0, len(records)
    while pos + _BATCH_HEADER <= end:
        (length,) = _LENGTH.unpack_from(records, pos + 8)
        n += _LENGTH.unpack_from(records, pos + 57)[0]
        if length <= 0:
            break
        pos += 12 + length
    return n


# -- error codes of a response (Kafka's AbstractResponse.errorCounts) -------------------

# class -> (names of its error_code fields, names of fields holding nested entities)
_PLANS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    plan = _PLANS.get(cls)
    if plan is not None:
        return plan
    _PLANS[cls] = ((), ())  # a recursive schema ends here while its plan is made
    errors, nested = [], []
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("kafka_type") == "error_code":
            errors.append(f.name)
            continue
        hint = hints.get(f.name)
        inner = _entity_of(hint)
        if inner is not None and any(_plan(inner)):
            nested.append(f.name)
    plan = (tuple(errors), tuple(nested))
    _PLANS[cls] = plan
    return plan


def _entity_of(hint: Any) -> type | None:
    """The kio entity class in `hint` (X, X | None or tuple[X, ...]), if any."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        found = _entity_of(arg)
        if found is not None:
            return found
    return None


def count_errors(entity: Any, counts: dict[int, int]) -> None:
    own = getattr(entity, "error_counts", None)
    if own is not None:  # a hand-written response (protocol/produce_response.py)
        own(counts)
        return
    errors, nested = _plan(type(entity))
    for name in errors:
        code = int(getattr(entity, name))
        counts[code] = counts.get(code, 0) + 1
    for name in nested:
        value = getattr(entity, name)
        if value is None:
            continue
        if isinstance(value, tuple):
            for item in value:
                count_errors(item, counts)
        else:
            count_errors(value, counts)
