"""LogConfig: Kafka's names, defaults, validation messages, broker key mapping."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tidegate.common.errors import InvalidConfigError
from tidegate.storage.config import (
    BROKER_SYNONYMS,
    LONG_MAX,
    REMOVED_TOPIC_KEYS,
    TOPIC_CONFIG_KEYS,
    ConfigType,
    LogConfig,
    topic_defaults_from_broker,
    without_removed_keys,
)


def test_kafka_defaults() -> None:
    cfg = LogConfig()
    assert cfg.segment_bytes == 1073741824
    assert cfg.segment_ms == 604800000
    assert cfg.segment_index_bytes == 10485760
    assert cfg.index_interval_bytes == 4096
    assert cfg.retention_ms == 604800000
    assert cfg.retention_bytes == -1
    assert cfg.cleanup_policy == ("delete",)
    assert cfg.max_message_bytes == 1048588
    assert cfg.message_timestamp_type == "CreateTime"
    assert cfg.min_compaction_lag_ms == 0
    assert cfg.max_compaction_lag_ms == LONG_MAX
    assert cfg.delete_retention_ms == 86400000
    assert cfg.min_cleanable_dirty_ratio == 0.5
    assert cfg.file_delete_delay_ms == 60000
    assert cfg.compression_type == "producer"
    assert cfg.flush_messages == 1  # ours; Kafka: Long.MAX_VALUE (documented)
    assert cfg.flush_ms == LONG_MAX


def test_every_key_is_a_field_and_round_trips() -> None:
    fields = {f.name for f in dataclasses.fields(LogConfig)}
    assert fields == {k.attr for k in TOPIC_CONFIG_KEYS.values()}
    props = LogConfig().to_props()
    assert list(props) == sorted(props)
    assert LogConfig.from_props(props) == LogConfig()
    assert TOPIC_CONFIG_KEYS["retention.ms"].type == ConfigType.LONG
    assert TOPIC_CONFIG_KEYS["cleanup.policy"].valid_values == "[compact, delete]"


def test_from_props_overrides_defaults() -> None:
    base = LogConfig(retention_ms=1000)
    cfg = LogConfig.from_props(
        {"cleanup.policy": "compact, delete", "segment.bytes": " 4096 ", "preallocate": "TRUE"},
        base,
    )
    assert cfg.retention_ms == 1000
    assert cfg.compact and cfg.delete
    assert cfg.segment_bytes == 4096
    assert cfg.preallocate is True
    assert cfg.to_props()["cleanup.policy"] == "compact,delete"


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        ({"cleanup.policy": "shred"}, "compact, delete"),
        ({"message.timestamp.type": "createtime"}, "CreateTime, LogAppendTime"),
        ({"compression.type": "brotli"}, "producer"),
        ({"retention.ms": "-5"}, "at least -1"),
        ({"segment.bytes": "abc"}, "Not a number of type INT"),
        ({"segment.bytes": str(1 << 31)}, "Not a number of type INT"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "no more than 1"),
        ({"preallocate": "yes"}, "true or false"),
        ({"no.such.key": "1"}, "Unknown topic config name: no.such.key"),
        ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "Conflict"),
    ],
)
def test_invalid_values_name_the_key_and_allowed_values(props: dict[str, str], needle: str) -> None:
    with pytest.raises(InvalidConfigError) as exc:
        LogConfig.from_props(props)
    assert needle in str(exc.value)
    key = next(iter(props))
    if key != "no.such.key":
        assert key in str(exc.value) or "compaction.lag" in str(exc.value)


def test_direct_construction_is_validated() -> None:
    with pytest.raises(InvalidConfigError, match=r"segment\.ms"):
        LogConfig(segment_ms=0)


def test_broker_keys_map_to_topic_defaults() -> None:
    cfg = topic_defaults_from_broker(
        {
            "log.retention.hours": "1",
            "log.segment.bytes": "1048576",
            "log.roll.hours": "2",
            "message.max.bytes": "2000000",
            "log.cleanup.policy": "compact",
            "log.message.timestamp.type": "LogAppendTime",
            "log.index.interval.bytes": "100",
            "log.flush.interval.messages": "10",
            "log.flush.interval.ms": "",  # unset (the broker config keeps empty defaults)
            "log.flush.scheduler.interval.ms": "1000",
            "listeners": "PLAINTEXT://:9092",  # not a log key: ignored
        }
    )
    assert cfg.retention_ms == 3_600_000
    assert cfg.segment_bytes == 1048576
    assert cfg.segment_ms == 7_200_000
    assert cfg.max_message_bytes == 2000000
    assert cfg.cleanup_policy == ("compact",)
    assert cfg.log_append_time
    assert cfg.index_interval_bytes == 100
    assert cfg.flush_messages == 10
    assert cfg.flush_ms == 1000  # Kafka falls back to the scheduler interval


def test_broker_precedence_and_infinite_retention() -> None:
    cfg = topic_defaults_from_broker(
        {"log.retention.ms": "5", "log.retention.minutes": "1", "log.retention.hours": "1"}
    )
    assert cfg.retention_ms == 5
    assert topic_defaults_from_broker({"log.retention.minutes": "2"}).retention_ms == 120_000
    assert topic_defaults_from_broker({"log.retention.hours": "-1"}).retention_ms == -1
    assert topic_defaults_from_broker({}) == LogConfig()
    assert all(k in TOPIC_CONFIG_KEYS for k in BROKER_SYNONYMS)


def test_broker_errors_name_the_broker_key() -> None:
    with pytest.raises(InvalidConfigError, match=r"log\.segment\.bytes"):
        topic_defaults_from_broker({"log.segment.bytes": "huge"})
    with pytest.raises(InvalidConfigError, match=r"log\.cleanup\.policy"):
        topic_defaults_from_broker({"log.cleanup.policy": "nope"})


@pytest.mark.parametrize("key", sorted(REMOVED_TOPIC_KEYS))
def test_keys_kafka_4_removed_are_unknown(key: str) -> None:
    """Kafka 4.1 refuses them with INVALID_CONFIG in Kafka's words (the oracle's
    topic_configs_kafka4_removed case); their broker keys no longer set anything."""
    assert key not in TOPIC_CONFIG_KEYS and key not in BROKER_SYNONYMS
    with pytest.raises(InvalidConfigError, match=f"^Unknown topic config name: {re.escape(key)}$"):
        LogConfig.from_props({key: "1000"})
    with pytest.raises(InvalidConfigError, match=f"^Unknown topic config name: {re.escape(key)}$"):
        LogConfig().value_of(key)
    assert topic_defaults_from_broker({"log." + key: "1000"}) == LogConfig()
    stored = {key: "1000", "retention.ms": "5"}
    assert without_removed_keys(stored) == {"retention.ms": "5"}
    assert stored == {key: "1000", "retention.ms": "5"}  # a copy


def test_kafka_4_tiered_storage_switches_are_accepted() -> None:
    """KIP-950's remote.log.copy.disable / remote.log.delete.on.disable: Kafka 4.1 accepts
    and describes them without tiered storage; so does Tidegate (they change nothing)."""
    cfg = LogConfig.from_props({"remote.log.copy.disable": "true",
                                "remote.log.delete.on.disable": "TRUE"})
    assert cfg.remote_log_copy_disable and cfg.remote_log_delete_on_disable
    assert LogConfig().value_of("remote.log.copy.disable") == "false"
    with pytest.raises(InvalidConfigError, match=r"remote\.log\.delete\.on\.disable"):
        LogConfig.from_props({"remote.log.delete.on.disable": "maybe"})


def test_timestamp_limits_are_the_before_and_after_keys() -> None:
    """Kafka 4: the removed difference key no longer stands in for either limit."""
    cfg = LogConfig.from_props({"message.timestamp.before.max.ms": "100",
                                "message.timestamp.after.max.ms": "7"})
    assert (cfg.timestamp_before_max_ms, cfg.timestamp_after_max_ms) == (100, 7)
    assert (LogConfig().timestamp_before_max_ms, LogConfig().timestamp_after_max_ms) == (
        LONG_MAX, 3_600_000)
    broker = topic_defaults_from_broker({"log.message.timestamp.difference.max.ms": "100"})
    assert (broker.timestamp_before_max_ms, broker.timestamp_after_max_ms) == (
        LONG_MAX, 3_600_000)
