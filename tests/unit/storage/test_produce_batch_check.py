"""`check_produce_batch` (storage/validation.py), the one-batch Produce check, against
the general `validate_producer_batches(single_batch=True)` over the same batches, edge
and malformed ones included: the same first error, and where the one-step check passes a
batch the general one passes it too with the same header. It runs `_check_header` only
when one of its checks could fail: a header rule added there but not to that guard (or
changed on one side only) makes a generated batch tell the two apart here."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.records import _accel
from tidegate.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, compute_crc
from tidegate.records.builder import build_batch
from tidegate.storage.config import LogConfig
from tidegate.storage.validation import check_produce_batch, validate_producer_batches

pytestmark = pytest.mark.skipif(_accel.check_batch is None, reason="C extension not built")

BASE_TS = 1_700_000_000_000
_SEQ = struct.Struct(">i")
_PID = struct.Struct(">q")


def _restamp(buf: bytearray) -> None:
    """A valid CRC again after a header field was changed."""
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))


@st.composite
def _cases(draw: st.DrawFn) -> tuple[bytes, LogConfig]:
    n = draw(st.integers(1, 3))
    pid = draw(st.sampled_from([-1, -2, 0, 7, 2**40]))
    data = bytearray(build_batch(
        [(BASE_TS + i, b"k", b"v" * draw(st.integers(0, 40))) for i in range(n)],
        producer_id=pid,
        producer_epoch=draw(st.sampled_from([-1, 0, 3])),
        base_sequence=draw(st.sampled_from([-1, 0, 9, 2**31 - 1])),
        is_transactional=draw(st.booleans()),
        is_control=draw(st.booleans()),
        timestamp_type=draw(st.sampled_from([0, 1])),
    ))
    edit = draw(st.sampled_from(["none", "attributes", "sequence", "producer", "byte",
                                 "cut", "extra"]))
    if edit == "attributes":  # any attribute bits, CRC valid
        struct.pack_into(">h", data, ATTRIBUTES_OFFSET, draw(st.integers(-2**15, 2**15 - 1)))
        _restamp(data)
    elif edit == "sequence":  # base sequence at 53
        _SEQ.pack_into(data, 53, draw(st.sampled_from([-1, -2, 0, 2**31 - 1])))
        _restamp(data)
    elif edit == "producer":  # producer id at 43
        _PID.pack_into(data, 43, draw(st.sampled_from([-1, -5, 0, 1])))
        _restamp(data)
    elif edit == "byte":  # anything, CRC left as it is
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    elif edit == "cut":
        data = data[:draw(st.integers(1, len(data) - 1))]
    elif edit == "extra":
        data += draw(st.binary(min_size=1, max_size=HEADER_SIZE + 20))
    size = len(data)
    limit = draw(st.sampled_from([size - 1, size, size + 1, 1_000_000, 1]))
    return bytes(data), LogConfig.from_props({"max.message.bytes": str(max(limit, 0))})


def _outcome(fn: object) -> tuple[str, str] | object:
    try:
        return fn()  # type: ignore[operator]
    except Exception as e:
        return (type(e).__name__, str(e))


@settings(max_examples=600, deadline=None)
@given(_cases(), st.sampled_from(["bytes", "bytearray", "memoryview"]))
def test_the_one_step_check_agrees_with_the_general_one(
        case: tuple[bytes, LogConfig], kind: str) -> None:
    raw, cfg = case
    data = (raw if kind == "bytes" else bytearray(raw) if kind == "bytearray"
            else memoryview(raw))
    fast = _outcome(lambda: check_produce_batch(data, cfg))
    general = _outcome(lambda: validate_producer_batches(data, cfg, single_batch=True,
                                                         scans=[]))
    if fast is None:
        return  # not exactly one batch: the caller takes the general path
    if isinstance(fast, tuple) and isinstance(fast[0], str):
        assert general == fast  # the same error, word for word
        return
    assert isinstance(fast, tuple)
    header, _scan = fast
    assert isinstance(general, list), general  # the general check passes it too
    assert general == [(0, header)]
