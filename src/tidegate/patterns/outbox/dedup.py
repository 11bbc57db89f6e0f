"""Consumer-side de-duplication by event id, for readers that do not read committed.

A read_committed consumer sees each outbox row's record exactly once. A reader with
``isolation.level=read_uncommitted`` (or a non-Kafka-transactional tool) also sees the
records of aborted attempts — a relay killed before its commit, a batch retried after
a broker error — before the committed retry, which carries the same ``id`` header.
`Deduplicator.first_time(record)` is True the first time an id is seen, so such a
reader processes every event once.

It remembers the last `capacity` ids (least recently seen are forgotten first): choose
it larger than the number of events a retry can be behind its first attempt (a few
relay batches). For a reader whose effects go to a database, store the processed ids
in the same local transaction as the effect instead (the consumer's own "local message
table"), which survives restarts; `event_id` reads the header for either.
"""

from __future__ import annotations

from collections import OrderedDict

from tidegate.client import ConsumerRecord

__all__ = ["Deduplicator", "event_id"]


def event_id(record: ConsumerRecord) -> str | None:
    """The outbox event id (header ``id``) of a record, or None."""
    for name, value in record.headers:
        if name == "id" and value is not None:
            return value.decode()
    return None


class Deduplicator:
    """See the module docstring."""

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.duplicates = 0

    def first_time(self, record: ConsumerRecord | str) -> bool:
        """True the first time this event id is seen (records without an id always
        count as new: they did not come from an outbox relay)."""
        eid = record if isinstance(record, str) else event_id(record)
        if eid is None:
            return True
        seen = self._seen
        if eid in seen:
            seen.move_to_end(eid)
            self.duplicates += 1
            return False
        seen[eid] = None
        if len(seen) > self.capacity:
            seen.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._seen)
