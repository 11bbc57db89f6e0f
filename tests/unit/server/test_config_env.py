"""`TIDEGATE_<KEY>` environment variables become broker settings; Tidegate's own process
switches (TIDEGATE_GC_TUNING, TIDEGATE_PURE_PYTHON, test switches) do not, so
`tidegate serve` does not warn about them as unknown keys."""

from __future__ import annotations

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
