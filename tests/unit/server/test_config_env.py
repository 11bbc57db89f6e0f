"""`TIDEGATE_<KEY>` environment variables become broker settings; Tidegate's own process
switches (TIDEGATE_GC_TUNING, TIDEGATE_PURE_PYTHON, test switches) do not, so
`tidegate serve` does not warn about them as unknown keys, and says which keys Kafka 4
removed."""

from __future__ import annotations

import logging

import pytest

from tidegate.common.config import BrokerConfig, env_overrides


def test_settings_come_from_the_environment() -> None:
    got = env_overrides({"TIDEGATE_LOG_DIRS": "/data", "TIDEGATE_NUM_PARTITIONS": "3",
                         "PATH": "/bin"})
    assert got == {"log.dirs": "/data", "num.partitions": "3"}


def test_process_switches_are_not_settings() -> None:
    environ = {"TIDEGATE_GC_TUNING": "0", "TIDEGATE_MALLOC_TUNING": "0",
               "TIDEGATE_PURE_PYTHON": "1", "TIDEGATE_SOAK": "1", "TIDEGATE_TEST_HTTP": "1",
               "TIDEGATE_SPARK_TEST_KILL_AT": "x", "TIDEGATE_LOG_FLUSH_INTERVAL_MS": "5"}
    assert env_overrides(environ) == {"log.flush.interval.ms": "5"}
    config = BrokerConfig.load(environ=environ)
    assert config.unknown_keys() == []


def test_a_mistyped_setting_is_still_reported() -> None:
    config = BrokerConfig.load(environ={"TIDEGATE_LOG_DIRZ": "/data"})
    assert config.unknown_keys() == ["log.dirz"]


def test_serve_says_which_keys_kafka_4_removed(caplog: pytest.LogCaptureFixture) -> None:
    """`tidegate serve`'s warnings: a typo is unknown; a key Kafka 4 removed says so; a
    broker default of a topic config is not warned about."""
    from tidegate.cli.serve import warn_unknown_keys

    config = BrokerConfig({"log.dirz": "/x", "log.message.format.version": "2.8",
                           "log.retention.ms": "1000"})
    with caplog.at_level(logging.WARNING, logger="tidegate.server"):
        warn_unknown_keys(config)
    lines = {r.getMessage() for r in caplog.records}
    assert lines == {
        "config log.dirz is not a broker setting Tidegate knows; it is kept as a topic "
        "default if it is one",
        "config log.message.format.version was removed in Kafka 4 (and Tidegate follows): "
        "it has no effect; remove it from the broker's properties",
    }
