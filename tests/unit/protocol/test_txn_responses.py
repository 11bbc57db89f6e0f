"""The hand-written AddPartitionsToTxn and EndTxn responses (protocol/txn_responses.py)
against kio: the same bytes for every version the broker serves on random responses, kio
decodes them back, and the request metrics count the same error codes."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from tests.unit.protocol._same_as_kio import assert_same_as_kio

from tidegate.protocol import txn_responses as tr
from tidegate.protocol.messages import build, encode
from tidegate.protocol.messages import response_class as kio_response_class
from tidegate.server.dispatch import default_dispatcher
from tidegate.server.quotas.throttle import with_throttle

VERSIONS = range(tr.MIN_VERSION, tr.MAX_VERSION + 1)
ADD, END = tr.ADD_PARTITIONS_KEY, tr.END_TXN_KEY
TEXT = st.text(max_size=10)
CODES = st.sampled_from(list(ErrorCode))

topic_results = st.lists(st.tuples(TEXT, st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), CODES), max_size=4)), max_size=3)
responses = st.fixed_dictionaries({
    "throttle_ms": st.integers(0, 2**31 - 1),
    "error_code": CODES,
    "topics": topic_results,
    "txns": st.lists(st.tuples(TEXT, topic_results), max_size=3),
    "producer_id": st.integers(-(2**63), 2**63 - 1),
    "producer_epoch": st.integers(-(2**15), 2**15 - 1),
})


def _kio_topics(ts: Any) -> list[dict[str, Any]]:
    return [{"name": n, "results_by_partition": [
        {"partition_index": i, "partition_error_code": c} for i, c in ps]} for n, ps in ts]


def _hand_topics(ts: Any) -> tuple[tr.AddPartitionsToTxnTopicResult, ...]:
    return tuple(tr.AddPartitionsToTxnTopicResult(n, tuple(
        tr.AddPartitionsToTxnPartitionResult(i, c) for i, c in ps)) for n, ps in ts)


def _kio(key: int, v: int, d: dict[str, Any]) -> Any:
    fields: dict[str, Any] = {"throttle_time": d["throttle_ms"], "error_code": d["error_code"]}
    if key == END:
        fields.update(producer_id=d["producer_id"], producer_epoch=d["producer_epoch"])
    else:
        fields.update(results_by_topic_v3_and_below=_kio_topics(d["topics"]),
                      results_by_transaction=[{"transactional_id": t,
                                               "topic_results": _kio_topics(ts)}
                                              for t, ts in d["txns"]])
    return build(kio_response_class(key, v), fields)


def _hand(key: int, v: int, d: dict[str, Any]) -> Any:
    throttle = datetime.timedelta(milliseconds=d["throttle_ms"])
    if key == END:
        return tr.end_txn_response(v, throttle_time=throttle, error_code=d["error_code"],
                                   producer_id=d["producer_id"],
                                   producer_epoch=d["producer_epoch"])
    return tr.add_partitions_response(
        v, throttle_time=throttle, error_code=d["error_code"],
        results_by_topic_v3_and_below=_hand_topics(d["topics"]),
        results_by_transaction=tuple(tr.AddPartitionsToTxnResult(t, _hand_topics(ts))
                                     for t, ts in d["txns"]))


def test_the_classes_cover_every_served_version() -> None:
    apis = default_dispatcher().apis
    for key, make in ((ADD, tr.add_partitions_response), (END, tr.end_txn_response)):
        assert (apis[key].min_version, apis[key].max_version) == (tr.MIN_VERSION,
                                                                  tr.MAX_VERSION)
        for v in VERSIONS:
            r: Any = make(v)
            assert (r.__version__, r.__flexible__, r.__api_key__) == (
                v, kio_response_class(key, v).__flexible__, key)


@settings(max_examples=60, deadline=None)
@given(data=responses)
def test_same_bytes_and_error_counts_as_kio(data: dict[str, Any]) -> None:
    for key in (ADD, END):
        for v in VERSIONS:
            assert_same_as_kio(_hand(key, v, data), _kio(key, v, data),
                               kio_response_class(key, v), f"{key} v{v}")


def test_throttle_is_replaced_as_on_kio_responses() -> None:
    for v in VERSIONS:
        for r in (tr.end_txn_response(v), tr.add_partitions_response(v)):
            throttled = with_throttle(r, 250)
            assert type(throttled) is type(r) and dataclasses.is_dataclass(throttled)
            assert throttled.throttle_time == datetime.timedelta(milliseconds=250)
            assert encode(throttled)[:4] == (250).to_bytes(4, "big")


def test_common_case_bytes() -> None:
    """EndTxn v5 and AddPartitionsToTxn v3 with one partition, spelled out."""
    end = tr.end_txn_response(5, producer_id=7, producer_epoch=2)
    assert encode(end) == bytes.fromhex("00000000" "0000" "0000000000000007" "0002" "00")
    add = tr.add_partitions_response(3, results_by_topic_v3_and_below=_hand_topics(
        [("t", [(1, ErrorCode.none)])]))
    assert encode(add) == bytes.fromhex("00000000" "02" "0274" "02" "00000001" "0000" "00"
                                        "00" "00")
