"""`SegmentLoading`: opening a `LogSegment` that is already on disk — `load` (a segment
believed intact: indexes sanity-checked, the tail after the last index entry scanned),
`recover` (every batch CRC-checked from the start, the file cut at the first torn,
corrupt or out-of-order batch, both indexes rebuilt) and `rebuild_indexes`; and
`check_batch`, the integrity check stored batches get. A base of `LogSegment`, whose
state it shares; `segment.py` has the invariants.

The aborted-transaction index needs the producer state to be rebuilt, so loading only
flags it (`txn_index_stale`); the log's loader (`txn_recovery`) rebuilds it.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    parse_header,
    peek_size,
    validate_batch,
)
from tidegate.storage.config import LogConfig
from tidegate.storage.errors import CorruptIndexError
from tidegate.storage.segment_reads import SegmentReads
from tidegate.storage.time_index import NO_TIMESTAMP
from tidegate.storage.txn_index import TxnIndex

__all__ = ["MAX_RELATIVE_OFFSET", "RECOVERY_CHUNK", "Buffer", "SegmentLoading", "check_batch"]

# the segment's logger: its lines keep the name they had before the split
log = logging.getLogger("tidegate.storage.segment")

RECOVERY_CHUNK = 1 << 20  # recovery reads whole batches in big chunks
MAX_RELATIVE_OFFSET = (1 << 31) - 1

Buffer = bytes | bytearray | memoryview


def check_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Integrity of a stored batch: framing, magic 2, CRC-32C, non-negative counts.

    Unlike the produce path it accepts batches whose record count and offset span
    disagree, which Kafka's compaction legitimately produces. Raises CorruptRecordError
    (InvalidRecordError, for negative counts, is a corruption here too).
    """
    try:
        return validate_batch(buf, pos, strict_counts=False)
    except InvalidRecordError as exc:
        raise CorruptRecordError(str(exc)) from exc


class SegmentLoading(SegmentReads):
    base_offset: int
    config: LogConfig
    indexes_missing: bool
    txn_index: TxnIndex
    txn_index_stale: bool
    recovered_controls: bool | None
    next_offset: int
    offset_of_max_timestamp: int
    first_batch_timestamp: int | None
    _bytes_since_index: int
    _dirty: bool

    if TYPE_CHECKING:

        def _index_batch(self, header: BatchHeader, position: int) -> bool: ...  # segment.py

        def _write_sparse_indexes(self) -> None: ...

    def load(self) -> int:
        """Open a segment believed intact (clean shutdown, or below the recovery point).

        The indexes are sanity-checked against the log and the tail after the last index
        entry is scanned; if anything is off the segment is recovered instead.
        Returns the number of bytes truncated (0 unless recovery found damage).
        """
        if self.indexes_missing and self.size:
            log.info("%s: index files missing, rebuilding", self.log_path)
            return self.recover()
        try:
            self.offset_index.load()
            self.time_index.load()
            self.offset_index.sanity_check(self.size)
            self._scan_tail()
            self.time_index.sanity_check(self.next_offset)
        except (CorruptIndexError, CorruptRecordError) as exc:
            log.warning("%s: %s; rebuilding indexes", self.log_path, exc)
            return self.recover()
        self._load_first_timestamp()
        self._load_txn_index()
        return 0

    def _load_txn_index(self) -> None:
        if self.txn_index.missing:
            self.txn_index_stale = True
            return
        try:
            self.txn_index.load()
            self.txn_index.check_range(self.base_offset, self.next_offset)
        except (CorruptIndexError, OSError) as exc:
            log.warning("%s: %s; the transaction index will be rebuilt", self.log_path, exc)
            self.txn_index_stale = True

    def _scan_tail(self) -> None:
        """Derive next offset and max timestamp from the index tails and the batches
        after the last offset index entry."""
        entry_offset, position = self.offset_index.lookup(1 << 62)
        max_ts, max_off = self.time_index.last_entry()
        next_offset = self.base_offset
        end = position
        for pos, header in self.iter_headers(position):
            if (
                pos == position
                and position
                and not (header.base_offset <= entry_offset <= header.last_offset)
            ):
                raise CorruptIndexError("last offset index entry does not match the log")
            if header.base_offset < next_offset:
                raise CorruptRecordError(f"offsets go backwards at position {pos}")
            if header.max_timestamp > max_ts:
                max_ts, max_off = header.max_timestamp, header.base_offset
            next_offset = header.next_offset
            end = pos + header.size
        if end != self.size:
            raise CorruptRecordError(f"partial batch at position {end} of {self.size}")
        if self.size and next_offset == self.base_offset:
            raise CorruptIndexError("no batch found after the last index entry")
        if next_offset - 1 - self.base_offset > MAX_RELATIVE_OFFSET:
            raise CorruptRecordError("offsets beyond the segment's int32 range")
        self.next_offset = next_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_off
        self._bytes_since_index = self.size - position if position else self.size

    def _load_first_timestamp(self) -> None:
        self.first_batch_timestamp = None
        if self.size >= HEADER_SIZE:
            self.first_batch_timestamp = parse_header(
                self._pread(HEADER_SIZE, 0)
            ).max_timestamp

    def recover(self, max_next_offset: int | None = None) -> int:
        """CRC-check every batch from the start, cut the file at the first torn, corrupt
        or out-of-order batch (or one reaching `max_next_offset`), rebuild both indexes.
        Returns the number of bytes cut off."""
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self.first_batch_timestamp = None
        self._bytes_since_index = 0
        end = self.size
        pos = 0
        buf = b""
        buf_start = 0
        controls = False
        while pos < end:
            rel = pos - buf_start
            if rel + LOG_OVERHEAD > len(buf):
                buf, buf_start, rel = self._pread(RECOVERY_CHUNK, pos), pos, 0
            size = peek_size(buf, rel)
            if size is None or size < HEADER_SIZE or size > end - pos:
                break
            if rel + size > len(buf):
                buf, buf_start, rel = self._pread(max(size, RECOVERY_CHUNK), pos), pos, 0
            try:
                header = check_batch(buf, rel)
            except CorruptRecordError as exc:
                log.warning("%s: %s at position %d", self.log_path, exc, pos)
                break
            if header.base_offset < self.next_offset or (
                header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET
            ):
                log.warning(
                    "%s: offset %d out of order at %d", self.log_path, header.base_offset, pos
                )
                break
            if max_next_offset is not None and header.next_offset > max_next_offset:
                break
            self._index_batch(header, pos)
            self.next_offset = header.next_offset
            controls = controls or header.is_control
            pos += size
        self.recovered_controls = controls
        truncated = end - pos
        if truncated:
            log.warning("%s: truncating %d bytes at position %d", self.log_path, truncated, pos)
            with self._file as fd:
                os.ftruncate(fd, pos)
            self.size = pos
        self._dirty = True  # recovery rewrote the indexes; sync everything once
        self.time_index.maybe_append(
            self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
        )
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self.indexes_missing = False
        self.txn_index_stale = True  # rebuilt by the loader, which has the producer state
        return truncated

    def rebuild_indexes(self) -> None:
        """Re-derive both indexes from batch headers (no CRC check, no truncation)."""
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self.first_batch_timestamp = None
        self._bytes_since_index = 0
        for pos, header in self.iter_headers(0):
            self._index_batch(header, pos)
        self.time_index.maybe_append(
            self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
        )
        self._write_sparse_indexes()  # a read may get here: a full disk must not fail it
