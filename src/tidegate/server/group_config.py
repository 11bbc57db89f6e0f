"""Kafka's group configs: the keys of a GROUP config resource (type 32), their
validation, and where the overrides are kept.

KIP-848 gave groups their own config resource: `consumer.session.timeout.ms`,
`share.record.lock.duration.ms`, `streams.num.standby.replicas`... `GROUP_CONFIG_KEYS`
is Kafka 4.1's `GroupConfig` (name, type, default, validator). A key's default is the
broker's `group.<protocol>.<key>` setting (Kafka's `extractGroupConfigMap`), and a
group's value must lie within the broker's `group.<protocol>.min/max.*` bounds, with the
session timeout above the heartbeat interval, each refused with Kafka's wording
(`INVALID_CONFIG`). A group need not exist to carry configs, and deleting a group keeps
them, as in Kafka (they live in the cluster metadata, not in the group's records).

Tidegate serves the classic group protocol (JoinGroup/SyncGroup), whose timeouts come
from the clients, so these values are validated, stored and described but do not change
how a group runs yet.

`GroupConfigStore` keeps the overrides of every group in
`<log.dirs>/tidegate-group-configs.json`, replaced atomically (write, fsync, rename),
so an acknowledged AlterConfigs survives a crash.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import InvalidConfigError, InvalidRequestError
from tidegate.storage.config_types import ConfigKey, ConfigType, ConfigValue, OneOf, Range

__all__ = [
    "GROUP_CONFIG_FILE",
    "GROUP_CONFIG_KEYS",
    "GroupConfigStore",
    "describe_group_configs",
    "effective_group_configs",
    "group_defaults",
    "validate_group_configs",
]

GROUP_CONFIG_FILE = "tidegate-group-configs.json"
_NOT_SERVED = " Stored and reported; Tidegate serves the classic group protocol only."


class _OffsetReset:
    """`latest`, `earliest` or `by_duration:<ISO-8601 duration>` (not negative), as
    Kafka's ShareGroupAutoOffsetResetStrategy.Validator."""

    _DURATION = re.compile(
        r"([-+]?)P(?:([-+]?\d+)D)?(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
        r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
        re.IGNORECASE,
    )

    def problem(self, value: ConfigValue) -> str | None:
        assert isinstance(value, str)
        if value in ("latest", "earliest"):
            return None
        if not value.startswith("by_duration:"):
            return (
                "The value must be either 'earliest', 'latest' or of the format "
                "'by_duration:<PnDTnHnMn.nS.>'."
            )
        text = value[len("by_duration:") :]
        m = self._DURATION.fullmatch(text)
        # Java's Duration.parse refuses "P", "PT" and a "T" with nothing after it.
        time_parts = [m.group(i) for i in (4, 5, 6)] if m else []
        if m is None or not (m.group(2) or any(time_parts)) or (m.group(3) and not any(time_parts)):
            return f"Text cannot be parsed to a Duration: {text}"
        seconds = float((m.group(6) or "0") + "." + (m.group(7) or "0"))
        total = int(m.group(2) or 0) * 86400 + int(m.group(4) or 0) * 3600
        total_s = total + int(m.group(5) or 0) * 60 + seconds
        if (-total_s if m.group(1) == "-" else total_s) < 0:
            return "Negative duration is not supported."
        return None

    def describe(self) -> str:
        return "[latest, earliest, by_duration:PnDTnHnMn.nS]"


def _int(name: str, default: int, low: int, doc: str) -> ConfigKey:
    return ConfigKey(name, ConfigType.INT, default, doc + _NOT_SERVED, Range(low))


