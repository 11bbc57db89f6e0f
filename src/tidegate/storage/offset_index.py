"""Sparse offset index of one segment: offset -> file position of a batch.

Entries are Kafka's: int32 offset relative to the segment's base offset, int32 position
in the `.log` file, big-endian, 8 bytes. Tidegate writes one entry per
`index.interval.bytes` of log, keyed by the batch's base offset; Kafka keys entries by
the batch's last offset. Both satisfy the one invariant lookups rely on: every batch
before an entry's position holds only offsets smaller than the entry's offset, so for
any target >= that offset, "floor entry, then scan batch headers forward" finds it.

Invariants (checked by `sanity_check`): offsets and positions strictly increase,
relative offsets are >= 0 and positions lie inside the log file.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

from tidegate.storage.errors import CorruptIndexError
from tidegate.storage.index_file import IndexFile, increasing

__all__ = ["OffsetIndex"]

_ENTRY = struct.Struct(">ii")


class OffsetIndex(IndexFile):
    entry_size = 8

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._rel = array("i")
        self._pos = array("i")

    def __len__(self) -> int:
        return len(self._rel)

    def _load_entries(self, data: bytes) -> None:
        flat = array("i")
        flat.frombytes(data)
        if sys.byteorder == "little":
            flat.byteswap()
        self._rel = flat[0::2]
        self._pos = flat[1::2]

    def _truncate_entries(self, count: int) -> None:
        del self._rel[count:]
        del self._pos[count:]

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset if there is none."""
        return self.base_offset + self._rel[-1] if self._rel else self.base_offset

    @property
    def last_position(self) -> int:
        return self._pos[-1] if self._pos else 0

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            raise ValueError(
                f"offset index entry ({offset}, {position}) is not after the last one "
                f"({self.last_offset}, {self.last_position}) in {self.path}"
            )
        if not 0 <= rel < (1 << 31):
            raise ValueError(f"offset {offset} out of range for segment {self.base_offset}")
        self._rel.append(rel)
        self._pos.append(position)
        self._queue(_ENTRY.pack(rel, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry with offset <= `offset`, else (base offset, 0)."""
        i = bisect_right(self._rel, offset - self.base_offset)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i - 1], self._pos[i - 1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        self.truncate_entries(bisect_right(self._rel, offset - self.base_offset - 1))

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond `position` (the log was cut there)."""
        self.truncate_entries(bisect_right(self._pos, position - 1))

    def entries(self) -> list[tuple[int, int]]:
        return [(self.base_offset + r, p) for r, p in zip(self._rel, self._pos)]

    def sanity_check(self, log_size: int) -> None:
        rel, pos = self._rel, self._pos
        if not rel or (min(rel) >= 0 and min(pos) >= 0 and max(pos) < log_size
                       and increasing(rel) and increasing(pos)):
            return
        for i in range(len(rel)):
            if rel[i] < 0 or not 0 <= pos[i] < log_size:
                raise CorruptIndexError(
                    f"{self.path}: entry {i} ({rel[i]}, {pos[i]}) is outside the segment "
                    f"(log size {log_size})"
                )
            if i and (rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]):
                raise CorruptIndexError(f"{self.path}: entry {i} is not increasing")
