"""Mixed groups (`consumer_upgrade`, `consumer_classic`): a Stable classic group is
upgraded online when a consumer-protocol member joins, its classic members are served
by the consumer group through JoinGroup/SyncGroup/Heartbeat, and the group is
downgraded when the last consumer-protocol member leaves. A Hypothesis model drives
eager classic clients and consumer-protocol clients at random and checks what the
clients believe they own: never the same partition in two clients at once."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.assignors.protocol import decode_assignment, encode_assignment, encode_subscription
from tidegate.assignors.types import Assignment as PA
from tidegate.assignors.types import Subscription
from tidegate.assignors.types import TopicPartition as PTP
from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group import consumer, consumer_classic
from tidegate.coordinator.group.config import GroupConfig
from tidegate.coordinator.group.consumer_regex import TopicNames
from tidegate.coordinator.group.messages import (
    HeartbeatRequest,
    JoinRequest,
    LeaveMember,
    LeaveRequest,
    SyncRequest,
)
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.runtime import LoggedRecord, Record
from tidegate.protocol import consumer_group_records as cr
from tidegate.protocol.coordinator_records import (
    GroupMetadataValue,
    MemberMetadata,
    encode_group_metadata_key,
    encode_group_metadata_value,
)

T = uuid.UUID(int=7)
TOPICS = {"a": cr.TopicMetadata(T, "a", 6)}
SUB = encode_subscription(Subscription(("a",)))


class _World:
    def __init__(self, policy: str = "bidirectional") -> None:
        self.shard = GroupShard(0, GroupConfig(consumer_migration_policy=policy),
                                new_id=lambda: str(uuid.uuid4()))
        self.shard.loading = False
        self.n = 0
        # a Stable classic group: c0 owns 0-2, c1 owns 3-5 (generation 4)
        members = tuple(MemberMetadata(
            f"c{i}", None, "cli", "/h", 30000, 10000, SUB,
            encode_assignment(PA(tuple(PTP("a", p) for p in range(3 * i, 3 * i + 3)))))
            for i in range(2))
        self.apply([(encode_group_metadata_key("g"), encode_group_metadata_value(
            GroupMetadataValue("consumer", 4, "range", "c0", 0, members)))])
        # what each client believes it owns
        self.owned: dict[str, set[int]] = {"c0": {0, 1, 2}, "c1": {3, 4, 5}}
        self.epochs: dict[str, int] = {"c0": 4, "c1": 4}

    def apply(self, records: list[Record]) -> None:
        self.shard.replay([LoggedRecord(self.n + i, k, v) for i, (k, v) in enumerate(records)])
        self.n += len(records)

    def beat(self, mid: str, epoch: int) -> consumer.HeartbeatResponse:
        owned = {T: frozenset(self.owned.get(mid, set()))} if epoch > 0 else {}
        res = consumer.heartbeat(self.shard, consumer.HeartbeatRequest(
            "g", mid, epoch, rebalance_timeout_ms=30000 if epoch == 0 else -1,
            subscribed_topic_names=("a",) if epoch == 0 else None,
            owned=owned if epoch >= 0 else None), TOPICS.get, 0)
        self.apply(res.records)
        r = res.response
        assert isinstance(r, consumer.HeartbeatResponse)
        if r.error is ErrorCode.none and epoch >= 0 and r.member_id:
            self.epochs[r.member_id] = r.member_epoch
            if r.assignment is not None:  # the client revokes, then takes the rest
                self.owned[r.member_id] = set(r.assignment.get(T, frozenset()))
        return r

    def cgroup(self) -> consumer_classic.ConsumerGroup | None:
        return consumer_classic.serves(self.shard, "g")

    def classic_beat(self, mid: str) -> ErrorCode:
        cg = self.cgroup()
        if cg is None:  # a classic group again: its members keep their assignments
            return ErrorCode.none
        code = consumer_classic.heartbeat(self.shard, cg, HeartbeatRequest(
            "g", self.epochs[mid], mid), 0).response
        assert isinstance(code, ErrorCode)
        if code in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
            self.owned[mid] = set()  # an eager client revokes everything, then rejoins
            self.classic_rejoin(mid)
        return code

    def classic_rejoin(self, mid: str) -> None:
        cg = self.cgroup()
        assert cg is not None
        res = consumer_classic.join(self.shard, cg, JoinRequest(
            "g", mid, None, "consumer", (("range", SUB),), 10000, 30000, "cli"),
            TOPICS.get, lambda: TopicNames(0, frozenset()), 0)
        self.apply(res.records)
        j = res.response
        assert j.error is ErrorCode.none, j  # type: ignore[union-attr]
        self.epochs[mid] = j.generation_id  # type: ignore[union-attr]
        cg = self.cgroup()
        assert cg is not None
        s = consumer_classic.sync(self.shard, cg, SyncRequest("g", self.epochs[mid], mid), 0)
        assert s.response.error is ErrorCode.none  # type: ignore[union-attr]
        got = decode_assignment(s.response.assignment).partitions  # type: ignore[union-attr]
        self.owned[mid] = {tp.partition for tp in got}

    def check(self) -> None:
        seen: dict[int, str] = {}
        for mid, ps in self.owned.items():
            for p in ps:
                assert p not in seen, f"partition {p} owned by {seen[p]} and {mid}"
                seen[p] = mid


def test_upgrade_split_and_downgrade() -> None:
    w = _World()
    r = w.beat("", 0)  # a consumer-protocol member joins: the classic group is upgraded
    assert r.error is ErrorCode.none
    new = r.member_id or ""
    cg = w.cgroup()
    assert cg is not None
    assert "g" not in w.shard.groups or not w.shard.groups["g"].members
    assert cg.members["c0"].classic is not None and cg.members["c0"].member_epoch == 4
    assert w.owned[new] == set()  # nothing until the classic members release
    for _ in range(3):
        for mid in ("c0", "c1"):
            w.classic_beat(mid)
        w.beat(new, w.epochs[new])
        w.check()
    assert len(w.owned[new]) == 2 and len(w.owned["c0"]) == 2 and len(w.owned["c1"]) == 2
    assert w.classic_beat("c0") is ErrorCode.none
    # the consumer-protocol member leaves: back to a classic group of the same members,
    # each keeping its partitions, one generation on (they rejoin: ILLEGAL_GENERATION)
    w.beat(new, -1)
    assert w.cgroup() is None and "g" not in w.shard.consumer_groups
    g = w.shard.groups["g"]
    assert set(g.members) == {"c0", "c1"} and g.generation > w.epochs["c0"]
    kept = {tp.partition for tp in decode_assignment(g.members["c0"].assignment).partitions}
    assert kept == w.owned["c0"]
    # and a consumer-protocol member may upgrade it again
    assert w.beat("", 0).error is ErrorCode.none and w.cgroup() is not None


def test_policy_disabled_refuses_the_upgrade() -> None:
    w = _World("disabled")
    r = w.beat("", 0)
    assert r.error is ErrorCode.group_id_not_found
    assert "g" not in w.shard.consumer_groups


def test_classic_leave_and_offset_commit_generation() -> None:
    w = _World()
    new = w.beat("", 0).member_id or ""
    cg = w.cgroup()
    assert cg is not None
    assert consumer.validate_offset_commit(cg, "c0", 3) is ErrorCode.illegal_generation
    assert consumer.validate_offset_commit(cg, "c0", 4) is ErrorCode.none
    res = consumer_classic.leave(w.shard, cg, LeaveRequest("g", (LeaveMember("c0"),)), 0)
    w.apply(res.records)
    cg = w.cgroup()
    assert cg is not None and set(cg.members) == {"c1", new}


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["join", "beat", "classic", "leave"]),
                          st.integers(0, 3)), min_size=1, max_size=40))
def test_no_partition_in_two_clients(steps: list[tuple[str, int]]) -> None:
    w = _World()
    members: list[str] = []  # consumer-protocol members
    for kind, i in steps:
        if kind == "join":
            r = w.beat("", 0)
            if r.error is ErrorCode.none and r.member_id:
                members.append(r.member_id)
        elif kind == "beat" and members:
            mid = members[i % len(members)]
            r = w.beat(mid, w.epochs[mid])
            if r.error is not ErrorCode.none:  # fenced: it lost its partitions
                w.owned[mid] = set()
                members.remove(mid)
        elif kind == "classic":
            mid = f"c{i % 2}"
            if w.cgroup() is not None and mid in w.cgroup().members:  # type: ignore[union-attr]
                w.classic_beat(mid)
        elif kind == "leave" and members:
            mid = members.pop(i % len(members))
            w.beat(mid, -1)
            w.owned[mid] = set()
        w.check()
