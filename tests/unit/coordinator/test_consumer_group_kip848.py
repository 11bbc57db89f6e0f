"""KIP-848 consumer groups: record round trips, the server-side assignors, and a
Hypothesis model of reconciliation driven through real GroupShard heartbeats
(no partition is ever held by two members)."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.assignors.server_side import range_assign, uniform_assign
from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group import consumer
from tidegate.coordinator.group.config import GroupConfig
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.runtime import LoggedRecord
from tidegate.protocol import consumer_group_records as cr

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {"a": cr.TopicMetadata(T1, "a", 12), "b": cr.TopicMetadata(T2, "b", 5)}


def test_records_round_trip() -> None:
    key = cr.ConsumerGroupKey(cr.CURRENT_ASSIGNMENT, "g", "m1")
    assert cr.decode_consumer_key(cr.encode_consumer_key(key)) == key
    assert cr.decode_consumer_key(cr.encode_consumer_key(
        cr.ConsumerGroupKey(cr.GROUP_METADATA, "g"))) == cr.ConsumerGroupKey(3, "g")
    assert cr.decode_epoch(cr.encode_epoch(7)) == 7
    assert cr.decode_partition_metadata(cr.encode_partition_metadata(TOPICS)) == TOPICS
    mm = cr.MemberMetadataValue("i", None, "c", "/h", ("a", "b"), None, 300000, "range")
    assert cr.decode_member_metadata(cr.encode_member_metadata(mm)) == mm
    a = {T1: frozenset({0, 3}), T2: frozenset({1})}
    assert cr.decode_target_member(cr.encode_target_member(a)) == a
    cur = cr.CurrentAssignmentValue(4, 3, 0, a, {T2: frozenset({4})})
    assert cr.decode_current_assignment(cr.encode_current_assignment(cur)) == cur
    # Kafka's layout: int16 version 0, int32 epoch, empty tagged fields
    assert cr.encode_epoch(5) == b"\x00\x00\x00\x00\x00\x05\x00"


@given(st.integers(1, 6), st.integers(0, 20), st.integers(0, 9))
def test_assignors_cover_every_partition_once(n: int, p1: int, p2: int) -> None:
    subs = {f"m{i}": frozenset({"a", "b"} if i % 2 else {"a"}) for i in range(n)}
    parts = {"a": p1, "b": p2}
    for fn in (uniform_assign, range_assign):
        out = fn(subs, parts, {})
        assert set(out) == set(subs)
        seen = [(t, p) for a in out.values() for t, ps in a.items() for p in ps]
        want = [("a", p) for p in range(p1)] + (
            [("b", p) for p in range(p2)] if n > 1 else [])
        assert sorted(seen) == sorted(want)
        for m, a in out.items():
            assert set(a) <= subs[m]


def test_uniform_is_balanced_and_sticky() -> None:
    subs = {m: frozenset({"a"}) for m in ("x", "y", "z")}
    first = uniform_assign(subs, {"a": 12}, {})
    assert sorted(len(a["a"]) for a in first.values()) == [4, 4, 4]
    del subs["z"]
    second = uniform_assign(subs, {"a": 12}, first)
    assert first["x"]["a"] <= second["x"]["a"] and first["y"]["a"] <= second["y"]["a"]


def _shard() -> GroupShard:
    shard = GroupShard(0, GroupConfig(), new_id=lambda: str(uuid.uuid4()))
    shard.loading = False
    return shard


class _Log:
    """Runs operations as the runtime does: records appended, then replayed."""

    def __init__(self) -> None:
        self.shard = _shard()
        self.records: list[tuple[bytes, bytes | None]] = []

    def run(self, req: consumer.HeartbeatRequest, now: int) -> consumer.HeartbeatResponse:
        res = consumer.heartbeat(self.shard, req, TOPICS.get, now)
        base = len(self.records)
        self.records += res.records
        self.shard.replay([LoggedRecord(base + i, k, v) for i, (k, v) in enumerate(res.records)])
        assert not isinstance(res.response, type(None))
        return res.response  # type: ignore[return-value]


def _check_exclusive(shard: GroupShard) -> None:
    g = shard.consumer_groups.get("g")
    if g is None:
        return
    held: dict[tuple[uuid.UUID, int], str] = {}
    for m in g.members.values():
        for a in (m.assigned, m.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    assert (t, p) not in held, f"{t}-{p} held by {held[(t, p)]} and {m.member_id}"
                    held[(t, p)] = m.member_id


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["join", "beat", "ack", "leave"]),
                          st.integers(0, 4)), min_size=1, max_size=60))
def test_reconciliation_never_double_assigns(steps: list[tuple[str, int]]) -> None:
    """Members join, heartbeat (acknowledging revocations or not) and leave in any
    order; after every step no partition is held by two members, and replaying the
    whole log into a fresh shard gives the same state."""
    log = _Log()
    epochs: dict[int, int] = {}
    owned: dict[int, cr.Assignment] = {}
    now = 0
    for action, i in steps:
        now += 10
        mid = f"m{i}"
        if action == "join" and i not in epochs:
            r = log.run(consumer.HeartbeatRequest("g", mid, 0, rebalance_timeout_ms=1000,
                                                  subscribed_topic_names=("a", "b"),
                                                  owned={}), now)
        elif i in epochs and action == "leave":
            r = log.run(consumer.HeartbeatRequest("g", mid, -1), now)
            assert r.error is ErrorCode.none
            del epochs[i]
            owned.pop(i, None)
            _check_exclusive(log.shard)
            continue
        elif i in epochs:
            # "ack": report owning exactly the last assignment; "beat": say nothing
            r = log.run(consumer.HeartbeatRequest(
                "g", mid, epochs[i], owned=owned.get(i, {}) if action == "ack" else None), now)
        else:
            continue
        assert r.error is ErrorCode.none, r
        epochs[i] = r.member_epoch
        if r.assignment is not None:
            owned[i] = r.assignment
        _check_exclusive(log.shard)
    fresh = _shard()
    fresh.replay([LoggedRecord(i, k, v) for i, (k, v) in enumerate(log.records)])
    a, b = log.shard.consumer_groups.get("g"), fresh.consumer_groups.get("g")
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert a.group_epoch == b.group_epoch and a.target == b.target
        assert a.owners == b.owners and set(a.members) == set(b.members)


def test_fencing_codes() -> None:
    log = _Log()
    r = log.run(consumer.HeartbeatRequest("g", "m1", 0, rebalance_timeout_ms=1000,
                                          subscribed_topic_names=("a",)), 0)
    assert r.error is ErrorCode.none and r.member_epoch == 1
    assert r.assignment == {T1: frozenset(range(12))}
    assert log.run(consumer.HeartbeatRequest("g", "m1", 5), 1).error \
        is ErrorCode.fenced_member_epoch
    assert log.run(consumer.HeartbeatRequest("g", "zz", 1), 1).error \
        is ErrorCode.unknown_member_id
    g = log.shard.consumer_groups["g"]
    assert consumer.validate_offset_commit(g, "m1", 0) is ErrorCode.stale_member_epoch
    assert consumer.validate_offset_commit(g, "m1", 1) is ErrorCode.none
    # a static member's instance id cannot be taken while it is alive
    log.run(consumer.HeartbeatRequest("g", "s1", 0, instance_id="i", rebalance_timeout_ms=1,
                                      subscribed_topic_names=("a",)), 2)
    assert log.run(consumer.HeartbeatRequest("g", "s2", 0, instance_id="i",
                                             rebalance_timeout_ms=1,
                                             subscribed_topic_names=("a",)), 3).error \
        is ErrorCode.unreleased_instance_id
    # after a static leave (-2) a new incarnation takes over its place
    assert log.run(consumer.HeartbeatRequest("g", "s1", -2, instance_id="i"), 4).error \
        is ErrorCode.none
    r = log.run(consumer.HeartbeatRequest("g", "s2", 0, instance_id="i",
                                          rebalance_timeout_ms=1,
                                          subscribed_topic_names=("a",)), 5)
    assert r.error is ErrorCode.none and "s1" not in log.shard.consumer_groups["g"].members


def _replay(log: _Log, records: list[tuple[bytes, bytes | None]]) -> None:
    base = len(log.records)
    log.records += records
    log.shard.replay([LoggedRecord(base + i, k, v) for i, (k, v) in enumerate(records)])


def test_session_expiry_frees_partitions_for_the_others() -> None:
    log = _Log()
    join = {"rebalance_timeout_ms": 1000, "subscribed_topic_names": ("a",)}
    r1 = log.run(consumer.HeartbeatRequest("g", "m1", 0, **join), 0)  # type: ignore[arg-type]
    r2 = log.run(consumer.HeartbeatRequest("g", "m2", 0, **join), 10)  # type: ignore[arg-type]
    assert r2.assignment == {}  # everything is still m1's
    r1 = log.run(consumer.HeartbeatRequest("g", "m1", r1.member_epoch, owned=r1.assignment),
                 20)
    assert r1.assignment is not None and len(r1.assignment[T1]) == 6  # revoke half
    # m1 dies: only m2 heartbeats; the session timer removes m1
    timeout = log.shard.config.consumer_session_timeout_ms
    log.run(consumer.HeartbeatRequest("g", "m2", r2.member_epoch), timeout - 100)
    res = log.shard.poll(timeout + 50)
    _replay(log, res.records)
    assert "m1" not in log.shard.consumer_groups["g"].members
    r2b = log.run(consumer.HeartbeatRequest("g", "m2", r2.member_epoch, owned={}),
                  timeout + 60)
    assert r2b.assignment == {T1: frozenset(range(12))}
    _check_exclusive(log.shard)


def test_offsets_and_deletion_of_a_consumer_group() -> None:
    from tidegate.coordinator.group import admin, offsets
    from tidegate.coordinator.group.messages import OffsetCommitRequest

    log = _Log()
    r = log.run(consumer.HeartbeatRequest("g", "m1", 0, rebalance_timeout_ms=1,
                                          subscribed_topic_names=("a",)), 0)
    fields = OffsetCommitRequest.__dataclass_fields__
    assert "generation_id" in fields and "member_id" in fields
    listed = admin.list_groups(log.shard)
    assert [(g.group_id, g.group_type) for g in listed] == [("g", "consumer")]
    assert admin.delete_groups(log.shard, ["g"], 1).response == [("g", ErrorCode.non_empty_group)]
    # offsets of subscribed topics never expire while the group is active
    g = log.shard.consumer_groups["g"]
    assert consumer.validate_offset_commit(g, "m1", r.member_epoch) is ErrorCode.none
    log.run(consumer.HeartbeatRequest("g", "m1", -1), 2)
    assert not log.shard.consumer_groups["g"].members
    res = offsets.expire(log.shard, 10)  # empty, no offsets: the group goes
    _replay(log, res.records)
    assert "g" not in log.shard.consumer_groups


def test_offset_delete_refuses_the_topics_a_consumer_group_subscribes_to() -> None:
    # Kafka's ConsumerGroup: OffsetDelete of a subscribed topic's partition is
    # GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to it (librdkafka's 0081
    # DeleteConsumerGroupOffsets "with subscribing consumer", group.protocol=consumer)
    from tidegate.coordinator.group import offsets
    from tidegate.coordinator.group.messages import CommitPartition, OffsetCommitRequest

    log = _Log()
    r = log.run(consumer.HeartbeatRequest("g", "m1", 0, rebalance_timeout_ms=1000,
                                          subscribed_topic_names=("a",)), 0)

    def delete(now: int) -> tuple[ErrorCode, list[tuple[tuple[str, int], ErrorCode]]]:
        res = offsets.delete_offsets(log.shard, "g", [("a", 0), ("b", 1)], now)
        _replay(log, res.records)
        return res.response[0], list(res.response[1])

    # no offsets committed yet: the group exists all the same
    assert delete(1) == (ErrorCode.none, [(("a", 0), ErrorCode.group_subscribed_to_topic),
                                          (("b", 1), ErrorCode.none)])
    commit = offsets.commit(log.shard, OffsetCommitRequest(
        "g", r.member_epoch, "m1", partitions=(CommitPartition("a", 0, 5),
                                              CommitPartition("b", 1, 7))), 2)
    _replay(log, commit.records)
    assert delete(3) == (ErrorCode.none, [(("a", 0), ErrorCode.group_subscribed_to_topic),
                                          (("b", 1), ErrorCode.none)])
    assert set(log.shard.groups["g"].offsets) == {("a", 0)}
    # the member leaves: nothing is subscribed any more
    log.run(consumer.HeartbeatRequest("g", "m1", -1), 4)
    assert delete(5) == (ErrorCode.none, [(("a", 0), ErrorCode.none), (("b", 1), ErrorCode.none)])
    g = log.shard.groups.get("g")
    assert g is None or not g.offsets


def test_a_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout() -> None:
    log = _Log()
    join = {"rebalance_timeout_ms": 500, "subscribed_topic_names": ("a",)}
    r1 = log.run(consumer.HeartbeatRequest("g", "m1", 0, **join), 0)  # type: ignore[arg-type]
    r2 = log.run(consumer.HeartbeatRequest("g", "m2", 0, **join), 10)  # type: ignore[arg-type]
    r1 = log.run(consumer.HeartbeatRequest("g", "m1", r1.member_epoch, owned=r1.assignment),
                 20)
    g = log.shard.consumer_groups["g"]
    assert g.members["m1"].pending_revocation  # told to give up half, it never does
    log.run(consumer.HeartbeatRequest("g", "m2", r2.member_epoch), 400)
    _replay(log, log.shard.poll(600).records)  # 20 + 500 ms: fenced
    assert "m1" not in log.shard.consumer_groups["g"].members
    r2 = log.run(consumer.HeartbeatRequest("g", "m2", r2.member_epoch, owned={}), 610)
    assert r2.assignment == {T1: frozenset(range(12))}
    # the fenced member learns it at its next heartbeat
    assert log.run(consumer.HeartbeatRequest("g", "m1", r1.member_epoch), 620).error \
        is ErrorCode.unknown_member_id
