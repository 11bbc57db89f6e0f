"""Online upgrade and downgrade between a classic group and a KIP-848 consumer group.

Upgrade (`group.consumer.migration.policy` upgrade or bidirectional, Kafka's default):
when a consumer-protocol member joins a classic group that has members, the classic
group becomes a consumer group in the same write as the join: the classic group's
metadata gets a tombstone (its committed offsets stay: they belong to the group id)
and every classic member becomes a member of the consumer group that keeps speaking
the classic protocol (`ClassicMemberMetadata`: its session timeout and JoinGroup
protocols), subscribed to the topics of its ConsumerProtocolSubscription, owning the
partitions of its current assignment at member epoch = the classic generation. The
group epoch and target assignment start at that generation, so nothing moves until the
joining member bumps the group epoch; then the classic members are told to rejoin
(REBALANCE_IN_PROGRESS on Heartbeat) and reconcile through JoinGroup/SyncGroup
(`consumer_classic`). Only a Stable classic group of protocol type "consumer" is
upgraded: in any other state the joining member gets GROUP_ID_NOT_FOUND and retries.

Downgrade (downgrade or bidirectional): when the last consumer-protocol member leaves
(or is fenced, or its session expires) and classic members remain, the consumer group's
records get tombstones and a classic GroupMetadata record takes over in the same
write: the same members, each keeping its current assignment (so no partition is
handed to anyone before its owner has rejoined), a protocol every member supports, the
generation one past the group epoch. The members' next Heartbeat (at their old
generation) is answered ILLEGAL_GENERATION, they rejoin, and the leader's JoinGroup
starts a classic rebalance that also hands out the partitions the consumer-protocol
member had — as Kafka converts the group and starts a rebalance.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.assignors.protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from tidegate.assignors.types import Assignment as ProtocolAssignment
from tidegate.assignors.types import TopicPartition as ProtocolTP
from tidegate.coordinator.group.consumer_model import ConsumerGroup, ConsumerMember, MemberState
from tidegate.coordinator.group.model import CONSUMER_PROTOCOL_TYPE, Group
from tidegate.coordinator.group.states import GroupState
from tidegate.coordinator.runtime import Record
from tidegate.protocol import consumer_group_records as cr
from tidegate.protocol.consumer_group_records import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroupKey,
    TopicMetadata,
)
from tidegate.protocol.coordinator_records import (
    GroupMetadataValue,
    MemberMetadata,
    encode_group_metadata_key,
    encode_group_metadata_value,
)

__all__ = ["downgrade", "upgrade"]

TopicLookup = Callable[[str], TopicMetadata | None]


def _key(kind: int, gid: str, mid: str | None = None) -> bytes:
    return cr.encode_consumer_key(ConsumerGroupKey(kind, gid, mid))


def upgrade(classic: Group, topics: TopicLookup, upgrade_allowed: bool
            ) -> tuple[ConsumerGroup, list[Record]] | str:
    """The consumer group the classic group becomes and the records that make it so; or
    why it cannot be upgraded now."""
    gid = classic.group_id
    if not upgrade_allowed:
        return f"group {gid} is a classic group (group.consumer.migration.policy forbids " \
               "upgrading it)"
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE or classic.state is not GroupState.STABLE:
        return (f"group {gid} is a classic group in state {classic.state.value} "
                f"(protocol type {classic.protocol_type!r}); only a Stable consumer group "
                "can be upgraded online")
    group = ConsumerGroup(gid)
    epoch = classic.generation
    group.group_epoch = group.assignment_epoch = epoch
    records: list[Record] = [(encode_group_metadata_key(gid), None)]
    members: list[tuple[ConsumerMember, Assignment]] = []
    for m in classic.members.values():
        meta = next((md for name, md in m.protocols if name == classic.protocol),
                    m.protocols[0][1] if m.protocols else b"")
        try:
            names = tuple(sorted(set(decode_subscription(meta).topics)))
            owned = decode_assignment(m.assignment).partitions if m.assignment else ()
        except ConsumerProtocolError as e:
            return f"group {gid}: member {m.member_id}'s protocol metadata is malformed: {e}"
        assigned: Assignment = {}
        for tp in owned:
            t = topics(tp.topic)
            if t is not None and 0 <= tp.partition < t.partitions:
                assigned[t.topic_id] = assigned.get(t.topic_id, frozenset()) | {tp.partition}
        member = ConsumerMember(
            m.member_id, instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=names,
            rebalance_timeout_ms=m.rebalance_timeout_ms, has_metadata=True,
            classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)))
        group.members[m.member_id] = member
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
        group.target[m.member_id] = assigned
        group.set_current(member, epoch, -1, MemberState.STABLE, assigned, {})
        members.append((member, assigned))
    group.topics = {n: t for n in sorted(group.subscribed()) if (t := topics(n)) is not None}
    records.append((_key(cr.GROUP_METADATA, gid), cr.encode_epoch(epoch)))
    records.append((_key(cr.PARTITION_METADATA, gid),
                    cr.encode_partition_metadata(group.topics)))
    for member, assigned in members:
        mid = member.member_id
        records.append((_key(cr.MEMBER_METADATA, gid, mid), cr.encode_member_metadata(
            cr.MemberMetadataValue(member.instance_id, None, member.client_id,
                                   member.client_host, member.subscribed_topic_names, None,
                                   member.rebalance_timeout_ms, None, member.classic))))
        records.append((_key(cr.TARGET_MEMBER, gid, mid), cr.encode_target_member(assigned)))
        records.append((_key(cr.CURRENT_ASSIGNMENT, gid, mid), cr.encode_current_assignment(
            cr.CurrentAssignmentValue(epoch, -1, MemberState.STABLE.value, assigned, {}))))
    records.append((_key(cr.TARGET_METADATA, gid), cr.encode_epoch(epoch)))
    return group, records


def downgrade(group: ConsumerGroup, leaving: str, downgrade_allowed: bool, now: int = 0
              ) -> list[Record] | None:
    """The records that turn the group back into a classic group when `leaving` is its
    last consumer-protocol member and only classic members remain; else None."""
    rest = sorted((m for k, m in group.members.items() if k != leaving),
                  key=lambda m: m.member_id)
    gone = group.members.get(leaving)
    if (not downgrade_allowed or gone is None or gone.classic is not None or not rest
            or any(m.classic is None for m in rest)):
        return None
    first = rest[0].classic
    assert first is not None
    common = [name for name, _ in first.protocols
              if all(any(n == name for n, _ in (m.classic.protocols if m.classic else ()))
                     for m in rest)]
    if not common:
        return None  # no protocol every member speaks: stay a consumer group
    by_id = {t.topic_id: t.name for t in group.topics.values()}
    members = []
    for m in rest:
        assert m.classic is not None
        sub = next(md for n, md in m.classic.protocols if n == common[0])
        parts = tuple(ProtocolTP(by_id[tid], p) for tid, ps in m.assigned.items()
                      if tid in by_id for p in sorted(ps))
        members.append(MemberMetadata(
            m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
            m.classic.session_timeout_ms, sub, encode_assignment(ProtocolAssignment(parts))))
    classic = GroupMetadataValue(CONSUMER_PROTOCOL_TYPE, group.group_epoch + 1, common[0],
                                 rest[0].member_id, now, tuple(members))
    gid = group.group_id
    records: list[Record] = []
    for mid in sorted(group.members):
        records += [(_key(cr.CURRENT_ASSIGNMENT, gid, mid), None),
                    (_key(cr.TARGET_MEMBER, gid, mid), None),
                    (_key(cr.MEMBER_METADATA, gid, mid), None)]
    records += [(_key(cr.REGULAR_EXPRESSION, gid, r), None) for r in sorted(group.regexes)]
    records += [(_key(kind, gid), None)
                for kind in (cr.TARGET_METADATA, cr.PARTITION_METADATA, cr.GROUP_METADATA)]
    records.append((encode_group_metadata_key(gid), encode_group_metadata_value(classic)))
    return records
