"""Cluster mode: which topics a handler looks up at the topic admin's truth, and when.

A lookup on a metadata-cache miss reads ZooKeeper (handlers/common.py's
`partition_counts`, `topic_names`). Handlers check the topic ACL first (Kafka answers
TOPIC_AUTHORIZATION_FAILED whether or not the topic exists), so an unauthorized client
naming unknown topics costs no ZooKeeper read; the lookups that remain go out together.
Topics named by id (OffsetCommit v10, OffsetFetch v10, DeleteTopics v6) are found by id
when the cache lacks the id (`ClusterTopicAdmin.find_topic_ids`)."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from tests.unit.server.topic_truth import Denying, TopicTruth

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group.messages import (
    FetchedOffset,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from tidegate.protocol.messages import build, request_class
from tidegate.replication.znodes import TopicAssignment
from tidegate.server.cluster import topic_admin as cluster_topic_admin
from tidegate.server.cluster.errors import ConnectionLossError, NoNodeError
from tidegate.server.cluster.metadata import ClusterMetadata
from tidegate.server.cluster.topic_admin import ClusterTopicAdmin
from tidegate.server.context import RequestContext
from tidegate.server.handlers.admin import handle_create_partitions, handle_delete_topics
from tidegate.server.handlers.common import partition_counts, topic_names
from tidegate.server.handlers.offsets_commit import (
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
)
from tidegate.server.handlers.transactions import handle_add_partitions, handle_txn_offset_commit

CACHED_ID, NEW_ID = uuid.UUID(int=5), uuid.UUID(int=6)


class Coordinator:
    def __init__(self) -> None:
        self.committed: list[tuple[str, int]] = []

    async def commit(self, req: Any) -> list[tuple[tuple[str, int], ErrorCode]]:
        self.committed += [(p.topic, p.partition) for p in req.partitions]
        return [((p.topic, p.partition), ErrorCode.none) for p in req.partitions]

    async def delete_offsets(self, group: str, tps: list[tuple[str, int]]
                             ) -> tuple[ErrorCode, list[Any]]:
        return ErrorCode.none, []

    async def fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        return OffsetFetchResponse(ErrorCode.none, tuple(
            FetchedOffset(t, p, offset=1) for t, p in req.partitions or ()))


def _broker(admin: TopicTruth, denied: set[str] = frozenset(),  # type: ignore[assignment]
            cluster: bool = True) -> Any:
    md = ClusterMetadata(1, "PLAINTEXT", "cluster")
    md.set_topic("cached", TopicAssignment("cached", {0: (1,), 1: (1,)}, topic_id=CACHED_ID))
    return SimpleNamespace(
        metadata=md, topic_admin=admin, authorizer=Denying(set(denied)),
        clock=SimpleNamespace(monotonic=time.monotonic), group_coordinator=Coordinator(),
        config=SimpleNamespace(get_bool=lambda key: True),
        replicas=SimpleNamespace(cluster=cluster))


def _codes(resp: Any) -> dict[str, str]:
    return {str(getattr(t, "name", None) or t.topic_id): t.partitions[0].error_code.name
            for t in resp.topics}


def _commit_topics(names: list[str]) -> list[dict[str, Any]]:
    return [{"name": n, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                        "committed_leader_epoch": -1,
                                        "committed_metadata": ""}]} for n in names]


def test_partition_counts_asks_only_the_misses_and_together() -> None:
    admin = TopicTruth({"a": 1, "b": 3, "cached": 4})
    b = _broker(admin)
    start = time.monotonic()
    got = asyncio.run(partition_counts(b, {"cached": 2, "a": 1, "b": 2, "none": 1}))
    assert got == {"cached": 2, "a": 1, "b": 3, "none": 0}
    assert sorted(admin.asked) == ["a", "b", "none"] and admin.most_in_flight == 3
    assert time.monotonic() - start < 3 * admin.delay


def test_offset_commit_checks_the_acl_before_looking_a_topic_up() -> None:
    """An unauthorized client naming unknown topics costs no lookup; the authorized
    unknown ones are looked up together."""
    admin = TopicTruth({"new": 1})
    b = _broker(admin, denied={"secret-1", "secret-2", "new-secret"})
    req = build(request_class(8, 8), {
        "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "retention_time_ms": -1,
        "topics": _commit_topics(["secret-1", "secret-2", "new-secret", "new", "gone",
                                  "cached"])})
    resp = asyncio.run(handle_offset_commit(b, RequestContext(8, 8, 1, "t", "peer"), req))
    assert _codes(resp) == {
        "secret-1": "topic_authorization_failed", "secret-2": "topic_authorization_failed",
        "new-secret": "topic_authorization_failed", "new": "none",
        "gone": "unknown_topic_or_partition", "cached": "none"}
    assert sorted(admin.asked) == ["gone", "new"] and admin.most_in_flight == 2
    assert sorted(b.group_coordinator.committed) == [("cached", 0), ("new", 0)]


def test_offset_commit_v10_finds_an_id_the_cache_lacks() -> None:
    unknown = uuid.UUID(int=99)
    admin = TopicTruth({"new": 1}, ids={NEW_ID: "new"})
    b = _broker(admin)
    req = build(request_class(8, 10), {
        "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None,
        "topics": [{"topic_id": i, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": ""}]} for i in (CACHED_ID, NEW_ID, unknown)]})
    resp = asyncio.run(handle_offset_commit(b, RequestContext(8, 10, 1, "t", "peer"), req))
    assert _codes(resp) == {str(CACHED_ID): "none", str(NEW_ID): "none",
                            str(unknown): "unknown_topic_id"}
    assert admin.asked_ids == [{NEW_ID, unknown}]  # one lookup, of the misses only
    # a request refused whole (no READ on the group) looks nothing up
    admin.asked_ids.clear()
    b.authorizer.authorize = lambda *a: int(a[3]) != 3  # 3: GROUP
    resp = asyncio.run(handle_offset_commit(b, RequestContext(8, 10, 1, "t", "peer"), req))
    assert set(_codes(resp).values()) == {"group_authorization_failed"}
    assert admin.asked_ids == []


def test_offset_fetch_v10_looks_the_ids_of_all_its_groups_up_once() -> None:
    """Several groups naming ids the cache lacks: one lookup for the request, not one per
    group; a group the principal may not describe adds nothing to it."""
    unknown, hidden = uuid.UUID(int=99), uuid.UUID(int=77)
    admin = TopicTruth({"new": 1}, ids={NEW_ID: "new", hidden: "hidden"})
    b = _broker(admin)
    b.authorizer.authorize = lambda *a: not (int(a[3]) == 3 and a[4] == "denied")  # 3: GROUP

    def group(name: str, ids: tuple[uuid.UUID, ...]) -> dict[str, Any]:
        return {"group_id": name, "member_id": None, "member_epoch": -1,
                "topics": [{"topic_id": i, "partition_indexes": [0]} for i in ids]}

    req = build(request_class(9, 10), {"groups": [
        group("g1", (CACHED_ID, NEW_ID)), group("g2", (NEW_ID, unknown)),
        group("denied", (hidden,)), group("g3", (unknown, CACHED_ID))],
        "require_stable": False})
    resp = asyncio.run(handle_offset_fetch(b, RequestContext(9, 10, 1, "t", "peer"), req))
    assert {str(g.group_id): (g.error_code.name, {
        str(t.topic_id): t.partitions[0].error_code.name for t in g.topics})
        for g in resp.groups} == {
        "g1": ("none", {str(CACHED_ID): "none", str(NEW_ID): "none"}),
        "g2": ("none", {str(NEW_ID): "none", str(unknown): "unknown_topic_id"}),
        "denied": ("group_authorization_failed", {}),
        "g3": ("none", {str(unknown): "unknown_topic_id", str(CACHED_ID): "none"})}
    assert admin.asked_ids == [{NEW_ID, unknown}]


def test_offset_delete_and_txn_offset_commit_check_the_acl_first() -> None:
    admin = TopicTruth({})
    b = _broker(admin, denied={"secret"})
    req = build(request_class(47, 0), {"group_id": "g", "topics": [
        {"name": n, "partitions": [{"partition_index": 0}]} for n in ("secret", "gone")]})
    resp = asyncio.run(handle_offset_delete(b, RequestContext(47, 0, 1, "t", "peer"), req))
    assert _codes(resp) == {"secret": "topic_authorization_failed",
                            "gone": "unknown_topic_or_partition"}
    assert admin.asked == ["gone"]
    admin.asked.clear()
    req = build(request_class(28, 3), {
        "transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 0,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": _commit_topics(["secret", "gone", "gone-2"])})
    resp = asyncio.run(handle_txn_offset_commit(b, RequestContext(28, 3, 1, "t", "peer"), req))
    assert _codes(resp) == {"secret": "topic_authorization_failed",
                            "gone": "unknown_topic_or_partition",
                            "gone-2": "unknown_topic_or_partition"}
    assert sorted(admin.asked) == ["gone", "gone-2"] and admin.most_in_flight == 2


def test_add_partitions_to_txn_looks_its_topics_up_together() -> None:
    admin = TopicTruth({})
    b = _broker(admin)
    req = build(request_class(24, 3), {
        "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 7,
        "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [
            {"name": n, "partitions": [0]} for n in ("gone-1", "gone-2", "__consumer_offsets")]})
    resp = asyncio.run(handle_add_partitions(b, RequestContext(24, 3, 1, "t", "peer"), req))
    codes = {str(t.name): t.results_by_partition[0].partition_error_code.name
             for t in resp.results_by_topic_v3_and_below}
    assert codes == {"gone-1": "unknown_topic_or_partition",
                     "gone-2": "unknown_topic_or_partition",
                     "__consumer_offsets": "invalid_topic_exception"}
    assert sorted(admin.asked) == ["gone-1", "gone-2"] and admin.most_in_flight == 2


def test_delete_topics_v6_finds_an_id_the_cache_lacks() -> None:
    admin = TopicTruth({"new": 1}, ids={NEW_ID: "new"})
    b = _broker(admin)
    unknown = uuid.UUID(int=99)
    req = build(request_class(20, 6), {"topics": [{"name": None, "topic_id": i}
                                                  for i in (NEW_ID, unknown)],
                                       "timeout": 1000})
    resp = asyncio.run(handle_delete_topics(b, RequestContext(20, 6, 1, "t", "peer"), req))
    assert [(r.name, r.error_code.name) for r in resp.responses] == [
        ("new", "none"), (None, "unknown_topic_id")]
    assert admin.asked_ids == [{NEW_ID, unknown}] and "new" not in admin.topics


def test_delete_topics_and_create_partitions_do_their_topics_side_by_side() -> None:
    """In a cluster each topic's lookup and write (ZooKeeper round trips) go side by
    side, a name given twice in turn (1 -> 2 -> 3 partitions); the answers in request
    order. Embedded, one after the other."""
    names = [f"t{i}" for i in range(8)]
    for cluster in (True, False):
        admin = TopicTruth(dict.fromkeys(names, 1), delay=0.02)
        b = _broker(admin, cluster=cluster)
        req = build(request_class(37, 3), {"topics": [
            {"name": n, "count": c, "assignments": None}
            for n, c in [("t0", 2), ("gone", 2), ("t0", 3), *((n, 2) for n in names[1:])]],
            "timeout": 0, "validate_only": False})
        resp = asyncio.run(handle_create_partitions(
            b, RequestContext(37, 3, 1, "t", "peer"), req))
        assert [(str(r.name), r.error_code.name) for r in resp.results] == [
            ("t0", "none"), ("gone", "unknown_topic_or_partition"), ("t0", "none"),
            *((n, "none") for n in names[1:])]
        assert admin.topics == {"t0": 3, **dict.fromkeys(names[1:], 2)}
        assert admin.most_in_flight == (len(names) + 1 if cluster else 1)  # with "gone"
        admin.most_in_flight = 0
        req = build(request_class(20, 4), {"topic_names": ["gone", *names, "cached"],
                                           "timeout": 0})
        resp = asyncio.run(handle_delete_topics(b, RequestContext(20, 4, 1, "t", "peer"), req))
        assert [(r.name, r.error_code.name) for r in resp.responses] == [
            ("gone", "unknown_topic_or_partition"), *((n, "none") for n in names),
            ("cached", "none")]
        assert admin.topics == {} and admin.most_in_flight == (len(names) + 2 if cluster else 1)


def test_topic_names_prefers_the_cache() -> None:
    admin = TopicTruth({}, ids={NEW_ID: "new"})
    got = asyncio.run(topic_names(_broker(admin), [CACHED_ID, NEW_ID, uuid.UUID(int=0)]))
    assert got == {CACHED_ID: "cached", NEW_ID: "new"}
    assert admin.asked_ids == [{NEW_ID}]


def test_topic_names_sees_the_cache_catch_up_during_the_lookup() -> None:
    """The cluster lookup skips the topics the cache knows when it lists them: one the
    watcher added meanwhile is found in the cache afterwards."""
    admin = TopicTruth({})
    b = _broker(admin)

    async def caught_up(ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
        b.metadata.set_topic("new", TopicAssignment("new", {0: (1,)}, topic_id=NEW_ID))
        return {}

    admin.find_topic_ids = caught_up  # type: ignore[method-assign]
    assert asyncio.run(topic_names(b, [NEW_ID])) == {NEW_ID: "new"}


class ListingZk:
    """get_children of /brokers/topics and get of each topic znode, counted."""

    def __init__(self, topics: dict[str, uuid.UUID]) -> None:
        self.topics = topics
        self.listings = 0
        self.reads: list[str] = []
        self.fail: Exception | None = None

    async def get_children(self, path: str, watch: object = None) -> list[str]:
        assert path == "/brokers/topics"
        self.listings += 1
        if self.fail is not None:
            raise self.fail
        return sorted(self.topics)

    async def get(self, path: str, watch: object = None) -> tuple[bytes, Any]:
        name = path.rsplit("/", 1)[1]
        self.reads.append(name)
        if name not in self.topics:
            raise NoNodeError(path)
        return (TopicAssignment(name, {0: (1,)}, topic_id=self.topics[name]).encode(),
                SimpleNamespace(version=0))


def test_find_topic_ids_reads_only_the_topics_the_cache_lacks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    zk = ListingZk({"cached": CACHED_ID, "new": NEW_ID, "other": uuid.UUID(int=8)})
    admin = ClusterTopicAdmin(zk, 3, cached={"cached"})  # type: ignore[arg-type]
    unknown = uuid.UUID(int=99)
    assert asyncio.run(admin.find_topic_ids({NEW_ID, unknown})) == {NEW_ID: "new"}
    assert zk.listings == 1 and sorted(zk.reads) == ["new", "other"]
    # an id found nowhere is not looked for again at once (a client repeating it)
    assert asyncio.run(admin.find_topic_ids({unknown})) == {}
    assert zk.listings == 1
    monkeypatch.setattr(cluster_topic_admin, "ID_MISS_TTL_S", 0.0)
    admin._misses.clear()
    # reads are bounded; ZooKeeper failing leaves the cache's "no" standing
    monkeypatch.setattr(cluster_topic_admin, "FIND_IDS_MAX_READS", 1)
    zk.reads.clear()
    asyncio.run(admin.find_topic_ids({unknown}))
    assert len(zk.reads) == 1
    zk.fail = ConnectionLossError("/brokers/topics")
    assert asyncio.run(admin.find_topic_ids({NEW_ID})) == {}
