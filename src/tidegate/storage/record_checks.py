"""Check the records inside a producer's batches, as Kafka's LogValidator does.

`validate_batch` (via `validation.validate_producer_batches`) has already checked each
batch's framing, magic, CRC and header counts. `validate_records` then decodes every
record (decompressing compressed batches, with a bounded output) and rejects the batch:

  * records that cannot be parsed (bad varints, lengths that overrun the record or the
    batch, a record count that does not match the header's records_count, bytes left
    after the last record): `CorruptRecordError` (CORRUPT_MESSAGE) or
    `InvalidRecordError` (INVALID_RECORD), from the records layer's decoder;
  * offset deltas that are not 0, 1, ..., n-1 in order: INVALID_RECORD (Kafka: "Invalid
    record offset" / InvalidRecordException);
  * on a compacted topic (cleanup.policy contains compact), records with a null key:
    INVALID_RECORD with one record error per such record ("Compacted topic cannot accept
    message without key"), as Kafka's RecordValidationException;
  * compressed data that inflates past `decompressed_limit`: INVALID_RECORD
    (`DecompressedSizeError`), without allocating more than the limit.

It returns each batch's record timestamp range (and, on demand, every record's
timestamp), so `validation.check_timestamps` (run later, under the log's lock) checks
every record's CreateTime, not just the header's.

How: `records.scan.scan_records` parses each section with every check of the decoder but
builds no record (in C, reading the request's bytes in place: no copy of an uncompressed
section; ~0.02 us per 1 KiB record). On the produce path the C scan of an uncompressed
CreateTime batch comes from the same call that checked its header
(`validation.validate_producer_batches(scans=)`); a batch it could not scan is scanned
here again, which raises the error. Only when it reports something to reject (an offset
delta out of order, a null key on a compacted topic) or a timestamp that overflows an
int64, or for a LogAppendTime batch sent by a producer, is the batch decoded with the
reference decoder, which gives the exact errors and values. A batch whose timestamps
are out of range is decoded again, then, for its per-record errors.
"""

from __future__ import annotations

from dataclasses import astuple
from operator import itemgetter

from tidegate.common.errors import InvalidRecordError, KafkaError
from tidegate.records import _accel
from tidegate.records.batch import HEADER_SIZE, BatchHeader
from tidegate.records.compression import decompress
from tidegate.records.record import decode_record_tuples
from tidegate.records.scan import scan_records
from tidegate.storage.config import LogConfig
from tidegate.storage.errors import InvalidTimestampError

__all__ = [
    "DECOMPRESSED_FLOOR",
    "DECOMPRESSED_RATIO",
    "NO_TIMESTAMPS",
    "BatchRecords",
    "KeylessRecordError",
    "RecordTimestampError",
    "RecordValidationError",
    "Scan",
    "decompressed_limit",
    "validate_records",
]

Buffer = bytes | bytearray | memoryview

# The bound on one batch's decompressed records section: max(64 MiB, 64 x
# max.message.bytes), i.e. 64 MiB with the default max.message.bytes (1 MiB).
#
# Why: a compressed batch is at most max.message.bytes on the wire but nothing bounds
# what it inflates to, and the whole section is decompressed in memory to be decoded.
# Real producers stay far below the bound: librdkafka caps a batch's *uncompressed* size
# at batch.size (1 MB by default) and message.max.bytes; kafkajs and kafka-python build
# what one send call gives them; the Java producer closes a batch when its estimated
# *compressed* size reaches batch.size (16 KiB by default), so its uncompressed size is
# about batch.size / compression ratio: reaching 64 MiB takes a ratio over 4000 at the
# default batch.size, or over 64 with batch.size raised to max.message.bytes. Only
# degenerate payloads (all zeros) compress like that. The peak memory one request can
# cost is then about twice the limit (the section plus the decoded records), once at a
# time, since produce requests are validated one by one.
DECOMPRESSED_FLOOR = 64 * 1024 * 1024
DECOMPRESSED_RATIO = 64

_offset = itemgetter(0)
_timestamp = itemgetter(1)
_key = itemgetter(2)

# What the C scan of a records section returns (`_speedups.validate_records`):
# (min_timestamp, max_timestamp, first_bad_offset, null_keys), as `SectionScan`.
Scan = tuple[int | None, int | None, int, int]


def decompressed_limit(config: LogConfig) -> int:
    """The largest records section a compressed batch may decompress to."""
    return max(DECOMPRESSED_FLOOR, DECOMPRESSED_RATIO * config.max_message_bytes)


