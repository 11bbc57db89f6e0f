"""Client quotas in cluster mode, Kafka's ZooKeeper way (`AdminZkClient.changeClientIdConfig`
/ `changeUserOrUserClientIdConfig` and the brokers' `ClientIdConfigHandler` /
`UserConfigHandler`).

Layout, as Kafka's ZooKeeper-mode brokers kept it: `/config/users/<user>`,
`/config/users/<user>/clients/<client-id>` and `/config/clients/<client-id>` hold
`{"version":1,"config":{"producer_byte_rate":"1048576",...}}`, with `<default>` for a
default and names URL-encoded (Kafka's `Sanitizer`), so no real name can read as
`<default>`. A user's znode may hold other keys (SCRAM credentials, in Kafka): they
are kept as they are and ignored here.

Writing (`ZkQuotaStore.alter`, on whichever broker gets AlterClientQuotas): the entity's
new config together with a `/config/changes/config_change_<seq>` notification naming
`users/<user>/clients/<client>` (or `clients/<c>`, `users/<u>`), in one ZooKeeper multi
conditional on the config znode's version (missing parents are created in it): two
brokers altering one entity at once re-read and re-apply rather than lose a change.

Applying (`ZkQuotaStore` runs the watcher): a watch on `/config/changes`' children; a
new notification naming a quota entity makes every broker re-read that entity's znode
into its QuotaManager, typically within milliseconds. At start and after a
(re)connection, when notifications may have been missed, every quota znode is read
again. Purging old notifications is left to the topic config watcher
(topic_configs.py), which purges every kind. A znode with a value that is not a number
is skipped, logged once.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Sequence

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.replication.znodes import MalformedZnodeError
from tidegate.replication.znodes_admin import decode_entity_config
from tidegate.server.cluster.config_changes import ConfigChangeWatcher, alter_entity_config
from tidegate.server.cluster.errors import NoNodeError, ZkError
from tidegate.server.cluster.zk import ZkClient
from tidegate.server.quotas.entities import CLIENT_ID, QUOTA_KEYS, USER, Entity, make_entity
from tidegate.server.quotas.manager import QuotaManager, Quotas
from tidegate.server.quotas.store import Change

__all__ = ["ZkQuotaStore", "entity_znode", "sanitize"]

log = logging.getLogger(__name__)

DEFAULT = "<default>"
_TIMEOUT_S = 30.0


def sanitize(name: str) -> str:
    """Kafka's `Sanitizer.sanitize`: URL-encoding as Java's URLEncoder, with `*` and
    `~` encoded too, so that `<default>` and path separators cannot be forged."""
    return urllib.parse.quote(name, safe="-_.").replace("~", "%7E")


def desanitize(text: str) -> str:
    return urllib.parse.unquote(text)


def entity_znode(entity: Entity) -> str:
    """The entity's path below /config (`users/alice/clients/<default>`)."""
    parts = dict(entity)
    out = []
    if USER in parts:
        user = parts[USER]
        out += ["users", DEFAULT if user is None else sanitize(user)]
    if CLIENT_ID in parts:
        client = parts[CLIENT_ID]
        out += ["clients", DEFAULT if client is None else sanitize(client)]
    return "/".join(out)


def _name(segment: str) -> str | None:
    return None if segment == DEFAULT else desanitize(segment)


def _entity_of(path: str) -> Entity | None:
    """The entity a notification's entity_path names (None: not a quota entity)."""
    seg = path.split("/")
    try:
        if len(seg) == 2 and seg[0] == "clients":
            return make_entity([(CLIENT_ID, _name(seg[1]))])
        if len(seg) == 2 and seg[0] == "users":
            return make_entity([(USER, _name(seg[1]))])
        if len(seg) == 4 and seg[0] == "users" and seg[2] == "clients":
            return make_entity([(USER, _name(seg[1])), (CLIENT_ID, _name(seg[3]))])
    except ValueError:
        return None
    return None


