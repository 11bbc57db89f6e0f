"""The ordered segments of one log, their lock, and deferred closing of removed ones.

Invariants:
- `segments` is sorted by base offset and never empty; `bases` mirrors it;
- a segment removed by `drop` has its files unlinked at once, but its descriptors are
  closed only when no pin is held, because a flusher thread (or the cleaner) may be
  fsyncing or reading them without holding `lock`;
- `generation` grows whenever data is truncated, so work prepared against an older
  snapshot (a flush's target offset, a cleaned segment) can tell it is stale.

All mutation happens with `lock` held (callers take it); `pin`/`unpin` take it briefly.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tidegate.storage.files import SWAP_SUFFIX, fsync_dir
from tidegate.storage.segment import LogSegment

__all__ = ["SegmentList"]


class SegmentList:
    def __init__(self, segments: list[LogSegment], directory: Path) -> None:
        assert segments
        self.directory = directory
        self.segments = segments
        self.bases = [s.base_offset for s in segments]
        self.lock = threading.RLock()
        self.generation = 0
        self.dir_dirty = False  # files created/removed since the directory was fsynced
        self._pins = 0
        self._retired: list[LogSegment] = []

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    def floor_index(self, offset: int) -> int:
        """Index of the segment whose range would hold `offset` (0 if below all)."""
        return max(bisect_right(self.bases, offset) - 1, 0)

    def append(self, seg: LogSegment) -> None:
        self.segments.append(seg)
        self.bases.append(seg.base_offset)
        self.dir_dirty = True

    def insert(self, index: int, seg: LogSegment) -> None:
        self.segments.insert(index, seg)
        self.bases.insert(index, seg.base_offset)
        self.dir_dirty = True

    def index_of_run(self, run: Sequence[LogSegment]) -> int | None:
        """Where `run` sits, contiguous and identical, before the active segment."""
        for i, seg in enumerate(self.segments):
            if seg is run[0]:
                ok = i + len(run) < len(self.segments) and all(
                    self.segments[i + k] is s for k, s in enumerate(run)
                )
                return i if ok else None
        return None

    def swap_in(self, old: Sequence[LogSegment], new: LogSegment, generation: int) -> bool:
        """Replace the contiguous closed segments `old` by `new`, whose files carry the
        `.cleaned` suffix and are fsynced (lock held). Crash-safe order: rename `new`'s
        log to `.swap` (the commit point recovery honours), unlink the old files, give
        `new`'s files their final names. False if truncated since `generation` or if
        `old` is no longer in place."""
        if generation != self.generation or not old:
            return False
        i = self.index_of_run(list(old))
        if i is None:
            return False
        new.rename_log(SWAP_SUFFIX)
        fsync_dir(self.directory)
        for seg in old:
            self.drop(seg)
        new.rename("")
        self.insert(i, new)
        fsync_dir(self.directory)
        self.dir_dirty = False
        return True

    def drop(self, seg: LogSegment) -> None:
        """Remove `seg` from the list and unlink its files (lock held)."""
        i = self.segments.index(seg)
        del self.segments[i]
        del self.bases[i]
        seg.delete_files()
        self.retire(seg)
        self.dir_dirty = True

    def retire(self, seg: LogSegment) -> None:
        """Close `seg` now, or when the last pin is released."""
        if self._pins:
            seg.hold_open()  # its directory may be renamed before the pin ends
            self._retired.append(seg)
        else:
            seg.close()

    def pin(self) -> None:
        with self.lock:
            self._pins += 1

    def unpin(self) -> None:
        with self.lock:
            self._pins -= 1
            if self._pins == 0:
                for seg in self._retired:
                    seg.close()
                self._retired.clear()

    @contextmanager
    def pinned(self) -> Iterator[tuple[tuple[LogSegment, ...], int]]:
        """A snapshot of the segments and the generation, descriptors kept open."""
        with self.lock:
            self._pins += 1
            snapshot = (tuple(self.segments), self.generation)
        try:
            yield snapshot
        finally:
            self.unpin()
