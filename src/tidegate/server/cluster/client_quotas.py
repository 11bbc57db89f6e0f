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
import contextlib
import logging
import urllib.parse
from collections.abc import Hashable, Sequence

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.replication.zk_ops import Create, SetData, ZkOp
from tidegate.replication.znodes import CONFIG_CHANGE_PREFIX, CONFIG_CHANGES, MalformedZnodeError
from tidegate.replication.znodes_admin import (
    config_change_sequence,
    decode_config_change,
    decode_entity_config,
    encode_config_change,
    encode_entity_config,
)
from tidegate.server.cluster.errors import (
    BadVersionError,
    ConnectionLossError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    ZkClosedError,
    ZkError,
)
from tidegate.server.cluster.zk import SessionEvent, SessionState, WatchEvent, ZkClient
from tidegate.server.quotas.entities import CLIENT_ID, QUOTA_KEYS, USER, Entity, make_entity
from tidegate.server.quotas.manager import QuotaManager, Quotas
from tidegate.server.quotas.store import Change

__all__ = ["ZkQuotaStore", "entity_znode", "sanitize"]

log = logging.getLogger(__name__)

DEFAULT = "<default>"
_ATTEMPTS = 20
_TIMEOUT_S = 30.0
_RESYNC = object()


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


class ZkQuotaStore:
    """The cluster's quota store and this broker's watcher of it (module docstring)."""

    def __init__(self, zk: ZkClient, manager: QuotaManager) -> None:
        self.zk = zk
        self.manager = manager
        self.last_seen = -1
        self._lock = asyncio.Lock()
        self._events: asyncio.Queue[object] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._said: set[Hashable] = set()
        self.synced = asyncio.Event()

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
        path = f"/config/{rel}"
        for _ in range(_ATTEMPTS):
            got = await self.zk.get_or_none(path)
            current: dict[str, str] = {}
            if got is not None:
                with contextlib.suppress(MalformedZnodeError):  # overwritten by a good one
                    current = decode_entity_config(got[0], path)
            quotas = self._quotas_of(current, path)
            new = QuotaManager.altered(quotas, ops)
            keep = {k: v for k, v in current.items() if k not in QUOTA_KEYS}
            data = encode_entity_config({**keep, **{k: _format(k, v) for k, v in new.items()}})
            writes: list[ZkOp] = []
            if got is None:
                writes += [Create(p) for p in await self._missing_parents(rel)]
                writes.append(Create(path, data))
            else:
                writes.append(SetData(path, data, got[1].version))
            writes.append(Create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                                 encode_config_change(rel), sequence=True))
            try:
                await self.zk.transaction(writes)
            except (BadVersionError, NodeExistsError, NoNodeError) as e:
                if (e.path or "").startswith(CONFIG_CHANGES):
                    raise  # /config/changes itself is missing: not a race
                log.info("client quotas of %s changed concurrently; re-reading", rel)
                continue
            self.manager.set_entity(entity, new)
            return
        raise KafkaError(f"the client quotas of {rel} kept changing concurrently; retry",
                         code=ErrorCode.request_timed_out)

    async def _missing_parents(self, rel: str) -> list[str]:
        seg = rel.split("/")
        out = []
        for i in range(2, len(seg), 1):  # /config/users/<u>, /config/users/<u>/clients
            parent = "/config/" + "/".join(seg[:i])
            if await self.zk.exists(parent) is None:
                out.append(parent)
        return out

    def _quotas_of(self, config: dict[str, str], path: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, value in config.items():
            if key not in QUOTA_KEYS:
                continue
            try:
                out[key] = float(value)
            except ValueError:
                self._say_once((path, key, value),
                               f"{path}: ignoring {key}={value!r} (not a number)")
        return out

    def _say_once(self, key: Hashable, msg: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", msg)

    # -- applying ---------------------------------------------------------------------

    async def start(self) -> None:
        self.zk.subscribe(self._events)
        self._events.put_nowait(_RESYNC)
        self._task = asyncio.create_task(self._run(), name="client-quota-watcher")

    async def stop(self) -> None:
        self.zk.unsubscribe(self._events)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            batch = [await self._events.get()]
            while not self._events.empty():
                batch.append(self._events.get_nowait())
            resync = any(e is _RESYNC or (isinstance(e, SessionEvent)
                                          and e.state is SessionState.CONNECTED) for e in batch)
            changed = any(isinstance(e, WatchEvent) and e.kind != "none" for e in batch)
            if not (resync or changed):
                continue
            try:
                async with self._lock:
                    await self._pass(resync)
                self.synced.set()
            except (ConnectionLossError, SessionExpiredError):
                log.info("client quotas: ZooKeeper unavailable; re-reading when it is back")
            except ZkClosedError:
                return
            except Exception:
                log.exception("client quotas: update failed; re-reading everything soon")
                asyncio.get_running_loop().call_later(1.0, self._events.put_nowait, _RESYNC)

    async def _pass(self, resync: bool) -> None:
        children = await self.zk.get_children(CONFIG_CHANGES,
                                              self.zk.watch(self._events, "quota-changes"))
        seqs = sorted((s, c) for c in children if (s := config_change_sequence(c)) is not None)
        newest = seqs[-1][0] if seqs else self.last_seen
        if resync:
            self.manager.replace(await self._read_all())
        else:
            for seq, child in seqs:
                if seq <= self.last_seen:
                    continue
                entity = await self._notified(child)
                if entity is not None:
                    self.manager.set_entity(entity, await self._read(entity))
                    log.info("client quotas of %s now %s (from ZooKeeper)",
                             entity_znode(entity), self.manager.quotas.get(entity) or "none")
        self.last_seen = max(self.last_seen, newest)

    async def _notified(self, child: str) -> Entity | None:
        try:
            data, _ = await self.zk.get(f"{CONFIG_CHANGES}/{child}")
            return _entity_of(decode_config_change(data))
        except NoNodeError:
            return None  # purged meanwhile
        except MalformedZnodeError as e:
            self._say_once(("notification", child), f"{CONFIG_CHANGES}/{child}: {e}")
            return None

    async def _read(self, entity: Entity) -> dict[str, float]:
        path = f"/config/{entity_znode(entity)}"
        got = await self.zk.get_or_none(path)
        if got is None:
            return {}
        try:
            return self._quotas_of(decode_entity_config(got[0], path), path)
        except MalformedZnodeError as e:
            self._say_once(("config", path, got[1].mzxid), f"{e}; ignoring it")
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
