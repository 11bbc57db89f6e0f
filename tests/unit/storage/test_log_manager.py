"""LogManager: topics create/delete/alter/partitions, persistence across restarts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tidegate.storage.config import LogConfig, topic_defaults_from_broker
from tidegate.storage.errors import InconsistentClusterIdError, LogDirectoryError
from tidegate.storage.files import read_offset_checkpoint, read_partition_metadata
from tidegate.storage.log_manager import LogManager

from ._support import BASE_TS, batch

DEFAULTS = topic_defaults_from_broker({"log.segment.bytes": "4096", "log.retention.ms": "1000"})


def manager(path: Path, **kw: object) -> LogManager:
    m = LogManager(path, DEFAULTS, ManualClock(BASE_TS), **kw)  # type: ignore[arg-type]
    m.load()
    return m


def test_create_append_reload(tmp_path: Path) -> None:
    m = manager(tmp_path)
    meta = m.create_topic("orders", 3, {"cleanup.policy": "compact"})
    assert meta.partitions == 3 and meta.configs == {"cleanup.policy": "compact"}
    assert m.topic_by_id(meta.topic_id) == meta
    lg = m.get_log("orders", 2)
    assert lg is not None and lg.topic_partition == "orders-2"
    assert lg.config.compact and lg.config.segment_bytes == 4096  # broker default
    lg.append(batch(3))
    assert read_partition_metadata(tmp_path / "orders-2") == meta.topic_id
    assert sorted((t, p) for t, p, _ in m.logs()) == [("orders", i) for i in range(3)]
    m.close()
    m2 = manager(tmp_path)
    assert m2.topics == {"orders": meta}
    assert m2.cluster_id == m.cluster_id
    lg2 = m2.get_log("orders", 2)
    assert lg2 is not None and lg2.log_end_offset == 3
    # the active segment's base: its indexes are not fsynced by flushes, so a start after
    # a crash must rebuild them (Log.recovery_point_to_checkpoint)
    assert read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint")[("orders", 2)] == 0
    m2.close()


def test_topic_name_and_argument_validation(tmp_path: Path) -> None:
    m = manager(tmp_path)
    for bad in ["", ".", "..", "a" * 250, "has space", "ü"]:
        with pytest.raises(InvalidTopicError):
            m.create_topic(bad, 1, {})
    m.create_topic("a" * 249, 1, {})
    m.create_topic("metrics.cpu", 1, {})
    with pytest.raises(InvalidTopicError, match="collides"):
        m.create_topic("metrics_cpu", 1, {})
    with pytest.raises(TopicAlreadyExistsError):
        m.create_topic("metrics.cpu", 1, {})
    with pytest.raises(InvalidPartitionsError):
        m.create_topic("zero", 0, {})
    with pytest.raises(InvalidConfigError, match=r"retention\.ms"):
        m.create_topic("badcfg", 1, {"retention.ms": "soon"})
    with pytest.raises(InvalidConfigError, match="Unknown topic config"):
        m.validate_new_topic("x", 1, {"retention.hours": "1"})
    assert m.create_topic("dry", 2, {}, validate_only=True).partitions == 2
    assert "dry" not in m.topics and not (tmp_path / "dry-0").exists()
    assert "__consumer_offsets" in [m.create_topic("__consumer_offsets", 2, {}).name]


def test_delete_topic(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.create_topic("doomed", 2, {})
    lg = m.get_log("doomed", 0)
    assert lg is not None
    lg.append(batch(1))
    m.delete_topic("doomed")
    assert "doomed" not in m.topics and m.get_log("doomed", 0) is None
    assert not any(p.name.startswith("doomed") for p in tmp_path.iterdir())
    with pytest.raises(UnknownTopicOrPartitionError):
        m.delete_topic("doomed")
    # Recreating gets a new id and an empty log.
    meta = m.create_topic("doomed", 1, {})
    lg = m.get_log("doomed", 0)
    assert lg is not None and lg.log_end_offset == 0 and lg.topic_id == meta.topic_id


def test_create_partitions_and_alter_configs(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.create_topic("t", 1, {"retention.ms": "5000"})
    with pytest.raises(InvalidPartitionsError):
        m.create_partitions("t", 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        m.create_partitions("nope", 3)
    m.create_partitions("t", 3)
    assert m.topics["t"].partitions == 3 and m.get_log("t", 2) is not None

    m.alter_topic_configs("t", {"segment.ms": "60000"}, incremental=True)
    assert m.topics["t"].configs == {"retention.ms": "5000", "segment.ms": "60000"}
    lg = m.get_log("t", 1)
    assert lg is not None and lg.config.segment_ms == 60000 and lg.config.retention_ms == 5000
    m.alter_topic_configs("t", {"retention.ms": None}, incremental=True)
    assert lg.config.retention_ms == 1000  # back to the broker default
    m.alter_topic_configs("t", {"max.message.bytes": "100"}, incremental=False)
    assert m.topics["t"].configs == {"max.message.bytes": "100"}
    assert m.effective_config("t").segment_ms == DEFAULTS.segment_ms
    with pytest.raises(InvalidConfigError):
        m.alter_topic_configs("t", {"cleanup.policy": "nope"}, incremental=True)
    with pytest.raises(InvalidConfigError):
        m.alter_topic_configs("t", {"bogus": None}, incremental=True)
    assert m.topics["t"].configs == {"max.message.bytes": "100"}
    m.close()
    m2 = manager(tmp_path)
    assert m2.topics["t"].configs == {"max.message.bytes": "100"}
    assert m2.topics["t"].partitions == 3


def test_broker_defaults_change_reaches_logs_without_overrides(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.create_topic("plain", 1, {})
    m.create_topic("pinned", 1, {"retention.ms": "5"})
    m.set_broker_defaults(topic_defaults_from_broker({"log.retention.hours": "2"}))
    plain, pinned = m.get_log("plain", 0), m.get_log("pinned", 0)
    assert plain is not None and pinned is not None
    assert plain.config.retention_ms == 7_200_000
    assert pinned.config.retention_ms == 5
    assert m.effective_config("plain").retention_ms == 7_200_000


def test_meta_properties(tmp_path: Path) -> None:
    m = manager(tmp_path, node_id=3, cluster_id="abcdefghijklmnopqrstuv")
    m.close()
    text = (tmp_path / "meta.properties").read_text()
    assert "node.id=3" in text and "cluster.id=abcdefghijklmnopqrstuv" in text
    assert "version=1" in text
    with pytest.raises(LogDirectoryError) as exc:
        manager(tmp_path, node_id=4)
    assert str(tmp_path) in str(exc.value) and "3" in str(exc.value) and "4" in str(exc.value)
    with pytest.raises(InconsistentClusterIdError):
        manager(tmp_path, node_id=3, cluster_id="another")
    assert manager(tmp_path, node_id=3).cluster_id == "abcdefghijklmnopqrstuv"


def test_leftovers_and_orphans_on_load(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.create_topic("keep", 1, {})
    m.close()
    (tmp_path / "gone-0.0123456789abcdef-delete").mkdir()
    (tmp_path / "orphan-0").mkdir()
    (tmp_path / "orphan-0" / "00000000000000000000.log").write_bytes(b"")
    m = manager(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert not any(n.endswith("-delete") for n in names)
    assert any(n.startswith("orphan-0.") and n.endswith("-stray") for n in names)
    assert list(m.topics) == ["keep"]


def test_topics_stored_with_keys_kafka_4_removed_still_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An older release accepted message.format.version & co.: such a topic loads
    without them, with one warning, and they leave the file at its next write."""
    m = manager(tmp_path)
    m.create_topic("old", 1, {"retention.ms": "5000"})
    m.create_topic("older", 1, {})
    m.create_topic("plain", 1, {"segment.ms": "60000"})
    m.close()
    path = tmp_path / "tidegate-topics.json"
    data = json.loads(path.read_text())
    for t in data["topics"]:
        if t["name"].startswith("old"):
            t["configs"].update({"message.format.version": "2.8-IV1",
                                 "message.timestamp.difference.max.ms": "1000"})
    path.write_text(json.dumps(data))
    with caplog.at_level("WARNING", logger="tidegate.storage.topics"):
        m = manager(tmp_path)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "message.format.version on 2 topic(s) (old, older)" in warnings[0]
    assert "message.timestamp.difference.max.ms" in warnings[0]
    assert m.topics["old"].configs == {"retention.ms": "5000"}
    assert m.topics["older"].configs == {}
    assert m.topics["plain"].configs == {"segment.ms": "60000"}
    lg = m.get_log("old", 0)
    assert lg is not None and lg.config.retention_ms == 5000
    assert lg.config.timestamp_before_max_ms == DEFAULTS.timestamp_before_max_ms
    m.alter_topic_configs("plain", {"retention.ms": "7"}, incremental=True)
    assert "message.format.version" not in path.read_text()
    m.close()


