"""`LogState`: what every part of a `Log` may use, declared once.

`Log` (storage/log.py) is one class made of mixins, one per job: `log_append`,
`log_roll`, `log_read`, `log_txn`, `log_replica`, `log_truncation`, `log_cleanup`,
`log_lifecycle`, `log_flush`. Each
inherits this class, so mypy checks every part against the whole log's state and the
methods the parts call on one another. Declarations only, nothing at run time:
`Log.__init__` sets the attributes, and the method stubs (visible to the type checker
alone) are defined by `Log` or by the mixin named beside each. The invariants and the
locking contract are `log`'s module docstring: every attribute here is guarded by
`_lock` unless its comment says otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from tidegate.common.clock import Clock
from tidegate.records.batch import BatchHeader
from tidegate.storage.config import LogConfig
from tidegate.storage.leader_epochs import EpochEntry, LeaderEpochCache
from tidegate.storage.producer_state import ProducerStateManager
from tidegate.storage.segment import LogSegment
from tidegate.storage.segment_list import SegmentList

if TYPE_CHECKING:
    from tidegate.storage.log import Log
    from tidegate.storage.log_append import AppendInfo

__all__ = ["LogState"]


class LogState:
    """The attributes `Log.__init__` sets, and the methods the parts share."""

    directory: Path
    on_truncated: Callable[[Log], None] | None
    last_flush_ms: int
    _lock: threading.RLock
    _flush_mutex: threading.Lock  # serialises flushes; taken before `_lock`
    _config: LogConfig
    syncs_every_write: bool  # flush.messages <= 1 (log.py)
    _clock: Clock
    _segs: SegmentList
    _producers: ProducerStateManager
    _epochs: LeaderEpochCache
    _epochs_version: int  # bumped by every change to the cache (under the log lock)
    _epochs_written: int  # the version the checkpoint file holds
    _epochs_io: threading.Lock  # orders checkpoint writes (taken after the log lock)
    _closed: bool
    _log_start_offset: int
    _recovery_point: int
    _high_watermark: int
    _last_stable_offset: int
    _first_dirty: int
    _unsynced_snapshots: list[Path]
    _rolled_unsynced: list[LogSegment]

    if TYPE_CHECKING:

        @property
        def log_end_offset(self) -> int: ...  # log.py

        @property
        def topic_partition(self) -> str: ...  # log.py

        @property
        def high_watermark(self) -> int: ...  # log_txn

        def _check_open(self) -> None: ...  # log.py

        def append_control(  # log_append
            self,
            data: bytes,
            *,
            now_ms: int | None = None,
            coordinator_epoch: int | None = None,
            leader_epoch: int | None = None,
        ) -> AppendInfo: ...

        def _maybe_roll(  # log_roll
            self, size: int, max_ts: int, last_offset: int, now: int
        ) -> LogSegment: ...

        def _note_epochs(self, headers: Iterable[BatchHeader]) -> None: ...  # log_replica

        def _refresh_lso(self, *, allow_backwards: bool = False) -> None: ...  # log_txn

        def _advance_hw_locked(self, offset: int) -> bool: ...  # log_txn

        def _epochs_cut(self, changed: bool) -> None: ...  # log_replica

        def _persist_epochs(self, *, quiet: bool = False, sync: bool = True) -> None: ...

        def _epochs_to_write(self) -> tuple[tuple[EpochEntry, ...], int] | None: ...

        def _write_epochs(  # log_replica
            self, entries: tuple[EpochEntry, ...], version: int, *, sync: bool = True
        ) -> None: ...

        def _increment_log_start(self, offset: int) -> None: ...  # log_cleanup

        def set_first_dirty_offset(self, offset: int) -> None: ...  # log_cleanup

        def _write_offset_file(self, name: str, value: int) -> None: ...  # log_lifecycle
