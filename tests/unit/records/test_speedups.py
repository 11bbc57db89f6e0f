"""The C extension `tidegate.records._speedups` against the pure-Python reference.

Differential tests: whatever the input (valid record sections, damaged ones, random
bytes, bad builder arguments), the C code and the pure-Python code must give the same
result, or raise the same exception class (and, for the records layer's own errors and
ValueError, the same message). Skipped when the extension is not built.

``TIDEGATE_SPEEDUPS_EXAMPLES`` raises the number of Hypothesis examples per test (the
suite's default keeps this module to a few seconds), e.g. for a fuzzing run under
AddressSanitizer.
"""

from __future__ import annotations

import gc
import os
import random
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records import builder, record
from tidegate.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    BatchHeader,
    parse_header_py,
    validate_batch,
)
from tidegate.records.builder import _encode_record_py, _PyRecordBuffer, build_batch
from tidegate.records.scan import scan_records_py

_speedups = pytest.importorskip("tidegate.records._speedups")

EXAMPLES = int(os.environ.get("TIDEGATE_SPEEDUPS_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

Header = tuple[str, Any]
Outcome = tuple[str, Any]

# -- strategies -------------------------------------------------------------------------


def _big(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


blobs_st = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=40),
    st.builds(_big, st.integers(100, 20_000), st.integers(0, 1000)),
)
header_keys_st = st.one_of(
    st.text(max_size=8),
    # Not valid UTF-8: decodes with surrogateescape, and re-encodes to the same bytes.
    st.binary(max_size=8).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
headers_st = st.lists(
    st.tuples(header_keys_st, st.none() | st.binary(max_size=16)), max_size=4
)
int64_st = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),
    st.integers(-5000, 5000),
    st.sampled_from([INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX]),
)
offset_delta_st = st.one_of(
    st.integers(0, 300), st.integers(0, INT32_MAX), st.sampled_from([0, 8191, 8192, INT32_MAX])
)
# (offset_delta, timestamp_delta, key, value, headers): one encode_record call
record_args_st = st.tuples(offset_delta_st, int64_st, blobs_st, blobs_st, headers_st)


def section_of(records: Sequence[tuple[int, int, Any, Any, Sequence[Header]]]) -> bytes:
    buf = bytearray()
    for args in records:
        _encode_record_py(buf, *args)
    return bytes(buf)


def _encoded_uvarint(z: int) -> bytes:
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Byte runs that exercise the varint decoders' edges: long, overlong, out-of-range.
varint_junk_st = st.one_of(
    st.builds(lambda n: b"\xff" * n, st.integers(1, 12)),
    st.builds(lambda n: b"\x80" * n + b"\x00", st.integers(1, 11)),
    st.sampled_from([1 << 31, (1 << 32) - 1, 1 << 32, 1 << 34, 1 << 63, (1 << 64) - 1]).map(
        _encoded_uvarint
    ),
    # 10-byte varlongs whose last byte puts bits above bit 63
    st.builds(
        lambda fill, last: fill * 9 + bytes([last]),
        st.sampled_from([b"\xff", b"\x80"]),
        st.integers(0, 127),
    ),
    st.integers(0, (1 << 70) - 1).map(_encoded_uvarint),
)


