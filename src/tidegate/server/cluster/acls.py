"""ACLs in ZooKeeper, in the layout Kafka's ZooKeeper-mode AclAuthorizer kept.

Each resource pattern's ACLs are one znode of Kafka's JSON
(`{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
"operation":"Read","host":"*"}]}`, common/acl.py):

- LITERAL: `/kafka-acl/<ResourceType>/<name>` (`/kafka-acl/Topic/orders`,
  `/kafka-acl/Cluster/kafka-cluster`);
- PREFIXED: `/kafka-acl-extended/prefixed/<ResourceType>/<name>`.

Writing (whichever broker receives CreateAcls / DeleteAcls): the resource's new entry
set goes to its znode conditionally on the version read (create if absent, delete when
empty), in one ZooKeeper multi with a sequential change notification —
`/kafka-acl-changes/acl_changes_<seq>` holding `Topic:orders` for a LITERAL pattern,
`/kafka-acl-extended-changes/acl_changes_<seq>` holding `{"version":1,"resourceType":
"Topic","name":"ord","patternType":"PREFIXED"}` for a PREFIXED one, as Kafka wrote them.
A lost race (another broker changed the same resource) re-reads and applies the change
again, so concurrent CreateAcls never lose an ACL. The writer applies the new set to its
own authorizer at once.

Applying (`ZkAclStore`'s watcher, on every broker): a watch on both change directories'
children; each new notification makes the broker re-read that one resource's znode and
replace its entries. A (re)connection re-reads every ACL, since notifications may have
been missed. Notifications older than 15 minutes are deleted by whichever broker sees
them (Kafka's `changeExpirationMs`). A znode Tidegate cannot parse is logged once and
read as no ACLs for that resource (Kafka logs and skips it too).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterable

from tidegate.common.acl import (
    RESOURCE_NAMES,
    AccessControlEntry,
    AclBinding,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
    resource_type_from_name,
)
from tidegate.common.acl_json import decode_zk_acls, encode_zk_acls
from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.replication.zk_ops import Create, Delete, SetData, ZkOp
from tidegate.server.cluster.config_changes import (
    ATTEMPTS,
    CHANGE_EXPIRATION_MS,
    WatchLoop,
    classify,
)
from tidegate.server.cluster.errors import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ZkError,
)
from tidegate.server.cluster.zk import ZkClient

__all__ = ["ZkAclStore", "acl_path", "change_data", "parse_change"]

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
_TIMEOUT_S = 30.0
_LOADED = object()  # queued by start(): the first pass skips what it loaded
_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
          ResourceType.TRANSACTIONAL_ID, ResourceType.DELEGATION_TOKEN, ResourceType.USER)


def acl_path(p: ResourcePattern) -> str:
    root = LITERAL_ROOT if p.pattern == PatternType.LITERAL else PREFIXED_ROOT
    return f"{root}/{RESOURCE_NAMES[p.type]}/{p.name}"


def change_data(p: ResourcePattern) -> tuple[str, bytes]:
    """(change directory, notification data) for a change of pattern `p`."""
    if p.pattern == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{RESOURCE_NAMES[p.type]}:{p.name}".encode()
    body = {"version": 1, "resourceType": RESOURCE_NAMES[p.type], "name": p.name,
            "patternType": p.pattern.name}
    return EXTENDED_CHANGES, json.dumps(body, separators=(",", ":")).encode()


def parse_change(directory: str, data: bytes) -> ResourcePattern | None:
    """The pattern a notification names (None if it is not one we can read)."""
    try:
        if directory == LITERAL_CHANGES:
            kind, _, name = data.decode().partition(":")
            rtype, ptype = resource_type_from_name(kind), PatternType.LITERAL
        else:
            raw = json.loads(data)
            rtype = resource_type_from_name(str(raw["resourceType"]))
            ptype, name = PatternType[str(raw["patternType"]).upper()], str(raw["name"])
    except (ValueError, KeyError, TypeError):
        return None
    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY) or ptype not in (
            PatternType.LITERAL, PatternType.PREFIXED) or not name:
        return None
    return ResourcePattern(rtype, name, ptype)


def _sequence(child: str) -> int | None:
    if not child.startswith(CHANGE_PREFIX):
        return None
    try:
        return int(child[len(CHANGE_PREFIX):])
    except ValueError:
        return None


class ZkAclStore(WatchLoop):
    """The AclStore of cluster mode (server/acl_store.py's interface)."""

    what = "ACLs"
    task_name = "acl-watcher"

    def __init__(self, zk: ZkClient, authorizer: Authorizer) -> None:
        super().__init__(zk)
        self.authorizer = authorizer
        self._last_seen: dict[str, int] = {LITERAL_CHANGES: -1, EXTENDED_CHANGES: -1}
        self._first = True  # the first pass only notes where the notifications end
        self._apply_lock = asyncio.Lock()  # one re-read at a time: no older read wins

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        for path in (LITERAL_ROOT, PREFIXED_ROOT, LITERAL_CHANGES, EXTENDED_CHANGES):
            await self.zk.ensure_path(path)
        await self._load_all()  # before the listener serves: no request sees no ACLs
        self.zk.subscribe(self._events)
        self._task = asyncio.create_task(self._run(), name=self.task_name)
        self._events.put_nowait(_LOADED)  # set the watches and skip what we loaded

    # -- writing ------------------------------------------------------------------------

    async def create(self, bindings: list[AclBinding]) -> None:
        await self._change(bindings, add=True)

    async def delete(self, bindings: list[AclBinding]) -> None:
        await self._change(bindings, add=False)

    async def _change(self, bindings: list[AclBinding], *, add: bool) -> None:
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, set()).add(b.entry)
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                for pattern, entries in by_pattern.items():
                    await self._update(pattern, entries, add)
        except ZkError as e:
            log.warning("changing ACLs in ZooKeeper failed: %s", e)
            raise KafkaError(f"ZooKeeper: {e}", code=ErrorCode.unknown_server_error) from e
        except TimeoutError:
            raise KafkaError("ZooKeeper did not answer in time",
                             code=ErrorCode.request_timed_out) from None

    async def _update(self, pattern: ResourcePattern, entries: set[AccessControlEntry],
                      add: bool) -> None:
        path = acl_path(pattern)
        parent = path.rsplit("/", 1)[0]
        await self.zk.ensure_path(parent)
        directory, note = change_data(pattern)
        for _ in range(ATTEMPTS):
            got = await self.zk.get_or_none(path)
            current = self._decode(path, got[0]) if got is not None else set()
            new = current | entries if add else current - entries
            if new == current:
                self._replace(pattern, new)
                return
            op: ZkOp
            if got is None:
                op = Create(path, encode_zk_acls(new))
            elif new:
                op = SetData(path, encode_zk_acls(new), got[1].version)
            else:
                op = Delete(path, got[1].version)
            try:
                await self.zk.transaction(
                    [op, Create(f"{directory}/{CHANGE_PREFIX}", note, sequence=True)])
            except (BadVersionError, NodeExistsError, NoNodeError) as e:
                if (e.path or "").startswith(directory):
                    raise
                log.info("ACLs of %s changed concurrently; re-reading", pattern)
                continue
            self._replace(pattern, new)
            return
        raise KafkaError(f"the ACLs of {pattern} kept changing concurrently; retry",
                         code=ErrorCode.request_timed_out)

    # -- reading ------------------------------------------------------------------------

    def _decode(self, path: str, data: bytes) -> set[AccessControlEntry]:
        try:
            return decode_zk_acls(data)
        except (ValueError, KeyError, TypeError) as e:
            self.say_once((path, data), f"{path}: cannot read its ACLs ({e}); treating it as none")
            return set()

    def _replace(self, pattern: ResourcePattern, entries: set[AccessControlEntry]) -> None:
        current = {b for b in self.authorizer.bindings() if b.pattern == pattern}
        self.authorizer.remove(current)
        self.authorizer.add(AclBinding(pattern, e) for e in entries)

    async def _read(self, pattern: ResourcePattern) -> set[AccessControlEntry]:
        path = acl_path(pattern)
        got = await self.zk.get_or_none(path)
        return set() if got is None else self._decode(path, got[0])

    async def _load_all(self) -> None:
        loaded: list[AclBinding] = []
        for root, ptype in ((LITERAL_ROOT, PatternType.LITERAL),
                            (PREFIXED_ROOT, PatternType.PREFIXED)):
            for type_name in await self.zk.get_children(root):
                rtype = resource_type_from_name(type_name)
                if rtype not in _TYPES:
                    continue
                try:
                    names = await self.zk.get_children(f"{root}/{type_name}")
                except NoNodeError:
                    continue
                for name in names:
                    pattern = ResourcePattern(rtype, name, ptype)
                    loaded += [AclBinding(pattern, e) for e in await self._read(pattern)]
        self.authorizer.replace(loaded)
        log.info("loaded %d ACLs from ZooKeeper", len(loaded))

    # -- the watcher --------------------------------------------------------------------

    async def handle(self, batch: list[object]) -> None:
        resync, changed = classify(batch)
        if not (resync or changed or _LOADED in batch):
            return
        async with self._apply_lock:
            if resync:
                await self._load_all()
            await self._pass(skip=self._first)
        self._first = False

    async def _pass(self, *, skip: bool) -> None:
        """Apply the notifications not seen yet (`skip`: only note where they end, after
        a full load), then purge the old ones."""
        for directory in (LITERAL_CHANGES, EXTENDED_CHANGES):
            children = await self.zk.get_children(
                directory, self.zk.watch(self._events, directory))
            seqs = sorted((s, c) for c in children if (s := _sequence(c)) is not None)
            for seq, child in seqs:
                if seq <= self._last_seen[directory] or skip:
                    continue
                try:
                    data, _stat = await self.zk.get(f"{directory}/{child}")
                except NoNodeError:
                    continue
                pattern = parse_change(directory, data)
                if pattern is None:
                    log.warning("%s/%s: not a change notification Tidegate reads; ignored",
                                directory, child)
                    continue
                self._replace(pattern, await self._read(pattern))
                log.info("ACLs of %s changed (from ZooKeeper)", pattern)
            if seqs:
                self._last_seen[directory] = max(self._last_seen[directory], seqs[-1][0])
            await self._purge(directory, (c for _s, c in seqs))

    async def _purge(self, directory: str, children: Iterable[str]) -> None:
        now = int(time.time() * 1000)  # compared with ZooKeeper's ctime, a wall clock
        for child in children:
            path = f"{directory}/{child}"
            stat = await self.zk.exists(path)
            if stat is None or now - stat.ctime_ms < CHANGE_EXPIRATION_MS:
                continue
            with contextlib.suppress(NoNodeError, NotEmptyError):
                await self.zk.delete(path)
