"""The message browser's decoding: fetched record batches -> rows with a status (sans-IO).

The console fetches a partition read_uncommitted (everything below the high watermark,
control batches included) and, from the same offset, read_committed, which brings the
broker's list of aborted transactions overlapping the range. `browse_batches` then tells
each record what a read_committed consumer would make of it:

- ``committed``: not transactional, or its transaction's COMMIT marker is known;
- ``aborted``: its producer's transaction was aborted (an ABORT marker follows in the
  window, or the broker's aborted list names it — the rule of `client/consumer/aborted.py`);
- ``open``: transactional, at or past the last stable offset, no marker yet;
- ``control``: a COMMIT or ABORT marker itself (`marker` says which).

Limits against a hostile or broken log (a "compression bomb"): each batch is
decompressed with `max_batch_bytes` as a hard cap, at most `max_records` rows are kept,
and a batch that cannot be decoded becomes one ``error`` row naming its offset instead
of failing the page. Keys, values and header values are kept as bytes; rendering
(text/JSON/hex, truncation, escaping) is the page's job (`render.py`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records.batch import HEADER_SIZE, BatchHeader, peek_size, validate_batch
from tidegate.records.compression import decompress
from tidegate.records.control import ControlType, parse_control_record
from tidegate.records.record import Header, RecordTuple, decode_record_tuples

__all__ = ["BrowsedRecord", "browse_batches"]

COMMITTED, ABORTED, OPEN, CONTROL, ERROR = "committed", "aborted", "open", "control", "error"


@dataclass(slots=True)
class BrowsedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    status: str = COMMITTED
    producer_id: int = -1
    marker: str = ""  # "COMMIT"/"ABORT" for control rows
    error: str = ""  # for error rows
    transactional: bool = False
    compression: int = 0
    batch_offset: int = -1


def _decode(data: bytes, pos: int, max_batch_bytes: int
            ) -> tuple[BatchHeader, list[RecordTuple]]:
    header = validate_batch(data, pos, check_crc=True, strict_counts=False)
    section = memoryview(data)[pos + HEADER_SIZE:pos + header.size]
    codec = header.compression
    raw = decompress(codec, section, max_size=max_batch_bytes) if codec else bytes(section)
    return header, decode_record_tuples(header, raw)


def _marker(records: list[RecordTuple]) -> str:
    if not records:
        return ""
    try:
        return parse_control_record(records[0][2], records[0][3])[0].name
    except InvalidRecordError:
        return ""


def browse_batches(data: bytes | None, fetch_offset: int, *, last_stable_offset: int,
                   aborted: Iterable[tuple[int, int]], max_records: int,
                   max_batch_bytes: int) -> list[BrowsedRecord]:
    """Rows for the records at or after `fetch_offset` in `data` (a Fetch response's
    records), each with its status (see the module docstring). `aborted` is the
    read_committed fetch's (producer id, first offset) list."""
    rows: list[BrowsedRecord] = []
    # producer id -> rows of its transaction not yet settled by a marker in the window
    pending: dict[int, list[BrowsedRecord]] = {}
    # producer id -> offset of its last marker seen in the window
    last_marker: dict[int, int] = {}
    pos, end = 0, len(data or b"")
    while data and pos < end and len(rows) < max_records:
        size = peek_size(data, pos)
        if size is None or size > end - pos:
            break  # the broker cuts the last batch at the fetch size: not an error
        if size < HEADER_SIZE:
            rows.append(BrowsedRecord(-1, -1, None, None, status=ERROR,
                                      error=f"batch at byte {pos} is shorter than a header"))
            break
        try:
            header, records = _decode(data, pos, max_batch_bytes)
        except (CorruptRecordError, InvalidRecordError) as e:
            # the header's base offset is readable whenever the size was
            base = int.from_bytes(data[pos:pos + 8], "big", signed=True)
            rows.append(BrowsedRecord(base, -1, None, None, status=ERROR,
                                      error=f"batch at offset {base} cannot be shown: {e}"))
            pos += size
            continue
        pos += size
        pid = header.producer_id
        if header.is_control:
            marker = _marker(records)
            for r in pending.pop(pid, []):
                r.status = ABORTED if marker == ControlType.ABORT.name else COMMITTED
            last_marker[pid] = header.base_offset
        for off, ts, key, value, hdrs in records:
            if off < fetch_offset:
                continue
            row = BrowsedRecord(off, ts, key, value, hdrs, producer_id=pid,
                                transactional=header.is_transactional,
                                compression=header.compression,
                                batch_offset=header.base_offset)
            if header.is_control:
                row.status, row.marker = CONTROL, _marker(records) or "UNKNOWN"
            elif header.is_transactional:
                pending.setdefault(pid, []).append(row)
            rows.append(row)
            if len(rows) >= max_records:
                break
    # Transactions whose marker lies outside the window: the broker's aborted list (it
    # covers the range below the LSO), else open at/after the LSO, else committed.
    aborted_by_pid: dict[int, list[int]] = {}
    for pid, first in aborted:
        aborted_by_pid.setdefault(int(pid), []).append(int(first))
    for pid, unsettled in pending.items():
        since = last_marker.get(pid, -1)
        for r in unsettled:
            if any(since < f <= r.offset for f in aborted_by_pid.get(pid, ())):
                r.status = ABORTED
            elif 0 <= last_stable_offset <= r.offset:
                r.status = OPEN
            else:
                r.status = COMMITTED
    return rows
