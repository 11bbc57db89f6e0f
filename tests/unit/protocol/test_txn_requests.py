"""The hand-written AddPartitionsToTxn and EndTxn request decoders (protocol/
txn_requests.py) against kio: the same values for every version the broker serves on
random requests, and garbled bodies refused by both or by neither (but for unknown
tagged fields, which kio refuses and Kafka's parsers skip)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader
from tests.unit.protocol._garbled import GARBLINGS, assert_both_or_neither, garble

from tidegate.protocol import guard
from tidegate.protocol import txn_requests as tq
from tidegate.protocol.messages import DecodeError, build, decode, encode, request_class
from tidegate.server.dispatch import default_dispatcher

VERSIONS = range(tq.MIN_VERSION, tq.MAX_VERSION + 1)
ADD, END = tq.ADD_PARTITIONS_KEY, tq.END_TXN_KEY
TEXT = st.text(max_size=10)
INT64 = st.integers(-(2**63), 2**63 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)

topics = st.lists(st.tuples(TEXT, st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4)),
                  max_size=3)
txns = st.tuples(TEXT, INT64, INT16, st.booleans(), topics)
requests = st.fixed_dictionaries({"txns": st.lists(txns, min_size=1, max_size=3)})


def _topics(ts: list[tuple[str, list[int]]]) -> list[dict[str, Any]]:
    return [{"name": n, "partitions": ps} for n, ps in ts]


def _encode(key: int, version: int, data: dict[str, Any]) -> bytes:
    cls = request_class(key, version)
    tid, pid, epoch, flag, ts = data["txns"][0]
    if key == END:
        fields: dict[str, Any] = {"transactional_id": tid, "producer_id": pid,
                                  "producer_epoch": epoch, "committed": flag}
    elif version < tq.FIRST_BATCHED:
        fields = {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                  "v3_and_below_producer_epoch": epoch,
                  "v3_and_below_topics": _topics(ts)}
    else:
        fields = {"transactions": [
            {"transactional_id": t, "producer_id": p, "producer_epoch": e,
             "verify_only": v, "topics": _topics(x)} for t, p, e, v, x in data["txns"]]}
    return encode(build(cls, fields))


def _kio(key: int, version: int, buf: bytes) -> tuple[Any, int]:
    """What the broker read before: guard's pre-check, then kio's reader."""
    cls = request_class(key, version)
    guard.check(cls, buf, 0)
    return entity_reader(cls)(buf, 0)


def _hand(key: int, version: int, buf: bytes) -> tuple[Any, int]:
    fn = tq.decode_end_txn if key == END else tq.decode_add_partitions
    return fn(buf, 0, version)


def _ts(ts: Any) -> list[Any]:
    return [(str(t.name), [int(p) for p in t.partitions]) for t in ts]


def _plain(key: int, version: int, req: Any) -> tuple[Any, ...]:
    if key == END:
        return (str(req.transactional_id), int(req.producer_id), int(req.producer_epoch),
                bool(req.committed))
    if version < tq.FIRST_BATCHED:
        return (str(req.v3_and_below_transactional_id), int(req.v3_and_below_producer_id),
                int(req.v3_and_below_producer_epoch), _ts(req.v3_and_below_topics))
    return tuple((str(t.transactional_id), int(t.producer_id), int(t.producer_epoch),
                  bool(t.verify_only), _ts(t.topics)) for t in req.transactions)


def test_the_decoders_cover_every_served_version() -> None:
    apis = default_dispatcher().apis
    for key in (ADD, END):
        assert (apis[key].min_version, apis[key].max_version) == (tq.MIN_VERSION,
                                                                  tq.MAX_VERSION)
        for v in VERSIONS:
            assert request_class(key, v).__flexible__ == (v >= tq.FIRST_FLEXIBLE)


@settings(max_examples=60, deadline=None)
@given(data=requests)
def test_same_values_as_kio(data: dict[str, Any]) -> None:
    for key in (ADD, END):
        for v in VERSIONS:
            raw = _encode(key, v, data)
            want, want_end = _kio(key, v, raw)
            got, end = _hand(key, v, raw)
            assert (_plain(key, v, got), end) == (_plain(key, v, want), want_end), f"{key} v{v}"
            framed = memoryview(bytearray(b"xyz" + raw)).toreadonly()  # as the listener's
            req = decode(request_class(key, v), framed, 3, strict=True)
            assert type(req) is type(got)
            assert _plain(key, v, req) == _plain(key, v, want)


@settings(max_examples=150, deadline=None)
@given(data=requests, **GARBLINGS)
def test_garbled_bodies_fail_in_both_or_neither(data: dict[str, Any], cut: int, at: int,
                                                 junk: bytes, how: str) -> None:
    for key in (ADD, END):
        for v in VERSIONS:
            bad = garble(_encode(key, v, data), cut, at, junk, how)
            assert_both_or_neither(
                bad, lambda b: _plain_end(key, v, *_kio(key, v, b)),  # noqa: B023
                lambda b: _plain_end(key, v, *_hand(key, v, b)),  # noqa: B023
                tq.TxnDecodeError, f"{key} v{v} {how}")


def _plain_end(key: int, version: int, req: Any, end: int) -> tuple[Any, ...]:
    return (_plain(key, version, req), end)


@pytest.mark.parametrize("body", [b"", b"\xff\xfe", b"\x00\x01a\x00\x00\x00\x00\x00\x00\x00"
                                  b"\x01\x00\x01\x02"])
def test_messages_decode_turns_errors_into_decode_errors(body: bytes) -> None:
    for key in (ADD, END):
        for v in (0, 3, 4):
            with pytest.raises(DecodeError):
                decode(request_class(key, v), body)


def test_strict_refuses_trailing_bytes() -> None:
    raw = _encode(END, 3, {"txns": [("t", 7, 1, True, [])]})
    assert _plain(END, 3, decode(request_class(END, 3), raw + b"\x00")) == ("t", 7, 1, True)
    with pytest.raises(DecodeError):
        decode(request_class(END, 3), raw + b"\x00", strict=True)
