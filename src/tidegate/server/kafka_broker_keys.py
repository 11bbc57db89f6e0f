"""The broker configs Apache Kafka 4.1 knows that Tidegate has no spec for, by name.

Used by `server.dynamic_config` to answer AlterConfigs on a broker resource as Kafka
does: a key listed here is one of Kafka's read-only (static) configs, refused with
INVALID_REQUEST "Cannot update these configs dynamically"; a key neither Kafka nor
Tidegate knows is accepted, stored and used for nothing, as Kafka 4.1 does (and
described as Kafka describes a config it cannot type: sensitive, so without its value,
unless listed here and not among `KAFKA_PASSWORD_KEYS`).

Listed from Kafka 4.1.1's jars: `KafkaConfig.configDef().names()` less
`DynamicBrokerConfig.AllDynamicConfigs` less the keys Tidegate knows (`BROKER_KEYS`,
`dynamic_config.DYNAMIC_KEYS` and `SYNONYM_KEYS`: tests/unit/server/
test_unknown_broker_configs.py keeps the sets apart). Kafka's dynamic configs Tidegate
has no spec for (principal.builder.class, four remote.* keys) are not here: Kafka accepts
them, and so, unused, does Tidegate.
"""

from __future__ import annotations

__all__ = ["KAFKA_PASSWORD_KEYS", "KAFKA_STATIC_KEYS"]

KAFKA_STATIC_KEYS = frozenset({
    "add.partitions.to.txn.retry.backoff.max.ms", "add.partitions.to.txn.retry.backoff.ms",
    "alter.config.policy.class.name", "alter.log.dirs.replication.quota.window.num",
    "alter.log.dirs.replication.quota.window.size.seconds", "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms", "client.quota.callback.class",
    "connection.failed.authentication.delay.ms", "controller.listener.names",
    "controller.performance.always.log.threshold.ms",
    "controller.performance.sample.period.ms", "controller.quorum.append.linger.ms",
    "controller.quorum.bootstrap.servers", "controller.quorum.election.backoff.max.ms",
    "controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms",
    "controller.quorum.request.timeout.ms", "controller.quorum.retry.backoff.ms",
    "controller.quorum.voters", "controller.socket.timeout.ms",
    "create.topic.policy.class.name", "delegation.token.expiry.check.interval.ms",
    "delegation.token.expiry.time.ms", "delegation.token.max.lifetime.ms",
    "delegation.token.secret.key", "delete.records.purgatory.purge.interval.requests",
    "early.start.listeners", "fetch.purgatory.purge.interval.requests",
    "group.consumer.max.size", "group.consumer.regex.refresh.interval.ms",
    "group.coordinator.append.linger.ms", "group.coordinator.rebalance.protocols",
    "group.coordinator.threads", "group.share.assignors",
    "group.share.delivery.count.limit", "group.share.enable",
    "group.share.max.share.sessions", "group.share.max.size",
    "group.share.partition.max.record.locks", "group.share.persister.class.name",
    "group.streams.max.size", "initial.broker.registration.timeout.ms",
    "internal.metadata.delete.delay.millis", "internal.metadata.log.segment.bytes",
    "internal.metadata.max.batch.size.in.bytes",
    "internal.metadata.max.fetch.size.in.bytes", "kafka.metrics.polling.interval.secs",
    "kafka.metrics.reporters", "log.dir.failure.timeout.ms",
    "log.flush.start.offset.checkpoint.interval.ms", "log.initial.task.delay.ms",
    "max.request.partition.size.limit", "metadata.log.dir",
    "metadata.log.max.record.bytes.between.snapshots",
    "metadata.log.max.snapshot.interval.ms", "metadata.log.segment.bytes",
    "metadata.log.segment.ms", "metadata.max.idle.interval.ms",
    "metadata.max.retention.bytes", "metadata.max.retention.ms", "metrics.num.samples",
    "metrics.recording.level", "metrics.sample.window.ms",
    "num.replica.alter.log.dirs.threads", "offsets.commit.timeout.ms",
    "offsets.topic.compression.codec", "process.roles",
    "producer.purgatory.purge.interval.requests", "queued.max.request.bytes",
    "remote.log.manager.copy.quota.window.num",
    "remote.log.manager.copy.quota.window.size.seconds",
    "remote.log.manager.fetch.quota.window.num",
    "remote.log.manager.fetch.quota.window.size.seconds",
    "remote.log.manager.task.interval.ms", "remote.log.manager.task.retry.backoff.max.ms",
    "remote.log.manager.task.retry.backoff.ms", "remote.log.manager.task.retry.jitter",
    "remote.log.manager.thread.pool.size", "remote.log.metadata.custom.metadata.max.bytes",
    "remote.log.metadata.manager.class.name", "remote.log.metadata.manager.class.path",
    "remote.log.metadata.manager.impl.prefix", "remote.log.metadata.manager.listener.name",
    "remote.log.reader.max.pending.tasks", "remote.log.storage.manager.class.name",
    "remote.log.storage.manager.class.path", "remote.log.storage.manager.impl.prefix",
    "remote.log.storage.system.enable", "replica.fetch.response.max.bytes",
    "replica.socket.receive.buffer.bytes", "replica.socket.timeout.ms",
    "replication.quota.window.num", "replication.quota.window.size.seconds",
    "sasl.client.callback.handler.class", "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.max.ms",
    "sasl.login.retry.backoff.ms", "sasl.mechanism.controller.protocol",
    "sasl.oauthbearer.assertion.algorithm", "sasl.oauthbearer.assertion.claim.aud",
    "sasl.oauthbearer.assertion.claim.exp.seconds", "sasl.oauthbearer.assertion.claim.iss",
    "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds", "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.file", "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.template.file",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.jwt.retriever.class", "sasl.oauthbearer.jwt.validator.class",
    "sasl.oauthbearer.scope", "sasl.oauthbearer.token.endpoint.url",
    "sasl.server.max.receive.size", "security.inter.broker.protocol", "security.providers",
    "server.max.startup.time.ms", "share.coordinator.append.linger.ms",
    "share.coordinator.cold.partition.snapshot.interval.ms",
    "share.coordinator.load.buffer.size",
    "share.coordinator.snapshot.update.records.per.snapshot",
    "share.coordinator.state.topic.compression.codec",
    "share.coordinator.state.topic.min.isr", "share.coordinator.state.topic.num.partitions",
    "share.coordinator.state.topic.prune.interval.ms",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.segment.bytes", "share.coordinator.threads",
    "share.coordinator.write.timeout.ms", "share.fetch.purgatory.purge.interval.requests",
    "socket.connection.setup.timeout.max.ms", "socket.connection.setup.timeout.ms",
    "socket.listen.backlog.size", "socket.receive.buffer.bytes", "socket.send.buffer.bytes",
    "ssl.allow.dn.changes", "ssl.allow.san.changes", "unclean.leader.election.interval.ms",
    "unstable.api.versions.enable", "unstable.feature.versions.enable",
})

# Of those, Kafka's PASSWORD-typed ones (DescribeConfigs hides their values)
KAFKA_PASSWORD_KEYS = frozenset({
    "delegation.token.secret.key",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.client.credentials.client.secret",
})
