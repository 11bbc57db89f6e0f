"""Check a producer's batches before they touch the log, and stamp them for storage.

`validate_producer_batches` runs before the log's lock is taken and before anything is
copied: the whole request is rejected if any batch is bad (framing, magic, CRC, counts
via `batch.validate_batch`; size against max.message.bytes; control batches; the shape
of idempotent batches); then `record_checks.validate_records` checks every record of
every batch (see there). With the C extension each batch's header, CRC and
(uncompressed, CreateTime) records are checked in one call (`_speedups.check_batch`), in
the same order and with the same errors as the Python steps. `check_timestamps` (every
record's CreateTime timestamp against message.timestamp.before/after.max.ms) runs under
the lock after the producer-state check, as in Kafka, so the retry of a batch already
written is answered as a duplicate even if its timestamps have since gone out of range.
`assign_offsets` patches a private copy in place: offsets (not covered by the CRC),
leader epoch, LogAppendTime (re-CRCs the batch). `stamp_offsets` does the same without
copying the batches (no LogAppendTime): only each batch's header is copied and patched,
and the write gathers the headers with the rest of the batches, read from the request's
own bytes.

Idempotent batches (producer id >= 0), as Kafka's LogValidator / ProduceRequest:
  * a base sequence of -1 is INVALID_RECORD ("Invalid sequence number");
  * such a batch must be the only one of the request for its partition: the duplicate
    check and its answer (the original batch's offsets) are per batch. Kafka rejects
    every v3+ Produce with more than one batch per partition; `single_batch=True`
    (the Produce handler) applies that rule to all batches, the default only to
    idempotent ones so internal callers may still append several plain batches at once.
"""

from __future__ import annotations

from tidegate.common.errors import InvalidRecordError, MessageTooLargeError
from tidegate.records import _accel
from tidegate.records.batch import (
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_SEQUENCE,
    BatchHeader,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    stamp_header,
    validate_batch,
)
from tidegate.storage.config import LONG_MAX, LogConfig
from tidegate.storage.errors import InvalidTimestampError
from tidegate.storage.record_checks import BatchRecords, RecordTimestampError, Scan

__all__ = [
    "assign_offsets",
    "check_produce_batch",
    "check_timestamps",
    "stamp_offsets",
    "validate_producer_batches",
]

NO_TIMESTAMP = -1

Buffer = bytes | bytearray | memoryview


def validate_producer_batches(
    data: Buffer,
    config: LogConfig,
    *,
    single_batch: bool = False,
    scans: list[Scan | None] | None = None,
) -> list[tuple[int, BatchHeader]]:
    """(position, header) of the batches in `data`; raises the Kafka error for the first
    bad one. With `scans`, each batch's records are scanned in the same C call (when the
    extension is built) and the result appended to it for `validate_records(scans=)`:
    one call per batch instead of several Python steps (a twentieth of a small batch's
    append). A scan that fails is None: `validate_records` raises its error at its own
    step, so the first error of a request stays the same."""
    found: list[tuple[int, BatchHeader]] = []
    pos, end = 0, len(data)
    idempotent = False
    # The C check reads bytes: len() must be the byte count the reference sees.
    byte_sized = not isinstance(data, memoryview) or data.format == "B"
    check_c = _accel.check_batch if byte_sized else None
    while pos < end:
        if check_c is not None:
            header, scan = check_c(data, pos, BatchHeader, scans is not None)
            if scans is not None:
                scans.append(scan)
        else:
            header = validate_batch(data, pos)
            if scans is not None:
                scans.append(None)
        _check_header(header, config)
        idempotent = idempotent or header.producer_id >= 0
        found.append((pos, header))
        pos += header.size
    if len(found) > 1 and (single_batch or idempotent):
        raise InvalidRecordError(
            f"produce requests must contain exactly one record batch per partition, got "
            f"{len(found)}"
        )
    return found


