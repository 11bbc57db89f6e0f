"""Coordinator epochs of the transaction coordinator's partitions, durable in one file.

Each load of a `__transaction_state` partition gets a new, larger coordinator epoch.
Markers carry it, and a partition refuses a marker older than the newest it has seen
(TRANSACTION_COORDINATOR_FENCED), so a marker writer left over from before a reload
cannot write after its successor.

What fencing needs of the file: after a restart, every new epoch must be larger than any
epoch a marker was written with before. So the file need not be written before a load,
only before the first marker carrying the load's epoch: `next` hands out an epoch in
memory (larger than any persisted or handed out before, no I/O, so a load never writes
and works on a full disk), and `persist` records it — with every other epoch handed out
so far, in one write — before the marker writer uses it (`persisted` tells whether it
must). A restart reads the file and continues above it.

The file is `<log.dirs>/tidegate-txn-coordinator-epochs`, JSON, replaced atomically.

In cluster mode the coordinator epoch is the leader epoch of the `__transaction_state`
partition (`LeaderCoordinatorEpochs`, as in Kafka): the controller makes every new leader
epoch larger and durable in ZooKeeper before a broker leads with it, so nothing needs
persisting here and a coordinator that lost leadership is fenced by its successor's
markers on every broker.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.storage.files import atomic_write

EPOCHS_FILE = "tidegate-txn-coordinator-epochs"


class EpochSource(Protocol):
    """Where a load's coordinator epoch comes from, and how it is made durable."""

    def next(self, partition: int) -> int: ...

    def persisted(self, partition: int, epoch: int) -> bool: ...

    def persist(self, partition: int, epoch: int) -> None: ...


class CoordinatorEpochs:
    """The coordinator epoch of each `__transaction_state` partition: handed out in
    memory by `next`, made durable by `persist` before markers carry it. Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            data = json.loads(path.read_text())
            self._persisted = {int(k): int(v) for k, v in dict(data).items()}
        except FileNotFoundError:
            self._persisted = {}
        except (OSError, ValueError) as e:
            raise KafkaError(f"cannot read {path}: {e}",
                             code=ErrorCode.kafka_storage_error) from e
        self._current = dict(self._persisted)

    def next(self, partition: int) -> int:
        """A new epoch for a load of `partition`: larger than any persisted or handed out
        before. No I/O."""
        with self._lock:
            epoch = self._current.get(partition, -1) + 1
            self._current[partition] = epoch
            return epoch

    def persisted(self, partition: int, epoch: int) -> bool:
        """The file already records `epoch` (or a larger one) for `partition`."""
        with self._lock:
            return self._persisted.get(partition, -1) >= epoch

    def persist(self, partition: int, epoch: int) -> None:
        """Make sure the file records at least `epoch` for `partition` (blocking: run it
        in a worker thread). One write covers every epoch handed out so far. Raises
        OSError (a full disk): nothing may carry `epoch` until this has succeeded."""
        with self._lock:
            if self._persisted.get(partition, -1) >= epoch:
                return
            data = dict(self._current)
            atomic_write(self.path, json.dumps(
                {str(k): v for k, v in sorted(data.items())}).encode())
            self._persisted = data


class LeaderCoordinatorEpochs:
    """Cluster mode: a partition's coordinator epoch is the leader epoch this broker leads
    it at (`leaders`: partition -> leader epoch, kept by the coordinator runtime from the
    leadership changes). Already durable (ZooKeeper), so `persist` does nothing."""

    def __init__(self, leaders: Mapping[int, int]) -> None:
        self._leaders = leaders

    def next(self, partition: int) -> int:
        return max(self._leaders.get(partition, 0), 0)

    def persisted(self, partition: int, epoch: int) -> bool:
        return True

    def persist(self, partition: int, epoch: int) -> None:
        return None
