"""Coordinator epochs of the transaction coordinator's partitions, durable in one file.

Each load of a `__transaction_state` partition gets a new, larger coordinator epoch,
persisted before the load. Markers carry it, and a partition refuses a marker older than
the newest it has seen (TRANSACTION_COORDINATOR_FENCED), so a marker writer left over from
before a reload cannot write after its successor. The file is
`<log.dirs>/tidegate-txn-coordinator-epochs`, JSON, replaced atomically. (The cluster
mode will use the partition's leader epoch instead.)
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.storage.files import atomic_write

EPOCHS_FILE = "tidegate-txn-coordinator-epochs"


class CoordinatorEpochs:
    """The coordinator epoch of each `__transaction_state` partition, durable in one small
    JSON file; `bump` raises an epoch and persists it before returning it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            data = json.loads(path.read_text())
            self._epochs = {int(k): int(v) for k, v in dict(data).items()}
        except FileNotFoundError:
            self._epochs = {}
        except (OSError, ValueError) as e:
            raise KafkaError(f"cannot read {path}: {e}",
                             code=ErrorCode.kafka_storage_error) from e

    def get(self, partition: int) -> int:
        with self._lock:
            return self._epochs.get(partition, 0)

    def bump(self, partitions: list[int]) -> None:
        with self._lock:
            for p in partitions:
                self._epochs[p] = self._epochs.get(p, -1) + 1
            atomic_write(self.path, json.dumps(
                {str(k): v for k, v in sorted(self._epochs.items())}).encode())
