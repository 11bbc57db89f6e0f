"""The broker's configuration keys: `BROKER_KEYS`, each with Kafka's name, its default,
its type and a line of documentation, and `CLUSTER_DEFAULTS`, the defaults that become
Kafka's in cluster mode.

Where a single-node default differs from Kafka's it says why next to the key. Parsing,
precedence and validation are `config.py`'s (`BrokerConfig`), which re-exports
`BROKER_KEYS`.
"""

from __future__ import annotations

from tidegate.common.security_config import SECURITY_KEYS

__all__ = ["BROKER_KEYS", "CLUSTER_DEFAULTS"]


def _group_protocol_keys() -> dict[str, tuple[str, str, str]]:
    """Kafka's `group.consumer.*`, `group.share.*` and `group.streams.*` settings: the
    defaults of the group configs (KIP-848, server/group_config.py) and the bounds a
    group's own value must lie within. The `group.consumer.*` session timeout, heartbeat
    interval and assignors drive KIP-848 consumer groups (coordinator/group/consumer.py;
    per-group overrides are not applied yet); share and streams groups are not served,
    their keys only default and bound the configs of GROUP resources."""
    out: dict[str, tuple[str, str, str]] = {}
    for proto in ("consumer", "share", "streams"):
        for what, default, low, high in (
            ("session.timeout.ms", "45000", "45000", "60000"),
            ("heartbeat.interval.ms", "5000", "5000", "15000"),
        ):
            key = f"group.{proto}.{what}"
            group_key = f"{proto}.{what}"
            out[key] = (default, "int", f"Default of the group config {group_key}.")
            out[f"group.{proto}.min.{what}"] = (low, "int", f"Smallest {group_key} allowed.")
            out[f"group.{proto}.max.{what}"] = (high, "int", f"Largest {group_key} allowed.")
    out["group.consumer.assignors"] = (
        "uniform,range", "list",
        "Server-side assignors of consumer-protocol groups; the first is the default.")
    out["group.consumer.migration.policy"] = (
        "bidirectional", "str",
        "Online upgrade of a classic group when a consumer-protocol member joins "
        "(upgrade), downgrade when the last one leaves (downgrade), both "
        "(bidirectional) or neither (disabled).")
    lock = "share.record.lock.duration.ms"
    out["group.share.record.lock.duration.ms"] = ("30000", "int", f"Default of {lock}.")
    out["group.share.min.record.lock.duration.ms"] = ("15000", "int", f"Smallest {lock}.")
    out["group.share.max.record.lock.duration.ms"] = ("60000", "int", f"Largest {lock}.")
    standby = "streams.num.standby.replicas"
    out["group.streams.num.standby.replicas"] = ("0", "int", f"Default of {standby}.")
    out["group.streams.max.standby.replicas"] = ("2", "int", f"Largest {standby}.")
    return out


_GROUP_PROTOCOL_KEYS = _group_protocol_keys()

