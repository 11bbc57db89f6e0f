"""Timestamp queries over a log's segments (ListOffsets by timestamp and MAX_TIMESTAMP).

Batches are located with the time index, offset index and batch headers (each batch's
max timestamp); only the one batch holding the answer is decoded, to find the exact
record. Pure functions of the segments: the caller holds the log's lock.

Invariant relied on: a segment's `max_timestamp` is the max over its batches, and the
first batch (in offset order) whose max timestamp is >= ts holds the first record with
timestamp >= ts, since every earlier batch's records are all < ts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records.batch import BatchHeader
from tidegate.records.record import decode_records
from tidegate.storage.segment import LogSegment

__all__ = ["max_timestamp_and_offset", "offset_for_timestamp"]


def offset_for_timestamp(
    segments: Sequence[LogSegment], timestamp: int, start_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after `start_offset` whose
    timestamp is >= `timestamp`, or None if there is none."""
    for seg in segments:
        if seg.max_timestamp < timestamp or seg.next_offset <= start_offset:
            continue
        for position, header in seg.batches_for_timestamp(timestamp, start_offset):
            hit = _first_record(
                seg, position, header, lambda o, t: o >= start_offset and t >= timestamp
            )
            if hit is not None:
                return hit
    return None


def max_timestamp_and_offset(segments: Sequence[LogSegment]) -> tuple[int, int]:
    """(max timestamp, offset of the earliest record carrying it), or (-1, -1)."""
    best: LogSegment | None = None
    for seg in segments:
        if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
            best = seg
    if best is None:
        return -1, -1
    max_ts = best.max_timestamp
    found = best.find_position(best.offset_of_max_timestamp)
    if found is not None:
        hit = _first_record(best, found[0], found[1], lambda _o, t: t == max_ts)
        if hit is not None:
            return max_ts, hit[0]
    return max_ts, best.offset_of_max_timestamp


def _first_record(
    seg: LogSegment, position: int, header: BatchHeader, pick: Callable[[int, int], bool]
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record in the batch at `position` for which
    `pick(offset, timestamp)`; judged on the header alone if the batch does not decode."""
    data = seg.read(position, header.size)
    try:
        _, records = decode_records(data)
    except (CorruptRecordError, InvalidRecordError):
        if pick(header.base_offset, header.max_timestamp):
            return header.base_offset, header.max_timestamp
        return None
    for r in records:
        if pick(r.offset, r.timestamp):
            return r.offset, r.timestamp
    return None
