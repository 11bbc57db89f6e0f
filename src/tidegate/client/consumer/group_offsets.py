"""Sans-IO OffsetCommit / OffsetFetch bodies and the group errors the consumer raises.

`commit_request` and `fetch_request` build version-agnostic request dicts (fields a
version lacks are ignored by `protocol.messages.build`; OffsetFetch v8+ nests the
request under ``groups``). `commit_result` and `fetch_result` read the responses of
any version and turn error codes into typed exceptions:

- `CommitFailedError`: the group rebalanced (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID;
  GROUP_ID_NOT_FOUND from OffsetCommit v9+ when the group itself is gone;
  FENCED_MEMBER_EPOCH for a `group.protocol=consumer` member) or the consumer is not
  in it; the partitions may be someone else's now, so the commit must not be retried
  as is. (STALE_MEMBER_EPOCH is retried with the member's current epoch.)
- `RebalanceInProgressError`: a rebalance is running; poll() to finish it, then commit.
- `FencedInstanceIdError`: another consumer with the same ``group.instance.id``
  took over; fatal for this consumer.
- `InvalidGroupIdError`: a group API was used without ``group.id``.
- coordinator errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
  COORDINATOR_LOAD_IN_PROGRESS, timeouts) stay plain retriable `KafkaError`s;
  `COORDINATOR_ERRORS` says which ones mean "find the coordinator again".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from tidegate.client.errors import ConfigError
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError, error_for_code

__all__ = [
    "COORDINATOR_ERRORS",
    "CommitFailedError",
    "FencedInstanceIdError",
    "InvalidGroupIdError",
    "OffsetAndMetadata",
    "RebalanceInProgressError",
    "StaleMemberEpochError",
    "commit_request",
    "commit_result",
    "fetch_request",
    "fetch_result",
    "group_error",
]


class OffsetAndMetadata(NamedTuple):
    """A committed position: the offset of the next record to read, optional metadata
    (at most ``offset.metadata.max.bytes`` on the broker) and the leader epoch."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class CommitFailedError(KafkaError):
    code = ErrorCode.illegal_generation

    @property
    def retriable(self) -> bool:
        return False


class RebalanceInProgressError(KafkaError):
    code = ErrorCode.rebalance_in_progress


class FencedInstanceIdError(KafkaError):
    code = ErrorCode.fenced_instance_id


class StaleMemberEpochError(KafkaError):
    """A `group.protocol=consumer` commit sent with an epoch the member has since left
    behind: retried with the current one (as Kafka's consumer does)."""

    code = ErrorCode.stale_member_epoch

    @property
    def retriable(self) -> bool:
        return True


class InvalidGroupIdError(ConfigError):
    """A group API (subscribe, commit, committed) without ``group.id``."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} needs a consumer group: set group.id in the consumer "
                         "configuration (or use assign() without committing)")


# Errors after which the coordinator must be looked up again.
COORDINATOR_ERRORS = frozenset({
    ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out, ErrorCode.network_exception,
})

# GROUP_ID_NOT_FOUND: OffsetCommit v9+ (Kafka 4) with a generation to a group that is
# gone; FENCED_MEMBER_EPOCH: a KIP-848 member fenced by the coordinator
_REBALANCED = frozenset({ErrorCode.illegal_generation, ErrorCode.unknown_member_id,
                         ErrorCode.group_id_not_found, ErrorCode.fenced_member_epoch})


def group_error(code: ErrorCode, what: str) -> KafkaError:
    """The typed exception for a group-API error code."""
    text = f"{what}: {code.name.upper()}"
    if code in _REBALANCED:
        return CommitFailedError(
            f"{text}; the group has rebalanced and these partitions may be assigned to "
            "another member. Poll again to rejoin; do not retry this commit",
            code=code)
    if code == ErrorCode.rebalance_in_progress:
        return RebalanceInProgressError(
            f"{text}; call poll() to complete the rebalance, then commit again")
    if code == ErrorCode.stale_member_epoch:
        return StaleMemberEpochError(f"{text}; retrying with the member's current epoch")
    if code == ErrorCode.fenced_instance_id:
        return FencedInstanceIdError(
            f"{text}; another consumer joined with the same group.instance.id")
    return error_for_code(code.value, text)


def _offset(value: int | OffsetAndMetadata) -> OffsetAndMetadata:
    return value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))


def commit_request(group_id: str, generation_id: int, member_id: str,
                   group_instance_id: str | None,
                   offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
                   ) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, value in sorted(offsets.items()):
        om = _offset(value)
        if om.offset < 0:
            raise ValueError(f"cannot commit negative offset {om.offset} for "
                             f"{tp.topic}-{tp.partition}")
        topics.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "committed_offset": om.offset,
            "committed_leader_epoch": om.leader_epoch, "committed_metadata": om.metadata,
            "commit_timestamp": -1})
    return {"group_id": group_id, "generation_id_or_member_epoch": generation_id,
            "member_id": member_id, "group_instance_id": group_instance_id,
            "retention_time": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def commit_result(resp: Any) -> KafkaError | None:
    """The first error in an OffsetCommit response (None if all partitions
    committed). Partition errors are per request in practice: they share a cause."""
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                return group_error(p.error_code, f"committing offsets of {t.name}-"
                                   f"{p.partition_index}")
    return None


def fetch_request(group_id: str, partitions: Iterable[TopicPartition], *,
                  require_stable: bool) -> dict[str, Any]:
    topics: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        topics.setdefault(tp.topic, []).append(tp.partition)
    entries = [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]
    return {"group_id": group_id, "topics": entries, "require_stable": require_stable,
            "groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1,
                        "topics": entries}]}


def fetch_result(resp: Any) -> tuple[dict[TopicPartition, OffsetAndMetadata | None],
                                     KafkaError | None]:
    """Committed offsets (None where nothing is committed) and the first error."""
    topics = resp.topics if hasattr(resp, "topics") else ()
    error = getattr(resp, "error_code", ErrorCode.none)
    groups = getattr(resp, "groups", None)
    if groups:
        topics = groups[0].topics
        error = groups[0].error_code
    if error != ErrorCode.none:
        return {}, group_error(error, "fetching committed offsets")
    found: dict[TopicPartition, OffsetAndMetadata | None] = {}
    first: KafkaError | None = None
    for t in topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            if p.error_code != ErrorCode.none:
                first = first or group_error(
                    p.error_code, f"fetching the committed offset of {tp.topic}-{tp.partition}")
                continue
            offset = int(p.committed_offset)
            found[tp] = None if offset < 0 else OffsetAndMetadata(
                offset, p.metadata or "", int(getattr(p, "committed_leader_epoch", -1)))
    return found, first
