"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, expiry,
deleted topics.

A commit is one OffsetCommitValue record per partition (v3, or v1 when the request
carries a retention); a deletion is a tombstone. A TxnOffsetCommit writes the same
records in a transactional batch of its producer (`Result.producer_id`): they stay
pending (`shard.pending`) until the transaction's marker. Pending offsets are hidden
from OffsetFetch, which answers the last committed offset — or, with `require_stable`,
UNSTABLE_OFFSET_COMMIT for that partition (a retriable error: the client asks again).
Expiry skips partitions with a pending offset and never removes a group holding one;
OffsetDelete, DeleteGroups and deleted topics write tombstones for pending partitions
too (a tombstone drops the pending offsets, as in Kafka). Expiry (Kafka 2.1+, KIP-211), run every
`offsets.retention.check.interval.ms`:

- a group with a protocol type that is Empty: offsets older than
  `offsets.retention.minutes` counted from when the group became Empty;
- a Stable consumer group: offsets of topics it no longer subscribes to, counted from
  their commit;
- a group used only to store offsets (simple consumers, no protocol type): counted from
  the commit;
- an offset committed with an explicit retention expires at its own expire timestamp.

An Empty group left without offsets is removed (its metadata gets a tombstone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group import consumer
from tidegate.coordinator.group.messages import (
    FetchedOffset,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TxnOffsetCommitRequest,
)
from tidegate.coordinator.group.model import CONSUMER_PROTOCOL_TYPE, Group, TopicPartition
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.group.states import GroupState
from tidegate.coordinator.runtime import Record, Result
from tidegate.protocol.coordinator_records import (
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

__all__ = [
    "commit",
    "delete_offsets",
    "expire",
    "fetch",
    "remove_topics",
    "txn_commit",
]

CommitErrors = list[tuple[TopicPartition, ErrorCode]]


def commit(shard: GroupShard, req: OffsetCommitRequest, now: int) -> Result[CommitErrors]:
    parts = [(p.topic, p.partition) for p in req.partitions]

    def all_(code: ErrorCode) -> Result[CommitErrors]:
        return Result([(tp, code) for tp in parts])

    group = shard.groups.get(req.group_id)
    cgroup = shard.consumer_groups.get(req.group_id)
    if cgroup is not None:  # KIP-848: the generation is the member epoch
        code = consumer.validate_offset_commit(cgroup, req.member_id, req.generation_id)
        if code is not ErrorCode.none:
            return all_(code)
    elif group is None:
        if req.generation_id >= 0:  # a stale member or a lost group (Kafka 4's answers)
            return all_(ErrorCode.group_id_not_found if req.api_version >= 9
                        else ErrorCode.illegal_generation)
    elif group.static_member_fenced(req.group_instance_id, req.member_id):
        return all_(ErrorCode.fenced_instance_id)
    elif not (req.generation_id < 0 and group.state is GroupState.EMPTY):
        member = group.members.get(req.member_id)
        if member is None:
            return all_(ErrorCode.unknown_member_id)
        if req.generation_id != group.generation:
            return all_(ErrorCode.illegal_generation)
        if group.state is GroupState.COMPLETING_REBALANCE:
            return all_(ErrorCode.rebalance_in_progress)
        # Stable or PreparingRebalance: a commit also counts as a heartbeat.
        shard.schedule_member(group, member.member_id, now + member.session_timeout_ms)
    errors: CommitErrors = []
    out: Result[CommitErrors] = Result(errors)
    limit = shard.config.offset_metadata_max_bytes
    expire = now + req.retention_ms if req.retention_ms >= 0 else -1
    for p in req.partitions:
        metadata = p.metadata or ""
        if len(metadata.encode("utf-8")) > limit:
            errors.append(((p.topic, p.partition), ErrorCode.offset_metadata_too_large))
            continue
        value = OffsetCommitValue(p.offset, metadata, now, p.leader_epoch, expire)
        out.records.append((
            encode_offset_commit_key(req.group_id, p.topic, p.partition),
            encode_offset_commit_value(value),
        ))
        errors.append(((p.topic, p.partition), ErrorCode.none))
    return out


def txn_commit(shard: GroupShard, req: TxnOffsetCommitRequest, now: int
               ) -> Result[CommitErrors]:
    """TxnOffsetCommit: the member checks of KIP-447 (v3+), then the offsets as one
    transactional batch of the producer. An older producer epoch is refused by the log
    (INVALID_PRODUCER_EPOCH, raised from the runtime). A group that does not exist is
    created by the records' replay (a "simple" group), unless the request names a
    generation: then ILLEGAL_GENERATION, as for OffsetCommit."""
    code = _check_txn_member(shard, req)
    if code is not ErrorCode.none:
        return Result([((p.topic, p.partition), code) for p in req.partitions])
    errors: CommitErrors = []
    out: Result[CommitErrors] = Result(
        errors, producer_id=req.producer_id, producer_epoch=req.producer_epoch)
    limit = shard.config.offset_metadata_max_bytes
    for p in req.partitions:
        metadata = p.metadata or ""
        if len(metadata.encode("utf-8")) > limit:
            errors.append(((p.topic, p.partition), ErrorCode.offset_metadata_too_large))
            continue
        value = OffsetCommitValue(p.offset, metadata, now, p.leader_epoch)
        out.records.append((
            encode_offset_commit_key(req.group_id, p.topic, p.partition),
            encode_offset_commit_value(value),
        ))
        errors.append(((p.topic, p.partition), ErrorCode.none))
    return out


def _check_txn_member(shard: GroupShard, req: TxnOffsetCommitRequest) -> ErrorCode:
    """Kafka's classic-group check for transactional commits: anyone may commit to an
    Empty group without a generation; a request naming a member (or a generation, or a
    static instance) must be that member of the current generation. Unlike OffsetCommit
    a commit without member fields is accepted in any state, and one during
    CompletingRebalance is not refused (older clients send no member fields)."""
    cgroup = shard.consumer_groups.get(req.group_id)
    if cgroup is not None:  # KIP-848: KIP-447's generation is the member epoch
        if req.generation_id < 0 and not req.member_id:
            return ErrorCode.none  # no member fields: accepted, as for classic groups
        return consumer.validate_offset_commit(cgroup, req.member_id, req.generation_id)
    group = shard.groups.get(req.group_id)
    if group is None:
        return ErrorCode.illegal_generation if req.generation_id >= 0 else ErrorCode.none
    if req.generation_id < 0 and group.state is GroupState.EMPTY:
        return ErrorCode.none
    if req.generation_id < 0 and not req.member_id and req.group_instance_id is None:
        return ErrorCode.none
    if req.group_instance_id is not None:
        holder = group.static_members.get(req.group_instance_id)
        if holder is None:
            return ErrorCode.unknown_member_id
        if holder != req.member_id:
            return ErrorCode.fenced_instance_id
    elif req.member_id not in group.members:
        return ErrorCode.unknown_member_id
    if req.generation_id != group.generation:
        return ErrorCode.illegal_generation
    return ErrorCode.none


def fetch(shard: GroupShard, req: OffsetFetchRequest, now: int) -> Result[OffsetFetchResponse]:
    """Committed offsets (-1 and empty metadata for partitions without one). With
    `require_stable`, a partition with a pending transactional offset is answered
    UNSTABLE_OFFSET_COMMIT (offset -1); without it, the last committed offset."""
    cgroup = shard.consumer_groups.get(req.group_id)
    if cgroup is not None and req.member_epoch >= 0:
        code = consumer.validate_offset_commit(cgroup, req.member_id, req.member_epoch)
        if code is ErrorCode.fenced_member_epoch:
            code = ErrorCode.stale_member_epoch  # Kafka: any other epoch is stale here
        if code is not ErrorCode.none:
            return Result(OffsetFetchResponse(code, ()))
    group = shard.groups.get(req.group_id)
    offsets = group.offsets if group is not None else {}
    wanted = sorted(offsets) if req.partitions is None else list(req.partitions)
    check = req.require_stable and shard.pending.has_group(req.group_id)
    result = []
    for tp in wanted:
        o = offsets.get(tp)
        if check and shard.pending.has(req.group_id, tp):
            result.append(FetchedOffset(tp[0], tp[1], error=ErrorCode.unstable_offset_commit))
        elif o is None:
            result.append(FetchedOffset(tp[0], tp[1]))
        else:
            result.append(FetchedOffset(tp[0], tp[1], o.offset, o.leader_epoch, o.metadata))
    return Result(OffsetFetchResponse(ErrorCode.none, tuple(result)))


def delete_offsets(
    shard: GroupShard, group_id: str, partitions: Iterable[TopicPartition], now: int
) -> Result[tuple[ErrorCode, CommitErrors]]:
    """OffsetDelete: allowed for an Empty group, and for a consumer group's topics it
    does not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC otherwise). A KIP-848 group's
    subscriptions are its members' (by name or regex), as Kafka's ConsumerGroup checks."""
    wanted = list(partitions)
    if not group_id:
        return Result((ErrorCode.invalid_group_id, []))
    group = shard.groups.get(group_id)
    cgroup = shard.consumer_groups.get(group_id)
    if group is None and cgroup is None:
        return Result((ErrorCode.group_id_not_found, []))
    subscribed: frozenset[str] | None = frozenset()
    if cgroup is not None:
        subscribed = frozenset(cgroup.subscribed())
    elif group is not None and group.state is not GroupState.EMPTY:
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return Result((ErrorCode.non_empty_group, []))
        subscribed = group.subscribed_topics()
    errors: CommitErrors = []
    out: Result[tuple[ErrorCode, CommitErrors]] = Result((ErrorCode.none, errors))
    for tp in wanted:
        if subscribed is None or tp[0] in subscribed:
            errors.append((tp, ErrorCode.group_subscribed_to_topic))
            continue
        errors.append((tp, ErrorCode.none))
        if (group is not None and tp in group.offsets) or shard.pending.has(group_id, tp):
            out.records.append((encode_offset_commit_key(group_id, *tp), None))
    return out


def _expired(shard: GroupShard, group: Group, now: int, retention_ms: int
             ) -> list[TopicPartition]:
    ignore: frozenset[str] = frozenset()
    cgroup = shard.consumer_groups.get(group.group_id)
    if cgroup is not None:
        # KIP-848 group (Kafka's rule): offsets of topics its members subscribe to stay
        ignore = frozenset(cgroup.subscribed())

        def base(commit_ts: int) -> int:
            return commit_ts
    elif group.protocol_type is not None and group.state is GroupState.EMPTY:
        empty_since = group.state_timestamp

        def base(commit_ts: int) -> int:
            return empty_since if empty_since is not None else commit_ts
    elif (
        group.protocol_type == CONSUMER_PROTOCOL_TYPE
        and group.state is GroupState.STABLE
        and group.subscribed_topics() is not None
    ):
        ignore = group.subscribed_topics() or frozenset()

        def base(commit_ts: int) -> int:
            return commit_ts
    elif group.protocol_type is None and group.state is GroupState.EMPTY:

        def base(commit_ts: int) -> int:
            return commit_ts
    else:
        return []
    expired = []
    pending = shard.pending.has_group(group.group_id)
    for tp, o in group.offsets.items():
        if tp[0] in ignore or (pending and shard.pending.has(group.group_id, tp)):
            continue  # an offset about to be replaced by a transaction's stays
        if o.expire_timestamp >= 0:
            if now >= o.expire_timestamp:
                expired.append(tp)
        elif now - base(o.commit_timestamp) >= retention_ms:
            expired.append(tp)
    return expired


def _cleanup(
    shard: GroupShard, now: int, select: Callable[[Group], list[TopicPartition]]
) -> Result[int]:
    """Tombstone the offsets `select` picks in every group (committed, or pending on
    a transaction); remove Empty groups (classic, or KIP-848 without members) left
    without offsets of either kind. The
    response is the number of partitions tombstoned."""
    records: list[Record] = []
    removed = 0
    left_of: dict[str, int] = {}  # offsets (committed or pending) each group keeps
    for group in list(shard.groups.values()):
        doomed = select(group)
        for tp in doomed:
            records.append((encode_offset_commit_key(group.group_id, *tp), None))
        removed += len(doomed)
        gone = set(doomed)
        left = sum(1 for tp in group.offsets if tp not in gone) + sum(
            1 for tp in shard.pending.partitions(group.group_id) if tp not in gone)
        left_of[group.group_id] = left
        if (
            group.state is GroupState.EMPTY
            and left == 0
            and not group.members
            and not group.pending
        ):
            if group.stored is not None:
                records.append((encode_group_metadata_key(group.group_id), None))
            elif not doomed:
                shard.drop_if_removable(group)
    for cg in list(shard.consumer_groups.values()):
        if not cg.members and left_of.get(cg.group_id, 0) == 0:
            records += consumer.delete_group(cg.group_id)  # empty, no offsets left
    return Result(removed, records)


def expire(shard: GroupShard, now: int) -> Result[int]:
    retention = shard.config.offsets_retention_ms
    return _cleanup(shard, now, lambda g: _expired(shard, g, now, retention))


def remove_topics(shard: GroupShard, topics: frozenset[str], now: int) -> Result[int]:
    """Deleting a topic deletes every group's committed and pending offsets for it."""

    def select(g: Group) -> list[TopicPartition]:
        tps = {tp for tp in g.offsets if tp[0] in topics}
        tps.update(tp for tp in shard.pending.partitions(g.group_id) if tp[0] in topics)
        return sorted(tps)

    return _cleanup(shard, now, select)
