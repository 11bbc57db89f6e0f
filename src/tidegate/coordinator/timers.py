"""Deadlines for a coordinator shard: schedule, cancel, and pop the ones that are due.

Sans-IO: nothing sleeps here. The shard asks `pop_due(now_ms)` when the I/O shell ticks
and reports `next_deadline()` so the shell knows whether anything is waiting.

Invariant: at most one deadline per key; rescheduling a key replaces its deadline.
Heap entries that no longer match the key's current deadline are stale and skipped
(lazy deletion), so schedule and cancel are O(log n) and O(1).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable

__all__ = ["DeadlineQueue"]


class DeadlineQueue:
    def __init__(self) -> None:
        self._deadlines: dict[Hashable, int] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._deadlines)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._deadlines

    def get(self, key: Hashable) -> int | None:
        return self._deadlines.get(key)

    def schedule(self, key: Hashable, deadline_ms: int) -> None:
        if self._deadlines.get(key) == deadline_ms:
            return
        self._deadlines[key] = deadline_ms
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), key))
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._deadlines):
            self._compact()

    def cancel(self, key: Hashable) -> None:
        self._deadlines.pop(key, None)

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap and self._deadlines.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_next(self, now_ms: int) -> Hashable | None:
        """The earliest key whose deadline is <= now (unscheduled), or None."""
        deadline = self.next_deadline()
        if deadline is None or deadline > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._deadlines[key]
        return key

    def pop_due(self, now_ms: int) -> list[Hashable]:
        """Keys whose deadline is <= now, earliest first; they are unscheduled."""
        due = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            deadline, _, key = heapq.heappop(heap)
            if self._deadlines.get(key) == deadline:
                del self._deadlines[key]
                due.append(key)
        return due

    def _compact(self) -> None:
        self._heap = [(d, next(self._seq), k) for k, d in self._deadlines.items()]
        heapq.heapify(self._heap)
