"""Group configs (KIP-848) and the KIP-966 cluster defaults, without a broker process:
Kafka 4.1's keys and defaults, validation order and wording, the durable store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import InvalidConfigError, InvalidRequestError
from tidegate.server.dynamic_config import activate_cluster_defaults, check_elr_min_isr
from tidegate.server.group_config import (
    GROUP_CONFIG_FILE,
    GROUP_CONFIG_KEYS,
    GroupConfigStore,
    describe_group_configs,
    group_defaults,
    validate_group_configs,
)


def test_kafka_4_1_keys_and_defaults() -> None:
    assert group_defaults(BrokerConfig()) == {
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
    assert GROUP_CONFIG_KEYS["share.record.lock.duration.ms"].valid_values == "[1000,...]"


def test_defaults_come_from_the_broker_group_protocol_keys() -> None:
    broker = BrokerConfig({"group.share.record.lock.duration.ms": "20000"})
    assert group_defaults(broker)["share.record.lock.duration.ms"] == "20000"
    entries = {
        e["name"]: e
        for e in describe_group_configs({"share.isolation.level": "read_committed"}, broker)
    }
    assert (
        entries["share.record.lock.duration.ms"]["value"],
        entries["share.record.lock.duration.ms"]["config_source"],
    ) == ("20000", 5)
    level = entries["share.isolation.level"]
    assert (level["value"], level["config_source"], level["config_type"]) == (
        "read_committed",
        8,
        2,
    )
    assert level["synonyms"] == [
        {"name": "share.isolation.level", "value": "read_committed", "source": 8}
    ]


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"session.timeout.ms": "1"}, "Unknown group config name: session.timeout.ms"),
        (
            {"consumer.session.timeout.ms": "x"},
            "Invalid value x for configuration consumer.session.timeout.ms: "
            "Not a number of type INT",
        ),
        ({"consumer.session.timeout.ms": "0"}, "Value must be at least 1"),
        (
            {"consumer.heartbeat.interval.ms": "4999"},
            "consumer.heartbeat.interval.ms must be greater than or equal to "
            "group.consumer.min.heartbeat.interval.ms",
        ),
        (
            {"consumer.session.timeout.ms": "60001"},
            "consumer.session.timeout.ms must be less than or equal to "
            "group.consumer.max.session.timeout.ms",
        ),
        (
            {"share.record.lock.duration.ms": "14999"},
            "share.record.lock.duration.ms must be greater than or equal to "
            "group.share.min.record.lock.duration.ms",
        ),
        (
            {"streams.num.standby.replicas": "3"},
            "streams.num.standby.replicas must be less than or equal to "
            "group.streams.max.standby.replicas",
        ),
        ({"share.auto.offset.reset": "by_duration:P"}, "Text cannot be parsed to a Duration: P"),
        ({"share.auto.offset.reset": "by_duration:PT-1S"}, "Negative duration is not supported."),
    ],
)
def test_refusals_with_kafkas_words(configs: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError) as ei:
        validate_group_configs("g", configs, BrokerConfig())
    assert message in str(ei.value)


def test_session_must_exceed_heartbeat_with_wide_broker_bounds() -> None:
    broker = BrokerConfig(
        {
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.max.heartbeat.interval.ms": "60000",
        }
    )
    validate_group_configs(
        "g",
        {"consumer.session.timeout.ms": "10000", "consumer.heartbeat.interval.ms": "9999"},
        broker,
    )
    with pytest.raises(
        InvalidConfigError, match=re.escape("must be greater than consumer.heartbeat")
    ):
        validate_group_configs(
            "g",
            {"consumer.session.timeout.ms": "10000", "consumer.heartbeat.interval.ms": "10000"},
            broker,
        )


def test_accepted_values_and_the_empty_name() -> None:
    validate_group_configs(
        "g",
        {
            "share.auto.offset.reset": "by_duration:P1DT2H0.5S",
            "share.isolation.level": "read_committed",
            "streams.num.standby.replicas": "2",
        },
        BrokerConfig(),
    )
    with pytest.raises(
        InvalidRequestError, match=re.escape("Default group resources are not allowed.")
    ):
        validate_group_configs("", {}, BrokerConfig())


def test_store_is_durable_and_forgets_a_group_without_overrides(tmp_path: Path) -> None:
    store = GroupConfigStore(tmp_path)
    store.set("a", {"consumer.session.timeout.ms": "50000"})
    store.set("b", {"streams.num.standby.replicas": "1"})
    store.set("b", {})
    again = GroupConfigStore(tmp_path)
    assert again.groups() == ["a"]
    assert again.get("a") == {"consumer.session.timeout.ms": "50000"}
    assert again.get("never") == {}
    (tmp_path / GROUP_CONFIG_FILE).write_text("[")
    with pytest.raises(InvalidConfigError, match=re.escape("cannot read group configs")):
        GroupConfigStore(tmp_path)


def test_cluster_defaults_are_written_once_with_the_static_value() -> None:
    saved: list[dict[str, str]] = []
    out = activate_cluster_defaults(
        {"log.retention.ms": "1"}, {"min.insync.replicas": "2"}, saved.append
    )
    assert out == {"log.retention.ms": "1", "min.insync.replicas": "2"} and saved == [out]
    assert activate_cluster_defaults(out, {"min.insync.replicas": "3"}, saved.append) == out
    assert len(saved) == 1  # nothing to add, nothing written
    assert activate_cluster_defaults({}, {}, saved.append) == {"min.insync.replicas": "1"}
    with pytest.raises(InvalidConfigError, match=re.escape("min.insync.replicas")):
        activate_cluster_defaults({}, {"min.insync.replicas": "0"}, saved.append)
    assert len(saved) == 2

    def disk_full(_: dict[str, str]) -> None:
        raise OSError(28, "No space left on device")

    # The value applies anyway; the write is retried at the next start.
    assert activate_cluster_defaults({}, {}, disk_full) == {"min.insync.replicas": "1"}


def test_elr_refusals() -> None:
    check_elr_min_isr(False, {"min.insync.replicas": "2"})
    check_elr_min_isr(True, {"background.threads": "2"})
    with pytest.raises(
        InvalidConfigError, match=re.escape("Broker-level min.insync.replicas cannot be altered")
    ):
        check_elr_min_isr(True, {"min.insync.replicas": "2"})
    with pytest.raises(
        InvalidConfigError, match=re.escape("Cluster-level min.insync.replicas cannot be removed")
    ):
        check_elr_min_isr(False, {"min.insync.replicas": None})
