"""Topic configs in cluster mode, as in Kafka's ZooKeeper mode: an alter through any
broker lands in /config/topics/<t> with a /config/changes notification; every broker
describes what ZooKeeper holds and applies it to its replicas. The checks are what a
client sees: DescribeConfigs through each broker, and min.insync.replicas enforced by
whichever broker leads, before and after a failover. Also: a follower that was away
while retention (set by such an alter) deleted what it missed restarts its log at the
leader's log start instead of failing its fetches forever (OFFSET_OUT_OF_RANGE).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from tests.integration.cluster import Cluster, cluster, wait_for
from tests.integration.rawclient import RawClient

from tidegate.records.builder import build_batch

__all__ = ["cluster"]

TOPIC_RESOURCE, SET = 2, 0
TOPIC_CONFIG_SOURCE = 1
NOT_ENOUGH_REPLICAS, UNKNOWN_TOPIC, INVALID_CONFIG = 19, 3, 40


def _partition(c: Cluster, topic: str) -> Any:
    md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[0]


def _isr_at(bootstrap: str, topic: str) -> list[int]:
    """The ISR in exactly this broker's metadata (a broker that was paused answers from a
    stale cache for a moment, as Kafka's would: ask the leader)."""
    raw = RawClient(bootstrap)
    try:
        resp = raw.call(3, 7, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    finally:
        raw.close()
    return sorted(int(r) for r in resp.topics[0].partitions[0].isr_nodes)


def _create(c: Cluster, topic: str, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config=configs or {})])[topic].result(30)
    wait_for(f"{topic} led with a full ISR", lambda: (
        (p := _partition(c, topic)).leader > 0 and len(p.isrs) == 3))