def check_produce_batch(
    data: Buffer, config: LogConfig
) -> tuple[BatchHeader, Scan | None] | None:
    """`validate_producer_batches(single_batch=True, scans=)` for a Produce's usual
    partition data, one whole batch: its header and C scan, after the same checks with
    the same errors. None when `data` is not exactly one batch or the C extension is not
    built: the caller takes the general path (whose first error is then the same)."""
    check_c = _accel.check_batch
    if check_c is None or not len(data) or (isinstance(data, memoryview) and data.format != "B"):
        return None
    header, scan = check_c(data, 0, BatchHeader, True)
    size = header.batch_length + LOG_OVERHEAD  # (`size`, `is_control`: fields, not properties)
    if size != len(data):
        return None
    if (size > config.max_message_bytes or header.attributes & CONTROL_MASK
            or header.producer_id >= 0):
        _check_header(header, config)  # raises, or an idempotent batch's sequence is set
    return header, scan


def _check_header(header: BatchHeader, config: LogConfig) -> None:
    """A producer's batch: size, not control, an idempotent one's base sequence."""
    size = header.size
    if size > config.max_message_bytes:
        raise MessageTooLargeError(
            f"record batch of {size} bytes exceeds max.message.bytes "
            f"({config.max_message_bytes})"
        )
    if header.is_control:
        raise InvalidRecordError("producers may not write control batches")
    if header.producer_id >= 0 and header.base_sequence == NO_SEQUENCE:
        raise InvalidRecordError(
            f"Invalid sequence number {header.base_sequence} in record batch with "
            f"producerId {header.producer_id}"
        )


def check_timestamps(
    headers: list[BatchHeader],
    now: int,
    config: LogConfig,
    records: list[BatchRecords] | None = None,
) -> None:
    """CreateTime timestamps within message.timestamp.before/after.max.ms of `now`: every
    record's (from `record_checks.validate_records`, when given; out-of-range ones become
    record errors, as Kafka's), then each header's first and max timestamps."""
    if config.log_append_time:
        return
    before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
    if before == LONG_MAX and after == LONG_MAX:
        return
    lo = now - before if before != LONG_MAX else None
    hi = now + after if after != LONG_MAX else None
    for batch in records or ():
        if not batch.count:  # not `timestamps`: that would decode them
            continue
        if (lo is None or batch.min_timestamp >= lo) and (hi is None or batch.max_timestamp <= hi):
            continue
        errors = [
            (
                i,
                f"Timestamp {ts} of message with offset delta {i} is out of range. The "
                f"timestamp should be within [{now - before}, {now + after}]",
            )
            for i, ts in enumerate(batch.timestamps)
            # -1 (NO_TIMESTAMP) is not checked, as in Kafka.
            if ts != NO_TIMESTAMP and ((lo is not None and ts < lo) or (hi is not None and ts > hi))
        ]
        if errors:
            raise RecordTimestampError(
                "One or more records have been rejected due to invalid timestamp: " + errors[0][1],
                record_errors=errors,
            )
    for header in headers:
        for ts in (header.base_timestamp, header.max_timestamp):
            if ts < 0:
                continue
            if (after != LONG_MAX and ts - now > after) or (
                before != LONG_MAX and now - ts > before
            ):
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


def stamp_offsets(
    view: memoryview,
    positions: list[int],
    first_offset: int,
    *,
    leader_epoch: int | None,
) -> tuple[list[BatchHeader], list[bytearray | memoryview]]:
    """`assign_offsets` without the copy of the batches (which `view` keeps, read-only):
    each batch's 61-byte header is copied and given its offsets and leader epoch, which
    the CRC does not cover (`batch.stamp_header`: copy, stamp and parse in one C call);
    returns the headers and the pieces to write in order (each batch's new header, then
    the rest of it from `view`). A megabyte's copy per request was a tenth of the
    broker's CPU per produced record. No LogAppendTime: its timestamps are under the CRC
    (use `assign_offsets` on a copy)."""
    headers: list[BatchHeader] = []
    # the pieces cover all of `view`, as the copy did
    pieces: list[bytearray | memoryview] = [view[: positions[0]]] if positions[0] else []
    offset = first_offset
    end = len(view)
    if len(positions) == 1:  # the rule for a Produce request: no loop
        head, header = stamp_header(view, positions[0], offset, leader_epoch)
        pieces += (head, view[positions[0] + HEADER_SIZE :])
        return [header], pieces
    for i, p in enumerate(positions):
        head, header = stamp_header(view, p, offset, leader_epoch)  # one C call
        headers.append(header)
        pieces.append(head)
        pieces.append(view[p + HEADER_SIZE : positions[i + 1] if i + 1 < len(positions) else end])
        offset = header.next_offset
    return headers, pieces
