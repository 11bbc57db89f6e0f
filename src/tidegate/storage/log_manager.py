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

The class is built in layers, each a module of its own sharing the manager's state:
`log_manager_jobs.py` (`LogJobs`: looking logs up, retention, the cleaner, flushes and
the checkpoints), `log_manager_loading.py` (`LogLoading`: `load` and `close`), and this
module (the topics and the replicas: create, delete, alter). `jbod.py` is the base.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from tidegate.common.clock import Clock
from tidegate.common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tidegate.storage.config import TOPIC_CONFIG_KEYS, LogConfig
from tidegate.storage.disk_space import LogDirSpace
from tidegate.storage.errors import LogDirectoryError
from tidegate.storage.log import Log
from tidegate.storage.log_dirs import LogDirs
from tidegate.storage.log_manager_jobs import RECOVERY_CHECKPOINT, REPLICATION_CHECKPOINT
from tidegate.storage.log_manager_loading import META_PROPERTIES, LogLoading
from tidegate.storage.topics import (
    TopicMeta,
    collides,
    save_topics,
    validate_topic_name,
)

__all__ = [
    "META_PROPERTIES",
    "RECOVERY_CHECKPOINT",
    "REPLICATION_CHECKPOINT",
    "LogManager",
    "TopicMeta",
]


class LogManager(LogLoading):
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
        """Open (creating if needed) this broker's replica of `name`-`partition`."""
        return self.ensure_replicas(name, topic_id, partitions, [partition], configs)[0]

    def ensure_replicas(
        self, name: str, topic_id: uuid.UUID, partitions: int, indexes: Sequence[int],
        configs: Mapping[str, str],
    ) -> list[Log]:
        """Open (creating if needed) this broker's replicas of `name`'s partitions
        `indexes`, in that order. The topics file is written once and the new logs open
        side by side (`_open_all`, as for CreateTopics): a new `__consumer_offsets`
        brings a broker 50 replicas at once, each mostly fsyncs.

        The topic's metadata here follows ZooKeeper's: a different topic id means the
        topic was deleted and re-created while this broker was away, so the old
        replicas go (`remove_replica`) before the new ones open."""
        with self._lock:
            meta = self.topics.get(name)
            if meta is not None and meta.topic_id != topic_id:
                for p in list(meta.local_partitions()):
                    self._drop_log(name, p)
                del self.topics[name]
                meta = None
            hosted = frozenset() if meta is None or meta.hosted is None else meta.hosted
            new = TopicMeta(name, topic_id, max(partitions, meta.partitions if meta else 0),
                            dict(configs), hosted | frozenset(indexes))
            if new != meta:
                self.topics[name] = new
                save_topics(self.log_dir, self.topics)
            cfg = self.effective_config(name)
            missing = [p for p in dict.fromkeys(indexes) if (name, p) not in self._logs]
            if meta is not None and meta.configs != new.configs:
                for p in new.local_partitions():
                    other = self._logs.get((name, p))
                    if other is not None:
                        other.update_config(cfg)
            for p in missing:
                self.dirs.place((name, p))
            self._open_all([(new, p, cfg, None) for p in missing])
            return [self._logs[(name, p)] for p in indexes]

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
