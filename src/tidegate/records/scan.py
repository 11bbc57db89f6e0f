"""Check a batch's records section without decoding its records: what produce
validation needs (`storage/record_checks.py`), at a fraction of a decode's cost.

`scan_records(header, data)` parses every record of the uncompressed section `data`
exactly as `record.decode_record_tuples` does — same checks, same order, same
`CorruptRecordError` / `InvalidRecordError` and messages — and returns a `SectionScan`:
the range of the records' CreateTime timestamps (baseTimestamp + timestampDelta), the
index of the first record whose offsetDelta is not its position, and how many records
have a null key. It builds no key, value or header object.

With the C extension (`_accel.SPEEDUPS`) the scan runs in C and reads `data` in place
(a memoryview slice of the request is not copied); otherwise it decodes the records
with the pure-Python reference and summarises them, which is what the C code must
match (tests/unit/records/test_scan.py compares the two on random batches).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tidegate.records import _accel
from tidegate.records.batch import TIMESTAMP_TYPE_MASK, BatchHeader
from tidegate.records.record import _decode_record_tuples_py

__all__ = ["SectionScan", "scan_records", "scan_records_py"]

Buffer = bytes | bytearray | memoryview

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class SectionScan:
    """What `scan_records` found in one records section.

    `min_timestamp` / `max_timestamp`: -1 without records; None when some
    baseTimestamp + timestampDelta does not fit in an int64 (callers then decode the
    records to see the exact values). `first_bad_offset`: -1 when the offset deltas are
    0, 1, ..., n-1."""

    min_timestamp: int | None
    max_timestamp: int | None
    first_bad_offset: int
    null_keys: int


def scan_records(header: BatchHeader, data: Buffer) -> SectionScan:
    """Check the uncompressed records section `data` of the batch `header`."""
    scan = _accel.validate_records
    if scan is not None:
        return SectionScan(*scan(data, header.records_count, header.base_timestamp))
    return scan_records_py(header, data)


def scan_records_py(header: BatchHeader, data: Buffer) -> SectionScan:
    """The pure-Python `scan_records`: decode with the reference decoder, summarise."""
    # Timestamps are baseTimestamp + timestampDelta whatever the batch's timestamp type
    # (the decoder would give a LogAppendTime batch's records its maxTimestamp), so the
    # section is decoded as a CreateTime batch; only the header's counts and bases count.
    create_time = replace(header, attributes=header.attributes & ~TIMESTAMP_TYPE_MASK)
    records = _decode_record_tuples_py(create_time, bytes(data))
    base = header.base_offset
    first_bad = next((i for i, r in enumerate(records) if r[0] - base != i), -1)
    null_keys = sum(1 for r in records if r[2] is None)
    if not records:
        return SectionScan(-1, -1, first_bad, null_keys)
    lo, hi = min(r[1] for r in records), max(r[1] for r in records)
    if lo < INT64_MIN or hi > INT64_MAX:
        return SectionScan(None, None, first_bad, null_keys)
    return SectionScan(lo, hi, first_bad, null_keys)
