"""`GroupShard`: the groups of one `__consumer_offsets` partition, replay and timers.

`replay` is the only code that changes durable state (offsets, stored group metadata,
pending transactional offsets); it also resets a group's live view to what a stored
record says.

Transactional offset commits (a transactional batch with a producer id, written by
TxnOffsetCommit) go to `pending` (see `pending.py`), not to `group.offsets`;
`replay_marker` moves a producer's pending offsets to `group.offsets` on COMMIT — each
only if its record is later in the log than the committed offset's record (Kafka keeps
the most recent commit when transactional and plain commits mix) — and drops them on
ABORT. A group with pending offsets is never removed as empty. The same happens at load,
since loading replays the batches and markers in log order: offsets whose marker is not
in the log yet stay pending until the marker is written. The request
operations live in `rebalance.py` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
`offsets.py` (OffsetCommit, OffsetFetch, OffsetDelete, expiry) and `admin.py`
(DescribeGroups, ListGroups, DeleteGroups); each is `op(shard, ..., now) -> Result`.
KIP-848 consumer groups (`consumer_groups`) replay their own records and run
ConsumerGroupHeartbeat in `consumer.py`; their committed offsets live in `groups` too.

Timers (session, join and sync deadlines) are keys in a `DeadlineQueue`:
("member", group, member id) for members and pending members, ("join", group) for the
rebalance timeout or initial delay, ("sync", group) for members that must still sync.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Hashable, Sequence

from tidegate.coordinator.group import consumer
from tidegate.coordinator.group.config import GroupConfig
from tidegate.coordinator.group.consumer_model import ConsumerGroup
from tidegate.coordinator.group.model import Group, Member, OffsetAndMetadata
from tidegate.coordinator.group.pending import PendingOffsets
from tidegate.coordinator.group.states import GroupState
from tidegate.coordinator.runtime import ReplayRecord, Result
from tidegate.coordinator.timers import DeadlineQueue
from tidegate.protocol.consumer_group_records import decode_consumer_key
from tidegate.protocol.coordinator_records import (
    CoordinatorRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    offset_commit_fields,
)

__all__ = ["GroupShard"]

MemberKey = tuple[str, str, str]
_V3 = struct.Struct(">hqih")  # OffsetCommitValue v3 up to the metadata length
_Q = struct.Struct(">q")
_I = struct.Struct(">i")


def _uuid_ids() -> str:
    return str(uuid.uuid4())


class GroupShard:
    def __init__(
        self,
        partition: int,
        config: GroupConfig | None = None,
        *,
        new_id: Callable[[], str] = _uuid_ids,
    ) -> None:
        self.partition = partition
        self.config = config or GroupConfig()
        self.new_id = new_id
        self.groups: dict[str, Group] = {}
        # KIP-848 consumer groups (consumer.py); their offsets live in `groups`
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.pending = PendingOffsets()
        self.timers = DeadlineQueue()
        self.now_ms = 0
        self.loading = True
        self.skipped_records = 0
        self._names: dict[bytes, str] = {}

    # -- the Shard protocol ---------------------------------------------------------------

    def set_time(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def on_loaded(self, now_ms: int) -> None:
        """Members loaded from records get a full session from now (Kafka does the
        same), so a restarted coordinator does not expire everybody at once."""
        self.now_ms = now_ms
        self.loading = False
        for group in self.groups.values():
            for member in group.members.values():
                self.schedule_member(group, member.member_id, now_ms + member.session_timeout_ms)
        consumer.schedule_loaded(self, now_ms)

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def poll(self, now_ms: int) -> Result[None]:
        """Handle due deadlines until one produces records (later ones must see those
        records replayed first; the shell polls again while anything is due)."""
        from tidegate.coordinator.group import timeouts

        out: Result[None] = Result(None)
        while True:
            key = self.timers.pop_next(now_ms)
            if key is None:
                return out
            res = timeouts.on_deadline(self, key, now_ms)
            out.replies += res.replies
            if res.records:
                out.records = res.records
                return out

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """A COMMIT applies the producer's pending offsets where newer (by record
        offset) than the committed ones; an ABORT drops them."""
        done = self.pending.take(producer_id)
        for gid, tps in done.items():
            group = self.groups.get(gid)
            if group is None:  # cannot happen (pending keeps groups); be safe
                group = self.groups[gid] = Group(gid)
            if commit:
                committed = group.offsets
                for tp, o in tps.items():
                    cur = committed.get(tp)
                    if cur is None or o.record_offset > cur.record_offset:
                        committed[tp] = o
            self.drop_if_removable(group)

    def replay(self, records: Sequence[ReplayRecord], producer_id: int = -1,
               producer_epoch: int = -1, transactional: bool = False) -> None:
        """Apply records. Offset commits — nearly all of a loaded log — take an inlined
        path (names interned, no intermediate objects): a million load in seconds.
        A transactional batch's offset commits become pending instead."""
        if transactional and producer_id >= 0:
            self._replay_transactional(records, producer_id)
            return
        names, groups, fields = self._names, self.groups, offset_commit_fields
        pending = self.pending
        v3, q, i32, new_tuple, oam = _V3.unpack_from, _Q.unpack_from, _I.unpack_from, \
            tuple.__new__, OffsetAndMetadata
        for r in records:
            raw = r.key
            if raw is None:
                self.skipped_records += 1
                continue
            if len(raw) > 8 and raw[0] == 0 and raw[1] <= 1:
                try:
                    gend = 4 + ((raw[2] << 8) | raw[3])
                    tend = gend + 2 + ((raw[gend] << 8) | raw[gend + 1])
                    graw, traw = raw[4:gend], raw[gend + 2 : tend]
                    gid = names.get(graw) or names.setdefault(graw, graw.decode("utf-8"))
                    topic = names.get(traw) or names.setdefault(traw, traw.decode("utf-8"))
                except (IndexError, UnicodeDecodeError):
                    tend = -1
                if tend + 4 != len(raw):
                    decode_key(raw)  # raises CoordinatorRecordError with the details
                    raise CoordinatorRecordError("malformed offset commit key")
                tp = (topic, i32(raw, tend)[0])
                value = r.value
                group = groups.get(gid)
                if value is None:
                    if group is not None:
                        group.offsets.pop(tp, None)
                        if pending:
                            pending.discard(gid, tp)
                        self.drop_if_removable(group)
                    continue
                if group is None:
                    group = groups[gid] = Group(gid)
                if len(value) == 24 and value[1] == 3 and value[0] == 0:
                    # v3 without metadata (what consumers commit): no call, no decode
                    _, offset, epoch, mlen = v3(value)
                    if mlen == 0:
                        group.offsets[tp] = new_tuple(
                            oam, (offset, epoch, "", q(value, 16)[0], -1, r.offset))
                        continue
                offset, epoch, metadata, ts, expire = fields(value)
                group.offsets[tp] = oam(offset, epoch, metadata, ts, expire, r.offset)
                continue
            key = decode_key(raw)
            if isinstance(key, GroupMetadataKey):
                if r.value is None:
                    self._replay_group_tombstone(key.group)
                else:
                    self._replay_group(key.group, decode_group_metadata_value(r.value))
            elif (ckey := decode_consumer_key(raw)) is not None:
                consumer.replay(self, ckey, r.value)  # KIP-848 consumer-group records
            else:
                self.skipped_records += 1  # e.g. share-group records: not ours

    # -- replay ---------------------------------------------------------------------------

    def _replay_transactional(self, records: Sequence[ReplayRecord], producer_id: int) -> None:
        """Offset commits of a transactional batch wait for the producer's marker;
        tombstones and other records apply at once, as in a plain batch."""
        for r in records:
            if r.key is None or r.value is None:
                self.replay([r])
                continue
            key = decode_key(r.key)
            if not isinstance(key, OffsetCommitKey):
                self.replay([r])
                continue
            offset, epoch, metadata, ts, expire = offset_commit_fields(r.value)
            gid = key.group
            if gid not in self.groups:
                self.groups[gid] = Group(gid)
            self.pending.add(producer_id, gid, (key.topic, key.partition),
                             OffsetAndMetadata(offset, epoch, metadata, ts, expire, r.offset))

    def _replay_group(self, group_id: str, value: GroupMetadataValue) -> None:
        group = self.groups.get(group_id)
        # a group that only held offsets (e.g. a consumer group's, downgraded to classic
        # with its members: consumer_upgrade.downgrade) starts Stable as a new one does
        fresh = group is None or (group.state is GroupState.EMPTY and not group.members
                                  and group.protocol_type is None and group.stored is None)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        old = group.members
        members: dict[str, Member] = {}
        for mm in value.members:
            prev = old.get(mm.member_id)
            protocols: tuple[tuple[str, bytes], ...] = ((value.protocol or "", mm.subscription),)
            if prev is not None and (value.protocol or "", mm.subscription) in prev.protocols:
                protocols = prev.protocols  # keep the full list the member joined with
            members[mm.member_id] = Member(
                member_id=mm.member_id,
                group_instance_id=mm.group_instance_id,
                client_id=mm.client_id,
                client_host=mm.client_host,
                rebalance_timeout_ms=mm.rebalance_timeout,
                session_timeout_ms=mm.session_timeout,
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=mm.assignment,
                join_waiter=prev.join_waiter if prev else None,
                sync_waiter=prev.sync_waiter if prev else None,
            )
        for member_id in old:
            if member_id not in members:
                self.timers.cancel(("member", group_id, member_id))
        group.members = members
        group.static_members = {
            m.group_instance_id: m.member_id
            for m in members.values()
            if m.group_instance_id is not None
        }
        for member_id in members:
            group.pending.pop(member_id, None)
        group.protocol_type = value.protocol_type or None
        group.generation = value.generation
        group.protocol = value.protocol
        group.leader = value.leader if value.leader in members else next(iter(members), None)
        group.invalidate_subscriptions()
        target = GroupState.STABLE if members else GroupState.EMPTY
        if fresh or self.loading:
            group.state = target
        elif group.state is not target:
            group.transition_to(target, self.now_ms)
        group.state_timestamp = (
            value.current_state_timestamp if value.current_state_timestamp >= 0 else None
        )
        group.stored = value
        self.timers.cancel(("join", group_id))
        group.initial_delay = group.new_member_added = False
        if not members:
            group.pending_sync.clear()
            self.timers.cancel(("sync", group_id))
        if not self.loading:
            for m in members.values():
                self.schedule_member(group, m.member_id, self.now_ms + m.session_timeout_ms)

    def _replay_group_tombstone(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        if not self.loading:
            group.transition_to(GroupState.DEAD, self.now_ms)
        self.cancel_group_timers(group)
        # offsets (committed or pending) outlive their group's metadata (Kafka's too)
        if group.offsets or self.pending.has_group(group_id):
            survivor = self.groups[group_id] = Group(group_id)
            survivor.offsets = group.offsets

    # -- helpers for the operations -------------------------------------------------------

    def schedule_member(self, group: Group, member_id: str, deadline_ms: int) -> None:
        self.timers.schedule(("member", group.group_id, member_id), deadline_ms)

    def cancel_member(self, group: Group, member_id: str) -> None:
        self.timers.cancel(("member", group.group_id, member_id))

    def cancel_group_timers(self, group: Group) -> None:
        gid = group.group_id
        for member_id in list(group.members) + list(group.pending):
            self.timers.cancel(("member", gid, member_id))
        self.timers.cancel(("join", gid))
        self.timers.cancel(("sync", gid))

    def drop_if_removable(self, group: Group) -> None:
        """Forget a group that holds nothing (e.g. created by a join that went away);
        pending transactional offsets count."""
        if (group.is_removable and self.groups.get(group.group_id) is group
                and not self.pending.has_group(group.group_id)):
            self.cancel_group_timers(group)
            del self.groups[group.group_id]

    def timer_key(self, key: Hashable) -> tuple[str, str, str | None]:
        parts = key if isinstance(key, tuple) else ()
        kind = str(parts[0]) if parts else ""
        gid = str(parts[1]) if len(parts) > 1 else ""
        mid = str(parts[2]) if len(parts) > 2 else None
        return kind, gid, mid
