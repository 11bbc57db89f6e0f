"""Kafka's JSON for ACLs: the ZooKeeper znode of one resource and the single-node file.

`encode_zk_acls` / `decode_zk_acls` are the body of `/kafka-acl/<Type>/<name>` as
Kafka's AclAuthorizer wrote it (`{"version":1,"acls":[{"principal":"User:alice",
"permissionType":"Allow","operation":"Read","host":"*"}]}`); the file of a single node
(`__acls.json`) lists, per resource pattern, the same `acls` array, so both stores hold
the same text per resource. Unknown operations or permissions are a ValueError: a
store refuses to guess what an ACL it cannot read meant.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tidegate.common.acl import (
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_NAMES,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    operation_from_name,
    permission_from_name,
    resource_type_from_name,
)

__all__ = ["bindings_from_json", "bindings_to_json", "decode_zk_acls", "encode_zk_acls"]


def encode_zk_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """`{"version":1,"acls":[{"principal":..,"permissionType":"Allow","operation":"Read",
    "host":"*"}]}`, as Kafka's AclAuthorizer wrote /kafka-acl/<Type>/<name>."""
    acls = [{"principal": e.principal, "permissionType": PERMISSION_NAMES[e.permission],
             "operation": OPERATION_NAMES[e.operation], "host": e.host}
            for e in sorted(entries, key=_entry_key)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_zk_acls(data: bytes) -> set[AccessControlEntry]:
    """The entries of one resource's znode (ValueError if it is not Kafka's JSON)."""
    if not data:
        return set()
    raw = json.loads(data)
    out: set[AccessControlEntry] = set()
    for a in raw.get("acls", []):
        op = operation_from_name(str(a["operation"]))
        perm = permission_from_name(str(a["permissionType"]))
        if op in (AclOperation.UNKNOWN, AclOperation.ANY) or perm in (
                AclPermissionType.UNKNOWN, AclPermissionType.ANY):
            raise ValueError(f"unknown operation or permission in ACL {a!r}")
        out.add(AccessControlEntry(str(a["principal"]), str(a["host"]), op, perm))
    return out


def _entry_key(e: AccessControlEntry) -> tuple[str, str, int, int]:
    return (e.principal, e.host, int(e.operation), int(e.permission))


def bindings_to_json(bindings: Iterable[AclBinding]) -> str:
    """The single-node file: one object per resource pattern, each with Kafka's ZK JSON
    `acls` list, so a file and a ZooKeeper tree hold the same text per resource."""
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    resources = []
    for p in sorted(by_pattern, key=lambda p: (int(p.type), int(p.pattern), p.name)):
        acls = json.loads(encode_zk_acls(by_pattern[p]))["acls"]
        resources.append({"resourceType": RESOURCE_NAMES[p.type],
                          "patternType": p.pattern.name, "name": p.name, "acls": acls})
    return json.dumps({"version": 1, "resources": resources}, indent=1)


def bindings_from_json(text: str) -> list[AclBinding]:
    raw = json.loads(text)
    out: list[AclBinding] = []
    for r in raw.get("resources", []):
        rtype = resource_type_from_name(str(r["resourceType"]))
        ptype = PatternType[str(r["patternType"])]
        if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise ValueError(f"unknown resource type in {r!r}")
        pattern = ResourcePattern(rtype, str(r["name"]), ptype)
        entries = decode_zk_acls(json.dumps({"acls": r["acls"]}).encode())
        out.extend(AclBinding(pattern, e) for e in entries)
    return out