_KEYS: tuple[ConfigKey, ...] = (
    _int("consumer.heartbeat.interval.ms", 5000, 1,
         "The heartbeat interval given to the members of a consumer group."),
    _int("consumer.session.timeout.ms", 45000, 1,
         "The timeout to detect client failures when using the consumer group protocol."),
    ConfigKey("share.auto.offset.reset", ConfigType.STRING, "latest",
              "The strategy to initialize the share-partition start offset: earliest, "
              "latest, or by_duration:<ISO-8601 duration> back from now." + _NOT_SERVED,
              _OffsetReset()),
    _int("share.heartbeat.interval.ms", 5000, 1,
         "The heartbeat interval given to the members of a share group."),
    ConfigKey("share.isolation.level", ConfigType.STRING, "read_uncommitted",
              "Whether a share group delivers only committed transactional records "
              "(read_committed) or all of them (read_uncommitted)." + _NOT_SERVED,
              OneOf(("read_committed", "read_uncommitted"))),
    _int("share.record.lock.duration.ms", 30000, 1000,
         "The record acquisition lock duration in milliseconds for share groups."),
    _int("share.session.timeout.ms", 45000, 1,
         "The timeout to detect client failures when using the share group protocol."),
    _int("streams.heartbeat.interval.ms", 5000, 1,
         "The heartbeat interval given to the members of a streams group."),
    _int("streams.num.standby.replicas", 0, 0,
         "The number of standby replicas for each task of a streams group."),
    _int("streams.session.timeout.ms", 45000, 1,
         "The timeout to detect client failures when using the streams group protocol."),
)  # fmt: skip

GROUP_CONFIG_KEYS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}

