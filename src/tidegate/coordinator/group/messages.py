"""Version-free requests and responses of the group coordinator's operations.

Handlers translate the wire messages of every API version to and from these, so the
state machine never sees a protocol version.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidegate.common.errors import ErrorCode

__all__ = [
    "CommitPartition",
    "DescribedGroup",
    "DescribedMember",
    "FetchedOffset",
    "HeartbeatRequest",
    "JoinRequest",
    "JoinResponse",
    "JoinedMember",
    "LeaveMember",
    "LeaveRequest",
    "LeaveResponse",
    "ListedGroup",
    "OffsetCommitRequest",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "SyncRequest",
    "SyncResponse",
    "TxnCommitPartition",
    "TxnOffsetCommitRequest",
]


@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True  # JoinGroup v4+
    supports_skip_assignment: bool = True  # JoinGroup v9+ (KIP-814)
    reason: str | None = None


@dataclass(frozen=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResponse:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class SyncResponse:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeaveMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LeaveRequest:
    group_id: str
    members: tuple[LeaveMember, ...]


@dataclass(frozen=True)
class LeaveResponse:
    error: ErrorCode
    members: tuple[tuple[LeaveMember, ErrorCode], ...] = ()


@dataclass(frozen=True)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    retention_ms: int = -1  # OffsetCommit v2-v4 retention_time; -1: broker default
    partitions: tuple[CommitPartition, ...] = ()
    api_version: int = 8  # v9+: GROUP_ID_NOT_FOUND for a group that does not exist


@dataclass(frozen=True)
class TxnCommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True)
class TxnOffsetCommitRequest:
    """TxnOffsetCommit: offsets committed as part of the producer's transaction
    (member fields from v3, KIP-447; -1 / "" / None when absent)."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    partitions: tuple[TxnCommitPartition, ...] = ()


@dataclass(frozen=True)
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[tuple[str, int], ...] | None  # None: every committed partition
    require_stable: bool = False
    member_id: str = ""  # v9+, KIP-848 members: checked against the member epoch
    member_epoch: int = -1


@dataclass(frozen=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True)
class OffsetFetchResponse:
    error: ErrorCode
    partitions: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode
    state: str = "Dead"
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[DescribedMember, ...] = field(default=())


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # or "consumer" (KIP-848)