def test_unreadable_topics_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "tidegate-topics.json").write_text(json.dumps({"version": 9}))
    with pytest.raises(LogDirectoryError, match=r"tidegate-topics\.json"):
        manager(tmp_path)


def test_retention_cleaner_flush_across_logs(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.create_topic("del", 1, {"segment.bytes": "1024"})
    m.create_topic("cmp", 1, {"segment.bytes": "1024", "cleanup.policy": "compact"})
    for name in ("del", "cmp"):
        lg = m.get_log(name, 0)
        assert lg is not None
        for i in range(30):
            lg.append(batch(1, value_size=100, ts=BASE_TS + i))
        lg.update_high_watermark(lg.log_end_offset)
    assert m.run_retention(BASE_TS + 10_000) > 0
    stats = m.run_cleaner(BASE_TS)
    assert len(stats) == 1 and stats[0].records_kept < stats[0].records_in
    m.flush_all()
    assert all(lg.recovery_point == lg.log_end_offset for _, _, lg in m.logs())


def test_every_log_dir_is_used(tmp_path: Path) -> None:
    """JBOD (tests/unit/storage/test_log_dirs.py): the first directory holds the topics
    file, every one its own meta.properties."""
    m = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(), ManualClock())
    m.load()
    assert m.log_dir == tmp_path / "a" and (tmp_path / "b" / "meta.properties").exists()


