"""The hand-written Produce request decoder (protocol/produce_request.py) against kio: the
same values for every version the broker serves on random requests, the records fields
slices of the frame (no copy), and garbled bodies refused by both or by neither (but for
unknown tagged fields, which kio refuses and Kafka's parsers skip)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader
from tests.unit.protocol._garbled import GARBLINGS, assert_both_or_neither, garble

from tidegate.protocol import guard
from tidegate.protocol import produce_request as pq
from tidegate.protocol.messages import DecodeError, build, decode, encode, request_class
from tidegate.server.dispatch import default_dispatcher

VERSIONS = range(pq.MIN_VERSION, pq.MAX_VERSION + 1)
TEXT = st.text(max_size=10)

# records of one-, two- and three-byte flexible lengths (the decoder reads the first two
# kinds inline)
RECORDS = st.none() | st.binary(max_size=40) | st.integers(100, 17000).map(bytes)
partitions = st.tuples(st.integers(-(2**31), 2**31 - 1), RECORDS)
requests = st.fixed_dictionaries({
    "transactional_id": st.none() | TEXT,
    "acks": st.sampled_from([-1, 0, 1, 2, -(2**15)]),
    "timeout": st.integers(-(2**31), 2**31 - 1),
    "topics": st.lists(st.tuples(TEXT, st.lists(partitions, max_size=4)), max_size=3),
})


def _encode(version: int, data: dict[str, Any]) -> bytes:
    return encode(build(request_class(0, version), {
        "transactional_id": data["transactional_id"],
        "acks": data["acks"],
        "timeout": data["timeout"],
        "topic_data": [{"name": name, "partition_data": [
            {"index": i, "records": r} for i, r in parts]} for name, parts in data["topics"]],
    }))


def _kio(version: int, buf: bytes) -> tuple[Any, int]:
    """What the broker read before: guard's pre-check, then kio's reader."""
    cls = request_class(0, version)
    guard.check(cls, buf, 0)
    return entity_reader(cls)(buf, 0)  # type: ignore[no-any-return]


def _plain(req: Any) -> tuple[Any, ...]:
    return (req.transactional_id, int(req.acks), req.timeout, [
        (t.name, [(int(p.index), None if p.records is None else bytes(p.records))
                  for p in t.partition_data]) for t in req.topic_data])


def test_the_decoder_covers_every_served_version() -> None:
    api = default_dispatcher().apis[0]
    assert (api.min_version, api.max_version) == (pq.MIN_VERSION, pq.MAX_VERSION)
    for v in VERSIONS:
        assert request_class(0, v).__flexible__ == (v >= pq.FIRST_FLEXIBLE)


@settings(max_examples=80, deadline=None)
@given(data=requests)
def test_same_values_as_kio_and_records_are_slices(data: dict[str, Any]) -> None:
    for v in VERSIONS:
        raw = _encode(v, data)
        want, want_end = _kio(v, raw)
        got, end = pq.decode(raw, 0, v)
        assert (_plain(got), end) == (_plain(want), want_end), f"v{v}"
        framed = memoryview(bytearray(b"xyz" + raw)).toreadonly()  # as the listener's
        req: Any = decode(request_class(0, v), framed, 3)
        assert isinstance(req, pq.ProduceRequest)
        assert _plain(req) == _plain(want)
        for t in req.topic_data:
            for p in t.partition_data:
                if p.records is not None:  # a view of the frame, not a copy
                    assert isinstance(p.records, memoryview) and p.records.obj is framed.obj


@settings(max_examples=150, deadline=None)
@given(data=requests, **GARBLINGS)
def test_garbled_bodies_fail_in_both_or_neither(data: dict[str, Any], cut: int, at: int,
                                                 junk: bytes, how: str) -> None:
    for v in VERSIONS:
        bad = garble(_encode(v, data), cut, at, junk, how)
        assert_both_or_neither(bad, lambda b: _plain_end(*_kio(v, b)),  # noqa: B023
                               lambda b: _plain_end(*pq.decode(b, 0, v)),  # noqa: B023
                               pq.ProduceDecodeError, f"v{v} {how}")


def _plain_end(req: Any, end: int) -> tuple[Any, ...]:
    return (_plain(req), end)


@pytest.mark.parametrize("body", [b"", b"\xff\xfe", b"\x00\x00\x00\x01\x00\x00\x00\x10"])
def test_messages_decode_turns_errors_into_decode_errors(body: bytes) -> None:
    for v in (3, 9):
        with pytest.raises(DecodeError):
            decode(request_class(0, v), body)


def test_strict_refuses_trailing_bytes() -> None:
    raw = _encode(9, {"transactional_id": None, "acks": -1, "timeout": 5, "topics": []})
    assert _plain(decode(request_class(0, 9), raw + b"\x00")) == (None, -1, _ms(5), [])
    with pytest.raises(DecodeError):
        decode(request_class(0, 9), raw + b"\x00", strict=True)


def _ms(n: int) -> Any:
    import datetime
    return datetime.timedelta(milliseconds=n)


def test_a_first_produce_imports_no_other_schema_module() -> None:
    """The hand decoder is found from the class's own API key and version: decoding a
    broker's first Produce imports no other Produce or transaction schema module (all
    32 of them took ~0.2 s, and a fresh broker's first produce ~0.5 s)."""
    code = (
        "import sys\n"
        "from tidegate.protocol.messages import build, decode, encode, request_class\n"
        "cls = request_class(0, 9)\n"
        "body = encode(build(cls, {'acks': -1, 'timeout': 1000, 'topic_data': []}))\n"
        "before = {m for m in sys.modules if m.startswith('kio.schema.')}\n"
        "req = decode(cls, body)\n"
        "new = sorted({m for m in sys.modules if m.startswith('kio.schema.')} - before)\n"
        "print(new)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.strip()
    assert out == "[]", f"decoding one Produce imported {out}"


@pytest.mark.parametrize("size", [0, 126, 127, 128, 129, 16382, 16383, 16384])
def test_length_prefixes_at_their_boundaries(size: int) -> None:
    """Records whose compact length takes one, two or three bytes, whole and cut short
    at every byte of the prefix and the tagged-field byte after the records: the same
    answer as kio's, or an error in both."""
    data = {"transactional_id": None, "acks": -1, "timeout": 5,
            "topics": [("t", [(7, bytes(size)), (8, b"x")])]}
    for v in (8, 9, 12):
        raw = _encode(v, data)
        assert _plain_end(*pq.decode(raw, 0, v)) == _plain_end(*_kio(v, raw))
        start = raw.index(bytes(size)) if size else len(raw) - 8
        for cut in range(max(start - 8, 0), min(start + 2, len(raw))):
            assert_both_or_neither(raw[:cut], lambda b: _plain_end(*_kio(v, b)),  # noqa: B023
                                   lambda b: _plain_end(*pq.decode(b, 0, v)),  # noqa: B023
                                   pq.ProduceDecodeError, f"v{v} cut at {cut}")