class RecordValidationError(KafkaError):
    """Some records of a batch are invalid; `record_errors` holds (index in the batch,
    message) for each, for ProduceResponse's record_errors (Kafka's
    RecordValidationException). Raised as one of the subclasses below."""

    def __init__(self, message: str, *, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class KeylessRecordError(RecordValidationError, InvalidRecordError):
    """Records without a key on a compacted topic (INVALID_RECORD)."""


class RecordTimestampError(RecordValidationError, InvalidTimestampError):
    """Records whose CreateTime is out of range (INVALID_TIMESTAMP)."""


class BatchRecords:
    """What record validation learned about one batch: how many records have a
    timestamp to check (0 when the topic uses LogAppendTime, which replaces them), their
    range, and `timestamps`, each record's: given, or decoded on first use from the
    batch's `source` (header, records section, decompression limit; the section was
    checked already). Only a batch with a timestamp out of range needs them, for its
    record errors. One per batch on the append path: no closure, no type checks."""

    __slots__ = ("_source", "_timestamps", "count", "max_timestamp", "min_timestamp")

    def __init__(
        self,
        timestamps: list[int] | None,
        count: int,
        min_timestamp: int,
        max_timestamp: int,
        source: tuple[BatchHeader, memoryview, int] | None = None,
    ) -> None:
        self.count = count
        self.min_timestamp = min_timestamp
        self.max_timestamp = max_timestamp
        self._timestamps = timestamps
        self._source = source

    @property
    def timestamps(self) -> list[int]:
        if self._timestamps is None:
            assert self._source is not None
            header, section, limit = self._source
            codec = header.compression
            raw = decompress(codec, section, max_size=limit) if codec else bytes(section)
            self._timestamps = list(map(_timestamp, decode_record_tuples(header, raw)))
            self._source = None
        return self._timestamps


# A batch without timestamps to check (shared: nothing changes it)
NO_TIMESTAMPS = BatchRecords([], 0, -1, -1)


def validate_records(
    data: Buffer,
    found: list[tuple[int, BatchHeader]],
    config: LogConfig,
    *,
    max_decompressed: int | None = None,
    scans: list[Scan | None] | None = None,
) -> list[BatchRecords]:
    """Check the records of each (position, header) batch of `data`; raise the Kafka
    error for the first bad batch. `scans[i]`, when given and not None, is the C scan
    of batch i's (uncompressed) records already made (`validation.validate_producer_
    batches(scans=)`); a None one is scanned here."""
    limit = decompressed_limit(config) if max_decompressed is None else max_decompressed
    view = memoryview(data)
    compacted = config.compact
    want_timestamps = not config.log_append_time
    scan_c = _accel.validate_records
    out: list[BatchRecords] = []
    for i, (pos, header) in enumerate(found):
        section = view[pos + HEADER_SIZE : pos + header.size]
        codec = header.compression
        raw = decompress(codec, section, max_size=limit) if codec else section
        if not header.timestamp_type:  # LogAppendTime from a producer: the decoder's way
            # the C scan's tuple as it is (no SectionScan): this runs once per append
            pre = scans[i] if scans is not None else None
            lo, hi, first_bad, null_keys = (
                pre
                if pre is not None
                else scan_c(raw, header.records_count, header.base_timestamp)
                if scan_c is not None
                else astuple(scan_records(header, raw))
            )
            ok = first_bad < 0 and not (compacted and null_keys)
            if ok and lo is not None and hi is not None:
                n = header.records_count
                if want_timestamps and n > 0:
                    out.append(BatchRecords(None, n, lo, hi, (header, section, limit)))
                else:
                    out.append(NO_TIMESTAMPS)
                continue
        out.append(_decode_and_check(header, bytes(raw), compacted, want_timestamps))
    return out


def _decode_and_check(
    header: BatchHeader, raw: bytes, compacted: bool, want_timestamps: bool
) -> BatchRecords:
    """The reference: decode every record of the section `raw`, check what
    `validate_records` checks, raise its exact errors."""
    records = decode_record_tuples(header, raw)
    del raw
    n = len(records)
    base = header.base_offset
    offsets = list(map(_offset, records))
    if offsets != list(range(base, base + n)):
        i = next(i for i, o in enumerate(offsets) if o != base + i)
        raise InvalidRecordError(
            f"Invalid record offset: record {i} of the batch has offset delta "
            f"{offsets[i] - base}, expected {i} (offset deltas must be 0..{n - 1} in "
            "order)"
        )
    if compacted:
        keys = list(map(_key, records))
        if None in keys:
            errors = [
                (i, "Compacted topic cannot accept message without key")
                for i, k in enumerate(keys)
                if k is None
            ]
            raise KeylessRecordError(
                f"One or more records have been rejected due to {len(errors)} record "
                "errors in total: compacted topic cannot accept message without key "
                f"(record {errors[0][0]} of the batch)",
                record_errors=errors,
            )
    if want_timestamps and n:
        ts = list(map(_timestamp, records))
        return BatchRecords(ts, n, min(ts), max(ts))
    return NO_TIMESTAMPS
