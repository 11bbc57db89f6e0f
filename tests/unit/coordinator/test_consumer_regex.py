"""Regex subscriptions of KIP-848 consumer groups (`consumer_regex`), driven through real
GroupShard heartbeats: validation, resolution and re-resolution as topics come and go,
Kafka's ConsumerGroupRegularExpression record, replay, and a Hypothesis model (after
every member heartbeats, each member's target is exactly the partitions of the topics
its names and regex match now, split disjointly)."""

from __future__ import annotations

import re
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group import consumer
from tidegate.coordinator.group.config import GroupConfig
from tidegate.coordinator.group.consumer_regex import TopicNames, regex_error
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.runtime import LoggedRecord
from tidegate.protocol import consumer_group_records as cr


class _Cluster:
    """Topics that come and go, and a shard fed the records its heartbeats return."""

    def __init__(self, *names: str) -> None:
        self.topics: dict[str, cr.TopicMetadata] = {}
        self.version = 100
        for n in names:
            self.create(n)
        self.shard = GroupShard(0, GroupConfig(), new_id=lambda: str(uuid.uuid4()))
        self.shard.loading = False
        self.records: list[tuple[bytes, bytes | None]] = []

    def create(self, name: str, partitions: int = 3) -> None:
        self.topics[name] = cr.TopicMetadata(uuid.uuid4(), name, partitions)
        self.version += 1

    def delete(self, name: str) -> None:
        del self.topics[name]
        self.version += 1

    def names(self) -> TopicNames:
        return TopicNames(self.version, frozenset(self.topics))

    def beat(self, member: str = "", epoch: int = 0, *, regex: str | None = None,
             names: tuple[str, ...] | None = None, now: int = 0
             ) -> consumer.HeartbeatResponse:
        req = consumer.HeartbeatRequest(
            "g", member, epoch, rebalance_timeout_ms=30000 if epoch == 0 else -1,
            subscribed_topic_names=names if names is not None else (() if epoch == 0
                                                                    else None),
            subscribed_topic_regex=regex)
        res = consumer.heartbeat(self.shard, req, self.topics.get, now, self.names)
        base = len(self.records)
        self.records += res.records
        self.shard.replay([LoggedRecord(base + i, k, v) for i, (k, v) in enumerate(res.records)])
        assert isinstance(res.response, consumer.HeartbeatResponse)
        return res.response

    def assigned_topics(self, member: str) -> set[str]:
        g = self.shard.consumer_groups["g"]
        by_id = {t.topic_id: n for n, t in self.topics.items()}
        return {by_id[t] for t, ps in g.target.get(member, {}).items() if ps and t in by_id}


def test_regex_record_layout_round_trips() -> None:
    key = cr.ConsumerGroupKey(cr.REGULAR_EXPRESSION, "g", "^in-.*")
    raw = cr.encode_consumer_key(key)
    assert raw[:2] == b"\x00\x10"  # Kafka's record type 16
    assert cr.decode_consumer_key(raw) == key
    v = cr.RegexValue(("in-a", "in-b"), 7, 1234)
    enc = cr.encode_regex(v)
    # version 0, compact array of 2 compact strings, int64 version, int64 timestamp, tags
    assert enc == (b"\x00\x00\x03\x05in-a\x05in-b" + (7).to_bytes(8, "big")
                   + (1234).to_bytes(8, "big") + b"\x00")
    assert cr.decode_regex(enc) == v


def test_regex_validation_follows_re2() -> None:
    assert regex_error("^orders-.*") is None
    assert regex_error(r"a\(?=b") is None  # an escaped parenthesis is a literal
    assert regex_error("(?=x)y") is not None  # lookahead: RE2 has none
    assert regex_error("(?<!x)y") is not None
    assert regex_error(r"(a)\1") is not None  # backreference
    assert regex_error("[unclosed") is not None


def test_invalid_regex_is_refused() -> None:
    c = _Cluster("a")
    resp = c.beat(regex="[oops")
    assert resp.error == ErrorCode.invalid_regular_expression
    assert "g" not in c.shard.consumer_groups


