"""A topic just created through one broker, used at once through the others (3 brokers).

Each broker's metadata cache follows ZooKeeper through watches, so it learns of a topic
created through another broker a few milliseconds late. Clients do not wait: librdkafka's
0081 sends CreatePartitions to any broker right after CreateTopics is answered, 0099
commits offsets to the group's coordinator right after creating the topic. Both were
refused with UNKNOWN_TOPIC_OR_PARTITION while the receiving broker's cache lagged.

The tests use raw requests (no client retries hide an error), connected beforehand so
that each request follows the CreateTopics answer as closely as a client's would, and
loop so that the race shows.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.cluster import Cluster, cluster, wait_for
from tests.integration.rawclient import RawClient

__all__ = ["cluster"]

ROUNDS = 15


@pytest.fixture(scope="module")
def raws(cluster: Cluster) -> Iterator[dict[int, RawClient]]:
    clients = {bid: RawClient(b.bootstrap) for bid, b in cluster.brokers.items()}
    try:
        yield clients
    finally:
        for c in clients.values():
            c.close()


def _create(raw: RawClient, name: str, assignment: list[int] | None = None,
            factor: int = 1, timeout: int = 0, partitions: int = 1) -> uuid.UUID:
    """CreateTopics; with the default timeout 0 answered as soon as ZooKeeper has the
    topic (as Kafka does), before any broker's cache can have it. Returns its id."""
    topic: dict[str, Any] = {"name": name, "num_partitions": partitions,
                             "replication_factor": factor, "assignments": [], "configs": []}
    if assignment is not None:
        topic.update(num_partitions=-1, replication_factor=-1, assignments=[
            {"partition_index": 0, "broker_ids": assignment}])
    r = raw.call(19, 7, {"topics": [topic], "timeout": timeout})
    assert r.topics[0].error_code.value == 0, r
    return uuid.UUID(str(r.topics[0].topic_id))


def _commit(raw: RawClient, group: str, name: str) -> str:
    r = raw.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1,
                        "member_id": "", "topics": [{"name": name, "partitions": [
                            {"partition_index": 0, "committed_offset": 0}]}]})
    return str(r.topics[0].partitions[0].error_code.name)


def _coordinator(raws: dict[int, RawClient], group: str) -> int:
    """The group's coordinator, once it has loaded the group's shard (on a new cluster,
    __consumer_offsets is created by the first FindCoordinator)."""
    def ready() -> int:
        r = raws[1].call(10, 4, {"key_type": 0, "coordinator_keys": [group]})
        c = r.coordinators[0]
        if c.error_code.value != 0:
            return 0
        fetched = raws[int(c.node_id)].call(9, 7, {"group_id": group, "topics": None,
                                                   "require_stable": False})
        return int(c.node_id) if fetched.error_code.value == 0 else 0
    return int(wait_for(f"the coordinator of {group}", ready))  # type: ignore[call-overload]


def test_create_partitions_through_another_broker_at_once(
        cluster: Cluster, raws: dict[int, RawClient]) -> None:
    """librdkafka 0081: CreateTopics through broker 1, CreatePartitions through 2 and 3."""
    failures = []
    for i in range(ROUNDS):
        name = f"lag-cp-{i}-{uuid.uuid4().hex[:6]}"
        _create(raws[1], name)
        for n, via in enumerate((2, 3), start=2):
            r = raws[via].call(37, 3, {"topics": [{"name": name, "count": n,
                                                   "assignments": None}],
                                       "timeout": 10000, "validate_only": False})
            if r.results[0].error_code.value != 0:
                failures.append((name, via, r.results[0].error_code.name))
    assert not failures


def test_offset_commit_right_after_create(
        cluster: Cluster, raws: dict[int, RawClient]) -> None:
    """librdkafka 0099: a commit reaches a coordinator that did not create the topic, at
    once (the topic has a replica on every broker: only the lag is tested here)."""
    group = f"lag-g-{uuid.uuid4().hex[:6]}"
    coordinator = _coordinator(raws, group)
    creator = 1 if coordinator != 1 else 2
    failures = []
    for i in range(ROUNDS):
        name = f"lag-oc-{i}-{uuid.uuid4().hex[:6]}"
        _create(raws[creator], name, factor=3)
        code = _commit(raws[coordinator], group, name)
        if code != "none":
            failures.append((name, code))
    assert not failures


