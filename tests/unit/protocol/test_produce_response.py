"""The hand-written Produce response (protocol/produce_response.py) against kio: the same
bytes for every version the broker serves, on random responses; kio decodes them back."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from tidegate.protocol import produce_response as pr
from tidegate.protocol.messages import build, decode, encode
from tidegate.protocol.messages import response_class as kio_response_class
from tidegate.server.dispatch import default_dispatcher

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# kio carries LogAppendTimeMs as a datetime: -1 (none) or a time a datetime can hold
APPEND_TIME = st.one_of(st.just(-1), st.integers(0, 253_402_300_799_999))
TEXT = st.text(max_size=12)

partitions = st.fixed_dictionaries({
    "index": INT32,
    "error_code": st.sampled_from(list(ErrorCode)),
    "base_offset": INT64,
    "log_append_time": APPEND_TIME,
    "log_start_offset": INT64,
    "record_errors": st.lists(st.tuples(INT32, st.none() | TEXT), max_size=3),
    "error_message": st.none() | TEXT,
})
responses = st.fixed_dictionaries({
    "topics": st.lists(st.tuples(TEXT, st.lists(partitions, max_size=4)), max_size=3),
    "throttle_ms": st.integers(0, 2**31 - 1),
})


def _kio(version: int, data: dict[str, Any]) -> Any:
    return build(kio_response_class(0, version), {
        "responses": [
            {"name": name, "partition_responses": [
                {**p, "record_errors": [{"batch_index": i, "batch_index_error_message": m}
                                        for i, m in p["record_errors"]]} for p in parts]}
            for name, parts in data["topics"]],
        "throttle_time": data["throttle_ms"]})


def _hand(version: int, data: dict[str, Any]) -> pr.ProduceResponse:
    return pr.response_class(version)(
        tuple(pr.TopicProduceResponse(name, tuple(
            pr.PartitionProduceResponse(
                p["index"], p["error_code"], p["error_message"], p["base_offset"],
                p["log_append_time"], p["log_start_offset"],
                tuple(pr.RecordError(i, m) for i, m in p["record_errors"]))
            for p in parts)) for name, parts in data["topics"]),
        datetime.timedelta(milliseconds=data["throttle_ms"]))


def test_the_classes_cover_every_served_version() -> None:
    api = default_dispatcher().apis[0]
    assert (api.min_version, api.max_version) == (pr.MIN_VERSION, pr.MAX_VERSION)
    for v in range(pr.MIN_VERSION, pr.MAX_VERSION + 1):
        cls = pr.response_class(v)
        assert (cls.__version__, cls.__flexible__) == (v, kio_response_class(0, v).__flexible__)


@settings(max_examples=60, deadline=None)
@given(data=responses)
def test_same_bytes_as_kio_for_every_served_version(data: dict[str, Any]) -> None:
    for v in range(pr.MIN_VERSION, pr.MAX_VERSION + 1):
        raw = encode(_hand(v, data))
        assert raw == encode(_kio(v, data)), f"v{v}"
        decoded: Any = decode(kio_response_class(0, v), raw, strict=True)
        assert [len(t.partition_responses) for t in decoded.responses] == [
            len(parts) for _, parts in data["topics"]]


def test_common_case_bytes() -> None:
    """A v9 answer with one topic and one partition, spelled out."""
    ok = pr.PartitionProduceResponse(2, ErrorCode.none, None, 7, -1, 0)
    raw = encode(pr.response_class(9)((pr.TopicProduceResponse("t", (ok,)),)))
    assert raw == bytes.fromhex(
        "02" "02" "74" "02"  # 1 topic, name "t", 1 partition
        "00000002" "0000" "0000000000000007" "ffffffffffffffff" "0000000000000000"
        "01" "00" "00"  # no record errors, null message, no tags
        "00" "00000000" "00")  # topic tags, throttle, tags


@settings(max_examples=30, deadline=None)
@given(data=responses)
def test_request_metrics_count_the_same_errors_as_for_kio(data: dict[str, Any]) -> None:
    """The broker's request metrics (Kafka's errorCounts, NONE included) see the
    hand-written response's error codes as they see kio's."""
    from tidegate.server.metrics.requests import count_errors

    for v in (pr.MIN_VERSION, 9, pr.MAX_VERSION):
        hand: dict[int, int] = {}
        kio: dict[int, int] = {}
        count_errors(_hand(v, data), hand)
        count_errors(_kio(v, data), kio)
        assert hand == kio, f"v{v}"
