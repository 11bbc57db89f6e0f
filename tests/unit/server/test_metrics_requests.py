"""Request-path counters: records per batch, error codes per response, histograms."""

from __future__ import annotations

import asyncio
from typing import Any

from tidegate.protocol.messages import build, request_class, response_class
from tidegate.records.builder import build_batch
from tidegate.server.context import RequestContext
from tidegate.server.metrics.requests import (
    TIME_BUCKETS_MS,
    Histogram,
    RequestMetrics,
    count_errors,
    record_count,
)


def batch(n: int) -> bytes:
    return build_batch([(1_700_000_000_000, None, b"v%d" % i, ()) for i in range(n)])


def test_record_count_walks_batch_headers() -> None:
    assert record_count(batch(3) + batch(4)) == 7
    assert record_count(batch(2)[:40]) == 0  # a torn header counts nothing
    assert record_count(b"") == 0


def test_errors_are_counted_at_every_level_of_a_response() -> None:
    resp = build(response_class(0, 9), {"responses": [
        {"name": "a", "partition_responses": [{"index": 0, "error_code": 0},
                                              {"index": 1, "error_code": 6}]},
        {"name": "b", "partition_responses": [{"index": 0, "error_code": 6}]}]})
    counts: dict[int, int] = {}
    count_errors(resp, counts)
    assert counts == {0: 1, 6: 2}
    md = build(response_class(3, 12), {"topics": [{"name": "x", "error_code": 3,
                                                   "partitions": []}]})
    counts = {}
    count_errors(md, counts)
    assert counts == {3: 1}


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram()
    for v in (0.1, 3.0, 3.0, 20_000.0):
        h.observe(v)
    cum = dict(h.cumulative())
    assert cum["0.5"] == 1 and cum["5.0"] == 3 and cum["+Inf"] == 4
    assert len(cum) == len(TIME_BUCKETS_MS) + 1 and h.sum == 20_006.1


def test_produce_counts_only_partitions_answered_without_error() -> None:
    rm = RequestMetrics(lambda _id: None)
    req = build(request_class(0, 9), {"acks": -1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": batch(5)},
                                         {"index": 1, "records": batch(2)}]}]})
    resp = build(response_class(0, 9), {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0}, {"index": 1, "error_code": 6}]}]})

    async def handler(_b: Any, _c: Any, _r: Any) -> Any:
        return resp

    ctx = RequestContext(0, 9, 1, "c", "peer")
    out = asyncio.run(rm.run(handler, None, ctx, req, 0.0))  # type: ignore[arg-type]
    assert out is resp
    assert rm.topics["t"].messages_in == 5 and rm.topics["t"].bytes_in == len(batch(5))
    stats = rm.apis[0]
    assert stats.requests == {9: 1} and stats.errors == {0: 1, 6: 1}
    assert sum(stats.total.counts) == 1
    rm.forget_topic("t")
    assert "t" not in rm.topics


def test_fast_exposition_writes_what_prometheus_client_writes() -> None:
    from prometheus_client import CollectorRegistry, Counter, Gauge
    from prometheus_client import Histogram as PHist
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from tidegate.server.metrics.exposition import render

    reg = CollectorRegistry()
    c = Counter("reqs", "Requests\\ with a \n newline", ["api"], registry=reg)
    c.labels('Pro"du\\ce\n').inc(3)
    Gauge("size", "Size", registry=reg).set(1.5e20)
    h = PHist("lat", "Latency", registry=reg, buckets=(1.0, 2.0))
    h.observe(1.5)
    ours = render(reg).decode()
    theirs = generate_latest(reg).decode()
    # _created samples carry the time of the call: compare everything else
    strip = [line for line in theirs.splitlines() if "_created" not in line]
    assert [line for line in ours.splitlines() if "_created" not in line] == strip
    names = {s.name for f in text_string_to_metric_families(ours) for s in f.samples}
    assert {"reqs_total", "size", "lat_bucket", "lat_sum", "lat_count"} <= names


def test_produce_is_counted_when_the_handler_dropped_its_records() -> None:
    """The handler drops a hand-decoded request's records before it answers (they are
    views of the request's buffer): what it carried is read before the handler runs."""
    from tidegate.protocol import produce_request
    from tidegate.protocol.messages import encode

    rm = RequestMetrics(lambda _id: None)
    body = encode(build(request_class(0, 9), {"acks": -1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": batch(3)}]}]}))
    req, _ = produce_request.decode(memoryview(bytearray(body)), 0, 9)
    resp = build(response_class(0, 9), {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0}]}]})

    async def handler(_b: Any, _c: Any, r: Any) -> Any:
        produce_request.drop_records(r)
        return resp

    asyncio.run(rm.run(handler, None, RequestContext(0, 9, 1, "c", "peer"), req, 0.0))  # type: ignore[arg-type]
    assert req.topic_data[0].partition_data[0].records is None
    assert rm.topics["t"].messages_in == 3 and rm.topics["t"].bytes_in == len(batch(3))
