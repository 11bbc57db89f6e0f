"""`ReplicaManager.leader` (server/replica_manager.py) finds a known partition without
`partition()` and calls `check_leader` only when it could raise (an epoch given, or not
the leader): over every role and epoch it answers as `Partition.check_leader` does, and a
re-created topic's new log gets a new partition."""

from __future__ import annotations

import itertools
from pathlib import Path

from tidegate.common.config import BrokerConfig
from tidegate.server.broker import Broker


def _outcome(fn: object) -> object:
    try:
        return fn()  # type: ignore[operator]
    except Exception as e:
        return (type(e).__name__, str(e))


def test_leader_answers_as_check_leader_for_every_role_and_epoch(tmp_path: Path) -> None:
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path)}))
    b.load()
    try:
        b.create_topic("t", 1, {})
        part = b.replicas.leader("t", 0)
        for is_leader, epoch, asked in itertools.product(
                (True, False), (0, 3), (-1, 0, 2, 3, 4)):
            part.is_leader, part.leader_epoch = is_leader, epoch
            want = _outcome(lambda a=asked: part.check_leader(a))  # type: ignore[misc]
            got = _outcome(lambda a=asked: b.replicas.leader("t", 0, a))  # type: ignore[misc]
            assert got == (part if want is None else want), (is_leader, epoch, asked)
        part.is_leader, part.leader_epoch = True, 0
        b.delete_topic("t")
        b.create_topic("t", 1, {})
        again = b.replicas.leader("t", 0)  # the new log's partition, not the old one
        assert again is not part and again.log is b.logs.get_log("t", 0)
    finally:
        b.close()
