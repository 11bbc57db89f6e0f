"""Which of a log's oldest segments retention may delete (pure functions of segments).

Each function returns a count `n`: the `n` oldest segments are deletable. Rules, as in
Kafka: deletion is always a prefix of the log; the active (last) segment is never
deleted; nor is a segment holding offsets at or above the high watermark (its next
segment's base offset must be <= the high watermark).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

from tidegate.storage.config import LogConfig
from tidegate.storage.segment import LogSegment

__all__ = ["below_start_offset", "expired_by_size", "expired_by_time"]


def _prefix(
    segments: Sequence[LogSegment], high_watermark: int, pred: Callable[[LogSegment], bool]
) -> int:
    n = 0
    for seg, nxt in pairwise(segments):
        if nxt.base_offset > high_watermark or not pred(seg):
            break
        n += 1
    return n


def expired_by_time(
    segments: Sequence[LogSegment], config: LogConfig, now_ms: int, high_watermark: int
) -> int:
    """Segments whose largest timestamp is more than retention.ms old."""
    if config.retention_ms < 0:
        return 0
    limit = config.retention_ms
    return _prefix(segments, high_watermark, lambda s: now_ms - s.largest_timestamp > limit)


def expired_by_size(segments: Sequence[LogSegment], config: LogConfig, high_watermark: int) -> int:
    """Oldest segments whose removal keeps the log at >= retention.bytes."""
    if config.retention_bytes < 0:
        return 0
    excess = sum(s.size for s in segments) - config.retention_bytes

    def pred(seg: LogSegment) -> bool:
        nonlocal excess
        if excess - seg.size < 0:
            return False
        excess -= seg.size
        return True

    return _prefix(segments, high_watermark, pred)


def below_start_offset(segments: Sequence[LogSegment], log_start_offset: int) -> int:
    """Segments wholly below the log start offset (DeleteRecords)."""
    return _prefix(segments, log_start_offset, lambda s: True)