def _describe(bootstrap: str, topic: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs sent to exactly this broker: name -> (value, source)."""
    raw = RawClient(bootstrap)
    try:
        resp = raw.call(32, 4, {"resources": [{
            "resource_type": TOPIC_RESOURCE, "resource_name": topic,
            "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})
    finally:
        raw.close()
    result = resp.results[0]
    assert result.error_code == 0, result.error_message
    return {str(c.name): (str(c.value), int(c.config_source)) for c in result.configs}


def _alter(bootstrap: str, topic: str, configs: dict[str, str],
           validate_only: bool = False) -> int:
    """IncrementalAlterConfigs (SET) sent to exactly this broker; its error code."""
    raw = RawClient(bootstrap)
    try:
        resp = raw.call(44, 1, {"resources": [{
            "resource_type": TOPIC_RESOURCE, "resource_name": topic,
            "configs": [{"name": k, "config_operation": SET, "value": v}
                        for k, v in configs.items()]}],
            "validate_only": validate_only})
    finally:
        raw.close()
    return int(resp.responses[0].error_code)


def _produce_all(bootstrap: str, topic: str) -> int:
    """One acks=all Produce sent to exactly this broker (a keyed record: the topic may
    be compacted); its error code."""
    raw = RawClient(bootstrap, timeout=15)
    try:
        resp = raw.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [{
            "name": topic, "partition_data": [{
                "index": 0, "records": build_batch([(1_700_000_000_000, b"k", b"v", ())])}]}]})
    finally:
        raw.close()
    return int(resp.responses[0].partition_responses[0].error_code)


def _applied(c: Cluster, bid: int, topic: str) -> dict[str, str]:
    """The overrides broker `bid` has applied to its replicas (its topics file)."""
    data = json.loads((c.base / f"broker-{bid}" / "tidegate-topics.json").read_text())
    return next((dict(t["configs"]) for t in data["topics"] if t["name"] == topic), {})


def test_an_alter_through_one_broker_is_described_and_applied_by_all(cluster: Cluster) -> None:
    try:
        _alter_and_check(cluster)
    except BaseException:
        print(cluster.failure_report())
        raise


def _alter_and_check(c: Cluster) -> None:
    topic = f"cfg-{uuid.uuid4().hex[:6]}"
    _create(c, topic)
    part = _partition(c, topic)
    leader = part.leader
    f1, f2 = sorted(r for r in part.replicas if r != leader)

    # confluent-kafka's admin client, bootstrapped on a follower
    admin = AdminClient({"bootstrap.servers": c.brokers[f1].bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
    ])
    admin.incremental_alter_configs([res])[res].result(30)
    for bid, b in c.brokers.items():  # at once: every broker describes ZooKeeper's truth
        got = _describe(b.bootstrap, topic)
        assert got["retention.ms"] == ("123456", TOPIC_CONFIG_SOURCE), (bid, got)
        assert got["cleanup.policy"] == ("compact", TOPIC_CONFIG_SOURCE), (bid, got)
        assert got["min.insync.replicas"][1] != TOPIC_CONFIG_SOURCE
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = next(iter(described.values())).result(30)
    assert entries["retention.ms"].value == "123456"
    wanted = {"retention.ms": "123456", "cleanup.policy": "compact"}
    wait_for("every replica to apply the configs",  # not only the one that got the alter
             lambda: all(_applied(c, bid, topic) == wanted for bid in c.brokers))

    # validate_only writes nothing; bad input gets Kafka's errors from any broker
    assert _alter(c.brokers[leader].bootstrap, topic, {"retention.ms": "1"},
                  validate_only=True) == 0
    assert _alter(c.brokers[f2].bootstrap, topic, {"retention.ms": "soon"}) == INVALID_CONFIG
    assert _alter(c.brokers[f2].bootstrap, topic, {"no.such.key": "1"}) == INVALID_CONFIG
    assert _alter(c.brokers[f2].bootstrap, "no-such-topic", {"retention.ms": "1"}) \
        == UNKNOWN_TOPIC
    assert _describe(c.brokers[f2].bootstrap, topic)["retention.ms"][0] == "123456"

    # min.insync.replicas=3, altered through the other follower, reaches the leader:
    # with a follower paused out of the ISR, acks=all gets NOT_ENOUGH_REPLICAS
    assert _alter(c.brokers[f2].bootstrap, topic, {"min.insync.replicas": "3"}) == 0
    wait_for("the leader to apply min.insync.replicas",
             lambda: _applied(c, leader, topic).get("min.insync.replicas") == "3")
    assert _produce_all(c.brokers[leader].bootstrap, topic) == 0  # ISR of 3: fine
    c.pause(f1)
    try:
        wait_for("NOT_ENOUGH_REPLICAS from the leader", lambda: _produce_all(
            c.brokers[leader].bootstrap, topic) == NOT_ENOUGH_REPLICAS, timeout=60)
    finally:
        c.resume(f1)
    wait_for("the follower back in the ISR",
             lambda: len(_isr_at(c.brokers[leader].bootstrap, topic)) == 3, timeout=60)
    assert _produce_all(c.brokers[leader].bootstrap, topic) == 0

    # a former follower that becomes leader enforces it too (it applied the alter)
    c.kill(leader)
    try:
        new = wait_for("a new leader", lambda: (
            (p := _partition(c, topic)).leader not in (-1, leader) and p.leader), timeout=60)
        assert isinstance(new, int)
        wait_for("NOT_ENOUGH_REPLICAS from the new leader", lambda: _produce_all(
            c.brokers[new].bootstrap, topic) == NOT_ENOUGH_REPLICAS, timeout=60)
        # a broker away during an alter picks it up when it comes back
        assert _alter(c.brokers[new].bootstrap, topic, {"retention.ms": "777000"}) == 0
    finally:
        c.restart(leader)
    wait_for("the restarted broker to apply the alter it missed",
             lambda: _applied(c, leader, topic).get("retention.ms") == "777000")
    wait_for("a full ISR again", lambda: len(_isr_at(c.brokers[new].bootstrap, topic)) == 3,
             timeout=60)

    # deleted: every replica's files go (renamed `-delete` at once, removed off the loop)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    wait_for("every replica's files removed", lambda: not any(
        d.name.startswith(f"{topic}-") for bid in c.brokers
        for d in (c.base / f"broker-{bid}").iterdir()))


def _log_bytes(directory: Path) -> bytes:
    return b"".join((directory / n).read_bytes()
                    for n in sorted(os.listdir(directory)) if n.endswith(".log"))


def _earliest(bootstrap: str, topic: str) -> int:
    raw = RawClient(bootstrap)
    try:
        resp = raw.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{
            "name": topic, "partitions": [{
                "partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
    finally:
        raw.close()
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0
    return int(p.offset)


def test_a_follower_behind_the_leaders_log_start_restarts_there(tmp_path: Path) -> None:
    """A follower is killed; meanwhile the leader's retention (retention.bytes, set by an
    alter while the follower is down) deletes what it missed. Back, its fetch is
    OFFSET_OUT_OF_RANGE: it asks the leader's log start, empties its log there, catches
    up and rejoins the ISR, with the leader's bytes."""
    c = Cluster(tmp_path, overrides={"log.retention.check.interval.ms": "300"})
    c.start()
    topic = "trim"
    try:
        _create(c, topic, {"segment.bytes": "4096"})
        part = _partition(c, topic)
        leader, away = part.leader, max(r for r in part.replicas if r != part.leader)
        # small batches, so that 4 KiB segments roll often
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0,
                      "batch.num.messages": 10})

        def produce(n: int) -> None:
            for i in range(n):
                p.produce(topic, value=b"%06d" % i + b"x" * 100)
                p.poll(0)
            assert p.flush(60) == 0

        produce(200)
        c.kill(away)
        wait_for("the killed follower out of the ISR",
                 lambda: away not in _isr_at(c.brokers[leader].bootstrap, topic), timeout=60)
        produce(3000)
        assert _alter(c.brokers[leader].bootstrap, topic, {"retention.bytes": "16384"}) == 0
        wait_for("retention past the killed follower's log end",
                 lambda: _earliest(c.brokers[leader].bootstrap, topic) > 1000)
        c.restart(away)
        wait_for("the follower back in the ISR",
                 lambda: away in _isr_at(c.brokers[leader].bootstrap, topic), timeout=60)
        assert "restarting the log there" in c.brokers[away].logs()
        start = _earliest(c.brokers[leader].bootstrap, topic)
        held = sorted(int(n.split(".")[0]) for n in os.listdir(tmp_path / f"broker-{away}"
                                                               / f"{topic}-0")
                      if n.endswith(".log"))
        assert held and held[0] > 200, "nothing below the leader's log start was kept"

        def same_bytes() -> bool:
            digests = {hashlib.sha256(_log_bytes(tmp_path / f"broker-{b}" / f"{topic}-0"))
                       .hexdigest() for b in c.brokers}
            return len(digests) == 1

        wait_for(f"identical replicas (leader log start {start})", same_bytes)
    except BaseException:
        print(c.failure_report())
        raise
    finally:
        c.stop()


