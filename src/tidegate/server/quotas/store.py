"""Where client quota configs live: a file in the log directory, or ZooKeeper.

`FileQuotaStore` (single node): `<log dir>/__client_quotas.json`, the rows of
manager.to_json. A change is written to a temporary file, fsynced, renamed over the old
one and the directory fsynced (in a worker thread, off the event loop), and only then
applied to the `QuotaManager`: a crash leaves the old or the new set, never half, and
the broker never enforces a quota it could lose. A file that cannot be read stops the
broker at start rather than silently dropping every quota.

In cluster mode BrokerApp swaps in server/quotas/cluster.py's ZooKeeper store; both
offer `alter(changes)`: AlterClientQuotas' ops per entity, applied to the current
configs inside the store (under its lock, or conditionally on the znode's version), so
two concurrent alters of one entity cannot lose one another's change.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tidegate.server.quotas.entities import Entity, QuotaRequestError, entity_path
from tidegate.server.quotas.manager import Op, QuotaManager, Quotas, from_json, to_json

log = logging.getLogger(__name__)

FILE_NAME = "__client_quotas.json"

# an entity and AlterClientQuotas' ops on it (already validated)
Change = tuple[Entity, Sequence[Op]]


class QuotaStore(Protocol):
    async def alter(self, changes: Sequence[Change]) -> None:
        """Apply each entity's ops to its current configs (none left: the entity
        goes), durably, then to the broker's QuotaManager."""


class FileQuotaStore:
    def __init__(self, data_dir: Path, manager: QuotaManager) -> None:
        self.path = data_dir / FILE_NAME
        self.manager = manager
        self._lock = asyncio.Lock()
        manager.replace(self._load())

    def _load(self) -> Quotas:
        try:
            raw = json.loads(self.path.read_text())
            return from_json(raw)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, KeyError, QuotaRequestError) as e:
            raise OSError(f"cannot read client quotas from {self.path}: {e}") from e

    async def alter(self, changes: Sequence[Change]) -> None:
        async with self._lock:
            new = {e: dict(c) for e, c in self.manager.quotas.items()}
            for entity, ops in changes:
                configs = QuotaManager.altered(new.get(entity, {}), ops)
                if configs:
                    new[entity] = configs
                else:
                    new.pop(entity, None)
            await asyncio.to_thread(self._write, to_json(new))
            self.manager.replace(new)
            for entity, _ in changes:
                log.info("client quotas of %s now %s", entity_path(entity),
                         new.get(entity) or "none")

    def _write(self, rows: list[dict[str, object]]) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(rows, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
