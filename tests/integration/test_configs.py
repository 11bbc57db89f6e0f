"""DescribeConfigs as a Kafka 4.1+ broker answers it: the KIP-966 cluster default
`min.insync.replicas`, and GROUP config resources (KIP-848), with confluent-kafka's and
kafka-python's admin clients (and raw requests where a client hides a detail)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from tests.integration.conftest import BrokerProcess
from tests.integration.rawclient import RawClient

_SET, _DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
_APPEND, _SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT
DYNAMIC_DEFAULT, STATIC, DEFAULT, GROUP_CONFIG = 3, 4, 5, 8
INVALID_REQUEST, INVALID_CONFIG = 42, 40
GROUP_KEYS = {  # Kafka 4.1's GroupConfig and its defaults
    "consumer.heartbeat.interval.ms": "5000",
    "consumer.session.timeout.ms": "45000",
    "share.auto.offset.reset": "latest",
    "share.heartbeat.interval.ms": "5000",
    "share.isolation.level": "read_uncommitted",
    "share.record.lock.duration.ms": "30000",
    "share.session.timeout.ms": "45000",
    "streams.heartbeat.interval.ms": "5000",
    "streams.num.standby.replicas": "0",
    "streams.session.timeout.ms": "45000",
}


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _non_default(a: AdminClient, res: ConfigResource) -> list[str]:
    configs = a.describe_configs([res])[res].result(30)
    return sorted(str(e) for e in configs.values() if not e.is_default)


def _ialter(a: AdminClient, restype: Any, name: str, *entries: tuple[str, str | None, Any]) -> Any:
    res = ConfigResource(
        restype,
        name,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries],
    )
    return a.incremental_alter_configs([res])[res]


def _refused(fut: Any) -> str:
    with pytest.raises(KafkaException) as ei:
        fut.result(30)
    return str(ei.value)


def _describe_raw(b: BrokerProcess, restype: int, name: str, keys: list[str] | None) -> Any:
    raw = RawClient(b.bootstrap)
    try:
        resp = raw.call(
            32,
            4,
            {
                "resources": [
                    {"resource_type": restype, "resource_name": name, "configuration_keys": keys}
                ],
                "include_synonyms": True,
                "include_documentation": True,
            },
        )
    finally:
        raw.close()
    return resp.results[0]


def _ialter_raw(b: BrokerProcess, restype: int, name: str, ops: list[tuple[str, int, Any]]) -> Any:
    raw = RawClient(b.bootstrap)
    try:
        resp = raw.call(
            44,
            1,
            {
                "resources": [
                    {
                        "resource_type": restype,
                        "resource_name": name,
                        "configs": [
                            {"name": k, "config_operation": op, "value": v} for k, op, v in ops
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
    finally:
        raw.close()
    return resp.responses[0]


def _alter_raw(b: BrokerProcess, restype: int, name: str, configs: dict[str, str]) -> Any:
    """Non-incremental AlterConfigs: the resource's dynamic configs become `configs`."""
    raw = RawClient(b.bootstrap)
    try:
        resp = raw.call(
            33,
            2,
            {
                "resources": [
                    {
                        "resource_type": restype,
                        "resource_name": name,
                        "configs": [{"name": k, "value": v} for k, v in configs.items()],
                    }
                ],
                "validate_only": False,
            },
        )
    finally:
        raw.close()
    return resp.responses[0]