def test_topics_named_by_id_right_after_create(
        cluster: Cluster, raws: dict[int, RawClient]) -> None:
    """A topic named by its id (the CreateTopics answer's) at once through other brokers:
    OffsetCommit v10 and OffsetFetch v10 to the group's coordinator, DeleteTopics v6
    through the third broker. A cache lacking the id is backed by ZooKeeper; before, each
    answered UNKNOWN_TOPIC_ID, which an admin call or a commit does not retry."""
    group = f"lag-id-{uuid.uuid4().hex[:6]}"
    coordinator = _coordinator(raws, group)
    creator = 1 if coordinator != 1 else 2
    third = next(b for b in raws if b not in (creator, coordinator))
    failures = []
    for i in range(ROUNDS):
        topic_id = _create(raws[creator], f"lag-idc-{i}-{uuid.uuid4().hex[:6]}", factor=3)
        r = raws[coordinator].call(8, 10, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition_index": 0, "committed_offset": 0}]}]})
        failures.append(("OffsetCommit", r.topics[0].partitions[0].error_code.name))
        topic_id = _create(raws[creator], f"lag-idf-{i}-{uuid.uuid4().hex[:6]}", factor=3)
        r = raws[coordinator].call(9, 10, {"groups": [{
            "group_id": group, "member_id": None, "member_epoch": -1,
            "topics": [{"topic_id": topic_id, "partition_indexes": [0]}]}],
            "require_stable": False})
        failures.append(("OffsetFetch", r.groups[0].topics[0].partitions[0].error_code.name))
        topic_id = _create(raws[creator], f"lag-idd-{i}-{uuid.uuid4().hex[:6]}")
        r = raws[third].call(20, 6, {"topics": [{"name": None, "topic_id": topic_id}],
                                     "timeout": 10000})
        failures.append(("DeleteTopics", r.responses[0].error_code.name))
    refused = Counter(f for f in failures if f[1] != "none")
    assert not refused, refused


def test_delete_topic_through_another_broker_at_once(
        cluster: Cluster, raws: dict[int, RawClient]) -> None:
    failures = []
    for i in range(ROUNDS):
        name = f"lag-dt-{i}-{uuid.uuid4().hex[:6]}"
        _create(raws[1], name)
        r = raws[2].call(20, 4, {"topic_names": [name], "timeout": 10000})
        if r.responses[0].error_code.value != 0:
            failures.append((name, r.responses[0].error_code.name))
    assert not failures


def test_create_topics_answers_once_its_partitions_have_leaders(
        cluster: Cluster, raws: dict[int, RawClient]) -> None:
    """With a timeout, CreateTopics and CreatePartitions answer once the receiving
    broker's metadata has a leader for every partition made (Kafka's
    DelayedCreatePartitions): a client may produce to them at once."""
    def leaders(name: str) -> list[int]:
        r = raws[1].call(3, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
        return [int(p.leader_id) for p in r.topics[0].partitions]

    for i in range(5):
        name = f"lag-ld-{i}-{uuid.uuid4().hex[:6]}"
        _create(raws[1], name, factor=3, timeout=10000, partitions=3)
        assert len(got := leaders(name)) == 3 and min(got) > 0, got
        r = raws[1].call(37, 3, {"topics": [{"name": name, "count": 5, "assignments": None}],
                                 "timeout": 10000, "validate_only": False})
        assert r.results[0].error_code.value == 0
        assert len(got := leaders(name)) == 5 and min(got) > 0, got


def test_offset_commit_to_a_coordinator_without_a_replica(
        cluster: Cluster, raws: dict[int, RawClient]) -> None:
    """Once every broker knows the topic, a coordinator that hosts none of its replicas
    takes (and gives back) offsets for it; a partition the topic lacks is refused."""
    group = f"lag-h-{uuid.uuid4().hex[:6]}"
    coordinator = _coordinator(raws, group)
    other = next(b for b in cluster.brokers if b != coordinator)
    name = f"lag-nr-{uuid.uuid4().hex[:6]}"
    _create(raws[other], name, assignment=[other])
    wait_for("the coordinator to know the topic", lambda: raws[coordinator].call(
        3, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}).topics[0].error_code.value == 0)
    assert _commit(raws[coordinator], group, name) == "none"
    r = raws[coordinator].call(9, 7, {"group_id": group, "topics": [
        {"name": name, "partition_indexes": [0]}], "require_stable": False})
    assert r.topics[0].partitions[0].committed_offset == 0
    r = raws[coordinator].call(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1,
                                      "member_id": "", "topics": [{"name": name, "partitions": [
                                          {"partition_index": 1, "committed_offset": 0}]}]})
    assert r.topics[0].partitions[0].error_code.name == "unknown_topic_or_partition"
    assert _commit(raws[coordinator], group, f"lag-none-{uuid.uuid4().hex[:6]}") == (
        "unknown_topic_or_partition")