def _format(key: str, value: float) -> str:
    return str(int(value)) if QUOTA_KEYS[key] else repr(float(value))


class ZkQuotaStore(ConfigChangeWatcher):
    """The cluster's quota store and this broker's watcher of it (module docstring)."""

    what = "client quotas"
    task_name = "client-quota-watcher"

    def __init__(self, zk: ZkClient, manager: QuotaManager) -> None:
        super().__init__(zk)
        self.manager = manager
        self._lock = asyncio.Lock()  # one alter or re-read at a time: no older read wins

    # -- writing ----------------------------------------------------------------------

    async def alter(self, changes: Sequence[Change]) -> None:
        try:
            async with asyncio.timeout(_TIMEOUT_S), self._lock:
                for entity, ops in changes:
                    await self._alter_one(entity, ops)
        except ZkError as e:
            log.warning("altering client quotas failed: ZooKeeper: %s", e)
            raise KafkaError(f"altering client quotas failed: ZooKeeper: {e}",
                             code=ErrorCode.unknown_server_error) from e
        except TimeoutError:
            raise KafkaError("altering client quotas did not finish in time (ZooKeeper)",
                             code=ErrorCode.request_timed_out) from None

    async def _alter_one(self, entity: Entity, ops: Sequence[tuple[str, float, bool]]) -> None:
        rel = entity_znode(entity)
        new: dict[str, float] = {}

        def change(current: dict[str, str]) -> dict[str, str]:
            nonlocal new
            new = QuotaManager.altered(self._quotas_of(current, f"/config/{rel}"), ops)
            keep = {k: v for k, v in current.items() if k not in QUOTA_KEYS}
            return {**keep, **{k: _format(k, v) for k, v in new.items()}}

        await alter_entity_config(self.zk, rel, change, what=f"the client quotas of {rel}")
        self.manager.set_entity(entity, new)

    def _quotas_of(self, config: dict[str, str], path: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, value in config.items():
            if key not in QUOTA_KEYS:
                continue
            try:
                out[key] = float(value)
            except ValueError:
                self.say_once((path, key, value),
                              f"{path}: ignoring {key}={value!r} (not a number)")
        return out

    # -- applying ---------------------------------------------------------------------

    async def changes_pass(self, resync: bool) -> None:
        async with self._lock:
            await super().changes_pass(resync)

    async def reload_all(self) -> None:
        self.manager.replace(await self._read_all())

    async def apply_changes(self, entity_paths: Sequence[str]) -> None:
        for rel in entity_paths:
            entity = _entity_of(rel)
            if entity is not None:
                self.manager.set_entity(entity, await self._read(entity))
                log.info("client quotas of %s now %s (from ZooKeeper)",
                         entity_znode(entity), self.manager.quotas.get(entity) or "none")

    async def _read(self, entity: Entity) -> dict[str, float]:
        path = f"/config/{entity_znode(entity)}"
        got = await self.zk.get_or_none(path)
        if got is None:
            return {}
        try:
            return self._quotas_of(decode_entity_config(got[0], path), path)
        except MalformedZnodeError as e:
            self.say_once(("config", path, got[1].mzxid), f"{e}; ignoring it")
            return {}

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.zk.get_children(path)
        except NoNodeError:
            return []

    async def _read_all(self) -> Quotas:
        entities: list[Entity] = []
        for c in await self._children("/config/clients"):
            entities.append(make_entity([(CLIENT_ID, _name(c))]))
        for u in await self._children("/config/users"):
            entities.append(make_entity([(USER, _name(u))]))
            for c in await self._children(f"/config/users/{u}/clients"):
                entities.append(make_entity([(USER, _name(u)), (CLIENT_ID, _name(c))]))
        out: Quotas = {}
        for entity in entities:
            configs = await self._read(entity)
            if configs:
                out[entity] = configs
        return out
