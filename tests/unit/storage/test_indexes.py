"""OffsetIndex and TimeIndex: lookups against a linear scan, persistence, sanity checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.storage.errors import CorruptIndexError
from tidegate.storage.offset_index import OffsetIndex
from tidegate.storage.time_index import TimeIndex

BASE = 1000

increasing = st.lists(st.integers(1, 50), min_size=0, max_size=60).map(
    lambda steps: [sum(steps[: i + 1]) for i in range(len(steps))]
)


def _floor(entries: list[tuple[int, int]], key: int, default: tuple[int, int]) -> tuple[int, int]:
    best = default
    for k, v in entries:
        if k <= key:
            best = (k, v)
    return best


@settings(max_examples=60, deadline=None)
@given(rels=increasing, positions=increasing, probes=st.lists(st.integers(-5, 3000), max_size=20))
def test_offset_lookup_matches_linear_scan(
    tmp_path_factory: pytest.TempPathFactory,
    rels: list[int],
    positions: list[int],
    probes: list[int],
) -> None:
    path = tmp_path_factory.mktemp("oi") / "x.index"
    n = min(len(rels), len(positions))
    entries = [(BASE + r, p) for r, p in zip(rels[:n], positions[:n])]
    idx = OffsetIndex(path, BASE, 1 << 20)
    for o, p in entries:
        idx.append(o, p)
    idx.write_pending()
    for probe in probes + [o for o, _ in entries]:
        assert idx.lookup(BASE + probe) == _floor(entries, BASE + probe, (BASE, 0))
    # The file alone reproduces the same lookups.
    idx.close()
    again = OffsetIndex(path, BASE, 1 << 20)
    again.load()
    again.sanity_check(10**9)
    assert again.entries() == entries
    for probe in probes:
        assert again.lookup(BASE + probe) == _floor(entries, BASE + probe, (BASE, 0))
    again.close()


@settings(max_examples=60, deadline=None)
@given(ts=increasing, rels=increasing, probes=st.lists(st.integers(-5, 3000), max_size=20))
def test_time_lookup_matches_linear_scan(
    tmp_path_factory: pytest.TempPathFactory, ts: list[int], rels: list[int], probes: list[int]
) -> None:
    path = tmp_path_factory.mktemp("ti") / "x.timeindex"
    n = min(len(ts), len(rels))
    entries = [(t, BASE + r) for t, r in zip(ts[:n], rels[:n])]
    idx = TimeIndex(path, BASE, 1 << 20)
    for t, o in entries:
        idx.maybe_append(t, o)
        idx.maybe_append(t, o)  # not larger: ignored
    idx.write_pending()
    for probe in probes:
        assert idx.lookup(probe) == _floor(entries, probe, (-1, BASE))
    idx.close()
    again = TimeIndex(path, BASE, 1 << 20)
    again.load()
    again.sanity_check(BASE + 10**6)
    assert again.entries() == entries
    again.close()


def test_truncate_and_full(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", 0, 8 * 4)
    for i in range(4):
        idx.append(i * 10, i * 100)
    assert idx.is_full
    idx.truncate_to(20)
    assert idx.entries() == [(0, 0), (10, 100)]
    idx.truncate_to_position(100)
    assert idx.entries() == [(0, 0)]
    assert (tmp_path / "a.index").stat().st_size == 8
    with pytest.raises(ValueError):
        idx.append(0, 50)  # not increasing
    idx.close()

    ti = TimeIndex(tmp_path / "a.timeindex", 0, 12 * 10)
    for i in range(5):
        ti.maybe_append(100 + i, i * 10)
    ti.truncate_to(25)
    assert ti.entries() == [(100, 0), (101, 10), (102, 20)]
    assert ti.last_entry() == (102, 20)
    ti.close()


def test_sanity_check_rejects_garbage(tmp_path: Path) -> None:
    path = tmp_path / "g.index"
    path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x10" + b"\x00\x00\x00\x03\x00\x00\x00\x20")
    idx = OffsetIndex(path, 0, 1 << 20)
    idx.load()
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(1000)  # offsets go backwards
    idx.close()
    path.write_bytes(b"\x01\x02\x03")
    idx = OffsetIndex(path, 0, 1 << 20)
    with pytest.raises(CorruptIndexError):
        idx.load()  # not whole entries
    idx.close()
    path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x10\x00")
    idx = OffsetIndex(path, 0, 1 << 20)
    idx.load()
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(100)  # position beyond the log
    idx.close()
    tpath = tmp_path / "g.timeindex"
    tpath.write_bytes(bytes.fromhex("0000000000000064 00000009".replace(" ", "")))
    ti = TimeIndex(tpath, 0, 1 << 20)
    ti.load()
    with pytest.raises(CorruptIndexError):
        ti.sanity_check(5)  # offset 9 beyond the segment's next offset
    ti.close()
