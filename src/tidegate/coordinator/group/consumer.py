"""KIP-848 consumer groups on a `GroupShard`: ConsumerGroupHeartbeat, timers, describe.

`replay` (`consumer_replay.py`, re-exported here) applies one consumer-group record (the
only mutator of consumer-group state), and renews members' sessions.
`heartbeat` is the operation of ConsumerGroupHeartbeat; it only reads the shard and
returns records, in Kafka's order:

1. the member joins (epoch 0), leaves (-1; -2 for a static member, whose partitions stay
   reserved for its instance id until its session ends) or is checked: an unknown
   member gets UNKNOWN_MEMBER_ID, an epoch that is neither its current one nor (with
   owned partitions within its assignment: a lost answer) its previous one gets
   FENCED_MEMBER_EPOCH; a static instance id held by a live member UNRELEASED_INSTANCE_ID;
2. changed member metadata -> MemberMetadata; changed subscribed-topic metadata ->
   PartitionMetadata; either (or a join/leave) bumps the group epoch -> GroupMetadata;
3. a group epoch above the target's -> the server-side assignor computes a new target:
   TargetAssignmentMember for each changed member, then TargetAssignmentMetadata;
4. the member reconciles towards its target (`consumer_reconcile`) -> CurrentMemberAssignment.

Timers: ("consumer", group, member) is the session (`group.consumer.session.timeout.ms`,
renewed by every heartbeat); ("consumer-revoke", group, member) bounds a revocation by
the member's rebalance timeout. Either expiring removes the member (its partitions
become free) and bumps the group epoch.

Topic metadata comes from `topics(name) -> TopicMetadata | None`, a lookup in the
broker's in-memory metadata passed in by the caller (sans-IO); regex subscriptions
(`SubscribedTopicRegex`) are resolved against `topic_names()` by `consumer_regex`, and
a member's subscribed topics are its names plus what its regex resolved to.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tidegate.assignors.server_side import ASSIGNORS
from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group import consumer_regex, consumer_upgrade
from tidegate.coordinator.group.consumer_model import (
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from tidegate.coordinator.group.consumer_reconcile import Current, reconcile
from tidegate.coordinator.group.consumer_regex import TopicNames
from tidegate.coordinator.group.consumer_replay import replay, schedule_loaded, touch
from tidegate.coordinator.runtime import Record, Result
from tidegate.protocol import consumer_group_records as cr
from tidegate.protocol.consumer_group_records import (
    Assignment,
    ConsumerGroupKey,
    MemberMetadataValue,
    TopicMetadata,
)

if TYPE_CHECKING:  # shard.py imports this module
    from tidegate.coordinator.group.shard import GroupShard

__all__ = [
    "HeartbeatRequest",
    "HeartbeatResponse",
    "delete_group",
    "heartbeat",
    "on_deadline",
    "remove_member",
    "replay",
    "schedule_loaded",
    "touch",
    "validate_offset_commit",
]

TopicLookup = Callable[[str], TopicMetadata | None]
NamesLookup = Callable[[], TopicNames]
LEAVE, STATIC_LEAVE = -1, -2
_touch = touch  # replay and the session timers: consumer_replay.py


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    classic: cr.ClassicMemberMetadata | None = None  # a classic member (consumer_classic)


@dataclass(frozen=True)
class HeartbeatResponse:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None




# -- records -----------------------------------------------------------------------------


def _key(kind: int, gid: str, mid: str | None = None) -> bytes:
    return cr.encode_consumer_key(ConsumerGroupKey(kind, gid, mid))


def _member_value(m: ConsumerMember) -> MemberMetadataValue:
    return MemberMetadataValue(m.instance_id, m.rack_id, m.client_id, m.client_host,
                               m.subscribed_topic_names, m.subscribed_topic_regex,
                               m.rebalance_timeout_ms, m.server_assignor, m.classic)


def _current_record(gid: str, mid: str, c: Current) -> Record:
    return (_key(cr.CURRENT_ASSIGNMENT, gid, mid), cr.encode_current_assignment(
        cr.CurrentAssignmentValue(c.epoch, c.previous_epoch, c.state.value,
                                  c.assigned, c.revoking)))


def _removal(gid: str, mid: str) -> list[Record]:
    return [(_key(cr.CURRENT_ASSIGNMENT, gid, mid), None),
            (_key(cr.TARGET_MEMBER, gid, mid), None),
            (_key(cr.MEMBER_METADATA, gid, mid), None)]


def remove_member(group: ConsumerGroup, mid: str, downgrade: bool = True, now: int = 0
                  ) -> list[Record]:
    """Fence/remove a member: its records go (and its regex's, if no one else uses
    it), and the group epoch moves; or, when it was the last consumer-protocol member
    of a mixed group, the whole group goes (`consumer_upgrade.downgrade`)."""
    whole = consumer_upgrade.downgrade(group, mid, downgrade, now)
    if whole is not None:
        return whole
    left = {m.subscribed_topic_regex for k, m in group.members.items() if k != mid}
    unused = [(_key(cr.REGULAR_EXPRESSION, group.group_id, r), None)
              for r in sorted(group.regexes) if r not in left]
    return [*_removal(group.group_id, mid), *unused,
            (_key(cr.GROUP_METADATA, group.group_id), cr.encode_epoch(group.group_epoch + 1))]


def delete_group(gid: str) -> list[Record]:
    """Tombstones of an empty consumer group's group-level records."""
    return [(_key(kind, gid), None)
            for kind in (cr.TARGET_METADATA, cr.PARTITION_METADATA, cr.GROUP_METADATA)]


