"""Shared Hypothesis strategies and helpers for the records tests."""

from __future__ import annotations

import struct

from hypothesis import strategies as st

from tidegate.records.batch import CRC_OFFSET, compute_crc, peek_size

Header = tuple[str, bytes | None]
RecordTuple = tuple[int, bytes | None, bytes | None, list[Header]]

BASE_TS = 1_700_000_000_000

headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3
)
# Timestamps around a realistic base, with deltas of every varint size, negative too.
timestamps_st = st.one_of(
    st.integers(BASE_TS - 100, BASE_TS + 100),
    st.integers(0, 1 << 50),
    st.just(-1),
)
record_st = st.tuples(
    timestamps_st,
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    headers_st,
)
records_st = st.lists(record_st, min_size=1, max_size=25)


def recrc(buf: bytes | bytearray, pos: int = 0) -> bytes:
    """Return `buf` with the CRC of the batch at `pos` recomputed (to fuzz past it)."""
    out = bytearray(buf)
    size = peek_size(out, pos)
    assert size is not None
    struct.pack_into(">I", out, pos + CRC_OFFSET, compute_crc(out, pos, min(size, len(out) - pos)))
    return bytes(out)


def compressible_records(n: int = 50) -> list[RecordTuple]:
    """Records that every codec shrinks (so third-party builders keep the codec)."""
    return [
        (BASE_TS + i, b"key-%d" % i, b"value %d " % i * 20, [("h", b"x"), ("n", None)])
        for i in range(n)
    ]
