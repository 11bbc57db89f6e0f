"""The console's parameter validation and the message browser's decoding (sans-IO)."""

from __future__ import annotations

import pytest

from tidegate.console.browse import browse_batches
from tidegate.console.params import ParamError, choice_param, int_param, name_param
from tidegate.records.builder import build_batch
from tidegate.records.compression import Codec
from tidegate.records.control import ControlType, build_control_batch

# -- parameters ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw, why", [
    ("-1", "at least 0"), ("abc", "whole number"), ("1e9", "whole number"),
    ("9" * 30, "whole number"), (str(1 << 63), "at most"), ("\uff11\uff12", "whole number"),
    ("0x10", "whole number"),
])
def test_bad_offsets_are_refused_with_a_message(raw: str, why: str) -> None:
    with pytest.raises(ParamError, match=why):
        int_param({"offset": raw}, "offset")


def test_int_param_defaults_and_bounds() -> None:
    assert int_param({}, "limit", 50) == 50
    assert int_param({"limit": " 7 "}, "limit", 50, lo=1, hi=500) == 7
    with pytest.raises(ParamError, match="at most 500"):
        int_param({"limit": "501"}, "limit", 50, lo=1, hi=500)
    with pytest.raises(ParamError, match="required"):
        int_param({}, "partition")


def test_names_and_choices() -> None:
    assert name_param({"topic": " orders "}, "topic") == "orders"
    for bad in ("", "a\nb", "x" * 250):
        with pytest.raises(ParamError):
            name_param({"topic": bad}, "topic")
    assert choice_param({}, "format", ("text", "json")) == "text"
    with pytest.raises(ParamError, match="one of text, json"):
        choice_param({"format": "<b>"}, "format", ("text", "json"))


# -- browsing ------------------------------------------------------------------------------

PID_A, PID_B, PID_C = 7, 8, 9


def _data(base: int, values: list[bytes], *, pid: int = -1, txn: bool = False,
          codec: Codec = Codec.NONE) -> bytes:
    return build_batch([(1000 + i, None, v) for i, v in enumerate(values)], base_offset=base,
                       producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                       base_sequence=0 if pid >= 0 else -1, is_transactional=txn,
                       compression=codec)


def _marker(base: int, pid: int, kind: ControlType) -> bytes:
    return build_control_batch(producer_id=pid, producer_epoch=0, control_type=kind,
                               coordinator_epoch=0, timestamp=2000, base_offset=base)


def _log() -> bytes:
    """0-1 plain, 2-3 txn A aborted (marker 4), 5 txn B committed (marker 6), 7 txn C
    open, 8 plain."""
    return b"".join([
        _data(0, [b"p0", b"p1"]),
        _data(2, [b"a0", b"a1"], pid=PID_A, txn=True),
        _marker(4, PID_A, ControlType.ABORT),
        _data(5, [b"b0"], pid=PID_B, txn=True),
        _marker(6, PID_B, ControlType.COMMIT),
        _data(7, [b"c0"], pid=PID_C, txn=True),
        _data(8, [b"p8"]),
    ])


def test_each_record_gets_its_status() -> None:
    rows = browse_batches(_log(), 0, last_stable_offset=7, aborted=[(PID_A, 2)],
                          max_records=100, max_batch_bytes=1 << 20)
    got = [(r.offset, r.status, r.marker) for r in rows]
    assert got == [(0, "committed", ""), (1, "committed", ""), (2, "aborted", ""),
                   (3, "aborted", ""), (4, "control", "ABORT"), (5, "committed", ""),
                   (6, "control", "COMMIT"), (7, "open", ""), (8, "committed", "")]


def test_a_marker_outside_the_window_comes_from_the_brokers_aborted_list() -> None:
    # the window starts inside A's transaction and ends before its marker
    data = _data(2, [b"a0", b"a1"], pid=PID_A, txn=True)
    rows = browse_batches(data, 3, last_stable_offset=7, aborted=[(PID_A, 2)],
                          max_records=100, max_batch_bytes=1 << 20)
    assert [(r.offset, r.status) for r in rows] == [(3, "aborted")]
    # without the broker's word it is committed (below the LSO, no abort known)
    rows = browse_batches(data, 2, last_stable_offset=7, aborted=[], max_records=100,
                          max_batch_bytes=1 << 20)
    assert {r.status for r in rows} == {"committed"}


def test_max_records_caps_the_rows() -> None:
    rows = browse_batches(_log(), 0, last_stable_offset=7, aborted=[], max_records=3,
                          max_batch_bytes=1 << 20)
    assert [r.offset for r in rows] == [0, 1, 2]


def test_a_partial_batch_at_the_end_is_not_an_error() -> None:
    data = _log()
    rows = browse_batches(data[:-5], 0, last_stable_offset=7, aborted=[], max_records=100,
                          max_batch_bytes=1 << 20)
    assert rows[-1].offset == 7 and all(r.status != "error" for r in rows)


def test_a_compression_bomb_becomes_an_error_row_not_a_crash() -> None:
    bomb = _data(0, [b"\0" * (4 << 20)], codec=Codec.GZIP)  # ~4 KiB on the wire
    assert len(bomb) < 10_000
    after = _data(1, [b"fine"])
    rows = browse_batches(bomb + after, 0, last_stable_offset=2, aborted=[],
                          max_records=100, max_batch_bytes=1 << 20)
    assert rows[0].status == "error" and "offset 0" in rows[0].error
    assert (rows[1].offset, rows[1].value, rows[1].status) == (1, b"fine", "committed")


def test_a_corrupt_batch_becomes_an_error_row() -> None:
    data = bytearray(_data(0, [b"x" * 20]))
    data[-3] ^= 0xFF  # CRC mismatch
    rows = browse_batches(bytes(data), 0, last_stable_offset=1, aborted=[], max_records=10,
                          max_batch_bytes=1 << 20)
    assert [r.status for r in rows] == ["error"]