# -- the heartbeat -----------------------------------------------------------------------


def _error(code: ErrorCode, message: str, req: HeartbeatRequest) -> Result[HeartbeatResponse]:
    return Result(HeartbeatResponse(code, message, req.member_id or None, req.member_epoch))


def _no_names() -> TopicNames:
    return TopicNames(0, frozenset())


def heartbeat(shard: GroupShard, req: HeartbeatRequest, topics: TopicLookup, now: int,
              topic_names: NamesLookup = _no_names,
              visible: Callable[[str], bool] = lambda _t: True) -> Result[HeartbeatResponse]:
    cfg = shard.config
    gid = req.group_id
    if not gid:
        return _error(ErrorCode.invalid_request, "GroupId can't be empty", req)
    classic = shard.groups.get(gid)
    upgrading: list[Record] = []
    group: ConsumerGroup | None = shard.consumer_groups.get(gid)
    if classic is not None and (classic.members or classic.pending) and (
            group is None or not group.members):
        if req.member_epoch != 0:
            return _error(ErrorCode.unknown_member_id, f"unknown member {req.member_id}", req)
        converted = consumer_upgrade.upgrade(classic, topics, cfg.upgrade)
        if isinstance(converted, str):
            return _error(ErrorCode.group_id_not_found, converted, req)
        group, upgrading = converted
    if req.subscribed_topic_regex:  # "" clears the regex (librdkafka sends it for none)
        why = consumer_regex.regex_error(req.subscribed_topic_regex)
        if why is not None:
            return _error(ErrorCode.invalid_regular_expression, why, req)
    if req.server_assignor is not None and req.server_assignor not in cfg.consumer_assignors:
        return _error(ErrorCode.unsupported_assignor,
                      f"assignor {req.server_assignor} is not one of "
                      f"{', '.join(cfg.consumer_assignors)}", req)
    group = group or ConsumerGroup(gid)
    out: Result[HeartbeatResponse] = Result(HeartbeatResponse(ErrorCode.none))
    records = out.records
    records += upgrading  # an online upgrade of a classic group comes first
    mid = req.member_id
    epoch = group.group_epoch
    replaced: ConsumerMember | None = None

    if req.member_epoch in (LEAVE, STATIC_LEAVE):
        member = group.members.get(mid)
        if member is None:
            return _error(ErrorCode.unknown_member_id, f"unknown member {mid}", req)
        if req.member_epoch == STATIC_LEAVE and member.instance_id is not None:
            # the partitions stay reserved for the instance until its session ends
            records.append(_current_record(gid, mid, Current(
                STATIC_LEAVE, member.member_epoch, member.state, member.assigned,
                member.pending_revocation)))
        else:
            records += remove_member(group, mid, cfg.downgrade, now)
        out.response = HeartbeatResponse(ErrorCode.none, None, mid, req.member_epoch,
                                         cfg.consumer_heartbeat_interval_ms)
        return out

    if req.member_epoch == 0:
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            return _error(ErrorCode.invalid_request, "SubscribedTopicNames or "
                          "SubscribedTopicRegex must be set in the first heartbeat", req)
        if req.rebalance_timeout_ms < 0:
            return _error(ErrorCode.invalid_request,
                          "RebalanceTimeoutMs must be set in the first heartbeat", req)
        if not mid:
            mid = shard.new_id()
        if req.instance_id is not None:
            holder_id = group.static_members.get(req.instance_id)
            holder = group.members.get(holder_id) if holder_id else None
            if holder is not None and holder.member_id != mid:
                if holder.member_epoch != STATIC_LEAVE:
                    return _error(ErrorCode.unreleased_instance_id,
                                  f"instance {req.instance_id} is held by a live member", req)
                replaced = holder
        old = group.members.get(mid)
        member = ConsumerMember(mid, member_epoch=0, previous_member_epoch=-1)
        if replaced is not None:
            # the new incarnation inherits the static member's partitions and target
            member.member_epoch = replaced.previous_member_epoch
            member.assigned, member.state = replaced.assigned, replaced.state
            member.pending_revocation = replaced.pending_revocation
        elif old is not None:
            # the same member id rejoining from scratch (e.g. after being fenced): it
            # owns nothing any more
            member.subscribed_topic_names = old.subscribed_topic_names
            member.subscribed_topic_regex = old.subscribed_topic_regex
    else:
        found = group.members.get(mid)
        if found is None:
            return _error(ErrorCode.unknown_member_id, f"unknown member {mid}", req)
        if req.instance_id is not None and group.static_members.get(req.instance_id) != mid:
            return _error(ErrorCode.fenced_instance_id,
                          f"instance {req.instance_id} is held by another member", req)
        if req.member_epoch != found.member_epoch:
            lost = (req.member_epoch == found.previous_member_epoch and req.owned is not None
                    and all(ps <= found.assigned.get(t, frozenset())
                            for t, ps in req.owned.items()))
            if not lost:
                return _error(ErrorCode.fenced_member_epoch,
                              f"member epoch {req.member_epoch} is not "
                              f"{found.member_epoch}", req)
        member = replace(found)
        old = found

    # 2. metadata, subscriptions, group epoch
    upd = replace(
        member,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        client_id=req.client_id, client_host=req.client_host,
        subscribed_topic_names=(tuple(sorted(set(req.subscribed_topic_names)))
                                if req.subscribed_topic_names is not None
                                else member.subscribed_topic_names),
        subscribed_topic_regex=(req.subscribed_topic_regex or None
                                if req.subscribed_topic_regex is not None
                                else member.subscribed_topic_regex),
        rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms >= 0
                              else member.rebalance_timeout_ms),
        server_assignor=(req.server_assignor if req.server_assignor is not None
                         else member.server_assignor),
        classic=req.classic if req.classic is not None else member.classic,
    )
    bump = False
    if replaced is not None:
        records += _removal(gid, replaced.member_id)
    is_new = old is None or req.member_epoch == 0
    if old is None or is_new or _member_value(upd) != _member_value(old) \
            or not old.has_metadata:
        records.append((_key(cr.MEMBER_METADATA, gid, mid),
                        cr.encode_member_metadata(_member_value(upd))))
        bump = (is_new and replaced is None) or (old is not None and (
            old.subscribed_topic_names != upd.subscribed_topic_names
            or old.subscribed_topic_regex != upd.subscribed_topic_regex))
    members = {k: v for k, v in group.members.items()
               if replaced is None or k != replaced.member_id}
    members[mid] = upd
    regexes, regex_records = consumer_regex.refresh(
        group, (m.subscribed_topic_regex or "" for m in members.values()), topic_names,
        visible, now)
    if any(v is not None for _k, v in regex_records):
        bump = True  # a regex now stands for other topics: new target assignment
    records += regex_records
    subs = {k: _subscription(m, regexes) for k, m in members.items()}
    names = {t for ts in subs.values() for t in ts}
    meta = {n: t for n in sorted(names) if (t := topics(n)) is not None}
    if meta != group.topics:
        records.append((_key(cr.PARTITION_METADATA, gid), cr.encode_partition_metadata(meta)))
        bump = True
    if bump:
        epoch = group.group_epoch + 1
        records.append((_key(cr.GROUP_METADATA, gid), cr.encode_epoch(epoch)))

    # 3. the target assignment
    targets = dict(group.target)
    if replaced is not None:
        targets[mid] = targets.pop(replaced.member_id, {})
        records.append((_key(cr.TARGET_MEMBER, gid, mid), cr.encode_target_member(targets[mid])))
    target_epoch = group.assignment_epoch
    if epoch > group.assignment_epoch:
        new = _compute_target(cfg.consumer_assignors, members, subs, meta, targets)
        for k in sorted(new):
            if new[k] != targets.get(k) or k not in group.target:
                records.append((_key(cr.TARGET_MEMBER, gid, k), cr.encode_target_member(new[k])))
        targets = new
        target_epoch = epoch
        records.append((_key(cr.TARGET_METADATA, gid), cr.encode_epoch(epoch)))

    # 4. reconciliation
    cur = Current(upd.member_epoch, upd.previous_member_epoch, upd.state, upd.assigned,
                  upd.pending_revocation)
    others = {tp for tp, o in group.owners.items()
              if o != mid and (replaced is None or o != replaced.member_id)}
    nxt = reconcile(cur, target_epoch, targets.get(mid, {}), req.owned,
                    lambda t, p: (t, p) in others)
    if nxt != cur or is_new:
        records.append(_current_record(gid, mid, nxt))

    # timers (ephemeral) and the answer
    _touch(shard, gid, mid, now)
    revoke_key = ("consumer-revoke", gid, mid)
    if nxt.state is MemberState.UNREVOKED_PARTITIONS:
        if revoke_key not in shard.timers:
            shard.timers.schedule(revoke_key, now + max(upd.rebalance_timeout_ms, 0))
    else:
        shard.timers.cancel(revoke_key)
    send = (is_new or nxt.assigned != cur.assigned
            or (req.owned is not None and req.owned != nxt.assigned))
    out.response = HeartbeatResponse(ErrorCode.none, None, mid, nxt.epoch,
                                     cfg.consumer_heartbeat_interval_ms,
                                     dict(nxt.assigned) if send else None)
    return out