def test_every_broker_lists_its_own_groups(
        cluster: Cluster, raws: dict[int, RawClient]) -> None:
    """ListGroups (librdkafka 0081's ListConsumerGroups asks every broker): each broker
    lists the groups of the __consumer_offsets partitions it leads, without error for
    the partitions other brokers lead."""
    group = f"lag-lg-{uuid.uuid4().hex[:6]}"
    coordinator = _coordinator(raws, group)
    name = f"lag-lg-{uuid.uuid4().hex[:6]}"
    _create(raws[1], name, factor=3, timeout=10000)
    assert _commit(raws[coordinator], group, name) == "none"
    listed: dict[int, list[str]] = {}
    for bid, raw in raws.items():
        r = raw.call(16, 5, {"states_filter": [], "types_filter": ["classic"]})
        assert r.error_code.value == 0, (bid, r.error_code)
        listed[bid] = [str(g.group_id) for g in r.groups]
    assert [bid for bid, groups in listed.items() if group in groups] == [coordinator]


def test_a_new_coordinator_is_retried_not_refused(tmp_path: Path) -> None:
    """On a new cluster the first FindCoordinator creates __consumer_offsets and names
    a leader as soon as the controller writes the partition's state; that broker takes
    the partition up a moment later. Meanwhile it answers COORDINATOR_LOAD_IN_PROGRESS
    (retry here), not NOT_COORDINATOR (librdkafka 0099's committed() gave up on it)."""
    c = Cluster(tmp_path)
    c.start()
    raws: dict[int, RawClient] = {}
    try:
        raws = {bid: RawClient(b.bootstrap) for bid, b in c.brokers.items()}
        group = f"lag-new-{uuid.uuid4().hex[:6]}"

        def find() -> int:
            r = raws[1].call(10, 4, {"key_type": 0, "coordinator_keys": [group]})
            return int(r.coordinators[0].node_id) if r.coordinators[0].error_code.value == 0 else 0

        coordinator = int(wait_for("a coordinator", find))  # type: ignore[call-overload]
        seen = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = raws[coordinator].call(9, 7, {"group_id": group, "topics": None,
                                              "require_stable": False})
            seen.append(r.error_code.name)
            if r.error_code.value == 0:
                break
            time.sleep(0.05)
        assert seen[-1] == "none" and "not_coordinator" not in seen, seen
    finally:
        for raw in raws.values():
            raw.close()
        c.stop()


DESCRIBES = ("Metadata by id", "Metadata by name", "Metadata auto-create",
             "DescribeTopicPartitions")


def _describe(raw: RawClient, what: str, name: str, topic_id: uuid.UUID) -> str:
    """One describe of the topic: "none" when the answer names it with its id and, for
    its partition, a leader among the replicas (or LEADER_NOT_AVAILABLE with leader -1,
    which clients retry: "leaderless"), else what was wrong."""
    if what == "DescribeTopicPartitions":
        t = raw.call(75, 0, {"topics": [{"name": name}], "response_partition_limit": 2000,
                             "cursor": None}).topics[0]
    else:
        topic = ({"name": None, "topic_id": topic_id} if what == "Metadata by id"
                 else {"name": name})
        t = raw.call(3, 12, {"topics": [topic],
                             "allow_auto_topic_creation": what == "Metadata auto-create",
                             "include_topic_authorized_operations": False}).topics[0]
    if t.error_code.value != 0:
        return str(t.error_code.name)
    if str(t.name) != name or uuid.UUID(str(t.topic_id)) != topic_id:
        return f"wrong topic {t.name}/{t.topic_id}"
    if len(t.partitions) != 1:
        return f"{len(t.partitions)} partitions"
    p = t.partitions[0]
    leader = int(p.leader_id)
    if p.error_code.name == "leader_not_available" and leader == -1:
        return "leaderless"
    if p.error_code.value != 0 or leader not in [int(r) for r in p.replica_nodes]:
        return f"{p.error_code.name} leader {leader}"
    return "none"


