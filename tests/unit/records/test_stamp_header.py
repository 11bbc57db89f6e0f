"""`_speedups.stamp_header` (the produce path's header stamp) against its pure-Python
reference `batch.stamp_header_py`: valid and arbitrary bytes, any position, offsets and
epochs at and past their ranges; the same result or the same error, and no leak."""

from __future__ import annotations

import gc
import os
import tracemalloc
from collections.abc import Callable
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegate.common.errors import CorruptRecordError
from tidegate.records import batch as batch_mod
from tidegate.records.batch import HEADER_SIZE, BatchHeader, parse_header_py, stamp_header_py
from tidegate.records.builder import build_batch
from tidegate.storage.validation import stamp_offsets

_speedups = pytest.importorskip("tidegate.records._speedups")

FUZZ = settings(
    max_examples=int(os.environ.get("TIDEGATE_SPEEDUPS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
INT64 = 1 << 63
INT32 = 1 << 31
GOOD_BATCH = build_batch([(7, b"k", b"v" * 20, [("h", b"x")]), (9, None, b"w", [])])

offsets_st = st.integers(-INT64, INT64 - 1) | st.sampled_from([-INT64 - 1, INT64, 1 << 80])
epochs_st = st.none() | st.integers(-INT32, INT32 - 1) | st.sampled_from([-INT32 - 1, INT32])


def _outcome(fn: Callable[[], object]) -> tuple[str, object]:
    try:
        return ("ok", fn())
    except (CorruptRecordError, OverflowError) as e:
        return (type(e).__name__, str(e))


def _both(buf: bytes | bytearray | memoryview, pos: int, offset: int,
          epoch: int | None) -> tuple[str, object]:
    c = _outcome(partial(_speedups.stamp_header, buf, pos, offset, epoch, BatchHeader))
    py = _outcome(partial(stamp_header_py, buf, pos, offset, epoch))
    assert c == py
    if c[0] == "ok":
        head, header = c[1]  # type: ignore[misc]
        assert type(head) is bytearray and type(header) is BatchHeader
        assert hash(header) == hash(parse_header_py(head))
    return c


@given(st.binary(max_size=150), st.integers(0, 160), offsets_st, epochs_st)
@FUZZ
def test_arbitrary_bytes_stamp_or_fail_identically(
    data: bytes, pos: int, offset: int, epoch: int | None
) -> None:
    for buf in (data, bytearray(data), memoryview(data)):
        _both(buf, pos, offset, epoch)


@given(st.integers(0, 3), offsets_st, epochs_st)
@FUZZ
def test_real_batches_stamp_identically(pad: int, offset: int, epoch: int | None) -> None:
    buf = b"\0" * pad + GOOD_BATCH
    out = _both(buf, pad, offset, epoch)
    if out[0] == "ok":
        head, header = out[1]  # type: ignore[misc]
        assert header.base_offset == offset
        assert header.partition_leader_epoch == (-1 if epoch is None else epoch)
        # only the offset and the epoch change: the rest of the header is the batch's
        assert head[8:12] == GOOD_BATCH[8:12] and head[16:] == GOOD_BATCH[16:HEADER_SIZE]


def test_the_input_is_never_written() -> None:
    buf = bytearray(GOOD_BATCH)
    head, _ = _speedups.stamp_header(buf, 0, 99, 5, BatchHeader)
    assert bytes(buf) == GOOD_BATCH and head[:8] != GOOD_BATCH[:8]


def test_bad_arguments() -> None:
    with pytest.raises(TypeError):
        _speedups.stamp_header(GOOD_BATCH, 0, 1, None)
    with pytest.raises(ValueError):
        _speedups.stamp_header(GOOD_BATCH, -1, 1, None, BatchHeader)
    with pytest.raises(TypeError):
        _speedups.stamp_header(GOOD_BATCH, 0, 1.5, None, BatchHeader)
    with pytest.raises(TypeError):
        _speedups.stamp_header(GOOD_BATCH, 0, 1, "7", BatchHeader)
    with pytest.raises(TypeError):
        _speedups.stamp_header("not bytes", 0, 1, None, BatchHeader)
    with pytest.raises(TypeError):
        _speedups.stamp_header(GOOD_BATCH, 0, 1, None, int)  # no header slots


def test_no_reference_leaks() -> None:
    def calls() -> None:
        _speedups.stamp_header(GOOD_BATCH, 0, 5, 3, BatchHeader)
        try:
            _speedups.stamp_header(GOOD_BATCH[:60], 0, 5, None, BatchHeader)
        except CorruptRecordError:
            pass

    calls()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2000):
            calls()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 16_000  # one leaked header per call would be ~300 KB


@pytest.mark.parametrize("epoch", [None, 4])
def test_stamp_offsets_same_with_and_without_the_extension(
    monkeypatch: pytest.MonkeyPatch, epoch: int | None
) -> None:
    two = GOOD_BATCH + GOOD_BATCH
    view = memoryview(two).toreadonly()
    with_c = stamp_offsets(view, [0, len(GOOD_BATCH)], 10, leader_epoch=epoch)
    monkeypatch.setattr(batch_mod, "_stamp_header_c", None)
    pure = stamp_offsets(view, [0, len(GOOD_BATCH)], 10, leader_epoch=epoch)
    assert with_c[0] == pure[0] and [h.base_offset for h in pure[0]] == [10, 12]
    assert [bytes(p) for p in with_c[1]] == [bytes(p) for p in pure[1]]
    assert b"".join(bytes(p) for p in pure[1])[HEADER_SIZE:len(GOOD_BATCH)] == (
        GOOD_BATCH[HEADER_SIZE:]
    )
