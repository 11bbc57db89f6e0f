"""The notifier's bookkeeping, without I/O: which notifications are waiting for which
attempt, and which consumed offsets may be committed.

A notification is one record of the source topic to deliver to one endpoint. Its
first attempt is made when it is polled; a failed attempt ``k`` (1-based) is retried
``schedule[k-1]`` seconds later; after ``len(schedule) + 1`` failed attempts it is
*dead* (the notifier sends it to the dead-letter topic). Time is always passed in
(``now``, seconds from any monotonic clock), so the tests drive it.

Offsets: per partition the committable offset is the lowest offset still outstanding
(not yet delivered nor dead-lettered), or one past the last polled record when none
is. Committing only that much makes a crash re-deliver what was in flight: at least
once, never lost.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from tidegate.client import ConsumerRecord, TopicPartition

__all__ = ["DEFAULT_SCHEDULE_S", "Notification", "Outcome", "Tracker", "notification_id"]

# Seed 001's "time ladder": retry at increasing intervals, then stop. Seconds after the
# previous failed attempt: 15 s, 1 min, 5 min, 30 min, 1 h, 2 h, 6 h (about 10 h in all).
DEFAULT_SCHEDULE_S: tuple[float, ...] = (15, 60, 300, 1800, 3600, 7200, 21600)


def notification_id(record: ConsumerRecord) -> str:
    """Stable across restarts and re-deliveries: the receiver de-duplicates by it."""
    return f"{record.topic}:{record.partition}:{record.offset}"


@dataclass
class Notification:
    record: ConsumerRecord
    endpoint: str
    attempts: int = 0
    last_error: str = ""

    @property
    def id(self) -> str:
        return notification_id(self.record)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.record.topic, self.record.partition)


@dataclass(frozen=True)
class Outcome:
    """What one attempt's result means: ``delivered``, ``retry`` (at ``retry_at``) or
    ``dead`` (the schedule is exhausted)."""

    kind: str
    retry_at: float | None = None


@dataclass
class Tracker:
    schedule: Sequence[float] = DEFAULT_SCHEDULE_S
    _due: list[tuple[float, int, Notification]] = field(default_factory=list)
    _outstanding: dict[TopicPartition, set[int]] = field(default_factory=dict)
    _next: dict[TopicPartition, int] = field(default_factory=dict)
    _committed: dict[TopicPartition, int] = field(default_factory=dict)
    _tie: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        if any(s < 0 for s in self.schedule):
            raise ValueError("retry intervals must not be negative")

    @property
    def max_attempts(self) -> int:
        return len(self.schedule) + 1

    def add(self, record: ConsumerRecord, endpoint: str) -> Notification:
        """A polled record: outstanding until `finish`ed."""
        n = Notification(record, endpoint)
        self._outstanding.setdefault(n.tp, set()).add(record.offset)
        self._next[n.tp] = max(self._next.get(n.tp, 0), record.offset + 1)
        return n

    def skip(self, record: ConsumerRecord) -> None:
        """A polled record with nothing to deliver (no endpoint): only its offset moves."""
        tp = TopicPartition(record.topic, record.partition)
        self._next[tp] = max(self._next.get(tp, 0), record.offset + 1)

    def result(self, n: Notification, ok: bool, now: float, error: str = "") -> Outcome:
        """Count one attempt of `n` and say what comes next. A retry is queued here."""
        n.attempts += 1
        if ok:
            return Outcome("delivered")
        n.last_error = error
        if n.attempts >= self.max_attempts:
            return Outcome("dead")
        at = now + self.schedule[n.attempts - 1]
        heapq.heappush(self._due, (at, next(self._tie), n))
        return Outcome("retry", at)

    def finish(self, n: Notification) -> None:
        """Delivered or dead-lettered (and that is durably logged): release its offset."""
        self._outstanding.get(n.tp, set()).discard(n.record.offset)

    def due(self, now: float, limit: int) -> list[Notification]:
        """Up to `limit` retries whose time has come, earliest first."""
        out: list[Notification] = []
        while self._due and self._due[0][0] <= now and len(out) < limit:
            out.append(heapq.heappop(self._due)[2])
        return out

    def next_due(self) -> float | None:
        return self._due[0][0] if self._due else None

    @property
    def waiting(self) -> int:
        """Notifications queued for a retry."""
        return len(self._due)

    @property
    def outstanding(self) -> int:
        return sum(len(s) for s in self._outstanding.values())

    def to_commit(self) -> dict[TopicPartition, int]:
        """Offsets that moved since the last `committed` call, safe to commit now."""
        out: dict[TopicPartition, int] = {}
        for tp, nxt in self._next.items():
            pending = self._outstanding.get(tp)
            offset = min(pending) if pending else nxt
            if self._committed.get(tp) != offset:
                out[tp] = offset
        return out

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        self._committed.update(offsets)