def test_removing_a_replica_renames_now_and_deletes_later(tmp_path: Path) -> None:
    """Cluster mode: `remove_replica` only renames the directory (quick, on the event
    loop); the returned `-delete` directory is removed later in a worker. A replica of
    the same partition re-created in between opens a fresh directory that the late
    removal does not touch."""
    import uuid

    from tidegate.storage.log import remove_deleted_dir

    m = manager(tmp_path, cluster=True)
    topic_id = uuid.uuid4()
    lg = m.ensure_replica("moving", topic_id, 2, 0, {})
    m.ensure_replica("moving", topic_id, 2, 1, {})
    lg.append(batch(3))
    doomed = m.remove_replica("moving", 0)
    assert doomed is not None and doomed.name.endswith("-delete") and doomed.exists()
    assert not (tmp_path / "moving-0").exists() and m.get_log("moving", 0) is None
    assert m.topics["moving"].hosted == frozenset({1})
    again = m.ensure_replica("moving", topic_id, 2, 0, {})  # assigned back at once
    assert again is not lg and again.log_end_offset == 0
    again.append(batch(2))
    remove_deleted_dir(doomed)
    assert not doomed.exists()
    assert (tmp_path / "moving-0").is_dir() and again.log_end_offset == 2
    assert m.remove_replica("moving", 7) is None  # never held here
    m.close()
    reopened = manager(tmp_path, cluster=True)
    assert reopened.get_log("moving", 0) is not None
    assert reopened.get_log("moving", 0).log_end_offset == 2  # type: ignore[union-attr]
    reopened.close()


def test_load_pauses_gc_and_restores_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The opens run without cyclic GC (a start at 10,000 partitions spent ~1 s in full
    passes); the collector's state is restored after, and only `freeze` freezes."""
    import gc

    m = manager(tmp_path)
    m.create_topic("t", 3, {})
    m.close()
    during: list[bool] = []
    frozen: list[bool] = []
    real_open = LogManager._open_log

    def spy(self: LogManager, *a: object, **kw: object) -> object:
        during.append(gc.isenabled())
        return real_open(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(LogManager, "_open_log", spy)
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    assert gc.isenabled()
    m2 = manager(tmp_path)
    assert during == [False] * 3 and gc.isenabled() and not frozen
    m2.close()
    m3 = LogManager(tmp_path, DEFAULTS, ManualClock(BASE_TS), recovery_threads=1)
    m3.load(freeze=True)
    assert gc.isenabled() and frozen == [True]
    m3.close()
    gc.disable()
    try:  # a caller that turned the collector off keeps it off
        m4 = manager(tmp_path)
        assert not gc.isenabled()
        m4.close()
    finally:
        gc.enable()