@st.composite
def damaged_sections(draw: st.DrawFn) -> tuple[bytes, int]:
    records = draw(st.lists(record_args_st, max_size=5))
    buf = bytearray(section_of(records))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["set", "insert", "delete", "junk", "cut"]))
        i = draw(st.integers(0, len(buf)))
        if op == "set" and buf:
            buf[min(i, len(buf) - 1)] = draw(st.integers(0, 255))
        elif op == "insert":
            buf[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete":
            del buf[i : i + draw(st.integers(1, 4))]
        elif op == "junk":
            j = draw(st.integers(0, 4))
            buf[i : i + j] = draw(varint_junk_st)
        elif op == "cut":
            del buf[i:]
    count = draw(
        st.one_of(
            st.sampled_from([len(records), len(records) - 1, len(records) + 1]),
            st.integers(-3, 60),
        )
    )
    return bytes(buf), count


def _zz(n: int) -> bytes:
    return _encoded_uvarint((n << 1) ^ (n >> 127))


small_ints_st = st.one_of(st.integers(-3, 24), st.integers(-(1 << 40), 1 << 40))
# A varint field: usually a small value, sometimes damaged or overlong.
field_st = st.one_of(small_ints_st.map(_zz), small_ints_st.map(_zz), varint_junk_st)


@st.composite
def field_soup_record(draw: st.DrawFn) -> bytes:
    """A record built field by field from plausible and implausible values, with a
    length prefix that is usually right: reaches every check of the decoder."""
    parts = [b"\x00", draw(field_st), draw(field_st)]
    for _ in range(2):  # key, value
        n = draw(st.integers(-3, 12))
        parts += [_zz(n) if draw(st.booleans()) else draw(field_st), b"x" * max(n, 0)]
    n_headers = draw(st.integers(-1, 3))
    parts.append(_zz(n_headers) if draw(st.booleans()) else draw(field_st))
    for _ in range(max(n_headers, 0)):
        k = draw(st.integers(-2, 6))
        v = draw(st.integers(-3, 6))
        parts += [_zz(k), draw(st.binary(min_size=max(k, 0), max_size=max(k, 0)))]
        parts += [_zz(v) if draw(st.booleans()) else draw(field_st), b"y" * max(v, 0)]
    body = b"".join(parts)
    length = len(body) + draw(st.sampled_from([0, 0, 0, 0, -1, 1, -2, 2, -len(body)]))
    return _zz(length) + body


@st.composite
def soup_sections(draw: st.DrawFn) -> tuple[bytes, int]:
    records = draw(st.lists(field_soup_record(), max_size=4))
    data = b"".join(records)
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    count = draw(st.sampled_from([len(records), len(records), len(records) + 1, 0]))
    return data, count


@st.composite
def junk_sections(draw: st.DrawFn) -> tuple[bytes, int]:
    parts = draw(
        st.lists(
            st.one_of(
                st.binary(max_size=12),
                varint_junk_st,
                st.integers(-200, 200).map(lambda n: _encoded_uvarint((n << 1) ^ (n >> 63))),
            ),
            max_size=12,
        )
    )
    data = b"".join(parts)
    return data, draw(st.integers(-2, max(2, len(data) // 5)))


# -- helpers ----------------------------------------------------------------------------


def header_for(
    count: int, base_offset: int = 0, base_ts: int = 0, log_append_time: int | None = None
) -> BatchHeader:
    return BatchHeader(
        base_offset=base_offset,
        batch_length=HEADER_SIZE - 12,
        partition_leader_epoch=-1,
        magic=2,
        crc=0,
        attributes=0x08 if log_append_time is not None else 0,
        last_offset_delta=max(count - 1, 0),
        base_timestamp=base_ts,
        max_timestamp=log_append_time if log_append_time is not None else base_ts,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=count,
    )


def outcome(fn: Callable[[], Any]) -> Outcome:
    """The result, or the exception (class and message for the records layer's errors
    and ValueError; the class alone otherwise, whose messages are CPython's own)."""
    try:
        return ("ok", fn())
    except (CorruptRecordError, InvalidRecordError, ValueError) as exc:
        return (type(exc).__name__, str(exc))
    except (TypeError, AttributeError) as exc:
        return (type(exc).__name__, None)


class _Slotted:
    """A class for decode_records_as (the consumer's is client.types.ConsumerRecord)."""

    __slots__ = ("headers", "key", "offset", "partition", "timestamp", "timestamp_type",
                 "topic", "value")
    headers: Any
    key: Any
    offset: int
    partition: int
    timestamp: int
    timestamp_type: int
    topic: str
    value: Any


def decode_both(
    data: bytes, count: int, base_offset: int = 0, base_ts: int = 0, lat: int | None = None
) -> Outcome:
    c = outcome(lambda: _speedups.decode_records(data, count, base_offset, base_ts, lat))
    py = outcome(
        lambda: record._decode_record_tuples_py(
            header_for(count, base_offset, base_ts, lat), data
        )
    )
    assert c == py
    # decode_records_as: the same records (or error) as slot-filled instances
    objs = outcome(lambda: _speedups.decode_records_as(data, count, base_offset, base_ts, lat,
                                                       _Slotted, "t", 7, 1))
    assert objs[0] == c[0]
    if c[0] == "ok":
        assert [(o.offset, o.timestamp, o.key, o.value, o.headers) for o in objs[1]] == c[1]
        assert all((o.topic, o.partition, o.timestamp_type) == ("t", 7, 1) for o in objs[1])
    else:
        assert objs[1] == c[1]
    if c[0] == "ok":
        for rec in c[1]:
            assert type(rec) is tuple and len(rec) == 5
            assert rec[2] is None or type(rec[2]) is bytes
            assert rec[3] is None or type(rec[3]) is bytes
            if not rec[4]:
                assert rec[4] is record._NO_HEADERS  # the shared empty tuple
    return c


# -- decoding ---------------------------------------------------------------------------


def test_extension_is_active_unless_disabled() -> None:
    assert isinstance(builder.BatchBuilder(), _speedups.RecordBuffer) == builder.SPEEDUPS
    assert record.SPEEDUPS == builder.SPEEDUPS
    code = "from tidegate.records import record, builder; print(record.SPEEDUPS, builder.SPEEDUPS)"
    for env_value, expected in (("1", "False False"), ("0", "True True"), ("", "True True")):
        env = {**os.environ, "TIDEGATE_PURE_PYTHON": env_value}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == expected


@given(
    st.lists(record_args_st, max_size=12),
    int64_st,
    int64_st,
    st.none() | int64_st,
)
@FUZZ
def test_valid_sections_decode_identically(
    records: list[tuple[int, int, Any, Any, list[Header]]],
    base_offset: int,
    base_ts: int,
    lat: int | None,
) -> None:
    data = section_of(records)
    kind, decoded = decode_both(data, len(records), base_offset, base_ts, lat)
    assert kind == "ok"
    assert [r[0] for r in decoded] == [base_offset + r[0] for r in records]
    assert [r[1] for r in decoded] == [
        base_ts + r[1] if lat is None else lat for r in records
    ]
    assert [(r[2], r[3], list(r[4])) for r in decoded] == [
        (r[2], r[3], list(r[4])) for r in records
    ]
    # The dispatcher uses the extension for bytes when it is active.
    header = header_for(len(records), base_offset, base_ts, lat)
    assert record.decode_record_tuples(header, data) == decoded


@given(damaged_sections(), st.sampled_from([0, INT64_MAX, INT64_MIN]), st.none() | int64_st)
@FUZZ
def test_damaged_sections_fail_identically(
    section: tuple[bytes, int], base: int, lat: int | None
) -> None:
    data, count = section
    decode_both(data, count, base, base, lat)


@given(st.binary(max_size=400), st.data())
@FUZZ
def test_random_bytes_fail_identically(data: bytes, draw: st.DataObject) -> None:
    # Mostly counts that pass the up-front "count > len // 7" check.
    count = draw.draw(st.integers(-2, len(data) // 7) | st.integers(-2, 70))
    decode_both(data, count)


@given(soup_sections(), st.none() | int64_st)
@FUZZ
def test_field_soup_decodes_or_fails_identically(
    section: tuple[bytes, int], lat: int | None
) -> None:
    data, count = section
    decode_both(data, count, 0, 0, lat)


@given(junk_sections())
@FUZZ
def test_varint_junk_fails_identically(section: tuple[bytes, int]) -> None:
    data, count = section
    decode_both(data, count)


LONG_VARINTS = [
    # (record section, count): each hits one varint / varlong error of the decoder
    (b"\x0e\x00" + b"\xff" * 9 + b"\x02" + b"\x00" * 5, 1),  # varlong bit 64 set
    (b"\x0e\x00" + b"\xff" * 9 + b"\x7f" + b"\x00" * 5, 1),
    (b"\x0e\x00" + b"\x80" * 9 + b"\x03" + b"\x00" * 5, 1),
    (b"\x0e\x00" + b"\xff" * 9 + b"\x01" + b"\x00" * 5, 1),  # INT64_MIN: in range
    (b"\x0e\x00" + b"\xff" * 10 + b"\x00" * 5, 1),  # longer than 10 bytes
    (b"\xff\xff\xff\xff\x0f" + b"\x00" * 10, 1),  # varint value 2**31 .. (zigzag)
    (b"\x80\x80\x80\x80\x10" + b"\x00" * 10, 1),
    (b"\xff\xff\xff\xff\xff" + b"\x00" * 10, 1),  # longer than 5 bytes
    (b"\xff\xff\xff\xff\xff", 0),
    (b"\x80", 1),  # truncated second byte
    (b"\x80\x80" + b"\x00" * 12, 2),
    (b"\x0c\x00\x00\x00\x02k\x02v\x02\x00\x80", 1),
    (b"\x0c\x00\x00\x00\x02k\x02v\x02\x00\x80\x80\x80", 1),  # varint cut short
    (b"\x0c\x00\x80\x80\x80", 1),  # varlong cut short
    (b"\x0c\x00\x00\x00\x02k\x02v\x02\x80\x80\x80", 1),  # header count cut short
    (b"\x0e\x00\x00\x00\x00\x00\x02\x80\x80\x80", 1),  # header key length cut
    (b"\x0e\x00\x00\x00\x00\x00\x80\x00\x00\x00", 1),  # overlong header count 0
    (b"\x0c\x00\x00\x00\x00\x00\x02\x00\x01", 1),  # header: key "", value null
    (b"\x0c\x00\x00\x00\x00\x00\x02\x00\x01" * 2, 2),
    (b"\x0e\x00\x00\x00\x00\x00\x02\x02\xff\x01", 1),  # non-UTF-8 header key
]


@pytest.mark.parametrize(("data", "count"), LONG_VARINTS)
def test_varint_edge_cases_fail_identically(data: bytes, count: int) -> None:
    decode_both(data, count)
    decode_both(data + b"\x00" * 40, count)


def test_counts_and_bases_beyond_int64() -> None:
    data = section_of([(0, 5, b"k", b"v", [])])
    for count in (1 << 70, -(1 << 70), 1 << 63, 10, 2, 0, -1):
        decode_both(data, count)
    # Sums beyond int64 are Python ints, as in the reference.
    _, recs = decode_both(section_of([(INT32_MAX, INT64_MAX, None, None, [])]), 1,
                          INT64_MAX, INT64_MAX)
    assert recs[0][:2] == (INT64_MAX + INT32_MAX, 2 * INT64_MAX)
    _, recs = decode_both(section_of([(0, INT64_MIN, None, None, [])]), 1, 0, INT64_MIN)
    assert recs[0][1] == 2 * INT64_MIN
    # Bases that are not int64 at all
    c = _speedups.decode_records(data, 1, 1 << 80, -(1 << 80), None)
    py = record._decode_record_tuples_py(header_for(1, 1 << 80, -(1 << 80)), data)
    assert c == py


def test_log_append_time_object_is_shared() -> None:
    lat = 1 << 62
    recs = _speedups.decode_records(section_of([(0, 1, b"", b"", [])] * 3), 3, 0, 0, lat)
    assert all(r[1] is lat for r in recs)


def test_bad_argument_types() -> None:
    with pytest.raises(TypeError):
        _speedups.decode_records(bytearray(b"\x00" * 7), 1, 0, 0, None)
    with pytest.raises(TypeError):
        _speedups.decode_records(b"", 1.0, 0, 0, None)
    with pytest.raises(TypeError):
        _speedups.decode_records(b"", 0, 0, 0)
    # A bytearray section still decodes (in Python, with bytearray slices).
    data = section_of([(0, 0, b"k", b"v", [])])
    decoded: list[Any] = record.decode_record_tuples(
        header_for(1), bytearray(data)  # type: ignore[arg-type]
    )
    assert decoded == [(0, 0, bytearray(b"k"), bytearray(b"v"), ())]


# -- encoding ---------------------------------------------------------------------------

buffers_st = st.one_of(
    blobs_st,
    st.binary(max_size=30).map(bytearray),
    st.binary(max_size=30).map(lambda b: memoryview(b)),
)


@given(
    st.binary(max_size=20),
    offset_delta_st,
    int64_st,
    buffers_st,
    buffers_st,
    st.lists(st.tuples(header_keys_st, st.none() | buffers_st), max_size=4)
    | st.sampled_from([(), []]),
)
@FUZZ
def test_encode_record_matches_the_python_encoder(
    prefix: bytes,
    offset_delta: int,
    ts_delta: int,
    key: Any,
    value: Any,
    headers: Sequence[Header],
) -> None:
    c_buf, py_buf = bytearray(prefix), bytearray(prefix)
    _speedups.encode_record(c_buf, offset_delta, ts_delta, key, value, headers)
    _encode_record_py(py_buf, offset_delta, ts_delta, key, value, headers)
    assert c_buf == py_buf
    # and it decodes back
    (rec,) = _speedups.decode_records(bytes(c_buf[len(prefix) :]), 1, 0, 0, None)
    assert rec[:4] == (
        offset_delta,
        ts_delta,
        None if key is None else bytes(key),
        None if value is None else bytes(value),
    )


BAD_RECORDS: list[tuple[str, Any, Any, Any, Any]] = [
    # (what, timestamp delta, key, value, headers)
    ("str value", 0, b"k", "v", ()),
    ("str key", 0, "k", b"v", ()),
    ("int key", 0, 5, b"v", ()),
    ("str header value", 0, b"k", b"v", [("h", "x")]),
    ("unencodable header key", 0, b"k", b"v", [("ok", None), ("\ud800", b"x")]),
    ("bytes header key", 0, b"k", b"v", [(b"h", b"x")]),
    ("header not a pair", 0, b"k", b"v", [("h",)]),
    ("header triple", 0, b"k", b"v", [("h", b"x", b"y")]),
    ("header not iterable", 0, b"k", b"v", [5]),
    ("headers a generator", 0, b"k", b"v", (h for h in [("h", b"x")])),
    ("str value and bad header", 0, b"k", "v", [("\udfff", None)]),
    ("int key and bad header", 0, 5, b"v", [("\udfff", None)]),
    ("ts delta too big", INT64_MAX + 1, b"k", b"v", ()),
    ("ts delta too small", INT64_MIN - 1, b"k", b"v", ()),
    ("float ts delta", 1.5, b"k", b"v", ()),
]


@pytest.mark.parametrize(
    ("ts_delta", "key", "value", "headers"),
    [b[1:] for b in BAD_RECORDS],
    ids=[b[0] for b in BAD_RECORDS],
)
def test_encode_errors_match_and_leave_the_buffer_unchanged(
    ts_delta: int, key: Any, value: Any, headers: Any
) -> None:
    c_buf, py_buf = bytearray(b"prefix"), bytearray(b"prefix")
    c = outcome(lambda: _speedups.encode_record(c_buf, 0, ts_delta, key, value, headers))
    py = outcome(lambda: _encode_record_py(py_buf, 0, ts_delta, key, value, headers))
    assert c == py
    assert c[0] != "ok"
    assert c_buf == py_buf == b"prefix"


def test_str_value_raises_type_error_without_touching_the_buffer() -> None:
    buf = bytearray(b"abc")
    with pytest.raises(TypeError):
        _speedups.encode_record(buf, 0, 0, b"k", "value", ())
    assert buf == b"abc"
    b = builder.BatchBuilder()
    b.append(1, b"k", b"v")
    before = (bytes(b._buf), len(b), b._base_ts, b._max_ts)
    with pytest.raises(TypeError):
        b.append(2, b"k", "v")  # type: ignore[arg-type]
    assert (bytes(b._buf), len(b), b._base_ts, b._max_ts) == before


def test_exported_buffer_is_not_resized() -> None:
    buf = bytearray(b"abc")
    view = memoryview(buf)
    with pytest.raises(BufferError):
        _speedups.encode_record(buf, 0, 0, b"k", b"v", ())
    view.release()
    assert buf == b"abc"


# -- RecordBuffer (BatchBuilder's base class) against _PyRecordBuffer --------------------

timestamps_st = st.one_of(
    int64_st,
    st.integers(1_700_000_000_000 - 5000, 1_700_000_000_000 + 5000),
    st.sampled_from([INT64_MAX + 1, INT64_MIN - 1, 1 << 70, 1.5, 1e30]),
)
append_args_st = st.tuples(
    timestamps_st,
    buffers_st | st.just("bad"),
    buffers_st | st.just("bad"),
    st.one_of(
        st.just(()),
        st.none(),
        st.lists(st.tuples(header_keys_st, st.none() | st.binary(max_size=8)), max_size=3),
        st.just([("\ud800", None)]),
        st.just([("h",)]),
    ),
    st.booleans(),  # keywords
)


def _state(rb: Any) -> tuple[bytes, int, int, int, int, int]:
    return (bytes(rb._buf), rb._count, rb._base_ts, rb._max_ts, len(rb), rb.estimated_size())


@given(st.lists(append_args_st, max_size=15))
@FUZZ
def test_record_buffer_matches_the_python_one(
    calls: list[tuple[Any, Any, Any, Any, bool]],
) -> None:
    c_rb, py_rb = _speedups.RecordBuffer(), _PyRecordBuffer()
    for ts, key, value, headers, keywords in calls:
        args: tuple[Any, ...] = (ts, key, value, headers)
        kwargs: dict[str, Any] = {}
        if keywords:
            args, kwargs = (), dict(zip(("timestamp", "key", "value", "headers"), args))
        c = outcome(partial(c_rb.append, *args, **kwargs))
        py = outcome(partial(py_rb.append, *args, **kwargs))
        assert c == py
        assert _state(c_rb) == _state(py_rb)


def test_record_buffer_arguments() -> None:
    rb = _speedups.RecordBuffer()
    assert rb.append(1, None, None) == 0
    assert rb.append(2, b"k", value=b"v") == 1
    with pytest.raises(TypeError):
        rb.append(1, None)
    with pytest.raises(TypeError):
        rb.append(1, None, None, (), None)
    with pytest.raises(TypeError):
        rb.append(1, None, None, bogus=1)
    with pytest.raises(TypeError):
        rb.append(1, None, None, key=b"")
    with pytest.raises(TypeError):
        _speedups.RecordBuffer(1)
    with pytest.raises(AttributeError):
        rb._buf = bytearray()
    rb.__init__()
    assert (len(rb), rb._buf, rb.estimated_size()) == (0, bytearray(), HEADER_SIZE)


# -- memory: reference leaks and the garbage collector -----------------------------------


def _growth(fn: Callable[[], object], rounds: int = 2000) -> int:
    """Bytes of Python-allocated memory still held after `rounds` calls of `fn`."""
    for _ in range(10):
        fn()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(rounds):
            fn()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _swallow(fn: Callable[[], object]) -> Callable[[], object]:
    def call() -> object:
        try:
            return fn()
        except (CorruptRecordError, InvalidRecordError, ValueError, TypeError, BufferError):
            return None

    return call


def _with_crc(batch: bytes) -> bytes:
    """`batch` with its CRC recomputed, so checks past the CRC run."""
    out = bytearray(batch)
    if len(out) >= HEADER_SIZE:
        struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


GOOD_BATCH = build_batch([(7, b"k", b"v" * 20, [("h", b"x")]), (9, None, b"w", [])])
GOOD_SECTION = section_of(
    [(i, i - 3, b"key", b"value" * 3, [("h", b"x"), ("\udcff", None)]) for i in range(5)]
)
LEAK_CASES: list[tuple[str, Callable[[], object]]] = [
    ("decode", lambda: _speedups.decode_records(GOOD_SECTION, 5, 1 << 62, 1 << 62, None)),
    ("decode big sums", lambda: _speedups.decode_records(GOOD_SECTION, 5, INT64_MAX, 0, None)),
    ("decode error late", lambda: _speedups.decode_records(GOOD_SECTION + b"\0", 5, 0, 0, None)),
    ("decode error in headers", lambda: _speedups.decode_records(
        GOOD_SECTION[:-1] + b"\x05", 5, 0, 0, None)),
    ("decode truncated", lambda: _speedups.decode_records(GOOD_SECTION[:-1], 5, 0, 0, 7)),
    ("decode varlong range", lambda: _speedups.decode_records(
        b"\x0e\x00" + b"\xff" * 9 + b"\x02" + b"\x00" * 5, 1, 0, 0, None)),
    ("encode", lambda: _speedups.encode_record(
        bytearray(), 1, -5, b"k", bytearray(b"v"), [("h", memoryview(b"x")), ("n", None)])),
    ("encode str value", lambda: _speedups.encode_record(
        bytearray(), 1, 5, b"k", "v", [("h", b"x" * 300)])),
    ("encode bad header key", lambda: _speedups.encode_record(
        bytearray(), 1, 5, b"k", b"v", [("h", b"x" * 300), ("\ud800", None)])),
    ("encode bad header pair", lambda: _speedups.encode_record(
        bytearray(), 1, 5, b"k", b"v", [("h", b"x"), ["a", b"b", b"c"]])),
    ("append", lambda: _speedups.RecordBuffer().append(1, b"k", b"v", [("h", b"x")])),
    ("append bad timestamp", lambda: _speedups.RecordBuffer().append(1e30, b"k", b"v")),
    ("parse header", lambda: _speedups.parse_header(GOOD_BATCH, 0, BatchHeader)),
    ("parse header truncated", lambda: _speedups.parse_header(GOOD_BATCH[:60], 0, BatchHeader)),
    ("check batch", lambda: _speedups.check_batch(GOOD_BATCH, 0, BatchHeader, True)),
    ("check batch bad crc", lambda: _speedups.check_batch(
        GOOD_BATCH[:-1] + b"\0", 0, BatchHeader, True)),
    ("check batch bad records", lambda: _speedups.check_batch(
        _with_crc(GOOD_BATCH[:-1] + b"\5"), 0, BatchHeader, True)),
]


@pytest.mark.parametrize("fn", [c[1] for c in LEAK_CASES], ids=[c[0] for c in LEAK_CASES])
def test_no_reference_leaks(fn: Callable[[], object]) -> None:
    # One leaked object per call would be at least ~60 KB here.
    assert _growth(_swallow(fn)) < 16_000


def test_decoding_with_the_collector_running_all_the_time() -> None:
    threshold = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        for _ in range(50):
            decode_both(GOOD_SECTION, 5, 0, 0, None)
            decode_both(GOOD_SECTION[:-1] + b"\x05", 5)
            rb = _speedups.RecordBuffer()
            rb.append(1, b"k", b"v", [("h", b"x")])
    finally:
        gc.set_threshold(*threshold)


# -- batch headers: parse_header and check_batch (the produce path's one call) ---------


def _outcome(fn: Callable[[], object]) -> Outcome:
    try:
        return ("ok", fn())
    except (CorruptRecordError, InvalidRecordError) as e:
        return (type(e).__name__, str(e))


@given(st.binary(max_size=150), st.integers(0, 160))
@FUZZ
def test_parse_header_matches_the_struct_one(data: bytes, pos: int) -> None:
    for buf in (data, bytearray(data), memoryview(data)):
        c = _outcome(partial(_speedups.parse_header, buf, pos, BatchHeader))
        assert c == _outcome(partial(parse_header_py, buf, pos))
        if c[0] == "ok":
            assert type(c[1]) is BatchHeader and hash(c[1]) == hash(parse_header_py(buf, pos))


def _reference_check(buf: bytes, pos: int) -> Outcome:
    """validate_batch, then (uncompressed CreateTime) the scan of its records section:
    what check_batch must return, a failed scan being None."""
    first = _outcome(lambda: validate_batch(buf, pos))
    if first[0] != "ok":
        return first
    h = first[1]
    if h.compression or h.timestamp_type:
        return ("ok", (h, None))
    section = buf[pos + HEADER_SIZE : pos + h.size]
    scan = _outcome(lambda: scan_records_py(h, section))
    if scan[0] != "ok":
        return ("ok", (h, None))
    s = scan[1]
    return ("ok", (h, (s.min_timestamp, s.max_timestamp, s.first_bad_offset, s.null_keys)))


small_records_st = st.lists(
    st.tuples(
        st.integers(0, 1 << 45),
        st.none() | st.binary(max_size=12),
        st.none() | st.binary(max_size=30),
        st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=4)), max_size=2),
    ),
    min_size=1,
    max_size=5,
)


@given(
    small_records_st,
    st.sampled_from([0, 0, 1]),  # codec: mostly none
    st.sampled_from([0, 0, 1]),  # timestamp type
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3),
    st.booleans(),  # recompute the CRC after the damage
    st.integers(0, 3),  # bytes in front
    st.none() | st.integers(0, 400),  # cut at
)
@FUZZ
def test_check_batch_matches_validate_batch_and_the_scan(
    records: list[tuple[int, bytes | None, bytes | None, list[Header]]],
    codec: int,
    timestamp_type: int,
    damage: list[tuple[int, int]],
    fix_crc: bool,
    lead: int,
    cut: int | None,
) -> None:
    batch = bytearray(build_batch(records, compression=codec, timestamp_type=timestamp_type))
    for at, byte in damage:
        if at < len(batch):
            batch[at] = byte
    data = bytes(lead) + (_with_crc(bytes(batch)) if fix_crc else bytes(batch))
    if cut is not None:
        data = data[: lead + cut]
    got = _outcome(lambda: _speedups.check_batch(data, lead, BatchHeader, True))
    assert got == _reference_check(data, lead)
    if got[0] == "ok":  # without the scan: the header alone
        assert _speedups.check_batch(data, lead, BatchHeader, False) == (got[1][0], None)


def test_check_batch_reports_each_header_error_as_validate_batch() -> None:
    good = bytearray(GOOD_BATCH)
    cases = []
    for offset, fmt, value in [
        (8, ">i", 10),  # length too small
        (8, ">i", 10_000),  # length past the end
        (16, ">b", 1),  # magic
        (23, ">i", 5),  # lastOffsetDelta vs count
        (57, ">i", -1),  # negative count
        (57, ">i", 0),  # no records
    ]:
        b = bytearray(good)
        struct.pack_into(fmt, b, offset, value)
        cases.append(_with_crc(bytes(b)))
    cases.append(bytes(good[:-1]) + bytes([good[-1] ^ 1]))  # CRC mismatch
    for data in cases:
        got = _outcome(partial(_speedups.check_batch, data, 0, BatchHeader, True))
        assert got[0] != "ok" and got == _outcome(partial(validate_batch, data, 0))
