"""Classic-protocol members of a KIP-848 consumer group (mixed groups, Kafka's rules).

After an online upgrade (`consumer_upgrade`) — or when a classic consumer joins a
consumer group that has members — the classic members are served by the consumer
group: the broker's target assignment decides their partitions, the client-side
assignor is not used. Each classic request maps onto the consumer group's heartbeat
operation (`consumer.heartbeat`), so reconciliation, fencing and records are the same
for both kinds of member:

- JoinGroup: the member's first protocol's ConsumerProtocolSubscription gives its
  subscribed topics and (cooperative clients) the partitions it still owns; eager
  clients own nothing when they rejoin. A new member gets MEMBER_ID_REQUIRED first
  (JoinGroup v4+), then joins with the id. The answer comes at once: generation = the
  member epoch, the member's first protocol, no leader (every classic member is a
  follower: it sends an empty SyncGroup);
- SyncGroup: the member's current assignment (partitions still being revoked from
  others are not in it yet), as a ConsumerProtocolAssignment;
- Heartbeat: renews the session (the member's own ``session.timeout.ms``); while the
  member is behind the group epoch or not reconciled (revoking, or waiting for
  partitions others release) the answer is REBALANCE_IN_PROGRESS: the client rejoins
  and JoinGroup reconciles it one step further;
- LeaveGroup: removes the member;
- OffsetCommit from a classic member: a generation other than its epoch is
  ILLEGAL_GENERATION (`consumer.validate_offset_commit`).
"""

from __future__ import annotations

from tidegate.assignors.protocol import (
    ConsumerProtocolError,
    decode_subscription,
    encode_assignment,
)
from tidegate.assignors.types import Assignment as ProtocolAssignment
from tidegate.assignors.types import TopicPartition as ProtocolTP
from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group import consumer
from tidegate.coordinator.group.consumer import NamesLookup, TopicLookup
from tidegate.coordinator.group.consumer_model import ConsumerGroup, MemberState
from tidegate.coordinator.group.messages import (
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    LeaveResponse,
    SyncRequest,
    SyncResponse,
)
from tidegate.coordinator.group.model import CONSUMER_PROTOCOL_TYPE
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.runtime import Result
from tidegate.protocol.consumer_group_records import Assignment, ClassicMemberMetadata

__all__ = ["heartbeat", "join", "leave", "serves", "sync"]

_HEARTBEAT_ERRORS = {  # consumer-heartbeat errors as a classic client understands them
    ErrorCode.fenced_member_epoch: ErrorCode.illegal_generation,
    ErrorCode.unreleased_instance_id: ErrorCode.fenced_instance_id,
    ErrorCode.invalid_regular_expression: ErrorCode.inconsistent_group_protocol,
}


def serves(shard: GroupShard, group_id: str) -> ConsumerGroup | None:
    """The consumer group that serves classic requests for `group_id`, if any."""
    group = shard.consumer_groups.get(group_id)
    return group if group is not None and group.members else None


