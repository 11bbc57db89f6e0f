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
import logging
from collections.abc import Sequence

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.scram import MECHANISMS, ScramCredential
from tidegate.replication.znodes import MalformedZnodeError
from tidegate.replication.znodes_admin import decode_entity_config
from tidegate.server.cluster.client_quotas import desanitize, sanitize
from tidegate.server.cluster.config_changes import ConfigChangeWatcher, alter_entity_config
from tidegate.server.cluster.errors import NoNodeError, ZkError
from tidegate.server.cluster.zk import ZkClient

log = logging.getLogger(__name__)

_TIMEOUT_S = 30.0
Users = dict[str, dict[str, ScramCredential]]


class ZkScramStore(ConfigChangeWatcher):
    """The ScramUsers of cluster mode (server/scram_store.py's interface)."""

    what = "SCRAM users"
    task_name = "scram-user-watcher"

    def __init__(self, zk: ZkClient) -> None:
        super().__init__(zk)
        self.users: Users = {}
        self._lock = asyncio.Lock()  # one alter or re-read at a time: no older read wins

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

        def change(current: dict[str, str]) -> dict[str, str]:
            new = dict(current)  # quota keys (and anything else) kept as they are
            for mech, cred in changes.items():
                if cred is None:
                    new.pop(mech, None)
                else:
                    new[mech] = cred.to_kafka()
            return new

        new = await alter_entity_config(self.zk, rel, change,
                                        what=f"the SCRAM credentials of {user}")
        self._set(user, self._credentials(new, f"/config/{rel}"))

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
                self.say_once((path, mech, text), f"{path}: ignoring its {mech} credential: {e}")
        return out

    # -- applying ---------------------------------------------------------------------

    async def changes_pass(self, resync: bool) -> None:
        async with self._lock:
            await super().changes_pass(resync)

    async def reload_all(self) -> None:
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

    async def apply_changes(self, entity_paths: Sequence[str]) -> None:
        for rel in entity_paths:
            seg = rel.split("/")
            if len(seg) != 2 or seg[0] != "users":
                continue  # not a user's config (or a user's client quota)
            user = desanitize(seg[1])
            self._set(user, await self._read(seg[1]))
            log.info("SCRAM credentials of %s now %s (from ZooKeeper)", user,
                     sorted(self.users.get(user, {})) or "none")

    async def _read(self, segment: str) -> dict[str, ScramCredential]:
        path = f"/config/users/{segment}"
        got = await self.zk.get_or_none(path)
        if got is None:
            return {}
        try:
            return self._credentials(decode_entity_config(got[0], path), path)
        except MalformedZnodeError as e:
            self.say_once(("config", path, got[1].mzxid), f"{e}; ignoring it")
            return {}
