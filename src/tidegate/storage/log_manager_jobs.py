"""`LogJobs`: the `LogManager`'s work over every log — looking logs up, the periodic
jobs (retention, the cleaner, flushes) and the checkpoints they end with.

`recovery-point-offset-checkpoint` (Kafka's format: how far each log is known fsynced,
so the next start after a crash recovers only the tail) and, in cluster mode,
`replication-offset-checkpoint` (each log's high watermark): one file per online log
directory, with the partitions it holds. A full disk skips a job or a checkpoint
quietly (reported once to `space`); another I/O error takes a JBOD directory offline
(`fail_dir`, in `jbod.py`).

Threading: `run_retention`, `run_cleaner`, `flush_all`, `checkpoint_recovery_points` and
`checkpoint_high_watermarks` may run in worker threads; per-log work runs on a snapshot
of the logs taken under the manager's lock. Checkpoint writes are serialised, each
capturing its values under that serialisation, so an older capture never overwrites a
newer file. A base of `LogManager` (through `LogLoading`), whose state it shares.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from tidegate.common.errors import KafkaError
from tidegate.storage.cleaner import CleanStats, clean
from tidegate.storage.disk_space import disk_full_error
from tidegate.storage.files import write_offset_checkpoint
from tidegate.storage.jbod import LogDirsMixin
from tidegate.storage.log import Log

__all__ = ["RECOVERY_CHECKPOINT", "REPLICATION_CHECKPOINT", "LogJobs"]

# the manager's logger: its lines keep the name they had before the split
log = logging.getLogger("tidegate.storage.log_manager")

RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"


class LogJobs(LogDirsMixin):
    _checkpoint_lock: threading.Lock

    # -- logs ----------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def logs(self) -> Iterator[tuple[str, int, Log]]:
        """(topic, partition, log) for every partition (a snapshot)."""
        with self._lock:
            items = list(self._logs.items())
        for (topic, partition), lg in items:
            yield topic, partition, lg

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        deleted = 0
        for topic, partition, lg in self.logs():
            try:
                deleted += lg.apply_retention(now_ms)
            except (KafkaError, OSError) as exc:  # e.g. deleted meanwhile
                what = f"applying retention to {topic}-{partition}"
                if not self._disk_full(exc, what) and not self._io_failed(
                        topic, partition, lg, exc, what):
                    log.warning("retention of %s-%d failed: %s", topic, partition, exc)
        return deleted

    def run_cleaner(self, now_ms: int) -> list[CleanStats]:
        """One cleaner pass over every compacted log; stats of those that were cleaned."""
        done = []
        for topic, partition, lg in self.logs():
            if not lg.config.compact:
                continue
            try:
                stats = clean(lg, now_ms)
            except (KafkaError, OSError) as exc:
                what = f"cleaning {topic}-{partition}"
                if not self._disk_full(exc, what) and not self._io_failed(
                        topic, partition, lg, exc, what):
                    log.warning("cleaning %s-%d failed: %s", topic, partition, exc)
                continue
            if stats.cleaned:
                done.append(stats)
        return done

    def flush_all(self) -> None:
        for topic, partition, lg in self.logs():
            try:
                lg.flush()
            except OSError as exc:
                if not self._io_failed(topic, partition, lg, exc,
                                       f"flushing {topic}-{partition}"):
                    raise
        self.checkpoint_recovery_points()

    def checkpoint_recovery_points(self) -> None:
        """Persist every log's recovery point (call periodically, as Kafka does every
        log.flush.offset.checkpoint.interval.ms): a crash then recovers only the tail.
        A full disk skips it quietly (the previous checkpoint stays valid, only older);
        the next run retries."""
        # not past a segment whose indexes are unsynced (Log.recovery_point_to_checkpoint)
        self._write_checkpoint(RECOVERY_CHECKPOINT, "recovery points",
                               lambda lg: lg.recovery_point_to_checkpoint)

    def checkpoint_high_watermarks(self) -> None:
        """Cluster mode: persist every log's high watermark to Kafka's
        `replication-offset-checkpoint` (call periodically, as Kafka does every
        replica.high.watermark.checkpoint.interval.ms; also done at close and after a
        truncation). A full disk skips it quietly, as for recovery points."""
        self._write_checkpoint(REPLICATION_CHECKPOINT, "high watermarks",
                               lambda lg: lg.high_watermark)

    def _write_checkpoint(self, name: str, what: str, value: Callable[[Log], int]) -> None:
        """One file per online directory, with the partitions it holds."""
        with self._checkpoint_lock:
            offsets = {(t, p): value(lg) for t, p, lg in self.logs()}
            where: dict[tuple[str, int], Path] = {}
            if self.dirs.jbod:
                with self._lock:
                    where = dict(self.dirs.where)
            for d in self.dirs.online():
                mine = offsets if not self.dirs.jbod else {
                    tp: v for tp, v in offsets.items() if where.get(tp) == d}
                try:
                    write_offset_checkpoint(d / name, mine)
                except OSError as exc:
                    if self.dirs.jbod and disk_full_error(exc) is None:
                        self.fail_dir(d, exc, f"checkpointing {what}")
                        continue
                    if not self.space.write_failed(exc, f"checkpointing {what}"):
                        raise
                    return
        self.space.write_succeeded()

    def _disk_full(self, exc: BaseException, what: str) -> bool:
        """Report `exc` to `space` if it is a full disk (logged once there)."""
        return disk_full_error(exc) is not None and self.space.write_failed(exc, what)
