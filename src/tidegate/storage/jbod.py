"""`LogDirsMixin`: the several-directory (JBOD) half of `LogManager` — taking a failed
directory offline and moving a partition between directories.

Kafka's LogDirFailureChannel: an I/O error other than a full disk writing a partition
(an append, a flush, a checkpoint, retention or the cleaner) takes its directory
offline (`fail_dir`): its partitions leave service and answer KAFKA_STORAGE_ERROR
(`is_offline`, asked by the replica manager) until the broker restarts with the
directory repaired; the other directories keep serving. With one directory none of
this runs: a failed write is reported to `space` as before.

`move` serves AlterReplicaLogDirs: the partition is closed, copied as a fsynced
`-future` copy (`log_dirs.copy_partition_dir`), the source renamed to `-delete`, the
copy renamed in and reopened. Appends meanwhile get KAFKA_STORAGE_ERROR from the closed
log (retriable). Kafka copies online through a future replica instead.

The mixin uses `LogManager`'s state (declared below) under its `_lock`; the methods it
needs from `LogManager` are declared as stubs that `LogManager` overrides.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from pathlib import Path

from tidegate.common.errors import (
    KafkaError,
    KafkaStorageError,
    LogDirNotFoundError,
    UnknownTopicOrPartitionError,
)
from tidegate.storage.config import LogConfig
from tidegate.storage.disk_space import LogDirSpace, disk_full_error
from tidegate.storage.files import fsync_dir
from tidegate.storage.log import Log
from tidegate.storage.log_dirs import FUTURE_SUFFIX, LogDirs, copy_partition_dir
from tidegate.storage.topics import TopicMeta

__all__ = ["LogDirsMixin"]

log = logging.getLogger("tidegate.storage.log_manager")


class LogDirsMixin:
    dirs: LogDirs
    topics: dict[str, TopicMeta]
    space: LogDirSpace
    cluster: bool
    _logs: dict[tuple[str, int], Log]
    _lock: threading.RLock
    _moving: set[tuple[str, int]]

    # -- provided by LogManager ------------------------------------------------------

    def _open(self, meta: TopicMeta, partition: int, cfg: LogConfig, rp: int | None) -> Log:
        raise NotImplementedError

    def effective_config(self, topic: str) -> LogConfig:
        raise NotImplementedError

    def checkpoint_recovery_points(self) -> None:
        raise NotImplementedError

    def checkpoint_high_watermarks(self) -> None:
        raise NotImplementedError

    def _disk_full(self, exc: BaseException, what: str) -> bool:
        raise NotImplementedError

    # -- offline directories ---------------------------------------------------------

    def is_offline(self, topic: str, partition: int) -> bool:
        """Whether the partition lives in a directory taken offline (KAFKA_STORAGE_ERROR)."""
        return self.dirs.is_offline((topic, partition))

    def dir_of(self, topic: str, partition: int) -> Path | None:
        return self.dirs.where.get((topic, partition))

    def write_failed(self, topic: str, partition: int, exc: BaseException, what: str) -> None:
        """A write to a partition failed (the produce path): an I/O error takes its
        directory offline when there are several; else (one directory, or a full disk)
        it goes to `space` as before."""
        lg = self._logs.get((topic, partition))
        if lg is None or not self._io_failed(topic, partition, lg, exc, what):
            self.space.write_failed(exc, what)

    def log_write_failed(self, lg: object, exc: BaseException) -> bool:
        """A write (an fsync) to log `lg` failed: `_io_failed` for the partition it
        serves. True if its directory is (now) offline; always False with one directory."""
        if not self.dirs.jbod:
            return False
        with self._lock:
            found = [tp for tp, other in self._logs.items() if other is lg]
        if not found or not isinstance(lg, Log):
            return False
        topic, partition = found[0]
        return self._io_failed(topic, partition, lg, exc, f"flushing {topic}-{partition}")

    def _io_failed(self, topic: str, partition: int, lg: Log, exc: BaseException,
                   what: str) -> bool:
        """JBOD: an I/O error (not a full disk) writing `lg`, still registered and not
        being moved (a log deleted or moved meanwhile fails for that, not for its
        disk), takes its directory offline. True if it did (or it already was)."""
        tp = (topic, partition)
        if (not self.dirs.jbod or not isinstance(exc, OSError) or disk_full_error(exc)
                or self._logs.get(tp) is not lg or tp in self._moving):
            return False
        d = self.dirs.where.get(tp)
        return d is not None and self.fail_dir(d, exc, what)

    def fail_dir(self, d: Path, exc: BaseException, what: str) -> bool:
        """Take directory `d` offline (Kafka's LogDirFailureChannel): its partitions
        leave service and answer KAFKA_STORAGE_ERROR until a restart with `d` repaired;
        the other directories keep serving. Only with several directories (one failing
        directory fails its writes, as before). True if `d` is (now) offline."""
        if not self.dirs.jbod:
            return False
        with self._lock:
            if d in self.dirs.offline:
                return True
            self.dirs.offline[d] = f"{what}: {exc}"
            lost = [(tp, self._logs.pop(tp)) for tp in self.dirs.partitions_in(d)
                    if tp in self._logs]
        log.error("log directory %s failed (%s while %s) and is offline; its %d partitions "
                  "answer KAFKA_STORAGE_ERROR until the broker restarts with it repaired",
                  d, exc, what, len(lost))
        if not self.dirs.online():
            log.critical("every log directory is offline; no partition can be served")

        def close_lost() -> None:
            for _tp, lg in lost:
                try:  # keeps what can be kept; a dead disk refuses, its logs are gone anyway
                    lg.close()
                except (OSError, KafkaError):
                    pass

        # in a thread of its own: callers include the event loop, and a dying disk can
        # block a close (its flush lock, held by an fsync that hangs) for a long time
        threading.Thread(target=close_lost, name="log-dir-failure", daemon=True).start()
        return True

    def move(self, topic: str, partition: int, dest: Path) -> bool:
        """AlterReplicaLogDirs: move a partition to directory `dest` of this broker.
        Offline while it moves (appends to the closed log get KAFKA_STORAGE_ERROR,
        retriable): closed, copied as a fsynced `-future` copy (log_dirs.py), the source
        renamed away, the copy renamed in and reopened. Kafka copies online through a
        future replica instead. Blocking: run it in a worker thread. False if nothing
        was to do (already there)."""
        tp = (topic, partition)
        with self._lock:
            if dest not in self.dirs.dirs:
                raise LogDirNotFoundError(f"{dest} is not one of log.dirs")
            if dest in self.dirs.offline:
                raise KafkaStorageError(f"log directory {dest} is offline")
            if self.dirs.is_offline(tp):
                raise KafkaStorageError(f"{topic}-{partition} is in an offline log directory")
            lg = self._logs.get(tp)
            src = self.dirs.where.get(tp)
            if lg is None or src is None:
                raise UnknownTopicOrPartitionError(f"this server does not host {topic}-{partition}")
            if src == dest:
                return False
            if tp in self._moving:
                raise KafkaStorageError(f"{topic}-{partition} is being moved already")
            self._moving.add(tp)
        try:
            doomed = self._move_files(tp, lg, src, dest)
        finally:
            with self._lock:
                self._moving.discard(tp)
        if doomed is None:
            return True
        shutil.rmtree(doomed, ignore_errors=True)
        self.checkpoint_recovery_points()
        if self.cluster:
            self.checkpoint_high_watermarks()
        log.info("moved %s-%d from %s to %s", topic, partition, src, dest)
        return True

    def _move_files(self, tp: tuple[str, int], lg: Log, src: Path, dest: Path) -> Path | None:
        """`move`'s file work; the source's renamed directory, for the caller to remove
        (None: the partition was deleted meanwhile). On a failure the partition is
        served again from `src` and KafkaStorageError raised."""
        topic, partition = tp
        what = f"moving {topic}-{partition} to {dest}"
        try:
            lg.close()
            future = copy_partition_dir(lg.directory, dest)
        except OSError as exc:
            for stale in dest.glob(f"{lg.directory.name}.*{FUTURE_SUFFIX}"):
                shutil.rmtree(stale, ignore_errors=True)  # a copy cut short
            if not self._disk_full(exc, what):
                log.error("%s failed: %s", what, exc)
            try:
                with self._lock:  # the source is intact: serve it again where it was
                    if self._logs.get(tp) is lg:
                        self._open(self.topics[topic], partition,
                                   self.effective_config(topic), lg.recovery_point)
            except OSError as again:  # the source's disk failing (JBOD: offline)
                if not self._io_failed(topic, partition, lg, again, f"reopening after {what}"):
                    log.error("reopening %s-%d failed: %s", topic, partition, again)
            raise KafkaStorageError(f"{what} failed: {exc}") from exc
        with self._lock:
            if self._logs.get(tp) is not lg:  # deleted meanwhile: drop the copy
                shutil.rmtree(future, ignore_errors=True)
                return None
            doomed = lg.directory.with_name(f"{lg.directory.name}.{uuid.uuid4().hex}-delete")
            os.replace(lg.directory, doomed)
            fsync_dir(src)
            # from here a crash finishes the move at the next start (resolve_futures)
            os.replace(future, dest / lg.directory.name)
            fsync_dir(dest)
            self.dirs.where[tp] = dest
            self._open(self.topics[topic], partition, self.effective_config(topic),
                       lg.recovery_point)
        return doomed