def join(shard: GroupShard, group: ConsumerGroup, req: JoinRequest, topics: TopicLookup,
         names: NamesLookup, now: int) -> Result[JoinResponse]:
    if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not req.protocols:
        return Result(JoinResponse(ErrorCode.inconsistent_group_protocol, req.member_id))
    try:
        sub = decode_subscription(req.protocols[0][1])
    except ConsumerProtocolError:
        return Result(JoinResponse(ErrorCode.inconsistent_group_protocol, req.member_id))
    if not req.member_id and req.require_known_member_id:
        return Result(JoinResponse(ErrorCode.member_id_required,
                                   f"{req.client_id}-{shard.new_id()}"))
    member_id = req.member_id or f"{req.client_id}-{shard.new_id()}"
    known = group.members.get(member_id)
    owned: Assignment = {}
    for tp in sub.owned_partitions:  # cooperative clients: what they still hold
        t = topics(tp.topic)
        if t is not None:
            owned[t.topic_id] = owned.get(t.topic_id, frozenset()) | {tp.partition}
    hr = consumer.HeartbeatRequest(
        group.group_id, member_id, known.member_epoch if known is not None else 0,
        instance_id=req.group_instance_id, rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=tuple(sub.topics), owned=owned,
        client_id=req.client_id, client_host=req.client_host,
        classic=ClassicMemberMetadata(req.session_timeout_ms, tuple(req.protocols)))
    res = consumer.heartbeat(shard, hr, topics, now, names)
    r = res.response
    assert isinstance(r, consumer.HeartbeatResponse)  # heartbeats never park
    if r.error is not ErrorCode.none:
        return Result(JoinResponse(_HEARTBEAT_ERRORS.get(r.error, r.error), member_id))
    # no leader: every classic member of a consumer group is a follower
    return Result(JoinResponse(ErrorCode.none, member_id, r.member_epoch,
                               CONSUMER_PROTOCOL_TYPE, req.protocols[0][0], leader=""),
                  res.records)


def _member_check(group: ConsumerGroup, member_id: str, generation: int
                  ) -> ErrorCode:
    m = group.members.get(member_id)
    if m is None or m.classic is None:
        return ErrorCode.unknown_member_id
    if generation != m.member_epoch:
        return ErrorCode.illegal_generation
    return ErrorCode.none


def sync(shard: GroupShard, group: ConsumerGroup, req: SyncRequest, now: int
         ) -> Result[SyncResponse]:
    code = _member_check(group, req.member_id, req.generation_id)
    if code is not ErrorCode.none:
        return Result(SyncResponse(code))
    m = group.members[req.member_id]
    protocol = m.classic.protocols[0][0] if m.classic and m.classic.protocols else None
    if req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return Result(SyncResponse(ErrorCode.inconsistent_group_protocol))
    by_id = {t.topic_id: t.name for t in group.topics.values()}
    parts = tuple(ProtocolTP(by_id[tid], p) for tid, ps in m.assigned.items()
                  if tid in by_id for p in sorted(ps))
    consumer.touch(shard, group.group_id, m.member_id, now)
    return Result(SyncResponse(ErrorCode.none, encode_assignment(ProtocolAssignment(parts)),
                               CONSUMER_PROTOCOL_TYPE, protocol))


def heartbeat(shard: GroupShard, group: ConsumerGroup, req: HeartbeatRequest, now: int
              ) -> Result[ErrorCode]:
    code = _member_check(group, req.member_id, req.generation_id)
    if code is not ErrorCode.none:
        return Result(code)
    m = group.members[req.member_id]
    consumer.touch(shard, group.group_id, m.member_id, now)
    if m.state is not MemberState.STABLE or m.member_epoch < group.group_epoch:
        return Result(ErrorCode.rebalance_in_progress)
    return Result(ErrorCode.none)


def leave(shard: GroupShard, group: ConsumerGroup, req: LeaveRequest, now: int
          ) -> Result[LeaveResponse]:
    out: Result[LeaveResponse] = Result(LeaveResponse(ErrorCode.none))
    results = []
    gone: set[str] = set()
    for lm in req.members:
        mid = lm.member_id
        if lm.group_instance_id is not None:
            holder = group.static_members.get(lm.group_instance_id)
            if holder is None or (mid and mid != holder):
                results.append((lm, ErrorCode.unknown_member_id if holder is None
                                else ErrorCode.fenced_instance_id))
                continue
            mid = holder
        if mid not in group.members or mid in gone:
            results.append((lm, ErrorCode.unknown_member_id))
            continue
        gone.add(mid)
        results.append((lm, ErrorCode.none))
    for mid in sorted(gone):
        out.records += consumer.remove_member(group, mid, shard.config.downgrade, now)
    out.response = LeaveResponse(ErrorCode.none, tuple(results))
    return out
