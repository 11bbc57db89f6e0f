"""The values `LeaderReplicaState` (`replica_state.py`, which re-exports every public
name here) takes and hands out — each follower's position and timing, a pending ISR
change, a follower fetch's outcome, an acks=all produce's status, the epoch lookup it is
given — its errors, and `diverging_epoch`, the leader's pure check of a Fetch v12+
`last_fetched_epoch` against its epoch history (KIP-595).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from tidegate.common.errors import ErrorCode, KafkaError, OffsetOutOfRangeError
from tidegate.storage.leader_epochs import UNDEFINED_EPOCH, EpochEndOffset

__all__ = [
    "UNKNOWN_OFFSET",
    "AcksAllStatus",
    "EpochLookup",
    "FollowerFetchResult",
    "FollowerState",
    "IsrChangeInFlightError",
    "IsrChangeKind",
    "PendingIsrChange",
    "UnknownReplicaError",
    "diverging_epoch",
]

UNKNOWN_OFFSET = -1  # Kafka's UnifiedLog.UnknownOffset: no fetch seen yet


class UnknownReplicaError(KafkaError):
    """A fetch from a broker that is not a follower of this partition (not assigned, or
    the leader itself). Kafka answers NOT_LEADER_OR_FOLLOWER."""

    code = ErrorCode.not_leader_or_follower


class IsrChangeInFlightError(RuntimeError):
    """A second ISR change proposed while one is in flight: a bug in the caller."""


class EpochLookup(Protocol):
    """The leader's epoch history: `LeaderEpochCache.end_offset_for`, or a `Log` method
    that calls it under the log's lock."""

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset: ...


@dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's `ReplicaState`)."""

    replica_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        """Kafka's `isCaughtUp`: at the leader's LEO, or caught up within the lag time."""
        return (
            self.log_end_offset >= leader_log_end_offset
            or now_ms - self.last_caught_up_time_ms <= max_lag_ms
        )


class IsrChangeKind(enum.Enum):
    EXPAND = "expand"
    SHRINK = "shrink"


@dataclass(frozen=True)
class PendingIsrChange:
    kind: IsrChangeKind
    proposed_isr: tuple[int, ...]
    expected_zk_version: int  # the version the conditional write must match


@dataclass(frozen=True)
class FollowerFetchResult:
    diverging_epoch: EpochEndOffset | None  # set: answer with it, nothing was updated
    high_watermark_advanced: bool
    expand_isr: bool  # this follower may join the ISR: call expanded_isr/begin_isr_change


@dataclass(frozen=True)
class AcksAllStatus:
    """Where an acks=all produce stands: `done` False = keep waiting."""

    done: bool
    error: ErrorCode = ErrorCode.none


def diverging_epoch(
    leader_answer: EpochEndOffset, last_fetched_epoch: int, fetch_offset: int, log_start_offset: int
) -> EpochEndOffset | None:
    """The leader's check of a Fetch v12+ `last_fetched_epoch` (Kafka's `readRecords`).

    `leader_answer` is the leader's `end_offset_for(last_fetched_epoch)`. An undefined
    answer, or a fetch below the log start, is OFFSET_OUT_OF_RANGE (the follower falls back
    to OffsetForLeaderEpoch / the log start). If the leader's epoch is older than the one
    the follower last fetched, or that epoch ended before the fetch offset, the follower's
    log diverges: the answer is returned for the follower to truncate with
    (`follower.truncation_offset`). None: the fetch may be served."""
    if leader_answer.undefined or leader_answer.epoch == UNDEFINED_EPOCH:
        raise OffsetOutOfRangeError(
            f"cannot determine the end offset of last fetched epoch {last_fetched_epoch}"
        )
    if fetch_offset < log_start_offset:
        raise OffsetOutOfRangeError(
            f"fetch offset {fetch_offset} is below the log start offset {log_start_offset}"
        )
    if leader_answer.epoch < last_fetched_epoch or leader_answer.end_offset < fetch_offset:
        return leader_answer
    return None
