"""Check a producer's batches before they touch the log, and stamp them for storage.

`validate_producer_batches` runs before the log's lock is taken and before anything is
copied: the whole request is rejected if any batch is bad (framing, magic, CRC, counts
via `batch.validate_batch`; size against max.message.bytes; control batches; CreateTime
timestamps against message.timestamp.before/after.max.ms). `assign_offsets` patches a
private copy in place: offsets (not covered by the CRC), leader epoch, LogAppendTime
(re-CRCs the batch).
"""

from __future__ import annotations

from tidegate.common.errors import InvalidRecordError, MessageTooLargeError
from tidegate.records.batch import (
    BatchHeader,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from tidegate.storage.config import LONG_MAX, LogConfig
from tidegate.storage.errors import InvalidTimestampError

__all__ = ["assign_offsets", "validate_producer_batches"]

Buffer = bytes | bytearray | memoryview


def validate_producer_batches(data: Buffer, config: LogConfig, now_ms: int) -> list[int]:
    """Positions of the batches in `data`; raises the Kafka error for the first bad one."""
    positions: list[int] = []
    pos, end = 0, len(data)
    while pos < end:
        header = validate_batch(data, pos)
        if header.size > config.max_message_bytes:
            raise MessageTooLargeError(
                f"record batch of {header.size} bytes exceeds max.message.bytes "
                f"({config.max_message_bytes})"
            )
        if header.is_control:
            raise InvalidRecordError("producers may not write control batches")
        if not config.log_append_time:
            _check_timestamps(header, now_ms, config)
        positions.append(pos)
        pos += header.size
    return positions


def _check_timestamps(header: BatchHeader, now: int, config: LogConfig) -> None:
    # Kafka checks every record; the header's first and max timestamps cover the usual
    # cases (producers set the base timestamp to the first record's) without decoding.
    before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
    for ts in (header.base_timestamp, header.max_timestamp):
        if ts < 0:
            continue
        if (after != LONG_MAX and ts - now > after) or (before != LONG_MAX and now - ts > before):
            raise InvalidTimestampError(
                f"Timestamp {ts} of a record batch is out of range: it must be within "
                f"[{now - before}, {now + after}] (message.timestamp.before/after.max.ms)"
            )


def assign_offsets(
    buf: bytearray,
    positions: list[int],
    first_offset: int,
    *,
    log_append_time: int | None,
    leader_epoch: int | None,
) -> list[BatchHeader]:
    """Give the batches consecutive offsets from `first_offset`; return their headers."""
    headers: list[BatchHeader] = []
    offset = first_offset
    for p in positions:
        set_base_offset(buf, p, offset)
        if leader_epoch is not None:
            set_partition_leader_epoch(buf, p, leader_epoch)
        if log_append_time is not None:
            set_log_append_time(buf, p, parse_header(buf, p).size, log_append_time)
        header = parse_header(buf, p)
        headers.append(header)
        offset = header.next_offset
    return headers
