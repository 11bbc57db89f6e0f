"""Selects the optional C extension `tidegate.records._speedups` (see `_speedups.c`).

When it imports, `record.py` decodes with its `decode_records` (and
`decode_records_as`, straight into the consumer's record class), `scan.py` checks produced
records with its `validate_records` (no objects built), `builder.py` makes its
`RecordBuffer` (`append` in C) the base class of `BatchBuilder`, `batch.py` parses batch
headers with its `parse_header` (the slots set directly: an eighth of the frozen
dataclass's __init__), and `storage.validation` checks a produced batch's header, CRC
and records with one call of its `check_batch` and stamps its offsets with one call of
its `stamp_header` (via `batch.stamp_header`). Otherwise they use their own
pure-Python code, which is always kept: it is the reference the C code must match.
Setting the environment variable ``TIDEGATE_PURE_PYTHON`` to anything but "" or "0"
forces the pure-Python code; it is read once, at import.

`SPEEDUPS` (re-exported as `record.SPEEDUPS` and `builder.SPEEDUPS`) says which is active.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = [
    "PURE_PYTHON_ENV",
    "SPEEDUPS",
    "RecordBuffer",
    "check_batch",
    "decode_records",
    "decode_records_as",
    "gc_track",
    "parse_header",
    "stamp_header",
    "validate_records",
]

PURE_PYTHON_ENV = "TIDEGATE_PURE_PYTHON"

_Header = tuple[str, bytes | None]
_RecordTuple = tuple[int, int, bytes | None, bytes | None, tuple[_Header, ...]]

decode_records: Callable[[bytes, int, int, int, int | None], list[_RecordTuple]] | None = None
# (data, count, base_offset, base_timestamp, log_append_time, cls, topic, partition,
#  timestamp_type) -> list of cls instances; see _speedups.pyi
decode_records_as: Callable[..., list[Any]] | None = None
# lets the cycle collector track a record from decode_records_as again
gc_track: Callable[[object], None] | None = None
RecordBuffer: type | None = None
# (min_timestamp, max_timestamp, first_bad_offset, null_keys); see _speedups.pyi
validate_records: (
    Callable[[bytes | bytearray | memoryview, int, int], tuple[int | None, int | None, int, int]]
    | None
) = None

if os.environ.get(PURE_PYTHON_ENV, "") in ("", "0"):
    try:
        from tidegate.records._speedups import RecordBuffer as _RecordBuffer
        from tidegate.records._speedups import decode_records as _decode_records
        from tidegate.records._speedups import decode_records_as as _decode_records_as
        from tidegate.records._speedups import gc_track as _gc_track
        from tidegate.records._speedups import validate_records as _validate_records
    except ImportError:  # not built (or built from another version of the source)
        pass
    else:
        decode_records = _decode_records
        decode_records_as = _decode_records_as
        gc_track = _gc_track
        RecordBuffer = _RecordBuffer
        validate_records = _validate_records

# (buf, pos, cls) -> cls instance: batch.parse_header's header, made without calling cls
parse_header: Callable[[bytes | bytearray | memoryview, int, type], Any] | None = None
# (buf, pos, cls, scan) -> (header, validate_records' tuple or None): batch.validate_batch
# and, for an uncompressed CreateTime batch, the scan of its records (see _speedups.pyi)
check_batch: Callable[[bytes | bytearray | memoryview, int, type, bool], Any] | None = None
# (buf, pos, base_offset, leader_epoch, cls) -> (bytearray head, cls instance):
# batch.stamp_header (see _speedups.pyi)
stamp_header: Callable[[bytes | bytearray | memoryview, int, int, int | None, type], Any] | None = (
    None
)

if decode_records is not None:
    try:  # imported apart: an extension built from older source lacks them
        from tidegate.records._speedups import check_batch as _check_batch
        from tidegate.records._speedups import parse_header as _parse_header
    except ImportError:
        pass
    else:
        parse_header = _parse_header
        check_batch = _check_batch
    try:
        from tidegate.records._speedups import stamp_header as _stamp_header
    except ImportError:
        pass
    else:
        stamp_header = _stamp_header

SPEEDUPS = decode_records is not None