def test_regex_follows_topics_created_and_deleted() -> None:
    c = _Cluster("in-a", "in-b", "other", "__consumer_offsets")
    r = c.beat(regex="in-.*")
    assert r.error == ErrorCode.none and r.member_id
    mid, epoch = r.member_id, r.member_epoch
    assert c.assigned_topics(mid) == {"in-a", "in-b"}
    g = c.shard.consumer_groups["g"]
    assert g.regexes["in-.*"].topics == ("in-a", "in-b")
    assert g.members[mid].subscribed_topic_regex == "in-.*"
    # nothing changed: no records, no new epoch
    before = len(c.records)
    assert c.beat(mid, epoch).member_epoch == epoch
    assert len(c.records) == before
    # an unrelated topic: resolved again (nothing written), epoch unchanged
    c.create("zzz")
    assert c.beat(mid, epoch).member_epoch == epoch
    assert len(c.records) == before
    # a matching topic created after the subscription: new group epoch and target
    c.create("in-c")
    r = c.beat(mid, epoch)
    assert r.member_epoch > epoch
    assert c.assigned_topics(mid) == {"in-a", "in-b", "in-c"}
    epoch = r.member_epoch
    c.delete("in-a")
    group_epoch = g.group_epoch
    c.beat(mid, epoch)  # in-a's partitions are revoked first (the member keeps its epoch)
    assert g.group_epoch > group_epoch and c.assigned_topics(mid) == {"in-b", "in-c"}
    # replaying the log into a fresh shard rebuilds the regex and the member
    fresh = GroupShard(0, GroupConfig())
    fresh.replay([LoggedRecord(i, k, v) for i, (k, v) in enumerate(c.records)])
    fg = fresh.consumer_groups["g"]
    assert fg.regexes == g.regexes
    assert fg.members[mid].subscribed_topic_regex == "in-.*"
    # the last member leaving takes its regex record with it
    c.beat(mid, -1)
    assert c.shard.consumer_groups["g"].regexes == {}


def test_internal_topics_match_as_on_kafka() -> None:
    """Kafka resolves a group's regex against every topic of the metadata image,
    internal ones included (franz-go's Test848RegexBrokerResolves expects
    `__consumer_offsets` assigned); only DESCRIBE permission filters."""
    c = _Cluster("in-a", "__consumer_offsets", "__transaction_state")
    r = c.beat(regex="__consumer_offsets|in-.*")
    assert r.error == ErrorCode.none
    assert c.assigned_topics(r.member_id) == {"in-a", "__consumer_offsets"}
    r2 = c.beat("", 0, regex="__.*")
    assert c.assigned_topics(r2.member_id) | c.assigned_topics(r.member_id) >= {
        "__consumer_offsets", "__transaction_state"}


def test_names_and_regex_together_and_a_changed_regex() -> None:
    c = _Cluster("in-a", "x", "y")
    r = c.beat(regex="in-.*", names=("x",))
    mid = r.member_id or ""
    assert c.assigned_topics(mid) == {"in-a", "x"}
    r = c.beat(mid, r.member_epoch, regex="y")
    assert c.assigned_topics(mid) == {"x", "y"}
    assert set(c.shard.consumer_groups["g"].regexes) == {"y"}  # the old one tombstoned
    r = c.beat(mid, r.member_epoch, regex="")  # "" clears the regex
    assert c.assigned_topics(mid) == {"x"}
    assert c.shard.consumer_groups["g"].regexes == {}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("create"), st.sampled_from(["in-a", "in-b", "in-c", "out", "in"])),
    st.tuples(st.just("delete"), st.sampled_from(["in-a", "in-b", "in-c", "out", "in"])),
    st.tuples(st.just("join"), st.sampled_from(["in-.*", "in-[ab]", "out|in-c", ""])),
    st.tuples(st.just("leave"), st.integers(0, 3)),
), min_size=1, max_size=25))
def test_targets_follow_the_resolved_regexes(steps: list[tuple[str, object]]) -> None:
    c = _Cluster()
    members: dict[str, tuple[str, int]] = {}  # member id -> (regex, epoch)
    for kind, arg in steps:
        if kind == "create" and arg not in c.topics:
            c.create(str(arg))
        elif kind == "delete" and arg in c.topics:
            c.delete(str(arg))
        elif kind == "join":
            r = c.beat(regex=str(arg), names=("out",) if arg == "" else ())
            assert r.error == ErrorCode.none
            members[r.member_id or ""] = (str(arg), r.member_epoch)
        elif kind == "leave" and members:
            mid = sorted(members)[int(str(arg)) % len(members)]
            c.beat(mid, -1)
            del members[mid]
        # every member heartbeats (twice: the first may only start a new epoch)
        for _ in range(2):
            for mid in sorted(members):
                rx, epoch = members[mid]
                r = c.beat(mid, epoch)
                assert r.error == ErrorCode.none, r
                members[mid] = (rx, r.member_epoch)
        if not members:
            continue
        g = c.shard.consumer_groups["g"]
        seen: set[tuple[uuid.UUID, int]] = set()
        for mid, (rx, _e) in members.items():
            want = {"out"} & set(c.topics) if rx == "" else {
                t for t in c.topics if re.fullmatch(rx, t)}
            assert c.assigned_topics(mid) <= want
            for t, ps in g.target.get(mid, {}).items():
                for p in ps:
                    assert (t, p) not in seen
                    seen.add((t, p))
        every = {(t.topic_id, p) for n, t in c.topics.items()
                 if any(n in ({"out"} if rx == "" else {n} if re.fullmatch(rx, n) else set())
                        for rx, _e in members.values())
                 for p in range(t.partitions)}
        assert seen == every  # every subscribed partition has exactly one target owner
