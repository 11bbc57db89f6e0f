"""SCRAM users in cluster mode, where Kafka's ZooKeeper-mode brokers kept them.

Layout (Kafka's `AdminZkClient.changeUserOrUserClientIdConfig` and `UserConfigHandler`):
`/config/users/<user, URL-encoded as Kafka's Sanitizer>` holds
`{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,
iterations=4096", "SCRAM-SHA-512": "...", ...}}`. The same znode holds the user's
client quotas (server/cluster/client_quotas.py): each side rewrites only its own keys
and keeps the others, and both write conditionally on the znode's version, so a quota
and a credential altered at once both survive.

Writing (`apply`, on whichever broker gets AlterUserScramCredentials): per user, the new
config and a `/config/changes/config_change_<seq>` notification naming `users/<user>`,
in one ZooKeeper multi conditional on the znode's version (retried after a concurrent
change). The broker that wrote applies the change to its memory at once.

Applying (the watcher every broker runs): a watch on `/config/changes`' children; a
notification naming `users/<user>` makes the broker re-read that user's credentials, so
a user created through one broker can log in on all within milliseconds. At start and
after a (re)connection every `/config/users` znode is read again. A credential that does
not parse is skipped, logged once. Purging old notifications is the topic config
watcher's job (topic_configs.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.scram import MECHANISMS, ScramCredential
from tidegate.replication.zk_ops import Create, SetData, ZkOp
from tidegate.replication.znodes import CONFIG_CHANGE_PREFIX, CONFIG_CHANGES, MalformedZnodeError
from tidegate.replication.znodes_admin import (
    config_change_sequence,
    decode_config_change,
    decode_entity_config,
    encode_config_change,
    encode_entity_config,
)
from tidegate.server.cluster.client_quotas import desanitize, sanitize
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

log = logging.getLogger(__name__)

_ATTEMPTS = 20
_TIMEOUT_S = 30.0
_RESYNC = object()
Users = dict[str, dict[str, ScramCredential]]


class ZkScramStore:
    """The ScramUsers of cluster mode (server/scram_store.py's interface)."""

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk
        self.users: Users = {}
        self.last_seen = -1
        self._lock = asyncio.Lock()
        self._events: asyncio.Queue[object] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._said: set[Hashable] = set()
        self.synced = asyncio.Event()

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    # -- writing ----------------------------------------------------------------------

    async def apply(
        self,
        upserts: list[tuple[str, str, ScramCredential]],
        deletions: list[tuple[str, str]],
    ) -> None:
        by_user: dict[str, dict[str, ScramCredential | None]] = {}
        for user, mech in deletions:
            by_user.setdefault(user, {})[mech] = None
        for user, mech, cred in upserts:
            by_user.setdefault(user, {})[mech] = cred
        try:
            async with asyncio.timeout(_TIMEOUT_S), self._lock:
                for user, changes in by_user.items():
                    await self._alter_one(user, changes)
        except ZkError as e:
            log.warning("altering SCRAM credentials failed: ZooKeeper: %s", e)
            raise KafkaError(f"altering SCRAM credentials failed: ZooKeeper: {e}",
                             code=ErrorCode.unknown_server_error) from e
        except TimeoutError:
            raise KafkaError("altering SCRAM credentials did not finish in time (ZooKeeper)",
                             code=ErrorCode.request_timed_out) from None

    async def _alter_one(self, user: str, changes: dict[str, ScramCredential | None]) -> None:
        rel = f"users/{sanitize(user)}"
        path = f"/config/{rel}"
        for _ in range(_ATTEMPTS):
            got = await self.zk.get_or_none(path)
            current: dict[str, str] = {}
            if got is not None:
                with contextlib.suppress(MalformedZnodeError):  # overwritten by a good one
                    current = decode_entity_config(got[0], path)
            new = dict(current)  # quota keys (and anything else) kept as they are
            for mech, cred in changes.items():
                if cred is None:
                    new.pop(mech, None)
                else:
                    new[mech] = cred.to_kafka()
            writes: list[ZkOp] = []
            if got is None:
                if await self.zk.exists("/config/users") is None:
                    writes.append(Create("/config/users"))
                writes.append(Create(path, encode_entity_config(new)))
            else:
                writes.append(SetData(path, encode_entity_config(new), got[1].version))
            writes.append(Create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                                 encode_config_change(rel), sequence=True))
            try:
                await self.zk.transaction(writes)
            except (BadVersionError, NodeExistsError, NoNodeError) as e:
                if (e.path or "").startswith(CONFIG_CHANGES):
                    raise  # /config/changes itself is missing: not a race
                log.info("SCRAM credentials of %s changed concurrently; re-reading", user)
                continue
            self._set(user, self._credentials(new, path))
            return
        raise KafkaError(f"the SCRAM credentials of {user} kept changing concurrently; retry",
                         code=ErrorCode.request_timed_out)

    def _set(self, user: str, creds: dict[str, ScramCredential]) -> None:
        if creds:
            self.users[user] = creds
        else:
            self.users.pop(user, None)

    def _credentials(self, config: dict[str, str], path: str) -> dict[str, ScramCredential]:
        out = {}
        for mech in MECHANISMS:
            text = config.get(mech)
            if text is None:
                continue
            try:
                out[mech] = ScramCredential.from_kafka(text)
            except ValueError as e:
                key = (path, mech, text)
                if key not in self._said:
                    self._said.add(key)
                    log.warning("%s: ignoring its %s credential: %s", path, mech, e)
        return out

    # -- applying ---------------------------------------------------------------------

    async def start(self) -> None:
        self.zk.subscribe(self._events)
        self._events.put_nowait(_RESYNC)
        self._task = asyncio.create_task(self._run(), name="scram-user-watcher")

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
                log.info("SCRAM users: ZooKeeper unavailable; re-reading when it is back")
            except ZkClosedError:
                return
            except Exception:
                log.exception("SCRAM users: update failed; re-reading everything soon")
                asyncio.get_running_loop().call_later(1.0, self._events.put_nowait, _RESYNC)

    async def _pass(self, resync: bool) -> None:
        children = await self.zk.get_children(CONFIG_CHANGES,
                                              self.zk.watch(self._events, "scram-changes"))
        seqs = sorted((s, c) for c in children if (s := config_change_sequence(c)) is not None)
        newest = seqs[-1][0] if seqs else self.last_seen
        if resync:
            users: Users = {}
            try:
                names = await self.zk.get_children("/config/users")
            except NoNodeError:
                names = []
            for segment in names:
                creds = await self._read(segment)
                if creds:
                    users[desanitize(segment)] = creds
            self.users = users
        else:
            for seq, child in seqs:
                if seq <= self.last_seen:
                    continue
                named = await self._notified(child)
                if named is not None:
                    user = desanitize(named)
                    self._set(user, await self._read(named))
                    log.info("SCRAM credentials of %s now %s (from ZooKeeper)", user,
                             sorted(self.users.get(user, {})) or "none")
        self.last_seen = max(self.last_seen, newest)

    async def _notified(self, child: str) -> str | None:
        """The user segment a notification names, or None (not `users/<user>`)."""
        try:
            data, _ = await self.zk.get(f"{CONFIG_CHANGES}/{child}")
            seg = decode_config_change(data).split("/")
        except (NoNodeError, MalformedZnodeError):
            return None  # purged meanwhile, or not ours to judge (the quota store logs it)
        return seg[1] if len(seg) == 2 and seg[0] == "users" else None

    async def _read(self, segment: str) -> dict[str, ScramCredential]:
        path = f"/config/users/{segment}"
        got = await self.zk.get_or_none(path)
        if got is None:
            return {}
        try:
            return self._credentials(decode_entity_config(got[0], path), path)
        except MalformedZnodeError as e:
            key = ("config", path, got[1].mzxid)
            if key not in self._said:
                self._said.add(key)
                log.warning("%s; ignoring it", e)
            return {}
