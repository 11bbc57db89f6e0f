"""The broker: the composition root that builds and holds the broker's parts.

Handlers receive the `Broker` and reach the parts they need through it: `metadata`
(server/metadata_view.py: brokers, topics, partition leaders), `replicas`
(server/replica_manager.py: the partitions hosted here, their high watermarks and
fetch wake-ups), the coordinators, producer ids and configs. Rules live in those parts,
not here; the few methods left here delegate to them for callers not yet moved.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from tidegate.common.clock import Clock, SystemClock
from tidegate.common.config import BrokerConfig
from tidegate.coordinator.producer_ids import ProducerIdManager
from tidegate.server.acl_store import AclStore, FileAclStore, authorizer_from_config
from tidegate.server.cluster_admin import ClusterAdmin, EmbeddedClusterAdmin
from tidegate.server.dynamic_store import BrokerConfigStore, DynamicConfigs, LocalBrokerConfigs
from tidegate.server.fetch_session import FetchSessionCache
from tidegate.server.group_config import GroupConfigStore
from tidegate.server.metadata_view import EmbeddedMetadata, MetadataView
from tidegate.server.metrics.requests import RequestMetrics
from tidegate.server.quotas.manager import QuotaManager
from tidegate.server.quotas.store import FileQuotaStore, QuotaStore
from tidegate.server.replica_manager import ReplicaManager
from tidegate.server.scram_store import ScramStore, ScramUsers
from tidegate.server.security import GuessDelays, build_runtimes
from tidegate.server.topic_admin import EmbeddedTopicAdmin, TopicAdmin
from tidegate.storage.config import LogConfig, topic_defaults_from_broker
from tidegate.storage.file_cache import FILES
from tidegate.storage.log import Log
from tidegate.storage.log_manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.node_id = config.node_id
        # KIP-966 cluster defaults (min.insync.replicas), as a Kafka 4.1+ controller writes
        # dynamic broker configs: the cluster default and this broker id's
        # (server/dynamic_store.py), with the KIP-966 cluster defaults of Kafka 4.1+
        self.dynamic = DynamicConfigs(config.log_dir, config.props)
        # where AlterConfigs of a broker resource goes (cluster: ZooKeeper, set by BrokerApp)
        self.broker_configs: BrokerConfigStore = LocalBrokerConfigs(
            self.dynamic, self.node_id, self.set_dynamic_configs)
        self.group_configs = GroupConfigStore(config.log_dir)  # GROUP config resources
        # SCRAM users and each listener's TLS/SASL requirements (server/security.py)
        # (cluster: ZooKeeper's /config/users, set by BrokerApp)
        self.scram_users: ScramUsers = ScramStore(config.log_dir)
        # client quotas (server/quotas/): the configs and rates; the file store (cluster:
        # ZooKeeper, set by BrokerApp)
        self.quotas = QuotaManager(
            config.get_int("quota.window.num", 11) or 11,
            1000 * (config.get_int("quota.window.size.seconds", 1) or 1),
            config.get_int("controller.quota.window.num", 11) or 11,
            1000 * (config.get_int("controller.quota.window.size.seconds", 1) or 1))
        self.quota_store: QuotaStore = FileQuotaStore(config.log_dir, self.quotas)
        self.guess_delays = GuessDelays()
        # ACLs (server/acl_store.py, server/authz.py): None when authorizer.class.name is
        # empty, and then every check is this one attribute test. Cluster mode: BrokerApp
        # swaps the file store for ZooKeeper's.
        self.authorizer = authorizer_from_config(config)
        self.acl_store: AclStore | None = (
            None if self.authorizer is None else FileAclStore(config.log_dir, self.authorizer))
        self.listener_security = build_runtimes(
            config.props, [lis.name for lis in config.listeners()], self.scram_users
        )
        self.log_defaults: LogConfig = topic_defaults_from_broker(
            {**config.props, **self.dynamic_configs}
        )
        # segment files held open by this process: an LRU bounded by log.max.open.files
        FILES.set_max_open(config.get_int("log.max.open.files", 0) or 0)
        self.logs = LogManager(
            config.log_dirs,
            self.log_defaults,
            self.clock,
            node_id=self.node_id,
            cluster_id=config.get("cluster.id") or None,
            cluster=bool(config.get("zookeeper.connect")),
            recovery_threads=config.get_int("num.recovery.threads.per.data.dir", 8) or 8,
        )
        self.metadata: MetadataView = EmbeddedMetadata(config, self.logs)
        # partitions hosted here, their high watermarks, fetch wake-ups
        self.replicas = ReplicaManager(self.logs, cluster=bool(config.get("zookeeper.connect")))
        # creating and deleting topics: the local topics file (cluster: ZooKeeper, set
        # by BrokerApp)
        self.topic_admin: TopicAdmin = EmbeddedTopicAdmin(self)
        # KIP-392: replica.selector.class (Kafka's RackAwareReplicaSelector) or none
        self.replica_selector = bool((config.get("replica.selector.class") or "").strip())
        # elections, reassignments, controlled shutdown (cluster: the controller's, set
        # by BrokerApp)
        self.cluster_admin: ClusterAdmin = EmbeddedClusterAdmin(self)
        self.group_commit = self.replicas.group_commit
        # many partitions to fsync at once: one syncfs per log dir (server/durability.py)
        self.group_commit.use_syncfs(
            config.log_dirs, config.get_int("log.flush.syncfs.threshold", 8) or 0)
        # KIP-227 fetch sessions (server/fetch_session.py)
        self.fetch_sessions = FetchSessionCache(
            config.get_int("max.incremental.fetch.session.cache.slots", 1000) or 0,
            config.get_int("min.incremental.fetch.session.eviction.ms", 120000) or 0)
        # request counters (server/metrics/requests.py): set by BrokerApp when the HTTP
        # listener is on; None costs the request path one attribute test
        self.request_metrics: RequestMetrics | None = None
        self.started_at = self.clock.monotonic()
        self._init_idempotence()
        self._init_group_coordinator()
        self._init_txn_coordinator()
        from tidegate.server.dispatch import default_dispatcher

        self.dispatcher = default_dispatcher()

    @property
    def cluster_id(self) -> str:
        return self.logs.cluster_id

    # -- lifecycle --------------------------------------------------------------------

    def load(self) -> None:
        self.logs.load(progress=lambda msg: log.info("%s", msg), freeze=True)
        self.replicas.load()

    def close(self) -> None:
        self.logs.close()
        self.group_commit.close()

    # -- durability and the high watermark: server/replica_manager.py ------------------
    # (kept here for callers not yet moved to `replicas.leader(...)` / `Partition`)

    def syncs_every_write(self, lg: Log) -> bool:
        return lg.syncs_every_write

    def after_append(self, topic: str, partition: int, lg: Log) -> None:
        """Called after each append: advance HW now, or once the data is fsynced."""
        part = self.replicas.partition(topic, partition)
        if part is not None and part.log is lg:
            self.replicas.after_append(part)

    async def wait_durable(self, lg: Log, offset: int) -> None:
        """Return once `lg` is durable up to `offset` and the high watermark covers it."""
        await self.replicas.wait_durable(lg, offset)

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout: float) -> None:
        """Sleep until one of `tps` gets new committed data, or `timeout` seconds."""
        await self.replicas.wait_for_data(tps, timeout)

    # -- dynamic broker configs -------------------------------------------------------

    @property
    def dynamic_configs(self) -> dict[str, str]:
        """The dynamic broker configs in force (this broker's over the cluster's)."""
        return self.dynamic.effective

    def validate_dynamic(self, configs: dict[str, str], per_broker: bool = False) -> LogConfig:
        """The topic defaults if one resource's dynamic configs became `configs`."""
        return topic_defaults_from_broker(
            {**self.config.props, **self.dynamic.with_change(configs, per_broker=per_broker)})

    def set_dynamic_configs(self, configs: dict[str, str], per_broker: bool = False) -> None:
        defaults = self.validate_dynamic(configs, per_broker)
        self.dynamic.replace(configs, per_broker=per_broker)
        self.log_defaults = defaults
        self.logs.set_broker_defaults(defaults)
        log.info("dynamic configs of %s now %s",
                 f"broker {self.node_id}" if per_broker else "the cluster default", configs)

    # -- topics ----------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.replicas.get_log(topic, partition)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> uuid.UUID:
        meta = self.logs.create_topic(name, partitions, configs)
        log.info("created topic %s with %d partitions", name, partitions)
        return meta.topic_id

    def delete_topic(self, name: str) -> None:
        meta = self.logs.topics.get(name)
        if meta is not None:
            self.replicas.forget_topic(name, meta.partitions)
        self.logs.delete_topic(name)
        self.group_coordinator.on_topic_deleted(name)  # its committed offsets go too
        log.info("deleted topic %s", name)

    def auto_create_enabled(self) -> bool:
        return self.config.get_bool("auto.create.topics.enable")

    def default_partitions(self) -> int:
        return self.config.get_int("num.partitions", 1) or 1

    # -- idempotent producers: producer ids and producer-state expiry -----------------

    def _init_idempotence(self) -> None:
        """Producer ids for InitProducerId, reserved in durable blocks in the log dir."""
        self.producer_ids = ProducerIdManager(self.config.log_dir / PRODUCER_ID_FILE)

    @property
    def producer_id_expiration_ms(self) -> int:
        value = self.config.get_int("producer.id.expiration.ms", 86400000)
        return 86400000 if value is None else value

    def expire_producers(self) -> int:
        """Forget, in every partition, producers idle for producer.id.expiration.ms
        (blocking; run it in a worker thread). Returns how many were removed."""
        now, expiration = self.clock.now_ms(), self.producer_id_expiration_ms
        removed = 0
        for topic, partition, lg in self.logs.logs():
            n = lg.remove_expired_producers(now, expiration)
            if n:
                log.info("%s-%d: expired %d idle producer ids", topic, partition, n)
            removed += n
        return removed

    # -- coordinators: groups (__consumer_offsets) and transactions (__transaction_state)

    def _init_group_coordinator(self) -> None:
        """The group coordinator; `BrokerApp` starts it (creates and replays
        __consumer_offsets) after the logs are loaded. See server/group_coordinator.py."""
        from tidegate.server.group_coordinator import GroupCoordinator

        self.group_coordinator = GroupCoordinator(self)

    def _init_txn_coordinator(self) -> None:
        """The transaction coordinator; `BrokerApp` starts it after the group coordinator
        (markers to __consumer_offsets go through that one). See
        server/txn_coordinator.py."""
        from tidegate.server.txn_coordinator import TransactionCoordinator

        self.txn_coordinator = TransactionCoordinator(self)


PRODUCER_ID_FILE = "tidegate-producer-ids"
