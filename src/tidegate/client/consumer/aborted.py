"""read_committed filtering: which fetched batches a consumer may hand out (sans-IO).

A read_committed Fetch returns the log below the last stable offset as it is —
committed data, aborted data and COMMIT/ABORT control batches alike — together with
the aborted transactions, as (producer id, first offset), that overlap the returned
range. `AbortedFilter` decides batch by batch, in log order, what is dropped (seed
000's ``nextFetchedRecord``):

- the aborted transactions are taken in order of first offset; once the batches reach
  a transaction's first offset, its producer id joins the *aborted set*;
- a transactional data batch of a producer in the aborted set is dropped;
- an ABORT control batch of a producer takes it out of the aborted set again (its
  aborted transaction has ended: a later transaction of the same producer is judged
  by the next entry of the list);
- control batches are never handed out (read_uncommitted drops them too).

Invariants: the decision for a batch depends only on the batches before it in the
same fetch and the fetch's aborted list, so the filter is rebuilt for every fetch
response (the broker lists a transaction again in a later fetch as long as its ABORT
marker lies at or after that fetch's offset). Non-transactional batches are always
kept. A transaction is "reached" when its first offset is at or below the batch's last
offset (as Kafka's consumer does); for a well-formed log that is the same as its base
offset, since a transaction's first offset is the base offset of its first batch.
Control records of other types (KRaft's LEADER_CHANGE, unknown future ones) are
dropped without touching the aborted set.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any, NamedTuple

from tidegate.common.errors import InvalidRecordError
from tidegate.records.control import ControlType, parse_control_record
from tidegate.records.record import RecordTuple

__all__ = ["AbortedFilter", "AbortedTransaction", "aborted_from_response"]


class AbortedTransaction(NamedTuple):
    """One entry of a read_committed fetch response's ``aborted_transactions``."""

    producer_id: int
    first_offset: int


class AbortedFilter:
    """See the module docstring. One instance per partition per fetch response."""

    __slots__ = ("_aborted", "_pending")

    def __init__(self, aborted: Iterable[AbortedTransaction]) -> None:
        # (first_offset, producer_id): a heap ordered by first offset
        self._pending = [(int(a.first_offset), int(a.producer_id)) for a in aborted]
        heapq.heapify(self._pending)
        self._aborted: set[int] = set()

    @property
    def aborted_producers(self) -> frozenset[int]:
        """Producers whose aborted transaction the filter is inside of (for tests)."""
        return frozenset(self._aborted)

    def _reach(self, last_offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= last_offset:
            self._aborted.add(heapq.heappop(pending)[1])

    def accept(self, *, last_offset: int, producer_id: int, is_transactional: bool,
               is_control: bool, records: list[RecordTuple]) -> bool:
        """Feed the next batch of the fetch (in log order); True if its records may be
        handed to the application. Must see every batch, also those it drops."""
        self._reach(last_offset)
        if is_control:
            if producer_id in self._aborted and _is_abort_marker(records):
                self._aborted.discard(producer_id)
            return False
        return not (is_transactional and producer_id in self._aborted)


def _is_abort_marker(records: list[RecordTuple]) -> bool:
    if not records:
        return False
    key, value = records[0][2], records[0][3]
    try:
        return parse_control_record(key, value)[0] is ControlType.ABORT
    except InvalidRecordError:
        return False  # another kind of control record: not a transaction marker


def aborted_from_response(entries: Iterable[Any] | None) -> list[AbortedTransaction]:
    """The ``aborted_transactions`` of a fetch response partition as a list (a null
    list — read_uncommitted, or nothing aborted — gives an empty one)."""
    if not entries:
        return []
    return [
        AbortedTransaction(int(e.producer_id), int(e.first_offset))
        for e in entries
    ]
