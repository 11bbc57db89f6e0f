"""The two levels of dynamic broker configs (server/dynamic_store.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidegate.common.errors import InvalidConfigError
from tidegate.server.dynamic_store import DYNAMIC_FILE, DynamicConfigs


def test_a_broker_value_wins_over_the_cluster_default_and_both_persist(tmp_path: Path) -> None:
    d = DynamicConfigs(tmp_path, {})
    assert d.default == {"min.insync.replicas": "1"}  # KIP-966, written at first start
    d.replace({"log.retention.ms": "1000", "min.insync.replicas": "1"}, per_broker=False)
    d.replace({"log.retention.ms": "2000"}, per_broker=True)
    assert d.effective["log.retention.ms"] == "2000"
    assert d.with_change({}, per_broker=True)["log.retention.ms"] == "1000"
    again = DynamicConfigs(tmp_path, {})
    assert (again.default, again.broker) == (d.default, d.broker)
    again.replace({}, per_broker=True)  # replacing broker 1's set keeps the defaults
    assert DynamicConfigs(tmp_path, {}).effective == {"log.retention.ms": "1000",
                                                      "min.insync.replicas": "1"}


def test_the_flat_file_of_older_versions_reads_as_cluster_defaults(tmp_path: Path) -> None:
    (tmp_path / DYNAMIC_FILE).write_text(json.dumps({"background.threads": "9",
                                                     "min.insync.replicas": "2"}))
    d = DynamicConfigs(tmp_path, {})
    assert d.default == {"background.threads": "9", "min.insync.replicas": "2"}
    assert d.broker == {}


def test_an_unreadable_file_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / DYNAMIC_FILE).write_text("[1, 2]")
    with pytest.raises(InvalidConfigError):
        DynamicConfigs(tmp_path, {})