# key -> (default, type, doc). Types: int, bool, str, list.
BROKER_KEYS: dict[str, tuple[str, str, str]] = {
    "node.id": ("1", "int", "This broker's id (Kafka requires it; a single node uses 1)."),
    "broker.id": (
        "-1",
        "int",
        "Kafka's ZooKeeper-mode name of node.id: the same id (set either one; both only if "
        "equal). Each broker of a cluster needs its own.",
    ),
    "listeners": (
        "PLAINTEXT://127.0.0.1:9092",
        "list",
        "Where to bind. Kafka binds all interfaces (PLAINTEXT://:9092); an embedded "
        "development broker binds loopback only.",
    ),
    "advertised.listeners": (
        "",
        "list",
        "Addresses handed to clients in Metadata; defaults to listeners.",
    ),
    "listener.security.protocol.map": (
        ",".join(f"{p}:{p}" for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
        "list",
        "Security protocol of each listener name (NAME:PROTOCOL pairs): PLAINTEXT, SSL, "
        "SASL_PLAINTEXT or SASL_SSL. A secure listener without the settings it needs "
        "stops the broker at start (docs/security.md).",
    ),
    **SECURITY_KEYS,  # TLS and SASL (common/security_config.py, docs/security.md)
    "log.dirs": (
        "./tidegate-data",
        "list",
        "Data directory (Kafka: /tmp/kafka-logs; ours survives reboots). Several, "
        "comma-separated, spread partitions over them (JBOD, docs/broker.md). Each is "
        "locked by one broker at a time (<dir>/.lock).",
    ),
    "log.dir": ("", "str", "Used when log.dirs is unset."),
    "num.partitions": ("1", "int", "Partitions of an auto-created topic."),
    "default.replication.factor": ("1", "int", "Replication factor of auto-created topics."),
    "auto.create.topics.enable": ("true", "bool", "Create topics on Metadata/Produce requests."),
    "delete.topic.enable": ("true", "bool", "Allow DeleteTopics."),
    "socket.request.max.bytes": ("104857600", "int", "Largest request frame accepted."),
    "message.max.bytes": ("1048588", "int", "Largest record batch (topic: max.message.bytes)."),
    "log.flush.interval.messages": (
        "1",
        "int",
        "Records written before an fsync. Kafka's default is Long.MAX_VALUE (it relies on "
        "replicas); a single node has none, so every acknowledged write is fsynced (with "
        "group commit). Set higher to trade durability for latency.",
    ),
    "log.flush.interval.ms": ("", "int", "Max ms before unflushed data is fsynced."),
    "log.flush.scheduler.interval.ms": ("1000", "int", "How often the flush scheduler runs."),
    "log.retention.check.interval.ms": ("300000", "int", "How often retention runs."),
    "log.flush.syncfs.threshold": (
        "8",
        "int",
        "Tidegate-specific: when at least this many partitions need an fsync at the same "
        "moment, group commit makes them durable with one syncfs(2) per log directory "
        "instead of an fsync each (1,000 partitions: ~5 ms against ~100 ms). syncfs "
        "also writes back whatever else is dirty on that file system: keep log.dirs on "
        "volumes of their own. 0 turns it off; off where syncfs cannot report a lost "
        "write (not Linux, or Linux before 5.8).",
    ),
    "log.flush.offset.checkpoint.interval.ms": (
        "60000",
        "int",
        "How often each partition's flushed offset is checkpointed, bounding how much a "
        "restart after a crash must re-validate.",
    ),
    "log.dir.free.space.warn.bytes": (
        "1073741824",
        "int",
        "Tidegate-specific: warn in the log, and in `tidegate topics describe`, when the "
        "log directory's volume has less free space than this (bytes; 0 disables).",
    ),
    "log.dir.free.space.check.interval.ms": (
        "30000",
        "int",
        "Tidegate-specific: how often the free space of the log directory is checked.",
    ),
    "log.max.open.files": (
        "0",
        "int",
        "Tidegate-specific: most segment files (.log, .index, .timeindex) held open at "
        "once; the least recently used is closed and reopened at its next use. Kafka keeps "
        "every one open (3 per segment); 0 = half the process's open-files limit "
        "(ulimit -n), so partitions x segments never exhaust it.",
    ),
    "num.recovery.threads.per.data.dir": (
        "8",
        "int",
        "Partitions opened (and recovered after a crash) at once at start, and created at "
        "once by CreateTopics. Kafka's default is 2; opening a partition here is mostly "
        "fsyncs, which overlap well, so Tidegate uses 8.",
    ),
    "log.cleaner.enable": ("true", "bool", "Run the log cleaner for compacted topics."),
    "log.cleaner.backoff.ms": ("15000", "int", "Sleep between cleaner passes."),
    "fetch.max.bytes": ("57671680", "int", "Largest fetch response."),
    "max.incremental.fetch.session.cache.slots": (
        "1000", "int",
        "Fetch sessions (KIP-227) the broker keeps; 0 answers every fetch in full."),
    "min.incremental.fetch.session.eviction.ms": (
        "120000", "int",
        "A fetch session unused for this long may be evicted for a new one."),
    "connections.max.idle.ms": ("600000", "int", "Close idle connections after this."),
    "queued.max.requests": ("500", "int", "In-flight requests per connection before reads pause."),
    # client quotas (server/quotas/): rates are measured over quota.window.num samples
    "quota.window.num": ("11", "int", "Samples kept for client quota rates."),
    "quota.window.size.seconds": ("1", "int", "Time span of each client quota sample."),
    "controller.quota.window.num": ("11", "int", "Samples for controller_mutation_rate."),
    "controller.quota.window.size.seconds": ("1", "int", "Span of each mutation sample."),
    "cluster.id": ("", "str", "Cluster id; generated at first start and kept in meta.properties."),
    "broker.rack": ("", "str", "Rack of this broker."),
    "replica.selector.class": (
        "",
        "str",
        "KIP-392 fetch from the closest replica: "
        "org.apache.kafka.common.replica.RackAwareReplicaSelector points consumers that "
        "set client.rack to an in-sync replica in their rack. Empty: consumers read from "
        "leaders (a follower still serves a v11+ consumer that asks it).",
    ),
    "offsets.topic.num.partitions": (
        "50",
        "int",
        "Partitions of __consumer_offsets (Kafka's default; creating and replaying 50 "
        "empty partitions at start takes well under a second, so an embedded node keeps "
        "it). Fixed once the topic exists.",
    ),
    # -- cluster mode (ZooKeeper) ---------------------------------------------------------
    "zookeeper.connect": (
        "",
        "str",
        "ZooKeeper ensemble of a cluster, host:port[,host:port...][/chroot] (the chroot "
        "is created if missing). Empty: one embedded broker, no cluster code runs.",
    ),
    "zookeeper.session.timeout.ms": (
        "18000",
        "int",
        "ZooKeeper session timeout: a broker silent this long loses its registration "
        "and its leaderships.",
    ),
    "zookeeper.connection.timeout.ms": (
        "",
        "int",
        "How long to wait for ZooKeeper at start before giving up; unset: "
        "zookeeper.session.timeout.ms.",
    ),
    "replica.lag.time.max.ms": (
        "30000",
        "int",
        "A follower that has not caught up with the leader's log end for this long "
        "leaves the ISR.",
    ),
    "auto.leader.rebalance.enable": (
        "true",
        "bool",
        "Move leadership back to each partition's preferred replica when it is in sync.",
    ),
    "leader.imbalance.check.interval.seconds": (
        "300",
        "int",
        "How often the controller checks for partitions not led by their preferred replica.",
    ),
    "leader.imbalance.per.broker.percentage": (
        "10",
        "int",
        "Share of a broker's partitions not led by it (as preferred replica) above which "
        "the controller moves leadership back.",
    ),
    "controlled.shutdown.enable": (
        "true",
        "bool",
        "On SIGTERM, ask the controller to move this broker's leaderships away first.",
    ),
    "controlled.shutdown.max.retries": ("3", "int", "Attempts of a controlled shutdown."),
    "controlled.shutdown.retry.backoff.ms": (
        "5000",
        "int",
        "Wait between controlled shutdown attempts.",
    ),
    "authorizer.class.name": (
        "",
        "str",
        "The authorizer: empty (no ACLs checked), or Tidegate's built-in ACL authorizer under "
        "Kafka's names kafka.security.authorizer.AclAuthorizer or "
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer (docs/security.md).",
    ),
    "super.users": (
        "",
        "str",
        "Principals allowed everything, separated by semicolons (User:admin;User:broker).",
    ),
    "allow.everyone.if.no.acl.found": (
        "false",
        "bool",
        "With the authorizer on: allow a resource no ACL applies to (Kafka's default false).",
    ),
    "inter.broker.listener.name": (
        "",
        "str",
        "Listener the brokers use to reach each other (follower fetches); unset: the "
        "listener named PLAINTEXT.",
    ),
    "replica.fetch.max.bytes": (
        "1048576",
        "int",
        "Bytes a follower asks for per partition in one fetch (a larger first batch is "
        "still returned whole).",
    ),
    "replica.fetch.wait.max.ms": (
        "500",
        "int",
        "How long a follower's fetch waits at the leader for replica.fetch.min.bytes.",
    ),
    "replica.fetch.min.bytes": ("1", "int", "Bytes a follower's fetch waits for."),
    "replica.fetch.backoff.ms": ("1000", "int", "Pause after a failed follower fetch."),
    "request.timeout.ms": (
        "30000",
        "int",
        "How long a broker waits for another broker's answer (transaction markers, KIP-890 "
        "verification), and WriteTxnMarkers for the in-sync replicas.",
    ),
    "replica.high.watermark.checkpoint.interval.ms": (
        "5000",
        "int",
        "How often high watermarks are written to replication-offset-checkpoint.",
    ),
    # -- group coordinator ----------------------------------------------------
    "offsets.topic.segment.bytes": ("104857600", "int", "segment.bytes of __consumer_offsets."),
    "offsets.topic.replication.factor": (
        "1",
        "int",
        "Replicas of __consumer_offsets (Kafka: 3; a single node keeps one). In cluster "
        "mode (zookeeper.connect set) the default is Kafka's 3.",
    ),
    "offsets.load.buffer.size": (
        "5242880",
        "int",
        "Bytes read at a time when replaying __consumer_offsets at start.",
    ),
    "offsets.retention.minutes": (
        "10080",
        "int",
        "Committed offsets of a group expire this long after it became Empty (or after "
        "the commit, for groups that only store offsets). 0 expires them at the next check.",
    ),
    "offsets.retention.check.interval.ms": ("600000", "int", "How often offsets expire."),
    "offset.metadata.max.bytes": ("4096", "int", "Largest metadata string of a commit."),
    "group.min.session.timeout.ms": ("6000", "int", "Smallest session.timeout.ms accepted."),
    "group.max.session.timeout.ms": ("1800000", "int", "Largest session.timeout.ms accepted."),
    "group.initial.rebalance.delay.ms": (
        "3000",
        "int",
        "How long the first rebalance of an empty group waits for more members to join.",
    ),
    "group.max.size": ("2147483647", "int", "Most members a group may have."),
    **_GROUP_PROTOCOL_KEYS,
    # -- transaction coordinator --------------------------------------------------------
    "transaction.state.log.num.partitions": (
        "50",
        "int",
        "Partitions of __transaction_state (Kafka's default). Fixed once the topic exists.",
    ),
    "transaction.state.log.segment.bytes": (
        "104857600",
        "int",
        "segment.bytes of __transaction_state.",
    ),
    "transaction.state.log.replication.factor": (
        "1",
        "int",
        "Replicas of __transaction_state (Kafka: 3; a single node keeps one, so a "
        "development broker never hangs in init_transactions waiting for replicas). In "
        "cluster mode (zookeeper.connect set) the default is Kafka's 3.",
    ),
    "transaction.state.log.min.isr": (
        "1",
        "int",
        "min.insync.replicas of __transaction_state (Kafka: 2; a single node has one). "
        "In cluster mode (zookeeper.connect set) the default is Kafka's 2.",
    ),
    "transaction.state.log.load.buffer.size": (
        "5242880",
        "int",
        "Bytes read at a time when replaying __transaction_state at start.",
    ),
    "transaction.max.timeout.ms": (
        "900000",
        "int",
        "Largest transaction.timeout.ms a producer may ask for (15 min).",
    ),
    "transactional.id.expiration.ms": (
        "604800000",
        "int",
        "A transactional id idle this long (no transaction in progress) is forgotten (7 days).",
    ),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "10000",
        "int",
        "How often transactions past their timeout are looked for and aborted.",
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "3600000",
        "int",
        "How often expired transactional ids are removed.",
    ),
    "transaction.hanging.check.interval.ms": (
        "60000",
        "int",
        "Tidegate setting: how often partitions' open transactions are compared with the "
        "coordinator's, logging hanging transactions (open longer than "
        "transaction.max.timeout.ms in a partition, unknown to the coordinator).",
    ),
    # Kafka's default is false; Tidegate's is true because its exactly-once Spark sink
    # and check-back helper need KIP-939 (README, "Defaults that differ from Kafka's").
    "transaction.two.phase.commit.enable": (
        "true",
        "bool",
        "Allow InitProducerId with enable_2pc (KIP-939): prepared transactions that are "
        "exempt from the timeout and completed by a later process (list and abort them "
        "with `tidegate txn`). Tidegate's default is true (Kafka's: false).",
    ),
    "producer.id.expiration.ms": (
        "86400000",
        "int",
        "How long a partition keeps an idle producer id's de-duplication state after its "
        "last write (KIP-854).",
    ),
    "producer.id.expiration.check.interval.ms": (
        "600000",
        "int",
        "How often expired producer ids are removed.",
    ),
    # -- observability (server/metrics/, docs/observability.md) -----------------------
    "http.listeners": (
        "http://127.0.0.1:9644",
        "list",
        "Tidegate's HTTP listener (/metrics, /healthz, /readyz, the web console); empty "
        "turns it off. Kafka has none; 9644 is Redpanda's admin API port.",
    ),
    "console.read.only": (
        "false",
        "bool",
        "The web console on the HTTP listener shows but never changes (no create, delete, "
        "abort or offset reset).",
    ),
    "telemetry.max.bytes": (
        "1048576",
        "int",
        "KIP-714: largest metrics payload a client may push (PushTelemetry).",
    ),
    "client.metrics.push.interval.ms": (
        "30000",
        "int",
        "KIP-714: how often clients push their metrics (Kafka sets it per subscription).",
    ),
    "client.metrics.prefixes": (
        "*",
        "list",
        "KIP-714: metric name prefixes clients are asked to push (* or empty: all).",
    ),
    "client.metrics.max.series": (
        "1000",
        "int",
        "KIP-714: series kept per client instance; the rest of a push is dropped.",
    ),
    "client.metrics.max.clients": (
        "1000",
        "int",
        "KIP-714: client instances kept; pushes from more get THROTTLING_QUOTA_EXCEEDED.",
    ),
}

# Defaults that become Kafka's in cluster mode (zookeeper.connect set), where there are
# replicas to use; the single-node values above stay for the embedded broker.
CLUSTER_DEFAULTS: dict[str, str] = {
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}
