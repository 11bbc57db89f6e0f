"""The aborted-transaction index of one segment: Kafka's `<base offset>.txnindex` file.

Every transaction that ends with an ABORT marker gets one entry in the index of the
segment holding that marker, written when the marker is appended. read_committed
fetches use the entries to tell consumers which producers' batches to drop
(`collect_aborted`); the cleaner uses them to find aborted data.

Layout (Kafka's TransactionIndex, big-endian, 34 bytes per entry, no header):

    version            int16 (= 0)
    producerId         int64
    firstOffset        int64   first offset of the transaction's data in the partition
    lastOffset         int64   offset of the ABORT marker
    lastStableOffset   int64   the LSO once this transaction completed, ignoring the
                               high watermark: the first offset of the oldest other open
                               transaction, else lastOffset + 1

Invariants:
- entries are in marker order: `last_offset` strictly increases within a file, and
  from one segment's file to the next;
- the file is created empty with its segment (so a missing file means "lost", and
  recovery rebuilds it) and always holds a whole number of entries; a torn tail (a crash
  mid-append), a bad version or disorder makes it corrupt, and recovery rebuilds it;
- entries are kept in memory (aborts are rare); the file is opened only to append,
  truncate and fsync, so a segment holds no extra descriptor;
- an entry is in memory (read_committed fetches see it) from its marker's append on,
  even when writing it to the file failed (a full disk): it then stays *pending*, and
  `write_pending` (which the log's flush calls before it syncs, raising while it cannot)
  writes it, so the recovery point never passes a segment whose file lacks an entry:
  after a crash that segment is recovered and its index rebuilt.

Thread-safety: as `IndexFile`: everything under the log's lock except `sync`, which a
flusher thread may call concurrently; it only opens the path and fsyncs it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

from tidegate.storage.errors import CorruptIndexError

__all__ = ["ENTRY_SIZE", "AbortedTxn", "TxnIndex", "TxnIndexEntry", "collect_aborted"]

TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    """What a read_committed Fetch response reports per aborted transaction."""

    producer_id: int
    first_offset: int


class TxnIndexEntry(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            TXN_INDEX_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @classmethod
    def decode(cls, data: bytes | memoryview, pos: int = 0) -> TxnIndexEntry:
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != TXN_INDEX_VERSION:
            raise CorruptIndexError(f"transaction index entry version {version} at {pos}")
        return cls(pid, first, last, lso)


class TxnIndex:
    def __init__(self, path: Path, *, create: bool = False, missing: bool | None = None) -> None:
        """With `create`, start a new empty file; otherwise call `load`. `missing`:
        whether the file is absent, if the caller knows (from a directory listing)."""
        self.path = path
        self.entries: list[TxnIndexEntry] = []
        self._written = 0  # entries[:_written] are in the file; the rest are pending
        self._dirty = False
        if create:
            self._write_all()
        self.missing = not path.exists() if missing is None else missing

    def load(self) -> None:
        """Read the file. Raises CorruptIndexError if its length is not a whole number of
        entries, an entry is invalid, or entries are out of order (the caller rebuilds:
        cutting a torn entry would make aborted data visible)."""
        data = self.path.read_bytes()
        if len(data) % ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: {len(data)} bytes is not whole entries")
        entries = [TxnIndexEntry.decode(data, p) for p in range(0, len(data), ENTRY_SIZE)]
        for a, b in pairwise(entries):
            if b.last_offset <= a.last_offset:
                raise CorruptIndexError(f"{self.path}: last offsets out of order")
        for e in entries:
            if e.first_offset > e.last_offset or e.last_stable_offset > e.last_offset + 1:
                raise CorruptIndexError(f"{self.path}: inconsistent entry {e}")
        self.entries = entries
        self._written = len(entries)
        self.missing = False

    def check_range(self, base_offset: int, next_offset: int) -> None:
        """Every marker must lie in the segment [base_offset, next_offset)."""
        for e in self.entries:
            if not base_offset <= e.last_offset < next_offset:
                raise CorruptIndexError(
                    f"{self.path}: marker offset {e.last_offset} outside the segment "
                    f"[{base_offset}, {next_offset})"
                )

    # -- writing ----------------------------------------------------------------------

    def append(self, entry: TxnIndexEntry) -> bool:
        """Add `entry` (in memory at once) and write it to the file; False if the write
        failed (disk full): it stays pending, written by the next `append`,
        `write_pending` or `sync`. Never raises for I/O: the marker is in the log already,
        and failing its append would let a retry write it twice."""
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise ValueError(
                f"aborted transaction at {entry.last_offset} is not after "
                f"{self.entries[-1].last_offset} in {self.path}"
            )
        self.entries.append(entry)
        self.missing = False
        try:
            self.write_pending()
        except OSError:
            return False
        return True

    def extend(self, entries: Iterable[TxnIndexEntry]) -> None:
        """Add entries (recovery rebuilding the file); raises if they cannot be written."""
        for e in entries:
            self.append(e)
        self.write_pending()

    @property
    def pending(self) -> int:
        """Entries in memory not yet written to the file."""
        return len(self.entries) - self._written

    def write_pending(self) -> None:
        """Write the entries not in the file yet; raises OSError while it cannot (a
        partial write is overwritten by the next attempt)."""
        if self._written >= len(self.entries):
            return
        data = b"".join(e.encode() for e in self.entries[self._written :])
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            view, pos = memoryview(data), self._written * ENTRY_SIZE
            while view:
                n = os.pwrite(fd, view, pos)
                view, pos = view[n:], pos + n
        finally:
            os.close(fd)
        self._written = len(self.entries)
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset` (the new log end)."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._write_all()

    def reset(self) -> None:
        self.entries = []
        self._write_all()

    def _write_all(self) -> None:
        """Rewrite the file from memory (truncation, reset). Shrinking needs no space;
        entries that do not fit stay pending."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.close(fd)
        self._written = 0
        self._dirty = True
        self.missing = False
        try:
            self.write_pending()
        except OSError:
            pass  # pending: written (or raised) by the next flush

    # -- durability and files ----------------------------------------------------------

    def sync(self) -> None:
        """fsync the file if written since the last sync (any thread). Pending entries
        are the caller's to write first, under the log's lock (`Log.flush` does)."""
        if not self._dirty:
            return
        self._dirty = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:  # renamed or deleted meanwhile: nothing to keep
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, path: Path) -> None:
        try:
            os.replace(self.path, path)
        except FileNotFoundError:
            pass
        self.path = path

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    # -- queries ----------------------------------------------------------------------

    def collect(self, start_offset: int, upper_bound_offset: int, out: list[TxnIndexEntry]) -> bool:
        """Append to `out` the entries overlapping [start_offset, upper_bound_offset).
        True once an entry's lastStableOffset reaches the upper bound: no transaction
        completed later can overlap the range, so later segments need not be searched."""
        for e in self.entries:
            if e.last_offset >= start_offset and e.first_offset < upper_bound_offset:
                out.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return True
        return False


def collect_aborted(
    indexes: Sequence[TxnIndex], start_offset: int, upper_bound_offset: int
) -> list[TxnIndexEntry]:
    """Kafka's collectAbortedTransactions over the indexes of the segments from the one
    holding `start_offset` on: the entries overlapping [start, upper), by first offset."""
    found: list[TxnIndexEntry] = []
    for index in indexes:
        if index.collect(start_offset, upper_bound_offset, found):
            break
    found.sort(key=lambda e: (e.first_offset, e.last_offset))
    return found
