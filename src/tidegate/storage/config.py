"""Topic-level log configuration with Kafka's names, types, defaults and validators.

`TOPIC_CONFIG_KEYS` describes every key Kafka accepts on a topic (name, type, default,
doc, validator), so DescribeConfigs can list them and CreateTopics / AlterConfigs can
reject bad values with Kafka's wording. `LogConfig` is the typed, validated, immutable
result. `topic_defaults_from_broker` maps broker keys (`log.retention.hours`, ...) to
topic defaults the way Kafka's `LogConfig.extractLogConfigMap` does.

Invariants: a `LogConfig` instance always holds valid values (checked in
`__post_init__`); unknown keys and invalid values raise `InvalidConfigError` naming the
key and what is allowed. Keys Kafka accepts but Tidegate does not act on (replication,
tiered storage, preallocate, jitter) are accepted and stored so clients that set them
keep working. The keys Kafka 4 removed (`REMOVED_TOPIC_KEYS`) are unknown, as in Kafka
4.1: a request setting one is refused with "Unknown topic config name"; overrides an
older Tidegate release stored with them are dropped when read (`without_removed_keys`).

One deliberate default differs from Kafka: `flush.messages` is 1 (Kafka: Long.MAX_VALUE),
matching the broker's `log.flush.interval.messages=1`: a single node has no replicas to
fall back on, so acknowledged writes are fsynced (the server group-commits them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from tidegate.common.errors import InvalidConfigError
from tidegate.storage.config_types import (
    LONG_MAX,
    Anything,
    ConfigKey,
    ConfigType,
    ConfigValue,
    OneOf,
    Range,
    RangeOr,
)

__all__ = [
    "BROKER_SYNONYMS",
    "LONG_MAX",
    "REMOVED_TOPIC_KEYS",
    "TOPIC_CONFIG_KEYS",
    "ConfigKey",
    "ConfigType",
    "LogConfig",
    "topic_defaults_from_broker",
    "without_removed_keys",
]

_T = ConfigType
# Kafka 4 (KIP-1030): a CreateTime timestamp at most an hour ahead of the broker's clock
TIMESTAMP_AFTER_MAX_DEFAULT = 3_600_000
_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("cleanup.policy", _T.LIST, ("delete",),
              "delete (retention by time/size), compact (keep the latest value per key), "
              "or both.", OneOf(("compact", "delete"))),
    ConfigKey("compression.type", _T.STRING, "producer",
              "Codec of stored batches; producer keeps the producer's (Tidegate stores "
              "batches as produced).", OneOf(_COMPRESSION)),
    ConfigKey("compression.gzip.level", _T.INT, -1, "gzip level when recompressing.",
              RangeOr(1, 9, -1)),
    ConfigKey("compression.lz4.level", _T.INT, 9, "lz4 level when recompressing.",
              Range(1, 17)),
    ConfigKey("compression.zstd.level", _T.INT, 3, "zstd level when recompressing.",
              Range(-131072, 22)),
    ConfigKey("delete.retention.ms", _T.LONG, 86400000,
              "How long tombstones are kept after compaction first sees them.", Range(0)),
    ConfigKey("file.delete.delay.ms", _T.LONG, 60000,
              "Accepted; Tidegate deletes files at once (reads copy the bytes).", Range(0)),
    ConfigKey("flush.messages", _T.LONG, 1,
              "Records appended between fsyncs (Kafka: Long.MAX_VALUE; see module doc).",
              Range(1)),
    ConfigKey("flush.ms", _T.LONG, LONG_MAX, "Max ms data stays unflushed.", Range(0)),
    ConfigKey("follower.replication.throttled.replicas", _T.LIST, (),
              "Accepted; no replication throttling.", Anything()),
    ConfigKey("index.interval.bytes", _T.INT, 4096,
              "Bytes of log between offset index entries.", Range(0)),
    ConfigKey("leader.replication.throttled.replicas", _T.LIST, (),
              "Accepted; no replication throttling.", Anything()),
    ConfigKey("local.retention.bytes", _T.LONG, -2, "Accepted; no tiered storage.", Range(-2)),
    ConfigKey("local.retention.ms", _T.LONG, -2, "Accepted; no tiered storage.", Range(-2)),
    ConfigKey("max.compaction.lag.ms", _T.LONG, LONG_MAX,
              "Max time a record stays uncompacted.", Range(1)),
    ConfigKey("max.message.bytes", _T.INT, 1048588, "Largest record batch accepted.",
              Range(0)),
    ConfigKey("message.timestamp.after.max.ms", _T.LONG, TIMESTAMP_AFTER_MAX_DEFAULT,
              "How far in the future a CreateTime timestamp may be (Kafka 4's default: "
              "1 hour, KIP-1030).", Range(0)),
    ConfigKey("message.timestamp.before.max.ms", _T.LONG, LONG_MAX,
              "How far in the past a CreateTime timestamp may be.", Range(0)),
    ConfigKey("message.timestamp.type", _T.STRING, "CreateTime",
              "CreateTime keeps the producer's timestamps; LogAppendTime stamps the "
              "broker's time.", OneOf(("CreateTime", "LogAppendTime"))),
    ConfigKey("min.cleanable.dirty.ratio", _T.DOUBLE, 0.5,
              "Dirty share of the log that triggers compaction.", Range(0, 1)),
    ConfigKey("min.compaction.lag.ms", _T.LONG, 0,
              "Min time a record stays uncompacted.", Range(0)),
    ConfigKey("min.insync.replicas", _T.INT, 1, "Accepted; one replica.", Range(1)),
    ConfigKey("preallocate", _T.BOOLEAN, False, "Accepted; files grow as written.",
              Anything()),
    ConfigKey("remote.log.copy.disable", _T.BOOLEAN, False, "Accepted; no tiered storage.",
              Anything()),
    ConfigKey("remote.log.delete.on.disable", _T.BOOLEAN, False,
              "Accepted; no tiered storage.", Anything()),
    ConfigKey("remote.storage.enable", _T.BOOLEAN, False, "Accepted; no tiered storage.",
              Anything()),
    ConfigKey("retention.bytes", _T.LONG, -1,
              "Max log size before old segments are deleted; -1 = no limit.", Anything()),
    ConfigKey("retention.ms", _T.LONG, 604800000,
              "Max age of a segment's newest record before it is deleted; -1 = forever.",
              Range(-1)),
    ConfigKey("segment.bytes", _T.INT, 1073741824, "Segment file size before rolling.",
              Range(14)),
    ConfigKey("segment.index.bytes", _T.INT, 10485760,
              "Max size of a segment's offset and time index.", Range(4)),
    ConfigKey("segment.jitter.ms", _T.LONG, 0, "Accepted; rolls are not jittered.", Range(0)),
    ConfigKey("segment.ms", _T.LONG, 604800000,
              "Roll a segment this long after its first record.", Range(1)),
    ConfigKey("unclean.leader.election.enable", _T.BOOLEAN, False,
              "Accepted; one replica.", Anything()),
)

TOPIC_CONFIG_KEYS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}

# Topic keys Kafka 4.0 removed: message.format.version and message.downconversion.enable
# (KIP-724, with the old record formats), message.timestamp.difference.max.ms (KIP-937's
# deprecation; the before/after keys replace it). Kafka 4.1 refuses them as unknown
# (INVALID_CONFIG, "Unknown topic config name: ..."), per topic in CreateTopics and per
# resource in AlterConfigs / IncrementalAlterConfigs; so does Tidegate. Their broker
# keys (log.message.format.version, ...) are gone too: Kafka 4 ignores them as unknown.
REMOVED_TOPIC_KEYS = frozenset({
    "message.downconversion.enable",
    "message.format.version",
    "message.timestamp.difference.max.ms",
})


def without_removed_keys(configs: Mapping[str, str]) -> dict[str, str]:
    """Stored overrides without `REMOVED_TOPIC_KEYS` (an older Tidegate release accepted
    them): what a topic written then is read as now, rather than failing to load."""
    return {k: v for k, v in configs.items() if k not in REMOVED_TOPIC_KEYS}


def _name(key: ConfigKey) -> str:
    return key.name

_BY_ATTR: dict[str, ConfigKey] = {k.attr: k for k in _KEYS}


def _int(name: str) -> int:
    value = TOPIC_CONFIG_KEYS[name].default
    assert isinstance(value, int) and not isinstance(value, bool)
    return value


def _str(name: str) -> str:
    value = TOPIC_CONFIG_KEYS[name].default
    assert isinstance(value, str)
    return value


def _bool(name: str) -> bool:
    value = TOPIC_CONFIG_KEYS[name].default
    assert isinstance(value, bool)
    return value


def _float(name: str) -> float:
    value = TOPIC_CONFIG_KEYS[name].default
    assert isinstance(value, float)
    return value


def _list(name: str) -> tuple[str, ...]:
    value = TOPIC_CONFIG_KEYS[name].default
    assert isinstance(value, tuple)
    return value


@dataclass(frozen=True)
class LogConfig:
    """Validated topic configuration. Field = key with dots as underscores."""

    cleanup_policy: tuple[str, ...] = _list("cleanup.policy")
    compression_type: str = _str("compression.type")
    compression_gzip_level: int = _int("compression.gzip.level")
    compression_lz4_level: int = _int("compression.lz4.level")
    compression_zstd_level: int = _int("compression.zstd.level")
    delete_retention_ms: int = _int("delete.retention.ms")
    file_delete_delay_ms: int = _int("file.delete.delay.ms")
    flush_messages: int = _int("flush.messages")
    flush_ms: int = _int("flush.ms")
    follower_replication_throttled_replicas: tuple[str, ...] = _list(
        "follower.replication.throttled.replicas"
    )
    index_interval_bytes: int = _int("index.interval.bytes")
    leader_replication_throttled_replicas: tuple[str, ...] = _list(
        "leader.replication.throttled.replicas"
    )
    local_retention_bytes: int = _int("local.retention.bytes")
    local_retention_ms: int = _int("local.retention.ms")
    max_compaction_lag_ms: int = _int("max.compaction.lag.ms")
    max_message_bytes: int = _int("max.message.bytes")
    message_timestamp_after_max_ms: int = _int("message.timestamp.after.max.ms")
    message_timestamp_before_max_ms: int = _int("message.timestamp.before.max.ms")
    message_timestamp_type: str = _str("message.timestamp.type")
    min_cleanable_dirty_ratio: float = _float("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _int("min.compaction.lag.ms")
    min_insync_replicas: int = _int("min.insync.replicas")
    preallocate: bool = _bool("preallocate")
    remote_log_copy_disable: bool = _bool("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _bool("remote.log.delete.on.disable")
    remote_storage_enable: bool = _bool("remote.storage.enable")
    retention_bytes: int = _int("retention.bytes")
    retention_ms: int = _int("retention.ms")
    segment_bytes: int = _int("segment.bytes")
    segment_index_bytes: int = _int("segment.index.bytes")
    segment_jitter_ms: int = _int("segment.jitter.ms")
    segment_ms: int = _int("segment.ms")
    unclean_leader_election_enable: bool = _bool("unclean.leader.election.enable")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _BY_ATTR[f.name].check(getattr(self, f.name))
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                "Conflict topic config setting: min.compaction.lag.ms "
                f"({self.min_compaction_lag_ms}) > max.compaction.lag.ms "
                f"({self.max_compaction_lag_ms})"
            )

    @classmethod
    def from_props(
        cls, props: Mapping[str, str], defaults: LogConfig | None = None
    ) -> LogConfig:
        """`defaults` (or Kafka's defaults) overridden by topic-level `props`."""
        changes: dict[str, ConfigValue] = {}
        for name, raw in props.items():
            key = TOPIC_CONFIG_KEYS.get(name)
            if key is None:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
            changes[key.attr] = key.parse(raw)
        return dataclasses.replace(defaults or cls(), **changes)  # type: ignore[arg-type]

    def to_props(self) -> dict[str, str]:
        """Every key with its value as a string, sorted by name (for DescribeConfigs)."""
        return {k.name: k.format(getattr(self, k.attr)) for k in sorted(_KEYS, key=_name)}

    def value_of(self, name: str) -> str:
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
        return key.format(getattr(self, key.attr))

    # The derived values below are cached on first use (in the instance's __dict__, not
    # a field: eq, hash and `replace` ignore them): the append path reads them per
    # batch, and an instance never changes.

    @cached_property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @cached_property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @cached_property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    # Kafka 3.6-3.9 also applied the deprecated message.timestamp.difference.max.ms
    # when these two were unset; Kafka 4 removed it (and so did Tidegate), so the limits
    # are the two keys themselves.

    @property
    def timestamp_before_max_ms(self) -> int:
        """How far in the past a CreateTime timestamp may be."""
        return self.message_timestamp_before_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """How far in the future a CreateTime timestamp may be."""
        return self.message_timestamp_after_max_ms


# topic key -> broker keys in precedence order, each with a unit multiplier to ms.
BROKER_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "compression.type": (("compression.type", 1),),
    "compression.gzip.level": (("compression.gzip.level", 1),),
    "compression.lz4.level": (("compression.lz4.level", 1),),
    "compression.zstd.level": (("compression.zstd.level", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    # Kafka: log.flush.interval.ms, else log.flush.scheduler.interval.ms.
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "local.retention.bytes": (("log.local.retention.bytes", 1),),
    "local.retention.ms": (("log.local.retention.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "max.message.bytes": (("message.max.bytes", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "preallocate": (("log.preallocate", 1),),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ),
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
}


def topic_defaults_from_broker(props: Mapping[str, str]) -> LogConfig:
    """Topic defaults from broker properties; unrelated keys and empty values are ignored.

    For keys with several broker synonyms the first one set wins (`log.retention.ms`
    over `.minutes` over `.hours`), as in Kafka. A negative retention in minutes or
    hours means "forever" (-1).
    """
    changes: dict[str, ConfigValue] = {}
    for topic_key, synonyms in BROKER_SYNONYMS.items():
        key = TOPIC_CONFIG_KEYS[topic_key]
        for broker_key, factor in synonyms:
            raw = props.get(broker_key, "")
            if raw.strip() == "":
                continue
            if factor == 1:
                changes[key.attr] = key.parse(raw, source=broker_key)
            else:
                amount = ConfigKey(broker_key, _T.LONG, 0, "", Anything()).parse(raw)
                assert isinstance(amount, int)
                ms = -1 if amount < 0 else min(amount * factor, LONG_MAX)
                key.check(ms, source=broker_key)
                changes[key.attr] = ms
            break
    return dataclasses.replace(LogConfig(), **changes)  # type: ignore[arg-type]
