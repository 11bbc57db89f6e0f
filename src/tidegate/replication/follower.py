"""The follower's replication rules: its high watermark, and where to truncate its log.

A follower that starts following a leader (a new leader epoch, a restart, a fetch answered
OFFSET_OUT_OF_RANGE) may hold records the leader does not: the uncommitted tail of an old
leader. Before fetching it truncates to the point where its log and the leader's agree,
found from leader epochs alone (KIP-101), in as many OffsetForLeaderEpoch rounds as needed
when leaders changed quickly (KIP-279). The dialogue, as Kafka's `AbstractFetcherThread`
runs it:

1. `first_request_epoch(cache)`: the follower asks for its latest epoch. A follower with
   no epochs at all (an empty log, or one written before epochs were recorded) cannot ask:
   it truncates to its high watermark, which only ever covers committed records.
2. The leader answers `end_offset_for(epoch)`: (largest epoch <= asked, its end offset).
3. `truncation_offset(...)` turns the answer into a `TruncationPoint`: the offset to cut
   the log (and the epoch cache) at, and, when the leader named an epoch this follower
   never saw, the epoch to ask about next (the follower's largest epoch below it). Rounds
   strictly lower the epoch asked, so the dialogue ends.

The same function handles a Fetch v12+ answer carrying a diverging epoch: it is an
OffsetForLeaderEpoch answer delivered with the fetch.

A fetch answered OFFSET_OUT_OF_RANGE (the follower's log end is outside the leader's
log) is handled by `out_of_range_action`, Kafka's `fetchOffsetAndTruncate`: a follower
whose log end is past the leader's truncates to the leader's end (only an unclean
election can lead there); one whose log end is below the leader's log start (retention
or DeleteRecords removed what it missed while it was away) empties its log and restarts
it at the leader's log start.

Invariant kept (the model in tests/unit/replication proves it against a reference): a
follower never truncates a record the leader has, at the same offset and epoch; and so
never a committed one, since the leader holds every committed record.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.storage.leader_epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
)

__all__ = [
    "OutOfRangeAction",
    "TruncationPoint",
    "first_request_epoch",
    "follower_high_watermark",
    "out_of_range_action",
    "truncation_offset",
]


def follower_high_watermark(leader_high_watermark: int, log_end_offset: int,
                            log_start_offset: int = 0) -> int:
    """A follower's HW after a fetch: the leader's HW, capped by what the follower holds
    (Kafka's `updateHighWatermark`, bounded by log start and log end). Unlike a leader's,
    it may move backwards: a new leader's HW can lag behind its predecessor's."""
    return max(log_start_offset, min(leader_high_watermark, log_end_offset))


def first_request_epoch(cache: LeaderEpochCache) -> int | None:
    """The epoch a follower asks the leader about first: its latest one; None when it has
    none, and then it truncates to its high watermark instead of asking."""
    return cache.latest_epoch


@dataclass(frozen=True)
class TruncationPoint:
    """Truncate the log and its epoch cache to `offset` (nothing to do if it is at or above
    the log end), then fetch from there, or, if `ask_again_with` is set, send another
    OffsetForLeaderEpoch for that epoch first."""

    offset: int
    ask_again_with: int | None = None

    @property
    def complete(self) -> bool:
        return self.ask_again_with is None


def truncation_offset(
    local_cache: LeaderEpochCache,
    local_leo: int,
    leader_epoch: int,
    leader_end_offset: int,
    *,
    high_watermark: int,
) -> TruncationPoint:
    """Where a follower truncates given the leader's answer (`leader_epoch`,
    `leader_end_offset`) to its OffsetForLeaderEpoch request (or a diverging epoch).

    Kafka's `getOffsetTruncationState`:
    - undefined end offset (the leader knows no epoch <= the one asked): truncate to
      `high_watermark`, the follower's own committed point;
    - undefined epoch with an end offset (an old leader): min(end offset, local LEO);
    - the follower's largest epoch <= `leader_epoch` is `leader_epoch` itself: both logs
      agree up to min(leader's end offset, follower's end of that epoch, local LEO); done;
    - it is an older epoch E (the follower never saw `leader_epoch`): truncate to
      min(E's end offset here, local LEO) and ask again about E;
    - the follower has no epoch <= `leader_epoch` (its epochs all came later, or it has
      none): min(leader's end offset, local LEO)."""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return TruncationPoint(min(high_watermark, local_leo))
    if leader_epoch == UNDEFINED_EPOCH:
        return TruncationPoint(min(leader_end_offset, local_leo))
    local = local_cache.end_offset_for(leader_epoch, local_leo)
    if local.undefined:
        return TruncationPoint(min(leader_end_offset, local_leo))
    if local.epoch != leader_epoch:
        return TruncationPoint(min(local.end_offset, local_leo), ask_again_with=local.epoch)
    return TruncationPoint(min(local.end_offset, leader_end_offset, local_leo))


@dataclass(frozen=True)
class OutOfRangeAction:
    """What a follower does to its log after OFFSET_OUT_OF_RANGE, then fetches from
    `fetch_offset`: cut its tail at `truncate_to`, or empty it and restart it at
    `start_at`, or (both None) nothing: the leader's log moved meanwhile and the log end
    is back in range."""

    fetch_offset: int
    truncate_to: int | None = None
    start_at: int | None = None


def out_of_range_action(local_leo: int, leader_log_start: int,
                        leader_log_end: int) -> OutOfRangeAction:
    """Kafka's `fetchOffsetAndTruncate`, given the leader's log start and log end
    (ListOffsets earliest and latest with this follower's replica id):

    - leader's end below the follower's end: truncate to the leader's end. With leader
      epochs a diverging tail is cut through the diverging epoch instead; reaching this
      means the leader lost records the follower holds (an unclean election), and the
      follower must not keep offsets the leader will reuse;
    - leader's log start above the follower's end: everything the follower lacks below
      it is gone on the leader, so the follower empties its log and starts at the
      leader's log start (Kafka's truncateFullyAndStartAt);
    - otherwise the follower's end is in range now: fetch from it again."""
    if leader_log_end < local_leo:
        return OutOfRangeAction(leader_log_end, truncate_to=leader_log_end)
    if leader_log_start > local_leo:
        return OutOfRangeAction(leader_log_start, start_at=leader_log_start)
    return OutOfRangeAction(local_leo)
