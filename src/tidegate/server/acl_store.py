"""Where ACLs live, behind one narrow interface (`AclStore`), and how the authorizer is
built from the broker's configs.

The authorizer (common/acl.py) decides from memory; a store makes changes durable and
then applies them to that memory, on this broker and (cluster mode) on every other one:

- single node (`FileAclStore`): `<log dir>/__acls.json`, one object per resource
  pattern with Kafka's ZooKeeper JSON for its ACLs. A change is written to a temporary
  file, fsynced and renamed over the old one (then the directory is fsynced), off the
  event loop, so a crash leaves the old set or the new one, never half of one.
- cluster mode (`zookeeper.connect` set): server/cluster/acls.py keeps them in ZooKeeper
  as Kafka's AclAuthorizer did, and every broker applies a change on its notification.

`authorizer.class.name` turns authorization on: Kafka's AclAuthorizer (and its older
SimpleAclAuthorizer) and StandardAuthorizer class names are accepted, as is
`tidegate.security.Authorizer`; anything else stops the start (Kafka fails on a class
it cannot load). Empty (the default) means no authorizer: every principal may do
everything, and the ACL admin APIs answer SECURITY_DISABLED.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Protocol

from tidegate.common.acl import (
    AclBinding,
    Authorizer,
    parse_super_users,
)
from tidegate.common.acl_json import bindings_from_json, bindings_to_json
from tidegate.common.config import BrokerConfig
from tidegate.common.errors import InvalidConfigError
from tidegate.common.listeners import parse_protocol_map

__all__ = ["AUTHORIZER_CLASSES", "AclStore", "FileAclStore", "authorizer_from_config"]

log = logging.getLogger(__name__)

FILE_NAME = "__acls.json"

AUTHORIZER_CLASSES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "tidegate.security.Authorizer",
})


def authorizer_from_config(config: BrokerConfig) -> Authorizer | None:
    """The authorizer `authorizer.class.name` asks for, or None when it is empty."""
    name = config.get("authorizer.class.name").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASSES:
        raise InvalidConfigError(
            f"authorizer.class.name={name!r}: Tidegate's authorizer answers to "
            + ", ".join(sorted(AUTHORIZER_CLASSES)))
    supers = parse_super_users(config.get("super.users"))
    _warn_inter_broker(config, supers)
    return Authorizer(supers, allow_if_no_acl=config.get_bool("allow.everyone.if.no.acl.found"))


def _warn_inter_broker(config: BrokerConfig, supers: frozenset[str]) -> None:
    """Brokers reach each other without SASL, so on a PLAINTEXT inter-broker listener
    they are User:ANONYMOUS and need CLUSTER_ACTION (Kafka: put the brokers' principal in
    super.users). Say so at start rather than let replication fail quietly."""
    if not config.cluster_mode or "User:ANONYMOUS" in supers:
        return
    name = config.get("inter.broker.listener.name") or config.advertised_listeners()[0].name
    protocol = parse_protocol_map(config.get("listener.security.protocol.map")).get(name, name)
    if protocol == "PLAINTEXT":
        log.warning("authorizer on, and the brokers reach each other on PLAINTEXT listener "
                    "%s as User:ANONYMOUS, which super.users does not list: replication, "
                    "markers and controlled shutdown will be refused CLUSTER_ACTION "
                    "(add User:ANONYMOUS to super.users, or an ALLOW ClusterAction ACL; "
                    "docs/security.md)", name)


class AclStore(Protocol):
    """Durable ACLs. `create` / `delete` return once the change is durable and applied
    to this broker's authorizer; other brokers follow within about a second."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def create(self, bindings: list[AclBinding]) -> None: ...

    async def delete(self, bindings: list[AclBinding]) -> None: ...


class FileAclStore:
    def __init__(self, data_dir: Path, authorizer: Authorizer) -> None:
        self.path = data_dir / FILE_NAME
        self.authorizer = authorizer
        self._lock = asyncio.Lock()
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return
        except OSError as e:
            raise OSError(f"cannot read ACLs from {self.path}: {e}") from e
        try:
            authorizer.replace(bindings_from_json(text))
        except (ValueError, KeyError, TypeError) as e:
            # Refuse to start on a damaged file rather than serve with ACLs missing
            # (a missing DENY would let someone in).
            raise InvalidConfigError(f"cannot read ACLs from {self.path}: {e}") from e
        log.info("loaded %d ACLs from %s", len(authorizer.bindings()), self.path)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def create(self, bindings: list[AclBinding]) -> None:
        await self._change(bindings, [])

    async def delete(self, bindings: list[AclBinding]) -> None:
        await self._change([], bindings)

    async def _change(self, add: list[AclBinding], remove: list[AclBinding]) -> None:
        async with self._lock:
            current = set(self.authorizer.bindings())
            new = (current - set(remove)) | set(add)
            if new == current:
                return
            await asyncio.to_thread(self._write, bindings_to_json(new))
            # Applied only once durable: a crash before this line loses nothing acknowledged.
            self.authorizer.remove(remove)
            self.authorizer.add(add)

    def _write(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
