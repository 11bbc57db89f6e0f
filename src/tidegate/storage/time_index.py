"""Sparse time index of one segment: max timestamp so far -> offset where it was reached.

Entries are Kafka's: int64 timestamp, int32 offset relative to the segment's base offset,
big-endian, 12 bytes. An entry (t, o) is added alongside an offset index entry only when
the segment's max timestamp has grown, and once more when the segment stops being active,
so the last entry is the segment's max timestamp. `o` is the base offset of the batch
where that max was first reached (Kafka stores the batch's last offset; both work).

Invariant used by lookups: every batch before offset `o` has a max timestamp < t, so for
a target ts >= t the first batch with max timestamp >= ts is at or after `o`.
Checked by `sanity_check`: timestamps strictly increase, offsets never decrease and lie
inside the segment.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from tidegate.storage.errors import CorruptIndexError
from tidegate.storage.index_file import IndexFile, increasing

__all__ = ["TimeIndex"]

_ENTRY = struct.Struct(">qi")
NO_TIMESTAMP = -1


class TimeIndex(IndexFile):
    entry_size = 12

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._ts = array("q")
        self._rel = array("i")

    def __len__(self) -> int:
        return len(self._ts)

    def _load_entries(self, data: bytes) -> None:
        ts = array("q")
        rel = array("i")
        for t, r in _ENTRY.iter_unpack(data):
            ts.append(t)
            rel.append(r)
        self._ts, self._rel = ts, rel

    def _truncate_entries(self, count: int) -> None:
        del self._ts[count:]
        del self._rel[count:]

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) if empty."""
        if not self._ts:
            return NO_TIMESTAMP, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if `timestamp` is larger than the last entry's."""
        if self._ts and timestamp <= self._ts[-1]:
            return
        if timestamp < 0:
            return
        if self.is_full and not skip_full_check:
            return
        rel = offset - self.base_offset
        if self._rel and rel < self._rel[-1]:
            raise ValueError(
                f"time index entry ({timestamp}, {offset}) goes back from offset "
                f"{self.base_offset + self._rel[-1]} in {self.path}"
            )
        if not 0 <= rel < (1 << 31):
            raise ValueError(f"offset {offset} out of range for segment {self.base_offset}")
        self._ts.append(timestamp)
        self._rel.append(rel)
        self._queue(_ENTRY.pack(timestamp, rel))

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last entry with timestamp <= `timestamp`, else (-1, base offset)."""
        i = bisect_right(self._ts, timestamp)
        if i == 0:
            return NO_TIMESTAMP, self.base_offset
        return self._ts[i - 1], self.base_offset + self._rel[i - 1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        self.truncate_entries(bisect_left(self._rel, offset - self.base_offset))

    def entries(self) -> list[tuple[int, int]]:
        return [(t, self.base_offset + r) for t, r in zip(self._ts, self._rel)]

    def sanity_check(self, next_offset: int) -> None:
        ts, rel = self._ts, self._rel
        limit = next_offset - self.base_offset
        if not ts or (min(rel) >= 0 and max(rel) < limit and increasing(ts)
                      and increasing(rel, strict=False)):
            return
        for i in range(len(ts)):
            if not 0 <= rel[i] < limit:
                raise CorruptIndexError(
                    f"{self.path}: entry {i} offset {self.base_offset + rel[i]} is outside "
                    f"the segment [{self.base_offset}, {next_offset})"
                )
            if i and (ts[i] <= ts[i - 1] or rel[i] < rel[i - 1]):
                raise CorruptIndexError(f"{self.path}: entry {i} is out of order")
