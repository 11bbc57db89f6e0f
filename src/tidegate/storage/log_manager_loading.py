"""`LogLoading`: the `LogManager`'s start and stop — checking the log directories,
opening (and if needed recovering) every partition, and closing them.

`load` checks each directory's `meta.properties` (node.id and cluster.id, Kafka's
format), reads the topics file and the recovery-point checkpoints (and in cluster mode
the high-watermark ones: a restarted replica starts each log's HW there, capped by its
log end, so it never exposes records it cannot know are committed), finishes or undoes
a JBOD move a crash interrupted, removes leftover `*-delete` directories, moves an
orphan directory aside as `<dir>.<uuid>-stray` (never deleting data it does not
understand), then opens every partition. `close` flushes and closes every log (each
leaves a clean-shutdown marker) and checkpoints.

Threading: `load`, `close`, `create_topic` and `create_partitions` open or close
partitions on `recovery_threads` worker threads at once (Kafka's
num.recovery.threads.per.data.dir), registering each in the caller's thread. A base of
`LogManager`, whose state it shares.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tidegate.common.clock import Clock
from tidegate.storage.config import LogConfig
from tidegate.storage.errors import (
    InconsistentClusterIdError,
    InconsistentTopicIdError,
    LogDirectoryError,
)
from tidegate.storage.files import (
    fsync_dir,
    kafka_uuid,
    parse_partition_dir,
    read_offset_checkpoint,
    read_properties,
    sync_filesystem,
    write_properties,
)
from tidegate.storage.log import Log
from tidegate.storage.log_manager_jobs import RECOVERY_CHECKPOINT, REPLICATION_CHECKPOINT, LogJobs
from tidegate.storage.topics import TopicMeta, drop_removed_configs, load_topics

__all__ = ["META_PROPERTIES", "LogLoading"]

# the manager's logger: its lines keep the name they had before the split
log = logging.getLogger("tidegate.storage.log_manager")

META_PROPERTIES = "meta.properties"


class LogLoading(LogJobs):
    log_dir: Path
    clock: Clock
    node_id: int
    _cluster_id: str | None
    _checkpointed_hws: dict[tuple[str, int], int]
    recovery_threads: int

    # -- startup and shutdown ------------------------------------------------------------

    def load(
        self, progress: Callable[[str], None] | None = None, *, freeze: bool = False
    ) -> None:
        """Check `meta.properties`, then open (and if needed recover) every partition.
        `freeze`: move what survives the opens out of the garbage collector's reach
        (`gc.freeze`: the broker's start; see below)."""
        say = progress or (lambda _msg: None)
        for d in self.dirs.dirs:
            d.mkdir(parents=True, exist_ok=True)
        self._check_meta_properties()
        self.topics = load_topics(self.log_dir)
        drop_removed_configs(self.topics)
        recovery: dict[tuple[str, int], int] = {}
        for d in self.dirs.dirs:
            recovery.update(read_offset_checkpoint(d / RECOVERY_CHECKPOINT))
        if self.cluster:
            for d in self.dirs.dirs:
                self._checkpointed_hws.update(self._read_hw_checkpoint(d))
        expected = {f"{t}-{p}" for t, m in self.topics.items() for p in m.local_partitions()}
        if self.dirs.jbod:  # finish or undo a move a crash interrupted (log_dirs.py)
            live = {tp for d in self.dirs.dirs for e in os.scandir(d)
                    if e.is_dir() and e.name in expected and (tp := parse_partition_dir(e.name))}
            for d in self.dirs.dirs:
                for line in self.dirs.resolve_futures(d, live):
                    say(line)
        for d in self.dirs.dirs:
            for entry in sorted(os.scandir(d), key=lambda e: e.name):
                if not entry.is_dir():
                    continue
                if entry.name.endswith("-delete"):
                    say(f"removing deleted partition directory {entry.name}")
                    shutil.rmtree(entry.path, ignore_errors=True)
                elif (tp := parse_partition_dir(entry.name)) is None:
                    continue
                elif entry.name not in expected:
                    self._set_aside(Path(entry.path), "belongs to no known topic")
                elif tp in self.dirs.where:
                    raise LogDirectoryError(
                        f"Duplicate log directories for {entry.name} are found in both "
                        f"{self.dirs.where[tp]} and {d}; remove the stale one")
                else:
                    self.dirs.where[tp] = d
        jobs = []
        for meta in list(self.topics.values()):
            cfg = self.effective_config(meta.name)
            for p in meta.local_partitions():
                self.dirs.place((meta.name, p))  # a partition not found: a new, empty one
            jobs += [(meta, p, cfg, recovery.get((meta.name, p))) for p in meta.local_partitions()]
        # What the opens repaired (torn tails cut, indexes and snapshots rewritten, the
        # clean-shutdown markers removed) is left unsynced, then made durable by one
        # syncfs per directory here, before any log serves or any recovery point is
        # checkpointed: ~8 fsyncs per partition otherwise, most of a start after kill -9
        # at 10,000 partitions. A crash before this sync repeats the recovery; a failed
        # open still syncs what the others repaired (a later close() marks them clean).
        # No cyclic garbage collection while the partitions open: they allocate a few
        # dozen long-lived objects each, so the collector's full passes (each walking
        # every object, with the GIL) came more often and grew with the partitions, ~1 s
        # of a start at 10,000. With `freeze` (the broker's start) what survives is then
        # frozen (`gc.freeze`): later full passes skip it; it is still freed by reference
        # counting, only a cycle among start-time objects would outlive its use (so a
        # test process loading many managers leaves it off).
        t0 = time.monotonic()
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._open_all(jobs, say, sync=False)
        finally:
            t1 = time.monotonic()
            if freeze:
                gc.freeze()
            if collecting:
                gc.enable()
            for d in self.dirs.dirs:
                sync_filesystem(d)
        say(f"opened {len(jobs)} partitions in {t1 - t0:.2f} s, then synced "
            f"{len(self.dirs.dirs)} log dir(s) in {time.monotonic() - t1:.2f} s")
        self.checkpoint_recovery_points()
        say(f"loaded {len(self._logs)} partitions of {len(self.topics)} topics")

    def _check_meta_properties(self) -> None:
        """Every directory's meta.properties must name this node and one cluster; those
        missing are written after all present ones are checked (so a new, empty second
        directory takes the cluster id of the first, never a fresh one)."""
        missing = [d for d in self.dirs.dirs if not self._check_one_meta(d)]
        for d in missing:
            if self._cluster_id is None:
                self._cluster_id = kafka_uuid(uuid.uuid4())
            new = {"version": "1", "node.id": str(self.node_id), "cluster.id": self._cluster_id}
            write_properties(d / META_PROPERTIES, new, "Written by Tidegate")

    def _check_one_meta(self, log_dir: Path) -> bool:
        path = log_dir / META_PROPERTIES
        props = read_properties(path)
        if props is None:
            return False
        stored = props.get("node.id") or props.get("broker.id")
        if stored is None or not stored.lstrip("-").isdigit():
            raise LogDirectoryError(f"{path} has no valid node.id; remove or fix it")
        if int(stored) != self.node_id:
            raise LogDirectoryError(
                f"The log directory {log_dir} belongs to node.id {stored}, but this "
                f"broker is configured with node.id {self.node_id} ({path}). Point log.dirs "
                f"at this node's own directory, or set node.id={stored}."
            )
        stored_cluster = props.get("cluster.id", "")
        if self._cluster_id and stored_cluster and stored_cluster != self._cluster_id:
            raise InconsistentClusterIdError(
                f"The log directory {log_dir} belongs to cluster {stored_cluster}, "
                f"but cluster.id is configured as {self._cluster_id} ({path})"
            )
        self._cluster_id = stored_cluster or self._cluster_id or kafka_uuid(uuid.uuid4())
        return True

    def _set_aside(self, directory: Path, why: str) -> None:
        stray = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}-stray")
        log.warning("%s %s; moving it to %s", directory, why, stray.name)
        os.replace(directory, stray)
        fsync_dir(directory.parent)

    def _open_all(
        self, jobs: Sequence[tuple[TopicMeta, int, LogConfig, int | None]],
        say: Callable[[str], None] = lambda _msg: None,
        *,
        sync: bool = True,
    ) -> None:
        """Open partitions on `recovery_threads` threads; each is registered (in the
        caller's thread) as it completes, in order. The first failure is raised once the
        partitions already being opened have finished. `sync=False`: see `Log.open`."""
        total = len(jobs)

        def one(job: tuple[TopicMeta, int, LogConfig, int | None]) -> Log:
            return self._open_log(*job, sync=sync)

        if self.recovery_threads == 1 or total < 2:
            opened: Iterator[Log] = map(one, jobs)
        else:
            pool = ThreadPoolExecutor(self.recovery_threads, thread_name_prefix="log-recovery")
            opened = pool.map(one, jobs)
        try:
            for i, ((meta, p, _, _), lg) in enumerate(zip(jobs, opened), 1):
                self._register(meta, p, lg)
                if total <= 100 or i % 1000 == 0 or i == total:
                    say(f"loaded {meta.name}-{p} ({i}/{total})")
        finally:
            if self.recovery_threads > 1 and total >= 2:
                pool.shutdown(wait=True, cancel_futures=True)

    def _open(self, meta: TopicMeta, partition: int, cfg: LogConfig, rp: int | None) -> Log:
        return self._register(meta, partition, self._open_log(meta, partition, cfg, rp))

    def _register(self, meta: TopicMeta, partition: int, lg: Log) -> Log:
        lg.on_truncated = self._after_truncation
        self._logs[(meta.name, partition)] = lg
        return lg

    def _open_log(
        self, meta: TopicMeta, partition: int, cfg: LogConfig, rp: int | None, *,
        sync: bool = True,
    ) -> Log:
        """Open (creating if needed, recovering if needed) one partition's log; safe to
        run on several threads at once for different partitions."""
        directory = self.dirs.where[(meta.name, partition)] / f"{meta.name}-{partition}"
        # Cluster mode: the checkpointed HW; none = 0, which the log raises to its start.
        hw = self._checkpointed_hws.get((meta.name, partition), 0) if self.cluster else None
        try:
            lg = Log.open(
                directory, cfg, self.clock, topic_id=meta.topic_id, recovery_point=rp,
                high_watermark=hw, sync=sync,
            )
        except InconsistentTopicIdError as exc:
            self._set_aside(directory, f"is from an older topic ({exc})")
            lg = Log.open(directory, cfg, self.clock, topic_id=meta.topic_id,
                          high_watermark=hw, sync=sync)
        return lg

    def _after_truncation(self, _lg: Log) -> None:
        self.checkpoint_recovery_points()
        if self.cluster:
            self.checkpoint_high_watermarks()

    def _read_hw_checkpoint(self, log_dir: Path) -> dict[tuple[str, int], int]:
        path = log_dir / REPLICATION_CHECKPOINT
        try:
            return read_offset_checkpoint(path)
        except ValueError as exc:  # every HW then starts at its log start: safe, only slow
            log.warning("%s is unreadable (%s); high watermarks restart at log starts",
                        path, exc)
            return {}

    def close(self) -> None:
        """Flush and close every log (each leaves a clean-shutdown marker). A log that
        cannot be closed for a full disk is left for recovery at the next start."""
        def close_one(item: tuple[str, int, Log]) -> int:
            topic, partition, lg = item
            try:
                lg.close()
            except OSError as exc:
                if not self.space.write_failed(exc, f"closing {topic}-{partition}"):
                    raise
                return 1
            return 0

        # each close is a few fsyncs (segments, snapshot, marker): side by side, as at load
        items = list(self.logs())
        if self.recovery_threads == 1 or len(items) < 2:
            unclean = sum(map(close_one, items))
        else:
            with ThreadPoolExecutor(self.recovery_threads, thread_name_prefix="log-close") as pool:
                unclean = sum(pool.map(close_one, items))
        if unclean:
            log.warning("%d partitions not closed cleanly (disk full); the next start "
                        "recovers them", unclean)
        self.checkpoint_recovery_points()
        if self.cluster:
            self.checkpoint_high_watermarks()