def _synonyms(entry: Any) -> list[tuple[str, str, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def test_topics_report_the_cluster_min_insync_replicas(shared_broker: BrokerProcess) -> None:
    """A fresh Kafka 4.1 cluster lists min.insync.replicas="1" among every topic's
    non-default entries, as a dynamic cluster default (KIP-966)."""
    a = _admin(shared_broker)
    a.create_topics([NewTopic("elr-t", 1, 1, config={"compression.type": "gzip"})])["elr-t"].result(
        30
    )
    res = ConfigResource("topic", "elr-t")
    assert _non_default(a, res) == ['compression.type="gzip"', 'min.insync.replicas="1"']
    entry = a.describe_configs([res])[res].result(30)["min.insync.replicas"]
    assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value and not entry.is_default

    topic = _describe_raw(shared_broker, 2, "elr-t", ["min.insync.replicas"])
    [mis] = topic.configs
    assert (mis.value, mis.config_source, mis.read_only) == ("1", DYNAMIC_DEFAULT, False)
    assert _synonyms(mis) == [
        ("min.insync.replicas", "1", DYNAMIC_DEFAULT),
        ("min.insync.replicas", "1", DEFAULT),
    ]
    # The broker reports it the same way, as a dynamic cluster default.
    [bmis] = _describe_raw(shared_broker, 4, "1", ["min.insync.replicas"]).configs
    assert (bmis.value, bmis.config_source, bmis.read_only) == ("1", DYNAMIC_DEFAULT, False)
    assert _synonyms(bmis) == _synonyms(mis)
    # An empty key list means every key, as in Kafka.
    assert len(_describe_raw(shared_broker, 2, "elr-t", []).configs) > 30


def test_incremental_alter_configs_of_two_topics(shared_broker: BrokerProcess) -> None:
    """What confluent-kafka's own integration test of IncrementalAlterConfigs expects
    from a Kafka 4.1+ broker."""
    a = _admin(shared_broker)
    for name in ("iac-1", "iac-2"):
        a.create_topics([NewTopic(name, 2, 1, config={"compression.type": "gzip"})])[name].result(
            30
        )
    _ialter(
        a, "topic", "iac-1", ("cleanup.policy", "compact", _APPEND), ("retention.ms", "10000", _SET)
    ).result(30)
    _ialter(
        a, "topic", "iac-2", ("cleanup.policy", "delete", _SUBTRACT), ("retention.ms", "5000", _SET)
    ).result(30)
    assert _non_default(a, ConfigResource("topic", "iac-1")) == [
        'cleanup.policy="delete,compact"',
        'compression.type="gzip"',
        'min.insync.replicas="1"',
        'retention.ms="10000"',
    ]
    assert _non_default(a, ConfigResource("topic", "iac-2")) == [
        'cleanup.policy=""',
        'compression.type="gzip"',
        'min.insync.replicas="1"',
        'retention.ms="5000"',
    ]
    _ialter(
        a, "topic", "iac-2", ("compression.type", None, _DELETE), ("retention.ms", "10000", _SET)
    ).result(30)
    assert _non_default(a, ConfigResource("topic", "iac-2")) == [
        'cleanup.policy=""',
        'min.insync.replicas="1"',
        'retention.ms="10000"',
    ]


def test_group_configs_with_confluent_kafka(shared_broker: BrokerProcess) -> None:
    a = _admin(shared_broker)
    # A group that does not exist has every key at its default, as in Kafka.
    res = ConfigResource(ResourceType.GROUP, "no-such-group")
    configs = a.describe_configs([res])[res].result(30)
    assert {k: e.value for k, e in configs.items()} == GROUP_KEYS
    assert all(
        e.source == ConfigSource.DEFAULT_CONFIG.value and e.is_default for e in configs.values()
    )

    _ialter(
        a, ResourceType.GROUP, "test-group", ("consumer.session.timeout.ms", "50000", _SET)
    ).result(30)
    group = ConfigResource(ResourceType.GROUP, "test-group")
    assert _non_default(a, group) == ['consumer.session.timeout.ms="50000"']
    entry = a.describe_configs([group])[group].result(30)["consumer.session.timeout.ms"]
    assert entry.source == ConfigSource.GROUP_CONFIG.value and not entry.is_read_only

    _ialter(
        a,
        ResourceType.GROUP,
        "test-group",
        ("share.isolation.level", "read_committed", _SET),
        ("share.auto.offset.reset", "by_duration:PT1H30M", _SET),
        ("streams.num.standby.replicas", "2", _SET),
    ).result(30)
    before = _non_default(a, group)
    assert len(before) == 4

    for key, value, op, words in [
        ("consumer.session.timeout.ms", "44999", _SET, "greater than or equal to group.consumer"),
        ("consumer.session.timeout.ms", "60001", _SET, "less than or equal to group.consumer.max"),
        ("consumer.heartbeat.interval.ms", "15001", _SET, "group.consumer.max.heartbeat"),
        ("consumer.heartbeat.interval.ms", "fast", _SET, "Not a number of type INT"),
        ("session.timeout.ms", "50000", _SET, "Unknown group config name: session.timeout.ms"),
        ("share.record.lock.duration.ms", "999", _SET, "Value must be at least 1000"),
        ("share.isolation.level", "none", _SET, "share.isolation.level"),
        ("share.auto.offset.reset", "by_duration:-PT1H", _SET, "Negative duration"),
        ("share.auto.offset.reset", "never", _SET, "'earliest', 'latest'"),
        ("streams.num.standby.replicas", "3", _SET, "group.streams.max.standby.replicas"),
        ("consumer.session.timeout.ms", "1", _APPEND, "because its type is not LIST"),
    ]:
        text = _refused(_ialter(a, ResourceType.GROUP, "test-group", (key, value, op)))
        assert "INVALID_CONFIG" in text and words in text, (key, value, text)
    assert _non_default(a, group) == before  # nothing of a refused request is applied

    # validate_only checks and changes nothing.
    vres = ConfigResource(
        ResourceType.GROUP,
        "test-group",
        incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", "55000", incremental_operation=_SET)
        ],
    )
    a.incremental_alter_configs([vres], validate_only=True)[vres].result(30)
    assert 'consumer.session.timeout.ms="50000"' in _non_default(a, group)

    _ialter(
        a, ResourceType.GROUP, "test-group", ("consumer.session.timeout.ms", None, _DELETE)
    ).result(30)
    assert 'consumer.session.timeout.ms="50000"' not in _non_default(a, group)
    # The non-incremental AlterConfigs replaces the group's whole set.
    lres = ConfigResource(
        ResourceType.GROUP, "test-group", set_config={"consumer.heartbeat.interval.ms": "6000"}
    )
    a.alter_configs([lres])[lres].result(30)
    assert _non_default(a, group) == ['consumer.heartbeat.interval.ms="6000"']

    # Kafka's answers for the group resource with no name.
    empty = _describe_raw(shared_broker, 32, "", None)
    assert (empty.error_code, empty.error_message) == (
        INVALID_REQUEST,
        "Group name must not be empty",
    )
    altered = _ialter_raw(shared_broker, 32, "", [("consumer.session.timeout.ms", 0, "50000")])
    assert altered.error_code == INVALID_REQUEST
    # Synonyms and documentation of a group key.
    [hb] = _describe_raw(
        shared_broker, 32, "test-group", ["consumer.heartbeat.interval.ms"]
    ).configs
    assert _synonyms(hb) == [("consumer.heartbeat.interval.ms", "6000", GROUP_CONFIG)]
    assert hb.config_type == 3 and "heartbeat" in (hb.documentation or "")


def test_group_configs_with_kafka_python(shared_broker: BrokerProcess) -> None:
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    a = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        res = KConfigResource(
            ConfigResourceType.GROUP, "kp-group", {"streams.session.timeout.ms": "50000"}
        )
        result = a.alter_configs([res])
        assert "kp-group" in str(result)
        got = a.describe_configs([KConfigResource(ConfigResourceType.GROUP, "kp-group")])
        modified = got["group"]["kp-group"]
        assert list(modified) == ["streams.session.timeout.ms"]
        assert modified["streams.session.timeout.ms"]["value"] == "50000"
        every = a.describe_configs(
            [KConfigResource(ConfigResourceType.GROUP, "kp-group")], config_filter="all"
        )["group"]["kp-group"]
        assert set(every) == set(GROUP_KEYS)
    finally:
        a.close()


def test_elr_rules_static_values_and_restarts(tmp_path: Path) -> None:
    """The cluster default takes the static min.insync.replicas at first start and keeps
    it afterwards; broker-level changes and its removal are refused as in Kafka 4.1;
    group configs survive restarts and the group's deletion; group defaults and bounds
    come from the broker's group.consumer.* settings."""
    overrides = {
        "min.insync.replicas": "2",
        "group.consumer.session.timeout.ms": "50000",
        "group.consumer.max.session.timeout.ms": "90000",
    }
    b = BrokerProcess(tmp_path / "data", overrides=overrides)
    b.start()
    try:
        a = _admin(b)
        cluster = _describe_raw(b, 4, "", None)
        assert [(c.name, c.value, c.config_source) for c in cluster.configs] == [
            ("min.insync.replicas", "2", DYNAMIC_DEFAULT)
        ]
        a.create_topics([NewTopic("elr", 1, 1)])["elr"].result(30)
        [mis] = _describe_raw(b, 2, "elr", ["min.insync.replicas"]).configs
        assert (mis.value, mis.config_source) == ("2", DYNAMIC_DEFAULT)
        assert _synonyms(mis) == [
            ("min.insync.replicas", "2", DYNAMIC_DEFAULT),
            ("min.insync.replicas", "2", STATIC),
            ("min.insync.replicas", "1", DEFAULT),
        ]

        broker_level = "Broker-level min.insync.replicas cannot be altered while ELR is enabled."
        removed = "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."
        for op, value in [(0, "1"), (1, None)]:
            r = _ialter_raw(b, 4, "1", [("min.insync.replicas", op, value)])
            assert (r.error_code, r.error_message) == (INVALID_CONFIG, broker_level)
        r = _ialter_raw(b, 4, "", [("min.insync.replicas", 1, None)])
        assert (r.error_code, r.error_message) == (INVALID_CONFIG, removed)
        r = _alter_raw(b, 4, "", {"log.retention.ms": "3600000"})  # would drop it
        assert (r.error_code, r.error_message) == (INVALID_CONFIG, removed)
        # A broker id's replacement keeps it; the cluster default may be changed.
        assert _alter_raw(b, 4, "1", {"background.threads": "9"}).error_code == 0
        assert _ialter_raw(b, 4, "", [("min.insync.replicas", 0, "1")]).error_code == 0
        [mis] = _describe_raw(b, 2, "elr", ["min.insync.replicas"]).configs
        assert (mis.value, mis.config_source) == ("1", DYNAMIC_DEFAULT)

        # Group defaults and bounds follow the broker's group.consumer.* settings.
        g = ConfigResource(ResourceType.GROUP, "persisted")
        entry = a.describe_configs([g])[g].result(30)["consumer.session.timeout.ms"]
        assert (entry.value, entry.source) == ("50000", ConfigSource.DEFAULT_CONFIG.value)
        _ialter(
            a, ResourceType.GROUP, "persisted", ("consumer.session.timeout.ms", "80000", _SET)
        ).result(30)
        # A group with committed offsets, configured, then deleted: its configs stay.
        p = Producer({"bootstrap.servers": b.bootstrap})
        p.produce("elr", b"v")
        assert p.flush(20) == 0
        c = Consumer(
            {
                "bootstrap.servers": b.bootstrap,
                "group.id": "doomed",
                "auto.offset.reset": "earliest",
            }
        )
        c.subscribe(["elr"])
        msg = None
        for _ in range(60):
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None
        c.commit(message=msg, asynchronous=False)
        c.close()
        _ialter(
            a, ResourceType.GROUP, "doomed", ("streams.num.standby.replicas", "1", _SET)
        ).result(30)
        a.delete_consumer_groups(["doomed"])["doomed"].result(30)
        doomed = ConfigResource(ResourceType.GROUP, "doomed")
        assert _non_default(a, doomed) == ['streams.num.standby.replicas="1"']

        # A later static value does not move the dynamic one (Kafka writes it once).
        b.stop()
        b.overrides["min.insync.replicas"] = "3"
        b.start()
        a = _admin(b)
        [mis] = _describe_raw(b, 2, "elr", ["min.insync.replicas"]).configs
        assert (mis.value, mis.config_source) == ("1", DYNAMIC_DEFAULT)
        assert _non_default(a, g) == ['consumer.session.timeout.ms="80000"']
        assert _non_default(a, doomed) == ['streams.num.standby.replicas="1"']
        stored = json.loads((tmp_path / "data" / "tidegate-group-configs.json").read_text())
        assert stored["persisted"] == {"consumer.session.timeout.ms": "80000"}
    finally:
        b.stop()


def test_bad_static_min_insync_replicas_stops_the_start_and_saves_nothing(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides={"min.insync.replicas": "0"})
    with pytest.raises(RuntimeError, match=r"min\.insync\.replicas"):
        b.start()
    assert not (tmp_path / "data" / "tidegate-broker-configs.json").exists()
