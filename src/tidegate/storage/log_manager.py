"""`LogManager`: every partition log in the log directory, and the topics they belong to.

It owns the log directory's files: `meta.properties` (node.id and cluster.id, Kafka's
format, checked at load), `tidegate-topics.json` (see `topics.py`),
`recovery-point-offset-checkpoint` (Kafka's format: how far each log is known fsynced,
so the next start after a crash recovers only the tail), and one `<topic>-<partition>`
directory per partition. In cluster mode (`cluster=True`) also Kafka's
`replication-offset-checkpoint` (same format): each log's high watermark, written by
`checkpoint_high_watermarks` (periodically, by the caller, and at close) and read at
`load`, which starts each log's HW there (capped by its log end; a log missing from it
starts at its log start): a restarted replica must not expose records it cannot know
are committed. The embedded broker neither writes nor reads it; its HW starts at the
log end, as everything recovered is fsynced.

A log's truncation (`Log.truncate_to`, a follower cutting a divergent tail) checkpoints
recovery points (and, in cluster mode, HWs) at once through `Log.on_truncated`: a stale
recovery point above the new end would let the next start trust segments appended after
the truncation without checking them.

Several `log.dirs` (JBOD, see `log_dirs.py`): each directory has its own
`meta.properties` (same node and cluster ids) and its own checkpoints for the partitions
it holds; `tidegate-topics.json` stays in the first. New partitions go to the directory
holding the fewest; a directory whose write fails with an I/O error (not a full disk)
goes offline (`fail_dir`), its partitions answering KAFKA_STORAGE_ERROR; `move` serves
AlterReplicaLogDirs (both in `jbod.py`). With one directory none of this changes a
file. The first directory's free space and full-disk state are tracked by `space`
(`disk_space.LogDirSpace`): the periodic jobs here report a full disk to it and skip
quietly, retrying on their next run. Locking the directories against a second broker
(`dir_lock`) is the caller's job, before `load`.

Invariants: a topic exists iff it is in `tidegate-topics.json`; metadata is written
before directories are created and removed before they are deleted, so a crash leaves at
worst an orphan directory, which `load` moves aside as `<dir>.<uuid>-stray` (never
deleting data it does not understand). Leftover `*-delete` directories are removed.

Threading: `load`, `close`, `create_topic` and `create_partitions` open or close
partitions on `recovery_threads` worker threads at once (Kafka's
num.recovery.threads.per.data.dir), registering each in the caller's thread. Admin
operations run on the event loop; `run_retention`, `run_cleaner`,
`flush_all`, `checkpoint_recovery_points` and `checkpoint_high_watermarks` may run in
worker threads. An internal lock guards the topic and log maps; per-log work runs on
snapshots outside it. Checkpoint writes are serialised, each capturing its values under
that serialisation, so an older capture never overwrites a newer file.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tidegate.common.clock import Clock
from tidegate.common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tidegate.storage.cleaner import CleanStats, clean
from tidegate.storage.config import TOPIC_CONFIG_KEYS, LogConfig
from tidegate.storage.disk_space import LogDirSpace, disk_full_error
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
    write_offset_checkpoint,
    write_properties,
)
from tidegate.storage.jbod import LogDirsMixin
from tidegate.storage.log import Log
from tidegate.storage.log_dirs import LogDirs
from tidegate.storage.topics import (
    TopicMeta,
    collides,
    load_topics,
    save_topics,
    validate_topic_name,
)

__all__ = ["LogManager", "TopicMeta"]

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"


class LogManager(LogDirsMixin):
    def __init__(
        self,
        log_dirs: Path | str | Sequence[Path | str],
        broker_defaults: LogConfig,
        clock: Clock,
        *,
        node_id: int = 1,
        cluster_id: str | None = None,
        cluster: bool = False,
        recovery_threads: int = 1,
    ) -> None:
        dirs = [log_dirs] if isinstance(log_dirs, Path | str) else list(log_dirs)
        self.dirs = LogDirs(Path(d) for d in dirs)
        self.log_dir = self.dirs.first  # the topics file's (and the broker's own files')
        self.broker_defaults = broker_defaults
        self.clock = clock
        self.node_id = node_id
        self._cluster_id = cluster_id
        self.topics: dict[str, TopicMeta] = {}
        self._logs: dict[tuple[str, int], Log] = {}
        self._lock = threading.RLock()
        self.space = LogDirSpace(self.log_dir, clock=clock)
        self.cluster = cluster
        self._moving: set[tuple[str, int]] = set()  # partitions `move` is moving
        # Cluster mode: the HWs `load` read from replication-offset-checkpoint.
        self._checkpointed_hws: dict[tuple[str, int], int] = {}
        self._checkpoint_lock = threading.Lock()
        # Kafka's num.recovery.threads.per.data.dir: partitions opened (and recovered) at
        # once at load and by a CreateTopics. Opening one is mostly fsyncs (its
        # clean-shutdown marker's removal, a new partition's metadata and directory),
        # which release the GIL and, run side by side, share the file system's journal
        # commits: 10,000 partitions open in seconds, not minutes.
        self.recovery_threads = max(1, recovery_threads)

    @property
    def cluster_id(self) -> str:
        if self._cluster_id is None:
            raise LogDirectoryError("cluster id unknown before load()")
        return self._cluster_id

    def adopt_cluster_id(self, cluster_id: str) -> None:
        """Cluster mode: the id ZooKeeper holds, before `load` checks meta.properties."""
        self._cluster_id = cluster_id

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

    # -- topics --------------------------------------------------------------------------

    def validate_new_topic(
        self, name: str, partitions: int, configs: Mapping[str, str]
    ) -> LogConfig:
        """Everything CreateTopics checks; returns the topic's effective config."""
        validate_topic_name(name)
        with self._lock:
            if name in self.topics:
                raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
            for other in self.topics:
                if collides(name, other):
                    raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")
        if partitions <= 0:
            raise InvalidPartitionsError(
                f"Number of partitions must be larger than 0, got {partitions}."
            )
        return LogConfig.from_props(configs, self.broker_defaults)

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str], *, validate_only: bool = False
    ) -> TopicMeta:
        with self._lock:
            cfg = self.validate_new_topic(name, partitions, configs)
            meta = TopicMeta(name, uuid.uuid4(), partitions, dict(configs))
            if validate_only:
                return meta
            self.topics[name] = meta
            save_topics(self.log_dir, self.topics)
            for p in range(partitions):
                self.dirs.place((name, p))
            self._open_all([(meta, p, cfg, None) for p in range(partitions)])
            return meta

    def delete_topic(self, name: str) -> None:
        with self._lock:
            meta = self.topics.pop(name, None)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
            save_topics(self.log_dir, self.topics)
            doomed = [self._logs.pop((name, p), None) for p in range(meta.partitions)]
            for p in range(meta.partitions):
                self.dirs.where.pop((name, p), None)
        for lg in doomed:
            if lg is not None:
                lg.delete()

    # -- cluster mode: replicas of the partitions the controller assigned here ----------

    def ensure_replica(
        self, name: str, topic_id: uuid.UUID, partitions: int, partition: int,
        configs: Mapping[str, str],
    ) -> Log:
        """Open (creating if needed) this broker's replica of `name`-`partition`.

        The topic's metadata here follows ZooKeeper's: a different topic id means the
        topic was deleted and re-created while this broker was away, so the old
        replicas go (`remove_replica`) before the new one opens."""
        with self._lock:
            meta = self.topics.get(name)
            if meta is not None and meta.topic_id != topic_id:
                for p in list(meta.local_partitions()):
                    self._drop_log(name, p)
                del self.topics[name]
                meta = None
            hosted = frozenset() if meta is None or meta.hosted is None else meta.hosted
            new = TopicMeta(name, topic_id, max(partitions, meta.partitions if meta else 0),
                            dict(configs), hosted | {partition})
            if new != meta:
                self.topics[name] = new
                save_topics(self.log_dir, self.topics)
            cfg = self.effective_config(name)
            lg = self._logs.get((name, partition))
            if lg is None:
                self.dirs.place((name, partition))
                lg = self._open(new, partition, cfg, None)
            elif meta is not None and meta.configs != new.configs:
                for p in new.local_partitions():
                    other = self._logs.get((name, p))
                    if other is not None:
                        other.update_config(cfg)
            return lg

    def remove_replica(self, name: str, partition: int) -> Path | None:
        """Drop this broker's replica of `name`-`partition` (the controller moved it
        away or the topic was deleted); the topic goes when its last replica does.

        Only the quick part runs here (the log is closed and its directory renamed to
        `...-delete` under the lock, so a replica re-created at once opens a fresh
        directory); the renamed directory is returned for the caller to remove with
        `storage.log.remove_deleted_dir` in a worker thread (None if nothing to remove)."""
        with self._lock:
            meta = self.topics.get(name)
            if meta is None:
                return None
            hosted = frozenset(meta.local_partitions()) - {partition}
            if hosted:
                self.topics[name] = dataclasses.replace(meta, hosted=hosted)
            else:
                del self.topics[name]
            save_topics(self.log_dir, self.topics)
            lg = self._logs.pop((name, partition), None)
            self.dirs.where.pop((name, partition), None)
            return None if lg is None else lg.close_for_delete()

    def _drop_log(self, name: str, partition: int) -> None:
        lg = self._logs.pop((name, partition), None)
        self.dirs.where.pop((name, partition), None)
        if lg is not None:
            lg.delete()

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> TopicMeta:
        with self._lock:
            meta = self._meta(name)
            if total <= meta.partitions:
                raise InvalidPartitionsError(
                    f"Topic currently has {meta.partitions} partitions, which is higher "
                    f"than or equal to the requested {total}."
                )
            new = dataclasses.replace(meta, partitions=total)
            if validate_only:
                return new
            self.topics[name] = new
            save_topics(self.log_dir, self.topics)
            cfg = self.effective_config(name)
            for p in range(meta.partitions, total):
                self.dirs.place((name, p))
            self._open_all([(new, p, cfg, None) for p in range(meta.partitions, total)])
            return new

    def alter_topic_configs(
        self,
        name: str,
        configs: Mapping[str, str | None],
        incremental: bool,
        *,
        validate_only: bool = False,
    ) -> TopicMeta:
        """AlterConfigs (`incremental=False`: the overrides become exactly `configs`,
        None values dropped) or IncrementalAlterConfigs (set, or delete with None)."""
        with self._lock:
            meta = self._meta(name)
            for key in configs:
                if key not in TOPIC_CONFIG_KEYS:
                    raise InvalidConfigError(f"Unknown topic config name: {key}")
            overrides = dict(meta.configs) if incremental else {}
            for key, value in configs.items():
                if value is None:
                    overrides.pop(key, None)
                else:
                    overrides[key] = value
            cfg = LogConfig.from_props(overrides, self.broker_defaults)
            new = dataclasses.replace(meta, configs=overrides)
            if validate_only:
                return new
            self.topics[name] = new
            save_topics(self.log_dir, self.topics)
            for p in range(new.partitions):
                lg = self._logs.get((name, p))
                if lg is not None:
                    lg.update_config(cfg)
            return new

    def set_broker_defaults(self, defaults: LogConfig) -> None:
        """New broker-level defaults (dynamic broker configs): every log's effective
        config is recomputed, so topics without an override follow the change."""
        with self._lock:
            self.broker_defaults = defaults
            effective = {name: self.effective_config(name) for name in self.topics}
            for (topic, _), lg in self._logs.items():
                lg.update_config(effective[topic])

    def _meta(self, name: str) -> TopicMeta:
        meta = self.topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        return meta

    def effective_config(self, topic: str) -> LogConfig:
        return LogConfig.from_props(self._meta(topic).configs, self.broker_defaults)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        for meta in list(self.topics.values()):
            if meta.topic_id == topic_id:
                return meta
        return None

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
