"""AddOffsetsToTxn and TxnOffsetCommit by hand (protocol/txn_offsets.py) against kio, for
every version the broker serves: requests decode to kio's values and garbled bodies are
refused by both or by neither; responses encode to kio's bytes and count the same error
codes for the request metrics."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from tests.unit.protocol._garbled import GARBLINGS, assert_both_or_neither, garble
from tests.unit.protocol._same_as_kio import assert_same_as_kio

from tidegate.protocol import guard
from tidegate.protocol import txn_offsets as to
from tidegate.protocol.messages import (
    DecodeError,
    build,
    decode,
    encode,
    request_class,
    response_class,
)
from tidegate.server.dispatch import default_dispatcher
from tidegate.server.quotas.throttle import with_throttle

ADD, COMMIT = to.ADD_OFFSETS_KEY, to.TXN_OFFSET_COMMIT_KEY
SERVED = [(key, v) for key in (ADD, COMMIT)
          for v in range(to.VERSIONS[key][0], to.VERSIONS[key][1] + 1)]
TEXT = st.text(max_size=10)
INT32 = st.integers(-(2**31), 2**31 - 1)
CODES = st.sampled_from(list(ErrorCode))

partitions = st.lists(st.tuples(INT32, st.integers(-(2**63), 2**63 - 1), INT32,
                                st.none() | TEXT), max_size=4)
requests = st.fixed_dictionaries({
    "txn": TEXT, "group": TEXT, "pid": st.integers(-(2**63), 2**63 - 1),
    "epoch": st.integers(-(2**15), 2**15 - 1), "generation": INT32, "member": TEXT,
    "instance": st.none() | TEXT, "topics": st.lists(st.tuples(TEXT, partitions), max_size=3),
})
responses = st.fixed_dictionaries({
    "throttle_ms": st.integers(0, 2**31 - 1), "error_code": CODES,
    "topics": st.lists(st.tuples(TEXT, st.lists(st.tuples(INT32, CODES), max_size=4)),
                       max_size=3),
})


def _encode_request(key: int, v: int, d: dict[str, Any]) -> bytes:
    fields: dict[str, Any] = {"transactional_id": d["txn"], "producer_id": d["pid"],
                              "producer_epoch": d["epoch"], "group_id": d["group"]}
    if key == COMMIT:
        fields.update(generation_id=d["generation"], member_id=d["member"],
                      group_instance_id=d["instance"], topics=[
                          {"name": n, "partitions": [
                              {"partition_index": i, "committed_offset": o,
                               "committed_leader_epoch": e, "committed_metadata": m}
                              for i, o, e, m in ps]} for n, ps in d["topics"]])
    return encode(build(request_class(key, v), fields))


def _kio(key: int, v: int, buf: bytes) -> tuple[Any, int]:
    """What the broker read before: guard's pre-check, then kio's reader."""
    cls = request_class(key, v)
    guard.check(cls, buf, 0)
    return entity_reader(cls)(buf, 0)


def _hand(key: int, v: int, buf: bytes) -> tuple[Any, int]:
    fn = to.decode_add_offsets if key == ADD else to.decode_txn_offset_commit
    return fn(buf, 0, v)


def _plain(key: int, req: Any) -> tuple[Any, ...]:
    """The values a handler reads (`view`'s defaults for fields a version lacks)."""
    head = (str(req.transactional_id), int(req.producer_id), int(req.producer_epoch),
            str(req.group_id))
    if key == ADD:
        return head
    return (*head, int(getattr(req, "generation_id", -1)), getattr(req, "member_id", ""),
            getattr(req, "group_instance_id", None),
            [(t.name, [(int(p.partition_index), int(p.committed_offset),
                        int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata)
                       for p in t.partitions]) for t in req.topics])


def _plain_end(key: int, req: Any, end: int) -> tuple[Any, ...]:
    return (_plain(key, req), end)


def test_the_codecs_cover_every_served_version() -> None:
    apis = default_dispatcher().apis
    for key in (ADD, COMMIT):
        assert (apis[key].min_version, apis[key].max_version) == to.VERSIONS[key]
    make = {ADD: to.add_offsets_response, COMMIT: to.txn_offset_commit_response}
    for key, v in SERVED:
        assert request_class(key, v).__flexible__ == (v >= to.FIRST_FLEXIBLE)
        r: Any = make[key](v)
        assert (r.__version__, r.__flexible__, r.__api_key__) == (
            v, response_class(key, v).__flexible__, key)


@settings(max_examples=60, deadline=None)
@given(data=requests)
def test_requests_same_values_as_kio(data: dict[str, Any]) -> None:
    for key, v in SERVED:
        raw = _encode_request(key, v, data)
        want, want_end = _kio(key, v, raw)
        got, end = _hand(key, v, raw)
        assert _plain_end(key, got, end) == _plain_end(key, want, want_end), f"{key} v{v}"
        framed = memoryview(bytearray(b"xyz" + raw)).toreadonly()  # as the listener's
        req = decode(request_class(key, v), framed, 3, strict=True)
        assert type(req) is type(got)
        assert _plain(key, req) == _plain(key, want)


@settings(max_examples=150, deadline=None)
@given(data=requests, **GARBLINGS)
def test_garbled_requests_fail_in_both_or_neither(data: dict[str, Any], cut: int, at: int,
                                                  junk: bytes, how: str) -> None:
    for key, v in SERVED:
        bad = garble(_encode_request(key, v, data), cut, at, junk, how)
        assert_both_or_neither(bad, lambda b: _plain_end(key, *_kio(key, v, b)),  # noqa: B023
                               lambda b: _plain_end(key, *_hand(key, v, b)),  # noqa: B023
                               to.TxnDecodeError, f"{key} v{v} {how}")


@pytest.mark.parametrize("body", [b"", b"\xff\xfe", b"\x00\x01a\x00\x01b\x00\x00\x00\x00"
                                  b"\x00\x00\x00\x01\x00\x01\xff\xff\xff\xff"])
def test_messages_decode_turns_errors_into_decode_errors(body: bytes) -> None:
    for key in (ADD, COMMIT):
        for v in (0, 2, 3, 4):
            with pytest.raises(DecodeError):
                decode(request_class(key, v), body)


def test_nulls_where_allowed_and_refused_elsewhere() -> None:
    """TxnOffsetCommit v3: a null group instance id and metadata decode as None; a null
    member id (not nullable) is refused."""
    ok = bytes.fromhex("0274" "0267" "0000000000000007" "0001" "ffffffff" "01" "00"
                       "02" "0274" "02" "00000000" "000000000000000a" "ffffffff" "00" "00"
                       "00" "00")
    req = decode(request_class(COMMIT, 3), ok, strict=True)
    assert _plain(COMMIT, req) == ("t", 7, 1, "g", -1, "", None, [("t", [(0, 10, -1, None)])])
    with pytest.raises(DecodeError):  # member id "" -> null
        decode(request_class(COMMIT, 3), ok[:18] + b"\x00" + ok[19:])


def _kio_response(key: int, v: int, d: dict[str, Any]) -> Any:
    fields: dict[str, Any] = {"throttle_time": d["throttle_ms"], "error_code": d["error_code"],
                              "topics": [{"name": n, "partitions": [
                                  {"partition_index": i, "error_code": c} for i, c in ps]}
                                  for n, ps in d["topics"]]}
    return build(response_class(key, v), fields)


def _hand_response(key: int, v: int, d: dict[str, Any]) -> Any:
    throttle = datetime.timedelta(milliseconds=d["throttle_ms"])
    if key == ADD:
        return to.add_offsets_response(v, throttle_time=throttle, error_code=d["error_code"])
    return to.txn_offset_commit_response(v, throttle_time=throttle, topics=tuple(
        to.TxnOffsetCommitTopicResult(n, tuple(
            to.TxnOffsetCommitPartitionResult(i, c) for i, c in ps))
        for n, ps in d["topics"]))


@settings(max_examples=60, deadline=None)
@given(data=responses)
def test_responses_same_bytes_and_error_counts_as_kio(data: dict[str, Any]) -> None:
    for key, v in SERVED:
        assert_same_as_kio(_hand_response(key, v, data), _kio_response(key, v, data),
                           response_class(key, v), f"{key} v{v}")


def test_throttle_is_replaced_as_on_kio_responses() -> None:
    for key, v in SERVED:
        r: Any = (to.add_offsets_response(v) if key == ADD
                  else to.txn_offset_commit_response(v))
        throttled: Any = with_throttle(r, 250)
        assert type(throttled) is type(r) and dataclasses.is_dataclass(throttled)
        assert throttled.throttle_time == datetime.timedelta(milliseconds=250)
        assert encode(throttled)[:4] == (250).to_bytes(4, "big")
