"""KIP-848 consumer groups: replaying their records onto a `GroupShard`, and the members'
session timers that replay (and `consumer.heartbeat`) renew.

`replay` applies one consumer-group record to `shard.consumer_groups`: it is the only
mutator of consumer-group state (`consumer.py` only reads it and returns records). A
tombstone removes what its key names; a member's records renew its session
(("consumer", group, member), `group.consumer.session.timeout.ms`, or a classic
member's own) unless the shard is loading; `schedule_loaded` starts every member's
session once a load is over. Removing a member or a group cancels its session and its
revocation timer (("consumer-revoke", group, member)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidegate.coordinator.group.consumer_model import ConsumerGroup, MemberState
from tidegate.protocol import consumer_group_records as cr
from tidegate.protocol.consumer_group_records import ConsumerGroupKey

if TYPE_CHECKING:  # shard.py imports consumer.py, which imports this module
    from tidegate.coordinator.group.shard import GroupShard

__all__ = ["replay", "schedule_loaded", "touch"]

_STATES = {s.value: s for s in MemberState}


# -- replay ------------------------------------------------------------------------------


def replay(shard: GroupShard, key: ConsumerGroupKey, value: bytes | None) -> None:
    groups = shard.consumer_groups
    group = groups.get(key.group)
    if value is None:
        if group is None:
            return
        if key.kind == cr.GROUP_METADATA:
            del groups[key.group]
            for mid in list(group.members):
                _cancel(shard, group.group_id, mid)
        elif key.kind == cr.PARTITION_METADATA:
            group.topics = {}
        elif key.kind == cr.TARGET_METADATA:
            group.assignment_epoch = 0
        elif key.kind == cr.TARGET_MEMBER and key.member is not None:
            group.target.pop(key.member, None)
        elif key.kind == cr.REGULAR_EXPRESSION and key.member is not None:
            group.regexes.pop(key.member, None)
            group.regexes_checked.pop(key.member, None)
        elif key.kind == cr.CURRENT_ASSIGNMENT and key.member in group.members:
            m = group.members[key.member]
            group.set_current(m, 0, -1, MemberState.STABLE, {}, {})
        elif key.kind == cr.MEMBER_METADATA and key.member is not None:
            group.remove(key.member)
            _cancel(shard, group.group_id, key.member)
        return
    if group is None:
        group = groups[key.group] = ConsumerGroup(key.group)
    if key.kind == cr.GROUP_METADATA:
        group.group_epoch = cr.decode_epoch(value)
    elif key.kind == cr.PARTITION_METADATA:
        group.topics = cr.decode_partition_metadata(value)
    elif key.kind == cr.TARGET_METADATA:
        group.assignment_epoch = cr.decode_epoch(value)
    elif key.kind == cr.REGULAR_EXPRESSION:
        if key.member is not None:  # the key's second string is the regex
            rv = cr.decode_regex(value)
            group.regexes[key.member] = rv
            group.regexes_checked[key.member] = rv.version
    elif key.member is not None:
        m = group.member(key.member)
        if key.kind == cr.MEMBER_METADATA:
            v = cr.decode_member_metadata(value)
            m.instance_id, m.rack_id, m.client_id, m.client_host = (
                v.instance_id, v.rack_id, v.client_id, v.client_host)
            m.subscribed_topic_names = v.subscribed_topic_names
            m.subscribed_topic_regex = v.subscribed_topic_regex or None
            m.rebalance_timeout_ms, m.server_assignor = v.rebalance_timeout_ms, v.server_assignor
            m.has_metadata = True
            m.classic = v.classic
            if v.instance_id is not None:
                group.static_members[v.instance_id] = m.member_id
        elif key.kind == cr.TARGET_MEMBER:
            group.target[m.member_id] = cr.decode_target_member(value)
        elif key.kind == cr.CURRENT_ASSIGNMENT:
            c = cr.decode_current_assignment(value)
            state = _STATES.get(c.state, MemberState.STABLE)
            group.set_current(m, c.member_epoch, c.previous_member_epoch, state,
                              c.assigned, c.pending_revocation)
        if not shard.loading:
            _touch(shard, group.group_id, m.member_id, shard.now_ms)


def _touch(shard: GroupShard, gid: str, mid: str, now: int) -> None:
    """Renew a member's session (a classic member of a mixed group has its own)."""
    group = shard.consumer_groups.get(gid)
    m = group.members.get(mid) if group is not None else None
    timeout = (m.classic.session_timeout_ms if m is not None and m.classic is not None
               else shard.config.consumer_session_timeout_ms)
    shard.timers.schedule(("consumer", gid, mid), now + timeout)


touch = _touch


def _cancel(shard: GroupShard, gid: str, mid: str) -> None:
    shard.timers.cancel(("consumer", gid, mid))
    shard.timers.cancel(("consumer-revoke", gid, mid))


def schedule_loaded(shard: GroupShard, now: int) -> None:
    for group in shard.consumer_groups.values():
        for mid in group.members:
            _touch(shard, group.group_id, mid, now)
