"""Kafka's ACL model and the authorizer's decision, sans-IO.

An ACL binding is a resource pattern (resource type, name, LITERAL or PREFIXED) and an
access control entry (principal, host, operation, ALLOW or DENY), with Kafka's enum
codes so the wire values of CreateAcls / DescribeAcls / DeleteAcls map one to one.
Filters (DescribeAcls, DeleteAcls) add ANY to every enum and MATCH to pattern types;
`AclBindingFilter.matches` is Kafka's `AclBindingFilter.matches`.

`Authorizer.authorize(principal, host, op, resource_type, name)` is the decision of
Kafka's AclAuthorizer / StandardAuthorizer:

- a principal in `super.users` may do everything;
- the ACLs that apply to a resource are the LITERAL ones on its name, the LITERAL ones
  on `*`, and the PREFIXED ones whose prefix starts the name;
- if none applies at all (whoever they are for), the answer is
  `allow.everyone.if.no.acl.found` (default false);
- otherwise a DENY for the principal (or `User:*`), the host (or `*`) and the operation
  (or ALL) refuses, whatever ALLOWs say;
- else an ALLOW for the principal, host and operation grants. DESCRIBE is implied by
  READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS; ALL implies every
  operation. Implication applies to ALLOW only: DENY READ does not deny DESCRIBE.

The ACL set is held in memory indexed by (type, name) for LITERAL and (type, prefix)
for PREFIXED, so a decision costs a few dictionary lookups per prefix length in use.
It changes only through `replace`, `add` and `remove` (the stores in server/ call them
after the durable write, or when ZooKeeper tells them of another broker's change).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "CLUSTER_NAME",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "Authorizer",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "operation_from_name",
    "parse_super_users",
    "permission_from_name",
    "resource_type_from_name",
    "validate_binding",
    "validate_filter",
]

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name, as in Kafka
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
_E = TypeVar("_E", bound=enum.IntEnum)


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # KIP-939, on a TRANSACTIONAL_ID


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _enum_of(cls: type[_E], value: int) -> _E:
    """The member for a wire value; unknown values read as UNKNOWN (0), as in Kafka."""
    try:
        return cls(value)
    except ValueError:
        return cls(0)


def resource_type(value: int) -> ResourceType:
    return _enum_of(ResourceType, value)


def pattern_type(value: int) -> PatternType:
    return _enum_of(PatternType, value)


def operation(value: int) -> AclOperation:
    return _enum_of(AclOperation, value)


def permission(value: int) -> AclPermissionType:
    return _enum_of(AclPermissionType, value)


# Names Kafka's ZooKeeper JSON and kafka-acls use ("Topic", "IdempotentWrite", "Allow").
def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


RESOURCE_NAMES = {t: _camel(t.name) for t in ResourceType}
OPERATION_NAMES = {o: _camel(o.name) for o in AclOperation}
PERMISSION_NAMES = {p: _camel(p.name) for p in AclPermissionType}
_RESOURCE_BY_NAME = {v.lower(): k for k, v in RESOURCE_NAMES.items()}
_OPERATION_BY_NAME = {v.lower(): k for k, v in OPERATION_NAMES.items()}
_PERMISSION_BY_NAME = {v.lower(): k for k, v in PERMISSION_NAMES.items()}


def operation_from_name(name: str) -> AclOperation:
    """'Read', 'READ', 'IdempotentWrite', 'idempotent_write' -> the operation (UNKNOWN
    if none)."""
    return _OPERATION_BY_NAME.get(name.replace("_", "").replace("-", "").lower(),
                                  AclOperation.UNKNOWN)


def permission_from_name(name: str) -> AclPermissionType:
    return _PERMISSION_BY_NAME.get(name.lower(), AclPermissionType.UNKNOWN)


def resource_type_from_name(name: str) -> ResourceType:
    return _RESOURCE_BY_NAME.get(name.replace("_", "").replace("-", "").lower(),
                                 ResourceType.UNKNOWN)


# Operations that imply DESCRIBE / DESCRIBE_CONFIGS when ALLOWed (Kafka's AclEntry).
_O = AclOperation
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    _O.DESCRIBE: frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER, _O.ALL}),
    _O.DESCRIBE_CONFIGS: frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.ALL}),
}


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    type: ResourceType
    name: str
    pattern: PatternType = PatternType.LITERAL

    def __str__(self) -> str:  # Kafka's ResourcePattern.toString shape in the log
        return f"{RESOURCE_NAMES[self.type]}:{self.pattern.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """None for a name, principal or host matches any; ANY for an enum matches any."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        return self._matches_pattern(b.pattern) and self._matches_entry(b.entry)

    def _matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, p.type):
            return False
        if self.pattern == PatternType.MATCH:
            # MATCH: every binding that would apply to the named resource.
            if self.name is None:
                return True
            if p.pattern == PatternType.LITERAL:
                return p.name in (self.name, WILDCARD)
            return p.pattern == PatternType.PREFIXED and self.name.startswith(p.name)
        if self.pattern not in (PatternType.ANY, p.pattern):
            return False
        return self.name is None or self.name == p.name

    def _matches_entry(self, e: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and self.operation in (AclOperation.ANY, e.operation)
            and self.permission in (AclPermissionType.ANY, e.permission)
        )