def _subscription(m: ConsumerMember, regexes: dict[str, cr.RegexValue]) -> frozenset[str]:
    names = frozenset(m.subscribed_topic_names)
    if m.subscribed_topic_regex and m.subscribed_topic_regex in regexes:
        names |= frozenset(regexes[m.subscribed_topic_regex].topics)
    return names


def _compute_target(assignors: tuple[str, ...], members: dict[str, ConsumerMember],
                    subs: dict[str, frozenset[str]], meta: dict[str, TopicMetadata],
                    targets: dict[str, Assignment]) -> dict[str, Assignment]:
    """Run the assignor (the most requested by the members, else the first configured)."""
    wanted = [m.server_assignor for m in members.values() if m.server_assignor in ASSIGNORS]
    name = max(sorted(set(wanted)), key=wanted.count) if wanted else (
        next((a for a in assignors if a in ASSIGNORS), "uniform"))
    by_id = {t.topic_id: t.name for t in meta.values()}
    current = {mid: {by_id[tid]: ps for tid, ps in a.items() if tid in by_id}
               for mid, a in targets.items() if mid in members}
    result = ASSIGNORS[name](
        {mid: subs[mid] for mid in members},
        {n: t.partitions for n, t in meta.items()}, current)
    return {mid: {meta[n].topic_id: ps for n, ps in a.items()} for mid, a in result.items()}