# group key -> (broker key of its default, broker key of its minimum, of its maximum);
# None where Kafka has no such bound. The broker keys are in common/config.py.
_BROKER_KEYS: dict[str, tuple[str, str | None, str | None]] = {
    "consumer.heartbeat.interval.ms": (
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    ),
    "consumer.session.timeout.ms": (
        "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    ),
    "share.heartbeat.interval.ms": (
        "group.share.heartbeat.interval.ms",
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
    ),
    "share.session.timeout.ms": (
        "group.share.session.timeout.ms",
        "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms",
    ),
    "share.record.lock.duration.ms": (
        "group.share.record.lock.duration.ms",
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
    ),
    "streams.heartbeat.interval.ms": (
        "group.streams.heartbeat.interval.ms",
        "group.streams.min.heartbeat.interval.ms",
        "group.streams.max.heartbeat.interval.ms",
    ),
    "streams.session.timeout.ms": (
        "group.streams.session.timeout.ms",
        "group.streams.min.session.timeout.ms",
        "group.streams.max.session.timeout.ms",
    ),
    "streams.num.standby.replicas": (
        "group.streams.num.standby.replicas",
        None,
        "group.streams.max.standby.replicas",
    ),
}

# Checked in Kafka's order: the bounds of each key, then session > heartbeat.
_BOUND_ORDER = (
    "consumer.heartbeat.interval.ms",
    "consumer.session.timeout.ms",
    "share.heartbeat.interval.ms",
    "share.session.timeout.ms",
    "share.record.lock.duration.ms",
    "streams.heartbeat.interval.ms",
    "streams.session.timeout.ms",
    "streams.num.standby.replicas",
)
_SESSION_ABOVE_HEARTBEAT = tuple(
    (f"{p}.session.timeout.ms", f"{p}.heartbeat.interval.ms")
    for p in ("consumer", "share", "streams")
)


def _broker_int(broker: BrokerConfig, key: str, fallback: int) -> int:
    value = broker.get_int(key)
    return fallback if value is None else value


def group_defaults(broker: BrokerConfig) -> dict[str, str]:
    """Every group key with the value a group without an override gets: the broker's
    `group.<protocol>.*` setting where Kafka has one, else Kafka's default."""
    out: dict[str, str] = {}
    for name, key in GROUP_CONFIG_KEYS.items():
        broker_key = _BROKER_KEYS.get(name, (None, None, None))[0]
        raw = broker.get(broker_key) if broker_key else ""
        out[name] = raw.strip() if raw.strip() else key.format(key.default)
    return out


def effective_group_configs(overrides: Mapping[str, str], broker: BrokerConfig) -> dict[str, str]:
    return {**group_defaults(broker), **overrides}


def validate_group_configs(group: str, configs: Mapping[str, str], broker: BrokerConfig) -> None:
    """Refuse a group's new set of overrides as Kafka's controller does: an empty group
    name is INVALID_REQUEST; an unknown key, a value of the wrong type or out of range,
    or one outside the broker's bounds is INVALID_CONFIG."""
    if not group:
        raise InvalidRequestError("Default group resources are not allowed.")
    for name in configs:
        if name not in GROUP_CONFIG_KEYS:
            raise InvalidConfigError(f"Unknown group config name: {name}")
    # Kafka validates the overrides merged over the broker-level defaults.
    values: dict[str, ConfigValue] = {}
    for name, raw in effective_group_configs(configs, broker).items():
        values[name] = GROUP_CONFIG_KEYS[name].parse(raw)
    for name in _BOUND_ORDER:
        value = values[name]
        assert isinstance(value, int)
        _default_key, low_key, high_key = _BROKER_KEYS[name]
        if low_key is not None and value < _broker_int(broker, low_key, -(1 << 31)):
            raise InvalidConfigError(f"{name} must be greater than or equal to {low_key}")
        if high_key is not None and value > _broker_int(broker, high_key, (1 << 31) - 1):
            raise InvalidConfigError(f"{name} must be less than or equal to {high_key}")
    for session, heartbeat in _SESSION_ABOVE_HEARTBEAT:
        s, h = values[session], values[heartbeat]
        assert isinstance(s, int) and isinstance(h, int)
        if s <= h:
            raise InvalidConfigError(f"{session} must be greater than {heartbeat}")


_GROUP_CONFIG, _DEFAULT_CONFIG = 8, 5  # DescribeConfigs config sources


def describe_group_configs(
    overrides: Mapping[str, str], broker: BrokerConfig
) -> list[dict[str, Any]]:
    """DescribeConfigs entries of a group with `overrides`, as Kafka's
    createGroupConfigEntry: every key, source GROUP_CONFIG for an override and
    DEFAULT_CONFIG otherwise (the broker's group.<protocol>.* value or Kafka's default),
    one synonym of the same source."""
    result = []
    for name, value in sorted(effective_group_configs(overrides, broker).items()):
        key = GROUP_CONFIG_KEYS[name]
        source = _GROUP_CONFIG if name in overrides else _DEFAULT_CONFIG
        result.append(
            {
                "name": name,
                "value": value,
                "read_only": False,
                "config_source": source,
                "is_sensitive": False,
                "synonyms": [{"name": name, "value": value, "source": source}],
                "config_type": int(key.type),
                "documentation": key.doc,
            }
        )
    return result


class GroupConfigStore:
    """The overrides of every group that has any, durable in one JSON file."""

    def __init__(self, log_dir: Path) -> None:
        self.path = log_dir / GROUP_CONFIG_FILE
        self._groups: dict[str, dict[str, str]] = self._load()
        # Held by the handler from reading a group's overrides to storing the new ones.
        self.lock = asyncio.Lock()

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise InvalidConfigError(f"cannot read group configs {self.path}: {e}") from e
        if not isinstance(data, dict):
            raise InvalidConfigError(f"cannot read group configs {self.path}: not an object")
        return {
            str(group): {str(k): str(v) for k, v in dict(cfg).items()}
            for group, cfg in data.items()
            if cfg
        }

    def get(self, group: str) -> dict[str, str]:
        return dict(self._groups.get(group, {}))

    def groups(self) -> list[str]:
        return sorted(self._groups)

    def set(self, group: str, configs: Mapping[str, str]) -> None:
        """Replace `group`'s overrides (none: forget the group) durably, then in memory.

        Blocking (write + fsync): call it from a worker thread, one call at a time."""
        new = {g: dict(c) for g, c in self._groups.items() if g != group}
        if configs:
            new[group] = dict(configs)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(new, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._groups = new