def _valid_principal(principal: str) -> bool:
    kind, sep, name = principal.partition(":")
    return bool(sep and kind and name)


def validate_binding(b: AclBinding) -> str | None:
    """Why Kafka refuses to create `b` (INVALID_REQUEST), or None if it may be stored."""
    p, e = b.pattern, b.entry
    if p.type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resource type {p.type.name}"
    if p.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid pattern type {p.pattern.name}: ACLs are LITERAL or PREFIXED"
    if not p.name:
        return "Resource name should not be empty"
    if p.type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {e.operation.name}"
    if e.permission in (AclPermissionType.UNKNOWN, AclPermissionType.ANY):
        return f"Invalid permission type {e.permission.name}"
    if not e.principal:
        return "Principal should not be empty"
    if not _valid_principal(e.principal):
        return f"Could not parse principal from `{e.principal}` (no colon is found between " \
               "the principal type and name)"
    if not e.host:
        return "Host should not be empty (use * for every host)"
    return None


def validate_filter(f: AclBindingFilter) -> str | None:
    """Kafka refuses filters with UNKNOWN elements (INVALID_REQUEST)."""
    if (f.resource_type == ResourceType.UNKNOWN or f.pattern == PatternType.UNKNOWN
            or f.operation == AclOperation.UNKNOWN
            or f.permission == AclPermissionType.UNKNOWN):
        return "The filter must not contain any UNKNOWN elements"
    return None


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (`User:admin;User:broker`)."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