# -- timers ------------------------------------------------------------------------------


def on_deadline(shard: GroupShard, key: Hashable, now: int) -> Result[None]:
    kind, gid, mid = shard.timer_key(key)
    group = shard.consumer_groups.get(gid)
    out: Result[None] = Result(None)
    if group is None or mid is None or mid not in group.members:
        return out
    member = group.members[mid]
    if kind == "consumer-revoke" and member.state is not MemberState.UNREVOKED_PARTITIONS:
        return out
    out.records = remove_member(group, mid, shard.config.downgrade, now)
    return out


# -- offsets -----------------------------------------------------------------------------


def validate_offset_commit(group: ConsumerGroup, member_id: str, member_epoch: int
                           ) -> ErrorCode:
    """OffsetCommit/TxnOffsetCommit of a consumer group: an admin commit (no epoch) only
    to an empty group; otherwise a current member at its current epoch (a newer epoch
    is FENCED_MEMBER_EPOCH, an older one STALE_MEMBER_EPOCH)."""
    if member_epoch < 0 and not member_id:
        return ErrorCode.none if not group.members else ErrorCode.unknown_member_id
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if member.classic is not None and member_epoch != member.member_epoch:
        return ErrorCode.illegal_generation  # a classic member: its epoch is its generation
    if member_epoch > member.member_epoch:
        return ErrorCode.fenced_member_epoch
    if member_epoch < member.member_epoch:
        return ErrorCode.stale_member_epoch
    return ErrorCode.none
