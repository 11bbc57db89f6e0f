"""`SegmentReads`: a `LogSegment`'s reads — scanning batch headers, finding the batch
that holds an offset (offset index floor, then a header scan), reading whole batches for
a fetch, and the batches from a timestamp on (time index floor). A base of `LogSegment`
(through `SegmentLoading`), whose state it shares; `segment.py` has the invariants.

An offset index entry that disagrees with the log makes `find_position` rebuild both
indexes (`SegmentLoading.rebuild_indexes`) rather than answer from a lying entry.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tidegate.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    parse_header,
    peek_size,
)
from tidegate.storage.file_cache import CachedFile
from tidegate.storage.offset_index import OffsetIndex
from tidegate.storage.time_index import TimeIndex

__all__ = ["SCAN_CHUNK", "SegmentReads"]

# the segment's logger: its lines keep the name they had before the split
log = logging.getLogger("tidegate.storage.segment")

SCAN_CHUNK = 16 * 1024  # header scans: one pread covers several small batches


class SegmentReads:
    log_path: Path
    size: int
    max_timestamp: int
    offset_index: OffsetIndex
    time_index: TimeIndex
    _file: CachedFile

    if TYPE_CHECKING:

        def rebuild_indexes(self) -> None: ...

    def iter_headers(self, position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch from `position` (no CRC check)."""
        pos = position
        end = self.size
        buf = b""
        buf_start = pos
        while pos + HEADER_SIZE <= end:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf, buf_start, rel = self._pread(SCAN_CHUNK, pos), pos, 0
                if len(buf) < HEADER_SIZE:
                    return
            header = parse_header(buf, rel)
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
                return
            yield pos, header
            pos += header.size

    def find_position(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset >= `offset`."""
        entry_offset, position = self.offset_index.lookup(offset)
        if position:
            first = self._header_at(position)
            if first is None or not first.base_offset <= entry_offset <= first.last_offset:
                log.warning("%s: offset index disagrees with the log; rebuilding", self.log_path)
                self.rebuild_indexes()
                position = self.offset_index.lookup(offset)[1]
        return self._scan_for(offset, position)

    def _header_at(self, position: int) -> BatchHeader | None:
        raw = self._pread(HEADER_SIZE, position)
        if len(raw) < HEADER_SIZE:
            return None
        header = parse_header(raw)
        if header.magic != MAGIC_V2 or header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            return None
        return header if position + header.size <= self.size else None

    def _scan_for(self, offset: int, position: int) -> tuple[int, BatchHeader] | None:
        for pos, header in self.iter_headers(position):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(self, position: int, size: int) -> bytes:
        return self._pread(size, position)

    def _pread(self, size: int, position: int) -> bytes:
        with self._file as fd:
            return os.pread(fd, size, position)

    def read_batches(
        self, position: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> bytes:
        """Whole batches from `position`: at most `max_bytes` (but the first batch whole
        when `min_one_batch`), stopping before a batch whose base offset >= max_offset."""
        end = self.size
        chunk = self._pread(min(max(max_bytes, LOG_OVERHEAD), end - position), position)
        cut = 0
        n = len(chunk)
        while cut + LOG_OVERHEAD <= n:
            size = peek_size(chunk, cut)
            assert size is not None
            if (
                max_offset is not None
                and int.from_bytes(chunk[cut : cut + 8], "big", signed=True) >= max_offset
            ):
                break
            if cut + size > n or cut + size > max_bytes:
                if cut == 0 and min_one_batch:
                    return self._pread(size, position)
                break
            cut += size
        if cut == n:
            return chunk
        return chunk[:cut]

    def batches_for_timestamp(
        self, timestamp: int, start_offset: int
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Batches (position, header) with max timestamp >= `timestamp` and last offset
        >= `start_offset`, in offset order, starting from the time index's floor entry."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(ts_offset, start_offset))
        for pos, header in self.iter_headers(position):
            if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
                yield pos, header

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, else the file's modification time (as Kafka does)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        with self._file as fd:
            return os.fstat(fd).st_mtime_ns // 1_000_000
