"""One log segment: a `.log` file of RecordBatch v2 bytes plus its two sparse indexes.

The segment stores batches exactly as they travel on the wire, already validated and
offset-assigned by the `Log`. It knows how to find the batch holding an offset (index
floor, then scan batch headers), read bytes at a position, decide when to roll, recover
after a crash (CRC-check every batch, cut at the first torn or corrupt one, rebuild the
indexes), truncate, fsync, close and delete.

Invariants:
- `size` is the length of the `.log` file and always ends on a batch boundary; batches
  have strictly increasing, non-overlapping offsets >= `base_offset`, with
  `last_offset - base_offset < 2**31` (relative offsets fit the indexes' int32).
- Index entries only point at batches that are already in the `.log` file (the log is
  written before the index), so a crash can lose index entries but never make one lie.
  (A power loss can leave an unsynced index short or garbled: the active segment's
  indexes are not fsynced by flushes, so a start after a crash rebuilds them; see `sync`.)
- `next_offset` is one past the last offset stored (the base offset if empty).
- `txn_index` (`.txnindex`, aborted transactions whose marker is in this segment) is
  created with the segment; `txn_index_stale` says it must be rebuilt (missing, corrupt,
  or the segment was recovered), which needs the producer state, so the loader does it.

Descriptors: the three files are opened through the process's bounded LRU
(`file_cache.FILES`, `log.max.open.files`), each pinned for one operation; an idle
segment's may be closed and are reopened at its next use.

Thread-safety: all methods run under the owning log's lock, except `sync`, which a
flusher thread may call concurrently with appends; it only fsyncs descriptors.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Container, Iterator, Sequence
from pathlib import Path

from tidegate.common.errors import CorruptRecordError, InvalidRecordError
from tidegate.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    parse_header,
    peek_size,
    validate_batch,
)
from tidegate.storage.config import LogConfig
from tidegate.storage.disk_space import disk_full_error
from tidegate.storage.errors import CorruptIndexError
from tidegate.storage.file_cache import FILES
from tidegate.storage.files import INDEX_EXT, LOG_EXT, TIMEINDEX_EXT, TXNINDEX_EXT, segment_path
from tidegate.storage.offset_index import OffsetIndex
from tidegate.storage.time_index import NO_TIMESTAMP, TimeIndex
from tidegate.storage.txn_index import TxnIndex

__all__ = ["LogSegment", "check_batch"]

log = logging.getLogger(__name__)

SCAN_CHUNK = 16 * 1024  # header scans: one pread covers several small batches
RECOVERY_CHUNK = 1 << 20  # recovery reads whole batches in big chunks
MAX_RELATIVE_OFFSET = (1 << 31) - 1

Buffer = bytes | bytearray | memoryview
IOV_MAX = 1024  # Linux's limit on the pieces of one pwritev


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


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        now_ms: int,
        *,
        suffix: str = "",
        create: bool = False,
        names: Container[str] | None = None,
    ) -> None:
        """Open (or with `create`, create empty) the segment's files. Call `load` or
        `recover` before using an existing segment. `names`: the directory's file names
        if the caller has just listed it (a partition's open: no stat per index file)."""
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.suffix = suffix
        self.log_path = segment_path(directory, base_offset, LOG_EXT, suffix)
        index_path = segment_path(directory, base_offset, INDEX_EXT, suffix)
        time_path = segment_path(directory, base_offset, TIMEINDEX_EXT, suffix)
        if names is None:
            self.indexes_missing = not (index_path.exists() and time_path.exists())
        else:
            self.indexes_missing = not (index_path.name in names and time_path.name in names)
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if create else 0)
        # through the process's LRU of descriptors (file_cache): pinned per operation
        self._file = FILES.open(self.log_path, flags)
        with self._file as fd:
            st = os.fstat(fd)
        self.size = st.st_size
        self.created_ms = now_ms if create or not self.size else st.st_mtime_ns // 1_000_000
        self.offset_index = OffsetIndex(index_path, base_offset, config.segment_index_bytes)
        self.time_index = TimeIndex(time_path, base_offset, config.segment_index_bytes)
        if create:
            self.offset_index.reset()
            self.time_index.reset()
        txn_path = segment_path(directory, base_offset, TXNINDEX_EXT, suffix)
        self.txn_index = TxnIndex(
            txn_path, create=create,
            missing=None if names is None or create else txn_path.name not in names,
        )
        # The aborted-transaction index needs the producer state to be rebuilt, so the
        # segment only flags it (missing, corrupt, or the log was recovered); the loader
        # (`txn_recovery`) rebuilds it.
        self.txn_index_stale = self.txn_index.missing
        # Whether `recover` kept a control batch (None: not recovered): a recovered
        # segment without one has an empty txn index, which the loader then writes
        # without the producer-state replay a rebuild needs (`recovery`).
        self.recovered_controls: bool | None = None
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset  # base offset of the batch holding it
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index = 0
        self._dirty = False
        self._index_write_failed = False
        self.closed = False

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size}, next={self.next_offset})"

    # -- loading -----------------------------------------------------------------------

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

    # -- appending ---------------------------------------------------------------------

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        if self._bytes_since_index > self.config.index_interval_bytes:
            self.offset_index.append(header.base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size

    def append(
        self, data: Buffer | Sequence[Buffer], headers: Sequence[BatchHeader],
        positions: Sequence[int]
    ) -> None:
        """Write validated batches (`positions` are their offsets within `data`), then
        index them. One write for the log, one per index. `data` may come in pieces
        (`validation.stamp_offsets`), written in order with one gathered write.

        All or nothing for the log: if the write fails (a full disk) after part of the
        data went in, the file is cut back to where it was, so no stray bytes lie past
        `size` (a later append writes there; a restart would have to cut them). After the
        log write nothing raises: index entries that cannot be written stay queued."""
        start = self.size
        pieces = ([memoryview(data)] if isinstance(data, bytes | bytearray | memoryview)
                  else [memoryview(d) for d in data])
        pos = start
        try:
            with self._file as fd:
                i = 0
                while i < len(pieces):
                    n = os.pwritev(fd, pieces[i : i + IOV_MAX], pos)
                    pos += n
                    while i < len(pieces) and n >= len(pieces[i]):  # skip what was written
                        n -= len(pieces[i])
                        i += 1
                    if n:  # a short write: go on from within this piece
                        pieces[i] = pieces[i][n:]
        except OSError:
            if pos > start:
                try:
                    with self._file as fd:
                        os.ftruncate(fd, start)  # shrinking needs no space
                except OSError as e:  # left for the next append or recovery to cut
                    log.warning("%s: cannot cut a partial write back to %d: %s",
                                self.log_path, start, e)
            raise
        self.size = pos
        self._dirty = True
        for header, rel in zip(headers, positions):
            self._index_batch(header, start + rel)
        self.next_offset = headers[-1].next_offset
        self._write_sparse_indexes()

    def _write_sparse_indexes(self) -> None:
        """Write queued offset / time index entries; a failure keeps them queued (and in
        memory, where lookups read them) for the next attempt. The batches they point at
        are in the log already and must stay reported written (failing the append would
        leave them unknown to the producer state, and a retry would be written twice);
        entries a crash loses cost only a longer scan, as recovery rebuilds them."""
        try:
            self.offset_index.write_pending()
            self.time_index.write_pending()
        except OSError as e:
            if not self._index_write_failed and disk_full_error(e) is None:
                log.warning("%s: index entries not written yet (%s); will retry",
                            self.log_path, e)
            self._index_write_failed = True
        else:
            self._index_write_failed = False

    def write_pending(self) -> None:
        """Write what earlier appends left queued (a full disk): offset / time index
        entries if they fit now, and aborted-transaction entries, raising OSError while
        those cannot be written (so a flush cannot call the segment durable without
        them). Under the owning log's lock."""
        if self._index_write_failed:
            self._write_sparse_indexes()
        self.txn_index.write_pending()

    def should_roll(self, incoming: int, max_timestamp: int, last_offset: int, now_ms: int) -> bool:
        """Kafka's roll rule: size, age (by first batch timestamp, else creation time,
        against segment.ms), full indexes, or relative offsets overflowing int32."""
        if last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            return True
        if self.size == 0:
            return False
        if self.size > self.config.segment_bytes - incoming:
            return True
        first = self.first_batch_timestamp
        waited = (
            max_timestamp - first if first is not None and first >= 0 else now_ms - self.created_ms
        )
        if waited > self.config.segment_ms:
            return True
        return self.offset_index.is_full or self.time_index.is_full

    def on_become_inactive(self) -> None:
        """The segment was rolled: record its final max timestamp in the time index
        (queued if the disk is full: see `_write_sparse_indexes`)."""
        self.time_index.maybe_append(
            self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
        )
        self._write_sparse_indexes()

    # -- reading -----------------------------------------------------------------------

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

    # -- truncation, durability, lifecycle ---------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding `offset` and everything after it; returns bytes cut."""
        found = self.find_position(offset)
        if found is None:
            return 0
        position, header = found
        cut = self.size - position
        with self._file as fd:
            os.ftruncate(fd, position)
        self.size = position
        self._dirty = True
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        if position == 0:
            self.next_offset = self.base_offset
            self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
            self.first_batch_timestamp = None
            self._bytes_since_index = 0
        else:
            self._scan_tail()
            self.next_offset = header.base_offset
        return cut

    def sync(self, *, indexes: bool = True) -> None:
        """fdatasync the log, the transaction index and (with `indexes`) the offset and
        time indexes, each if written since its last sync (any thread). `Log.flush`
        leaves the active segment's offset and time indexes out: a start after a crash
        rebuilds them from the log (see `Log.recovery_point_to_checkpoint`)."""
        if self.closed:
            return
        if self._dirty:
            self._dirty = False
            with self._file as fd:
                os.fdatasync(fd)
        if indexes:
            self.offset_index.sync()
            self.time_index.sync()
        self.txn_index.sync()

    def rename_log(self, suffix: str) -> None:
        """Rename only the `.log` file (the cleaner's commit point is `X.log.swap`)."""
        new_log = segment_path(self.directory, self.base_offset, LOG_EXT, suffix)
        with self._file:  # open across the rename: a flusher never reopens a stale path
            os.replace(self.log_path, new_log)
            self.log_path = self._file.path = new_log

    def rename(self, suffix: str) -> None:
        """Give the three files a new suffix ("" = live segment)."""
        for index, ext in ((self.offset_index, INDEX_EXT), (self.time_index, TIMEINDEX_EXT)):
            index.rename(segment_path(self.directory, self.base_offset, ext, suffix))
        self.txn_index.rename(segment_path(self.directory, self.base_offset, TXNINDEX_EXT, suffix))
        new_log = segment_path(self.directory, self.base_offset, LOG_EXT, suffix)
        with self._file:  # open across the rename: a flusher never reopens a stale path
            os.replace(self.log_path, new_log)
            self.log_path = self._file.path = new_log
        self.suffix = suffix

    def close(self) -> None:
        if not self.closed:
            self.offset_index.close()
            self.time_index.close()
            self.closed = True
            self._file.close()

    def hold_open(self) -> None:
        """Keep the descriptors open until `close`, out of the LRU's reach: the files are
        about to be unlinked or their directory renamed, and a flush still running may
        sync them (a descriptor reopened by path would not find them)."""
        if not self.closed:
            self._file.hold()
            self.offset_index.hold_open()
            self.time_index.hold_open()

    def delete_files(self) -> None:
        """Unlink the files (descriptors stay valid until `close`)."""
        self.hold_open()
        paths = (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path)
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