def _broker_configs(bootstrap: str, bid: int) -> dict[str, tuple[str | None, int]]:
    raw = RawClient(bootstrap)
    try:
        resp = raw.call(32, 4, {"resources": [{"resource_type": 4, "resource_name": str(bid),
                                               "configuration_keys": None}],
                                "include_synonyms": False})
    finally:
        raw.close()
    assert resp.results[0].error_code == 0, resp.results[0]
    return {c.name: (c.value, int(c.config_source)) for c in resp.results[0].configs}


def test_dynamic_broker_configs_are_shared_through_zookeeper(cluster: Cluster) -> None:
    """`kafka-configs --entity-default` and `--entity-name <id>` as on a ZooKeeper-mode
    Kafka: the cluster default reaches every broker, a broker's own value only it, and
    both survive that broker's restart."""
    try:
        _broker_configs_check(cluster)
    except BaseException:
        print(cluster.failure_report())
        raise


def _broker_configs_check(c: Cluster) -> None:
    ids = sorted(c.brokers)
    admin = AdminClient({"bootstrap.servers": c.brokers[ids[0]].bootstrap})
    # the cluster default resource "" (confluent-kafka cannot name it: raw request)
    raw = RawClient(c.brokers[ids[0]].bootstrap)
    try:
        resp = raw.call(44, 1, {"resources": [{"resource_type": 4, "resource_name": "",
                                               "configs": [{"name": "log.retention.ms",
                                                            "config_operation": SET,
                                                            "value": "7200000"}]}],
                                "validate_only": False})
    finally:
        raw.close()
    assert resp.responses[0].error_code == 0, resp.responses[0]
    own = ConfigResource(ResourceType.BROKER, str(ids[1]), incremental_configs=[
        ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("background.threads", "7", incremental_operation=AlterConfigOpType.SET),
        # a key nobody knows (a plugin's): stored and described, as Kafka 4.1 does
        ConfigEntry("some.plugin.setting", "x", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([own])[own].result(30)

    def seen() -> dict[int, tuple[str, int]]:
        return {bid: _broker_configs(c.brokers[bid].bootstrap, bid)["log.retention.ms"]
                for bid in ids}

    want = {bid: ("7200000", 3) for bid in ids} | {ids[1]: ("3600000", 2)}
    wait_for("every broker follows /config/brokers", lambda: seen() == want)
    assert _broker_configs(c.brokers[ids[2]].bootstrap, ids[2])["background.threads"][1] != 2
    # the KIP-966 cluster default lives in /config/brokers/<default> too, for all
    for bid in ids:
        got = _broker_configs(c.brokers[bid].bootstrap, bid)["min.insync.replicas"]
        assert got[1] == 3, (bid, got)
    c.brokers[ids[1]].stop()
    c.restart(ids[1])
    after = _broker_configs(c.brokers[ids[1]].bootstrap, ids[1])
    assert after["background.threads"] == ("7", 2)
    assert after["some.plugin.setting"] == (None, 2)  # sensitive: no value shown
    assert seen() == want
    # a value that is not dynamic is refused whichever broker it names
    bad = ConfigResource(ResourceType.BROKER, str(ids[2]), incremental_configs=[
        ConfigEntry("log.dirs", "/x", incremental_operation=AlterConfigOpType.SET)])
    err = admin.incremental_alter_configs([bad])[bad].exception(30)
    assert err is not None and "INVALID_REQUEST" in str(err), err
