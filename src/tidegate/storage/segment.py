"""One log segment: a `.log` file of RecordBatch v2 bytes plus its two sparse indexes.

The segment stores batches exactly as they travel on the wire, already validated and
offset-assigned by the `Log`. It knows how to find the batch holding an offset (index
floor, then scan batch headers), read bytes at a position, decide when to roll, recover
after a crash (CRC-check every batch, cut at the first torn or corrupt one, rebuild the
indexes), truncate, fsync, close and delete. This module opens, appends to, truncates,
syncs, renames and closes it; its bases hold the rest: `segment_loading.py` (load,
recover, rebuild the indexes) over `segment_reads.py` (header scans, lookups, fetch reads).

Invariants:
- `size` is the length of the `.log` file and always ends on a batch boundary; batches
  have strictly increasing, non-overlapping offsets >= `base_offset`, with
  `last_offset - base_offset < 2**31` (relative offsets fit the indexes' int32).
- Index entries only point at batches that are already in the `.log` file (the log is
  written before the index), so a crash can lose index entries but never make one lie.
  (A power loss can leave an unsynced index short or garbled: the active segment's
  indexes are not fsynced by flushes, so a start after a crash rebuilds them; see `sync`.
  Nor are they written at each append: `INDEX_WRITE_BYTES` of entries at a time, and
  all of them at roll, truncation and close, so a kill -9 can lose the queued ones.)
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
from collections.abc import Container, Sequence
from pathlib import Path

from tidegate.records.batch import LOG_OVERHEAD, BatchHeader
from tidegate.storage.config import LogConfig
from tidegate.storage.disk_space import disk_full_error
from tidegate.storage.file_cache import FILES
from tidegate.storage.files import INDEX_EXT, LOG_EXT, TIMEINDEX_EXT, TXNINDEX_EXT, segment_path
from tidegate.storage.offset_index import OffsetIndex
from tidegate.storage.segment_loading import (
    MAX_RELATIVE_OFFSET,
    RECOVERY_CHUNK,
    Buffer,
    SegmentLoading,
    check_batch,
)
from tidegate.storage.segment_reads import SCAN_CHUNK
from tidegate.storage.time_index import NO_TIMESTAMP, TimeIndex
from tidegate.storage.txn_index import TxnIndex

__all__ = ["MAX_RELATIVE_OFFSET", "RECOVERY_CHUNK", "SCAN_CHUNK", "LogSegment", "check_batch"]

log = logging.getLogger(__name__)

IOV_MAX = 1024  # Linux's limit on the pieces of one pwritev
# The active segment's offset / time index entries are written to their files once this
# many bytes of them are queued (and at roll, truncation and close), not at each append:
# two pwrite calls per indexed batch were ~8 us of a 60 KB batch's append at 1,000
# partitions. Lookups read the in-memory entries; no flush syncs the active segment's
# indexes, and a start after a crash rebuilds them from the log (module doc, `sync`), so
# entries still queued at a crash cost nothing that was not already so.
INDEX_WRITE_BYTES = 4096


class LogSegment(SegmentLoading):
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

    # -- appending ---------------------------------------------------------------------

    def _index_batch(self, header: BatchHeader, position: int) -> bool:
        """Note an appended batch; whether it got index entries (queued)."""
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        if self._bytes_since_index > self.config.index_interval_bytes:
            self.offset_index.append(header.base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = header.batch_length + LOG_OVERHEAD  # (`size`)
            return True
        self._bytes_since_index += header.batch_length + LOG_OVERHEAD  # (`size`)
        return False

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
        # pwritev takes any buffers; a short write slices them (a bytearray slice copies)
        pieces = [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
        pos = start
        try:
            with self._file as fd:
                i = 0
                while i < len(pieces):
                    chunk = pieces[i : i + IOV_MAX]
                    n = os.pwritev(fd, chunk, pos)
                    pos += n
                    if n == sum(map(len, chunk)):  # all of it: the usual case
                        i += len(chunk)
                        continue
                    while n >= len(pieces[i]):  # a short write: skip what was written
                        n -= len(pieces[i])
                        i += 1
                    if n:  # go on from within this piece
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
        if len(headers) == 1:  # one batch per Produce request: no loop
            indexed = self._index_batch(headers[0], start + positions[0])
        else:
            indexed = False
            for header, rel in zip(headers, positions):
                indexed = self._index_batch(header, start + rel) or indexed
        self.next_offset = headers[-1].next_offset
        if self._index_write_failed or (indexed and (
            self.offset_index.pending_bytes >= INDEX_WRITE_BYTES
            or self.time_index.pending_bytes >= INDEX_WRITE_BYTES
        )):
            self._write_sparse_indexes()

    def append_batch(self, head: bytearray, rest: memoryview, header: BatchHeader) -> None:
        """`append` of one batch given as its stamped header and the rest of it (a
        Produce's usual case, `Log._append_one`): the same write and index step, without
        the loop over pieces. A short write is written again whole by `append`."""
        start = self.size
        with self._file as fd:
            n = os.pwritev(fd, (head, rest), start)
        if n != len(head) + len(rest):
            self.append((head, rest), (header,), (0,))
            return
        self.size = start + n
        self._dirty = True
        indexed = self._index_batch(header, start)
        self.next_offset = header.base_offset + header.last_offset_delta + 1  # (`next_offset`)
        if self._index_write_failed or (indexed and (
            self.offset_index.pending_bytes >= INDEX_WRITE_BYTES
            or self.time_index.pending_bytes >= INDEX_WRITE_BYTES
        )):
            self._write_sparse_indexes()

    def _write_sparse_indexes(self) -> None:
        """Write queued offset / time index entries (`append` leaves them queued until
        INDEX_WRITE_BYTES of them are, `on_become_inactive`, truncation and `close`
        write them); a failure keeps them queued (and in
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
        size = self.size
        if size == 0:
            return False
        config = self.config
        if size > config.segment_bytes - incoming:
            return True
        first = self.first_batch_timestamp
        waited = (
            max_timestamp - first if first is not None and first >= 0 else now_ms - self.created_ms
        )
        if waited > config.segment_ms:
            return True
        return self.offset_index.is_full or self.time_index.is_full

    def on_become_inactive(self) -> None:
        """The segment was rolled: record its final max timestamp in the time index
        (queued if the disk is full: see `_write_sparse_indexes`)."""
        self.time_index.maybe_append(
            self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
        )
        self._write_sparse_indexes()

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
        """Unlink the files (descriptors stay valid until `close`; index entries still
        queued are dropped, not written at `close`)."""
        self.offset_index.discard_pending()
        self.time_index.discard_pending()
        self.hold_open()
        paths = (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path)
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
