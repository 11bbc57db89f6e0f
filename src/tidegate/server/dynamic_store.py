"""The two resources of Kafka's dynamic broker configs, kept durably.

Kafka keeps dynamic broker configs at two levels: the cluster default (the broker
resource named "", source DYNAMIC_DEFAULT_BROKER_CONFIG) and each broker's own (the
resource named by its id, source DYNAMIC_BROKER_CONFIG), a broker's own value winning.
`DynamicConfigs` holds both for this broker in `<log.dir>/tidegate-broker-configs.json`
as `{"default": {...}, "broker": {...}}`, written atomically (temporary file, fsync,
rename). A file from before this split (one flat object) reads as cluster defaults,
which is what its values were reported as.

`effective` is what the broker runs with: the cluster defaults overlaid by its own.
The KIP-966 cluster default `min.insync.replicas` is written at first start
(server/dynamic_config.py `activate_cluster_defaults`). Used from the event loop.

AlterConfigs of a broker resource goes through a `BrokerConfigStore`:
`LocalBrokerConfigs` here (the embedded broker: its own id or ""), or, in cluster
mode, ZooKeeper's `/config/brokers/<default>` and `/config/brokers/<id>`
(server/cluster/broker_configs.py), which every broker follows into its
`DynamicConfigs`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from tidegate.common.errors import InvalidConfigError, InvalidRequestError
from tidegate.server.dynamic_config import activate_cluster_defaults

__all__ = [
    "DYNAMIC_FILE",
    "BrokerConfigStore",
    "ConfigChange",
    "DynamicConfigs",
    "LocalBrokerConfigs",
]

ConfigChange = Callable[[dict[str, str]], dict[str, str]]
# apply(configs, per_broker): make `configs` one level of this broker's dynamic configs
Apply = Callable[[dict[str, str], bool], None]

DYNAMIC_FILE = "tidegate-broker-configs.json"


class DynamicConfigs:
    def __init__(self, log_dir: Path, static: dict[str, str]) -> None:
        self.path = log_dir / DYNAMIC_FILE
        default, broker = self._load()
        self.broker: dict[str, str] = broker  # this broker id's resource
        self.default: dict[str, str] = {}
        self.default = activate_cluster_defaults(
            default, static, lambda c: self._save(c, self.broker))

    @property
    def effective(self) -> dict[str, str]:
        return {**self.default, **self.broker}

    def replace(self, configs: dict[str, str], *, per_broker: bool) -> None:
        """Durably replace one resource's whole set (a broker id's, or the default's)."""
        default = self.default if per_broker else dict(configs)
        broker = dict(configs) if per_broker else self.broker
        self._save(default, broker)
        self.default, self.broker = default, broker

    def with_change(self, configs: dict[str, str], *, per_broker: bool) -> dict[str, str]:
        """What `effective` would be after `replace(configs, per_broker=...)`."""
        if per_broker:
            return {**self.default, **configs}
        return {**configs, **self.broker}

    def _load(self) -> tuple[dict[str, str], dict[str, str]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}, {}
        except (OSError, ValueError) as e:
            raise InvalidConfigError(f"cannot read dynamic broker configs {self.path}: {e}") from e
        if not isinstance(data, dict):
            raise InvalidConfigError(f"cannot read dynamic broker configs {self.path}: "
                                     "not a JSON object")
        if set(data) <= {"default", "broker"} and all(isinstance(v, dict) for v in data.values()):
            return _strings(data.get("default", {})), _strings(data.get("broker", {}))
        return _strings(data), {}  # the flat file of older versions: cluster defaults

    def _save(self, default: dict[str, str], broker: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"default": default, "broker": broker}, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


class BrokerConfigStore(Protocol):
    async def alter(self, resource: str, change: ConfigChange, *,
                    validate_only: bool) -> dict[str, str]:
        """Replace broker resource `resource`'s ("" or a broker id) dynamic configs with
        `change(current)` (which validates, raising a KafkaError to refuse); returns them."""
        ...


class LocalBrokerConfigs:
    """The embedded broker's: its own id or the cluster default, in its data directory."""

    def __init__(self, dynamic: DynamicConfigs, node_id: int, apply: Apply) -> None:
        self.dynamic = dynamic
        self.node_id = node_id
        self.apply = apply

    async def alter(self, resource: str, change: ConfigChange, *,
                    validate_only: bool) -> dict[str, str]:
        if resource not in ("", str(self.node_id)):
            raise InvalidRequestError(f"broker {resource} is not this broker ({self.node_id})")
        per_broker = resource != ""
        final = change(dict(self.dynamic.broker if per_broker else self.dynamic.default))
        if not validate_only:
            self.apply(final, per_broker)
        return final


def _strings(data: dict[object, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in data.items()}