def test_topics_described_right_after_create(
        cluster: Cluster, raws: dict[int, RawClient]) -> None:
    """A topic described right after its creation through another broker, as the Java
    admin's `describeTopics(TopicCollection.ofTopicIds(...))` does after `createTopics`
    (created with timeout 0, answered before any broker's view has the topic; with a
    timeout the creating broker waits for its leaders, and the other brokers have caught
    up by then: 0 of 45 refused before the fix, so that case is not run). Metadata by id must
    not answer UNKNOWN_TOPIC_ID (the admin gives up on it), by name not
    UNKNOWN_TOPIC_OR_PARTITION nor, with auto-creation, TOPIC_ALREADY_EXISTS;
    DescribeTopicPartitions not UNKNOWN_TOPIC_OR_PARTITION. Each describe has a topic of
    its own, through the broker after the creator."""
    failures: Counter[tuple[str, str]] = Counter()
    leaderless = 0
    took: list[float] = []
    for i in range(ROUNDS):
        for creator in (1, 2, 3):
            for what in DESCRIBES:
                name = f"lag-md-{i}-{creator}-{uuid.uuid4().hex[:6]}"
                topic_id = _create(raws[creator], name, factor=3)
                start = time.monotonic()
                code = _describe(raws[creator % 3 + 1], what, name, topic_id)
                took.append(time.monotonic() - start)
                if code == "leaderless":
                    leaderless += 1
                elif code != "none":
                    failures[(what, code)] += 1
    took.sort()
    print(f"{len(took)} describes, {leaderless} without a leader yet; answered in "
          f"{took[len(took) // 2] * 1000:.0f} ms (median), {took[-1] * 1000:.0f} ms (max)")
    assert not failures, failures


MANY = 50


def test_many_topics_in_one_create_partitions_and_delete_topics(
        cluster: Cluster, raws: dict[int, RawClient]) -> None:
    """One CreatePartitions and one DeleteTopics naming 50 topics, with unknown names
    (and, for CreatePartitions, a name given twice: grown 1 -> 2 -> 3, in request order)
    mixed in, through a broker that did not create them: each topic answered as if it
    were alone, in request order. Prints each request's time (ZooKeeper round trips per
    topic: side by side, server/handlers/admin.py)."""
    tag = uuid.uuid4().hex[:6]
    names = [f"lag-many-{tag}-{i}" for i in range(MANY)]
    r = raws[1].call(19, 7, {"topics": [
        {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []} for n in names], "timeout": 30000})
    assert {t.error_code.name for t in r.topics} == {"none"}, r
    ids = {str(t.name): uuid.UUID(str(t.topic_id)) for t in r.topics}
    asked = [(n, 2) for n in names[:10]] + [(f"lag-many-{tag}-gone", 2), (names[3], 3)] + [
        (n, 2) for n in names[10:]]
    start = time.monotonic()
    r = raws[2].call(37, 3, {"topics": [{"name": n, "count": c, "assignments": None}
                                        for n, c in asked],
                             "timeout": 0, "validate_only": False})
    grew = time.monotonic() - start
    assert [(str(x.name), x.error_code.name) for x in r.results] == [
        (n, "unknown_topic_or_partition" if n.endswith("-gone") else "none") for n, _ in asked]
    wait_for("the topics grown", lambda: [len(t.partitions) for t in raws[2].call(
        3, 12, {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}).topics] == [
        3 if i == 3 else 2 for i in range(MANY)])
    # v6: the first half by id, the rest by name, an unknown name and an unknown id
    gone_id = uuid.uuid4()
    targets = ([{"name": None, "topic_id": ids[n]} for n in names[:MANY // 2]]
               + [{"name": f"lag-many-{tag}-gone", "topic_id": None}]
               + [{"name": n, "topic_id": None} for n in names[MANY // 2:]]
               + [{"name": None, "topic_id": gone_id}])
    start = time.monotonic()
    r = raws[3].call(20, 6, {"topics": targets, "timeout": 0})
    deleted = time.monotonic() - start
    assert [(x.name and str(x.name), x.error_code.name) for x in r.responses] == (
        [(n, "none") for n in names[:MANY // 2]]
        + [(f"lag-many-{tag}-gone", "unknown_topic_or_partition")]
        + [(n, "none") for n in names[MANY // 2:]] + [(None, "unknown_topic_id")])
    assert [x.topic_id for x in r.responses] == (  # the zero id decodes as None
        [ids[n] for n in names[:MANY // 2]] + [None]
        + [ids[n] for n in names[MANY // 2:]] + [gone_id])
    print(f"{MANY} topics: CreatePartitions {grew * 1000:.0f} ms, "
          f"DeleteTopics {deleted * 1000:.0f} ms")
