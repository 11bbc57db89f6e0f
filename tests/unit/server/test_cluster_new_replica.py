"""`is_new_replica`: the one rule by which a cluster broker's batch of new replicas
(`ClusterNode._open_new_replicas`) and its one-by-one path (`_apply_one`) decide that a
partition change brings a replica to open here."""

from __future__ import annotations

import uuid
from pathlib import Path

from tidegate.common.clock import ManualClock
from tidegate.server.cluster.metadata import PartitionChange
from tidegate.server.cluster.node import is_new_replica
from tidegate.storage.config import LogConfig
from tidegate.storage.log_manager import LogManager

OLD, NEW = uuid.UUID(int=1), uuid.UUID(int=2)


def _change(index: int, topic_id: uuid.UUID | None, assignment: tuple[int, ...]
            ) -> PartitionChange:
    return PartitionChange(("t", index), topic_id, assignment, None)


def test_a_replica_is_new_when_assigned_here_and_not_held_as_this_topic(tmp_path: Path) -> None:
    logs = LogManager(tmp_path, LogConfig(), ManualClock(0), cluster=True)
    logs.load()
    logs.ensure_replica("t", OLD, 3, 0, {})
    # partition 1 is not held here: new once assigned here, with an id
    assert is_new_replica(1, logs, _change(1, OLD, (2, 1)))
    assert not is_new_replica(1, logs, _change(1, OLD, (2, 3)))  # assigned elsewhere
    assert not is_new_replica(1, logs, _change(1, OLD, ()))  # topic gone
    assert not is_new_replica(1, logs, _change(1, None, (1,)))  # no id yet
    # partition 0 is held: not new for the same topic, new for a recreated one
    assert not is_new_replica(1, logs, _change(0, OLD, (1, 2)))
    assert is_new_replica(1, logs, _change(0, NEW, (1, 2)))
    assert not is_new_replica(3, logs, _change(0, NEW, (1, 2)))
    logs.close()
