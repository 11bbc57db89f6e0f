"""`LogManager.ensure_replicas`: a cluster broker's batch of new replicas of one topic,
opened side by side with one write of the topics file."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.storage import log_manager as log_manager_module
from tidegate.storage.config import LogConfig
from tidegate.storage.log_manager import LogManager
from tidegate.storage.topics import load_topics

from ._support import BASE_TS, batch


def manager(path: Path, threads: int) -> LogManager:
    m = LogManager(path, LogConfig(), ManualClock(BASE_TS), cluster=True,
                   recovery_threads=threads)
    m.load()
    return m


@pytest.mark.parametrize("threads", [1, 4])
def test_a_batch_opens_every_replica_with_one_topics_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    m = manager(tmp_path, threads)
    topic_id = uuid.uuid4()
    first = m.ensure_replica("offsets", topic_id, 8, 5, {"cleanup.policy": "compact"})
    first.append(batch(2))
    writes: list[object] = []
    real = log_manager_module.save_topics
    monkeypatch.setattr(log_manager_module, "save_topics",
                        lambda d, t: (writes.append(1), real(d, t)))
    wanted = [3, 0, 5, 7, 1]
    logs = m.ensure_replicas("offsets", topic_id, 8, wanted, {"cleanup.policy": "compact"})
    assert len(writes) == 1
    assert [lg.topic_partition for lg in logs] == [f"offsets-{p}" for p in wanted]
    assert logs[2] is first and first.log_end_offset == 2  # an open one is kept as is
    assert all(m.get_log("offsets", p) is lg for p, lg in zip(wanted, logs, strict=True))
    assert all((tmp_path / f"offsets-{p}").is_dir() for p in wanted)
    on_disk = load_topics(tmp_path)["offsets"]
    assert on_disk.hosted == frozenset(wanted) and on_disk.topic_id == topic_id
    # nothing new: nothing written
    m.ensure_replicas("offsets", topic_id, 8, [0, 1], {"cleanup.policy": "compact"})
    assert len(writes) == 1


def test_a_recreated_topic_drops_the_old_replicas(tmp_path: Path) -> None:
    m = manager(tmp_path, 2)
    old = m.ensure_replicas("t", uuid.uuid4(), 4, [0, 1, 2], {})
    old[0].append(batch(3))
    new_id = uuid.uuid4()
    logs = m.ensure_replicas("t", new_id, 4, [1, 3], {})
    assert m.topics["t"].topic_id == new_id and m.topics["t"].hosted == frozenset({1, 3})
    assert m.get_log("t", 0) is None and m.get_log("t", 2) is None
    assert all(lg.log_end_offset == 0 and lg not in old for lg in logs)


def test_a_config_change_reaches_the_open_replicas(tmp_path: Path) -> None:
    m = manager(tmp_path, 2)
    topic_id = uuid.uuid4()
    (lg,) = m.ensure_replicas("t", topic_id, 4, [0], {})
    m.ensure_replicas("t", topic_id, 4, [1, 2], {"retention.ms": "1234"})
    assert lg.config.retention_ms == 1234
    assert m.get_log("t", 2) is not None
    assert m.get_log("t", 2).config.retention_ms == 1234  # type: ignore[union-attr]
