"""`records.scan`: the C `validate_records` entry point against the pure-Python
reference (`scan_records_py`, which decodes with `record._decode_record_tuples_py`).

Whatever the section — valid, damaged, random bytes — both must return the same
`SectionScan` or raise the same exception class with the same message; the C code must
read a memoryview slice in place, and its own bad cases (a count that does not match,
truncation) must fail. Bad CRCs are caught before the scan, by `batch.validate_batch`:
checked here through `validation` + `record_checks`, the produce path. Skipped when the
extension is not built.
"""

from __future__ import annotations

import struct
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.records.test_speedups import (
    FUZZ,
    INT64_MAX,
    INT64_MIN,
    damaged_sections,
    header_for,
    int64_st,
    junk_sections,
    outcome,
    record_args_st,
    section_of,
    soup_sections,
)

from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records.batch import HEADER_SIZE, parse_header, validate_batch
from tidegate.records.builder import build_batch
from tidegate.records.scan import SectionScan, scan_records, scan_records_py
from tidegate.storage.config import LogConfig
from tidegate.storage.record_checks import validate_records as check_records
from tidegate.storage.validation import validate_producer_batches

_speedups = pytest.importorskip("tidegate.records._speedups")


def scan_both(data: bytes, count: int, base_ts: int = 0, base_offset: int = 0) -> Any:
    header = header_for(count, base_offset, base_ts)
    c = outcome(lambda: SectionScan(*_speedups.validate_records(data, count, base_ts)))
    py = outcome(lambda: scan_records_py(header, data))
    assert c == py
    # and the C decoder, which the produce path falls back to, fails the same way
    if c[0] != "ok":
        assert outcome(lambda: _speedups.decode_records(data, count, 0, base_ts, None)) == c
    return c


# -- differential ------------------------------------------------------------------------


@given(st.lists(record_args_st, max_size=6), int64_st, st.booleans())
@FUZZ
def test_valid_sections_scan_identically(
    records: list[Any], base_ts: int, in_order: bool
) -> None:
    if in_order:  # offset deltas 0..n-1, as producers write them
        records = [(i, *r[1:]) for i, r in enumerate(records)]
    kind, result = scan_both(section_of(records), len(records), base_ts)
    assert kind == "ok"
    assert result.null_keys == sum(1 for r in records if r[2] is None)
    if in_order:
        assert result.first_bad_offset == -1


@given(damaged_sections(), st.sampled_from([0, INT64_MAX, INT64_MIN, 1_700_000_000_000]))
@FUZZ
def test_damaged_sections_scan_identically(section: tuple[bytes, int], base_ts: int) -> None:
    scan_both(*section, base_ts)


@given(soup_sections())
@FUZZ
def test_field_soup_scans_identically(section: tuple[bytes, int]) -> None:
    scan_both(*section)


@given(junk_sections())
@FUZZ
def test_junk_scans_identically(section: tuple[bytes, int]) -> None:
    scan_both(*section)


# -- the C entry point's own failures ------------------------------------------------------


def _batch(n: int = 4) -> bytes:
    return build_batch([(1000 + i, b"k%d" % i if i % 2 else None, b"v" * i, ()) for i in range(n)])


def test_summary_of_a_batch() -> None:
    data = _batch(4)
    header = parse_header(data)
    scan = scan_records(header, memoryview(data)[HEADER_SIZE:])
    assert scan == SectionScan(1000, 1003, -1, 2)


@pytest.mark.parametrize(
    ("count", "error", "message"),
    [
        (5, CorruptRecordError, "record data truncated at byte"),
        (100, InvalidRecordError, "batch declares 100 records but has only"),
        (3, InvalidRecordError, "bytes of record data left after the declared 3 records"),
        (1 << 40, InvalidRecordError, "batch declares 1099511627776 records"),
    ],
)
def test_bad_count_fails(count: int, error: type[Exception], message: str) -> None:
    section = _batch(4)[HEADER_SIZE:]
    with pytest.raises(error, match=message):
        _speedups.validate_records(section, count, 0)


def test_every_truncation_fails() -> None:
    section = _batch(4)[HEADER_SIZE:]
    for cut in range(len(section)):
        with pytest.raises((CorruptRecordError, InvalidRecordError)):
            _speedups.validate_records(section[:cut], 4, 0)


def test_reads_a_memoryview_in_place() -> None:
    big = bytearray(build_batch([(1, b"k", b"x" * 1024, ()) for _ in range(2000)]))
    view = memoryview(big)[HEADER_SIZE:]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = _speedups.validate_records(view, 2000, 1)
        grown = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert result == (1, 1, -1, 0)
    assert grown < 10_000  # no copy of the ~2 MB section
    with pytest.raises(TypeError):
        _speedups.validate_records("not a buffer", 1, 0)


def test_bad_crc_is_refused_before_the_scan() -> None:
    data = bytearray(_batch(4))
    data[-1] ^= 0xFF  # inside the last record's value: only the CRC can tell
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(bytes(data), 0)
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_producer_batches(bytes(data), LogConfig())


def test_produce_checks_reject_what_the_scan_flags() -> None:
    compact = LogConfig(cleanup_policy=("compact",))
    data = _batch(4)
    found = [(0, parse_header(data))]
    with pytest.raises(InvalidRecordError, match="2 record errors in total: compacted topic"):
        check_records(data, found, compact)
    checked = check_records(data, found, LogConfig())
    assert (checked[0].count, checked[0].min_timestamp, checked[0].max_timestamp) == (4, 1000, 1003)
    assert checked[0].timestamps == [1000, 1001, 1002, 1003]  # decoded on demand


def test_timestamp_overflow_falls_back_to_exact_values() -> None:
    # base + delta beyond int64: the C scan says None, Python's ints give the value
    section = section_of([(0, INT64_MAX, b"k", b"v", ())])
    assert _speedups.validate_records(section, 1, 5) == (None, None, -1, 0)
    assert scan_records_py(header_for(1, 0, 5), section) == SectionScan(None, None, -1, 0)
    data = bytearray(build_batch([(0, b"k", b"v", ())]))
    struct.pack_into(">q", data, 27, 5)  # baseTimestamp 5 (CRC not needed here)
    struct.pack_into(">i", data, 8, HEADER_SIZE - 12 + len(section))
    data = data[:HEADER_SIZE] + section
    [batch] = check_records(bytes(data), [(0, parse_header(bytes(data)))], LogConfig())
    assert batch.timestamps == [INT64_MAX + 5]
