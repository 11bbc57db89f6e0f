"""Dynamic broker configs in cluster mode, Kafka's ZooKeeper way (`AdminZkClient`'s
`changeBrokerConfig` and the brokers' `BrokerConfigHandler`).

Layout: `/config/brokers/<default>` holds the cluster default (the broker resource "")
and `/config/brokers/<id>` one broker's own, each `{"version":1,"config":{...}}`.

Writing (`ZkBrokerConfigs.alter`, on whichever broker receives AlterConfigs or
IncrementalAlterConfigs, for any broker id, as Kafka's ZooKeeper-mode brokers accept):
the resource's new set and a `/config/changes` notification naming
`brokers/<default>` or `brokers/<id>`, conditionally on the znode's version
(server/cluster/config_changes.py). A change of its own resources applies on the
writing broker at once.

Applying (the watcher every broker runs): a notification naming `brokers/<default>`
or this broker's id makes it re-read that znode into its `DynamicConfigs`
(server/dynamic_store.py), which keeps a copy in the data directory and moves the topic
defaults. At start and after a (re)connection both znodes are read again. A value that
does not parse is left out, logged once, and the rest applies.

The KIP-966 cluster default `min.insync.replicas` belongs in `/config/brokers/<default>`:
the first broker to start writes it there (from its local first-start value) if it is
missing, so every broker reports it alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from tidegate.common.errors import ErrorCode, InvalidRequestError, KafkaError
from tidegate.replication.znodes import MalformedZnodeError
from tidegate.replication.znodes_admin import decode_entity_config
from tidegate.server.cluster.config_changes import ConfigChangeWatcher, alter_entity_config
from tidegate.server.cluster.errors import ZkError
from tidegate.server.cluster.zk import ZkClient
from tidegate.server.dynamic_config import ELR_CLUSTER_KEYS, is_unknown, parse_dynamic
from tidegate.server.dynamic_store import ConfigChange, DynamicConfigs

__all__ = ["ZkBrokerConfigs", "broker_config_entity"]

log = logging.getLogger(__name__)

DEFAULT = "<default>"
_TIMEOUT_S = 30.0


def broker_config_entity(resource: str) -> str:
    """The entity path of broker resource `resource` ("" or a broker id)."""
    if resource == "":
        return f"brokers/{DEFAULT}"
    if not resource.isdigit():
        raise InvalidRequestError(f"broker resource {resource!r} is not a broker id")
    return f"brokers/{int(resource)}"


class ZkBrokerConfigs(ConfigChangeWatcher):
    """The BrokerConfigStore of cluster mode, and the watcher applying it (module
    docstring). `apply(configs, per_broker)` sets one level of this broker's configs."""

    what = "dynamic broker configs"
    task_name = "broker-config-watcher"

    def __init__(self, zk: ZkClient, node_id: int, dynamic: DynamicConfigs,
                 apply: Callable[[dict[str, str], bool], None]) -> None:
        super().__init__(zk)
        self.node_id = node_id
        self.dynamic = dynamic
        self.apply = apply
        self._lock = asyncio.Lock()  # one write or re-read at a time: no older read wins

    # -- writing ----------------------------------------------------------------------

    async def alter(self, resource: str, change: ConfigChange, *,
                    validate_only: bool) -> dict[str, str]:
        rel = broker_config_entity(resource)
        what = f"the dynamic configs of {rel}"
        try:
            async with asyncio.timeout(_TIMEOUT_S), self._lock:
                new = await alter_entity_config(self.zk, rel, change, what=what,
                                                validate_only=validate_only)
                if not validate_only:
                    self._apply_local(rel, new)
                return new
        except ZkError as e:
            log.warning("altering %s failed: ZooKeeper: %s", what, e)
            raise KafkaError(f"altering {what} failed: ZooKeeper: {e}",
                             code=ErrorCode.unknown_server_error) from e
        except TimeoutError:
            raise KafkaError(f"altering {what} did not finish in time (ZooKeeper)",
                             code=ErrorCode.request_timed_out) from None

    # -- applying ---------------------------------------------------------------------

    async def changes_pass(self, resync: bool) -> None:
        async with self._lock:
            await super().changes_pass(resync)

    async def reload_all(self) -> None:
        await self._ensure_cluster_defaults()
        for rel in (f"brokers/{DEFAULT}", f"brokers/{self.node_id}"):
            self._apply_local(rel, await self._read(rel))

    async def apply_changes(self, entity_paths: Sequence[str]) -> None:
        ours = (f"brokers/{DEFAULT}", f"brokers/{self.node_id}")
        for rel in dict.fromkeys(p for p in entity_paths if p in ours):
            self._apply_local(rel, await self._read(rel))

    def _apply_local(self, rel: str, configs: dict[str, str]) -> None:
        per_broker = rel != f"brokers/{DEFAULT}"
        if per_broker and rel != f"brokers/{self.node_id}":
            return  # another broker's own
        current = self.dynamic.broker if per_broker else self.dynamic.default
        if configs == current:
            return
        try:
            self.apply(configs, per_broker)
        except (KafkaError, ValueError) as e:
            self.say_once(("apply", rel, tuple(sorted(configs.items()))),
                          f"/config/{rel}: cannot apply {configs}: {e}; keeping the current ones")
            return
        log.info("dynamic configs of %s now %s (from ZooKeeper)", rel, configs)

    async def _read(self, rel: str) -> dict[str, str]:
        path = f"/config/{rel}"
        got = await self.zk.get_or_none(path)
        if got is None:
            return {}
        try:
            raw = decode_entity_config(got[0], path)
        except MalformedZnodeError as e:
            self.say_once(("config", path, got[1].mzxid), f"{e}; ignoring it")
            return {}
        out = {}
        for key, value in raw.items():
            try:
                parse_dynamic(key, value)
            except KeyError:
                if not is_unknown(key):  # a static key of Kafka's or Tidegate's
                    self.say_once((path, key),
                                  f"{path}: ignoring {key} (not a dynamic broker config)")
                    continue
                # a key nobody knows: kept and described (sensitive), used for nothing,
                # as the embedded broker and Kafka 4.1 keep it
            except (KafkaError, ValueError) as e:
                self.say_once((path, key, value), f"{path}: ignoring {key}={value!r}: {e}")
                continue
            out[key] = value
        return out

    async def _ensure_cluster_defaults(self) -> None:
        """KIP-966: the cluster default min.insync.replicas in ZooKeeper (module docstring)."""
        local = {k: v for k, v in self.dynamic.default.items() if k in ELR_CLUSTER_KEYS}
        current = await self._read(f"brokers/{DEFAULT}")
        if all(k in current for k in local):
            return

        def add_missing(cur: dict[str, str]) -> dict[str, str]:
            return {**local, **cur}

        await alter_entity_config(self.zk, f"brokers/{DEFAULT}", add_missing,
                                  what="the cluster-default broker configs")
        log.info("wrote the cluster-level defaults %s to ZooKeeper (KIP-966)", local)