class Authorizer:
    """The ACL set and Kafka's decision over it (see the module docstring)."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._literal: dict[tuple[ResourceType, str], set[AccessControlEntry]] = {}
        self._prefixed: dict[tuple[ResourceType, str], set[AccessControlEntry]] = {}
        # Lengths of the prefixes in use per type: a lookup tries only those.
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}

    # -- the set ----------------------------------------------------------------------

    def bindings(self) -> list[AclBinding]:
        out = [AclBinding(ResourcePattern(t, n, PatternType.LITERAL), e)
               for (t, n), es in self._literal.items() for e in es]
        out += [AclBinding(ResourcePattern(t, n, PatternType.PREFIXED), e)
                for (t, n), es in self._prefixed.items() for e in es]
        return out

    def replace(self, bindings: Iterable[AclBinding]) -> None:
        self._literal.clear()
        self._prefixed.clear()
        self._prefix_lengths.clear()
        self.add(bindings)

    def add(self, bindings: Iterable[AclBinding]) -> None:
        for b in bindings:
            p = b.pattern
            table = self._literal if p.pattern == PatternType.LITERAL else self._prefixed
            entries = table.setdefault((p.type, p.name), set())
            if p.pattern == PatternType.PREFIXED and not entries:
                lengths = self._prefix_lengths.setdefault(p.type, {})
                lengths[len(p.name)] = lengths.get(len(p.name), 0) + 1
            entries.add(b.entry)

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        for b in bindings:
            p = b.pattern
            table = self._literal if p.pattern == PatternType.LITERAL else self._prefixed
            entries = table.get((p.type, p.name))
            if entries is None:
                continue
            entries.discard(b.entry)
            if not entries:
                del table[(p.type, p.name)]
                if p.pattern == PatternType.PREFIXED:
                    lengths = self._prefix_lengths[p.type]
                    lengths[len(p.name)] -= 1
                    if not lengths[len(p.name)]:
                        del lengths[len(p.name)]

    def matching(self, f: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self.bindings() if f.matches(b)]

    # -- the decision -----------------------------------------------------------------

    def _applicable(self, rtype: ResourceType, name: str) -> list[AccessControlEntry]:
        out: list[AccessControlEntry] = []
        for key in ((rtype, name), (rtype, WILDCARD)):
            entries = self._literal.get(key)
            if entries:
                out.extend(entries)
        for length in self._prefix_lengths.get(rtype, ()):
            if length <= len(name):
                entries = self._prefixed.get((rtype, name[:length]))
                if entries:
                    out.extend(entries)
        return out

    def authorize(self, principal: str, host: str, op: AclOperation, rtype: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self._applicable(rtype, name)
        if not acls:
            return self.allow_if_no_acl
        return _decide(acls, principal, host, op)

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType,
                              name: str, supported: Iterable[AclOperation]) -> int:
        """Kafka's authorized-operations bitfield: bit n for each operation n allowed."""
        bits = 0
        for op in supported:
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << int(op)
        return bits

    def authorize_any(self, principal: str, host: str, op: AclOperation,
                      rtype: ResourceType) -> bool:
        """Kafka's `authorizeByResourceType`: may the principal do `op` on at least one
        resource of the type? (IDEMPOTENT_WRITE falls back to WRITE on any topic.)
        Yes if an ALLOW names some resource that no DENY covers: a DENY on LITERAL `*`
        covers all; a DENY PREFIXED covers the names and prefixes it starts."""
        if principal in self.super_users:
            return True
        denied_literal: set[str] = set()
        denied_prefixes: list[str] = []
        allowed: list[ResourcePattern] = []
        any_acl = False
        for table, ptype in ((self._literal, PatternType.LITERAL),
                             (self._prefixed, PatternType.PREFIXED)):
            for (t, n), entries in table.items():
                if t != rtype:
                    continue
                any_acl = True
                for e in entries:
                    if not _entry_applies(e, principal, host):
                        continue
                    if e.permission == AclPermissionType.DENY and e.operation in (op, _O.ALL):
                        if ptype == PatternType.LITERAL:
                            denied_literal.add(n)
                        else:
                            denied_prefixes.append(n)
                    elif (e.permission == AclPermissionType.ALLOW
                          and e.operation in _IMPLIED_BY.get(op, frozenset({op, _O.ALL}))):
                        allowed.append(ResourcePattern(t, n, ptype))
        if not any_acl:
            return self.allow_if_no_acl
        if WILDCARD in denied_literal:
            return False
        for p in allowed:
            if any(p.name.startswith(d) for d in denied_prefixes):
                continue
            if p.pattern == PatternType.LITERAL and p.name in denied_literal:
                continue
            return True
        return False


def _entry_applies(e: AccessControlEntry, principal: str, host: str) -> bool:
    return e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD)


def _decide(acls: list[AccessControlEntry], principal: str, host: str,
            op: AclOperation) -> bool:
    allowed_ops = _IMPLIED_BY.get(op, frozenset({op, _O.ALL}))
    allow = False
    for e in acls:
        if not _entry_applies(e, principal, host):
            continue
        if e.permission == AclPermissionType.DENY:
            if e.operation in (op, _O.ALL):
                return False
        elif e.permission == AclPermissionType.ALLOW and e.operation in allowed_ops:
            allow = True
    return allow
