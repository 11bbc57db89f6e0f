"""`tidegate acls add|list|remove`: Kafka ACLs, with kafka-acls' flags.

`add` builds the bindings kafka-acls would: every (--allow-principal x --allow-host)
and (--deny-principal x --deny-host) pair, times every --operation, on every resource
given (--topic, --group, --transactional-id, --cluster; repeatable), with
--resource-pattern-type LITERAL (default) or PREFIXED. Hosts default to `*`.
The convenience flags expand as in kafka-acls:

- `--producer`: WRITE, DESCRIBE and CREATE on the topics; with --transactional-id,
  WRITE and DESCRIBE on it; with --idempotent, IDEMPOTENT_WRITE on the cluster;
- `--consumer`: READ and DESCRIBE on the topics, READ on the --group.

`list` prints the ACLs on the resources given (all when none), optionally only those
of `--principal`, in kafka-acls' layout; `--resource-pattern-type` ANY (default) or
MATCH (every ACL that applies to the named resource). `remove` deletes the ACLs on the
resources given that match the principals, hosts and operations given (all of them
when none is), like `kafka-acls --remove --force`. Every command takes
`--command-config` for a secured broker; the principal it logs in as needs ALTER
(add, remove) or DESCRIBE (list) on the cluster, or to be a super user.
"""

from __future__ import annotations

import argparse
from itertools import product

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.topics import print_none, run_client
from tidegate.client.admin import AsyncAdmin
from tidegate.client.config import AdminConfig
from tidegate.common.acl import (
    CLUSTER_NAME,
    OPERATION_NAMES,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    operation_from_name,
    validate_binding,
)

_O = AclOperation


def _operation(text: str) -> AclOperation:
    op = operation_from_name(text)
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        names = ", ".join(OPERATION_NAMES[o] for o in AclOperation if o > AclOperation.ANY)
        raise argparse.ArgumentTypeError(f"unknown operation {text!r}: use one of {names}")
    return op


def _pattern(text: str) -> PatternType:
    try:
        return PatternType[text.upper()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"unknown pattern type {text!r}: LITERAL, PREFIXED, ANY or MATCH") from None


def _resources(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                   help="a topic (repeatable; '*' for all topics)")
    p.add_argument("--group", action="append", default=[], metavar="GROUP",
                   help="a consumer group (repeatable; '*' for all groups)")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                   help="a transactional id (repeatable; '*' for all)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", type=_pattern, metavar="TYPE",
                   help="LITERAL or PREFIXED (list and remove also: ANY, MATCH)")


def _entries(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                   help="e.g. User:alice, User:* (repeatable)")
    p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="client IP the allow applies to (default *)")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--operation", action="append", type=_operation, default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                        "DescribeConfigs, AlterConfigs, IdempotentWrite or All (repeatable)")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("acls", help="add, list and remove ACLs (like kafka-acls)",
                       description="Manage Kafka ACLs on topics, groups, transactional ids "
                                   "and the cluster.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = actions.add_parser("add", help="create ACLs")
    _resources(a)
    _entries(a)
    a.add_argument("--producer", action="store_true",
                   help="what a producer needs: WRITE, DESCRIBE, CREATE on the topics "
                        "(+ the transactional id, + IDEMPOTENT_WRITE with --idempotent)")
    a.add_argument("--consumer", action="store_true",
                   help="what a consumer needs: READ, DESCRIBE on the topics, READ on --group")
    a.add_argument("--idempotent", action="store_true",
                   help="with --producer: IDEMPOTENT_WRITE on the cluster")
    lst = actions.add_parser("list", help="show ACLs")
    _resources(lst)
    lst.add_argument("--principal", metavar="PRINCIPAL", help="only this principal's ACLs")
    rm = actions.add_parser("remove", help="delete ACLs")
    _resources(rm)
    _entries(rm)
    rm.add_argument("--force", action="store_true", help="accepted for kafka-acls scripts "
                    "(tidegate never asks for confirmation)")
    for leaf in (a, lst, rm):
        add_bootstrap(leaf)
    p.set_defaults(func=run)


def _patterns(args: argparse.Namespace, default: PatternType) -> list[ResourcePattern]:
    pt = args.resource_pattern_type or default
    out = [ResourcePattern(ResourceType.TOPIC, t, pt) for t in args.topic]
    out += [ResourcePattern(ResourceType.GROUP, g, pt) for g in args.group]
    out += [ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, pt)
            for t in args.transactional_id]
    if args.cluster:
        out.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, pt))
    return out


def _pairs(args: argparse.Namespace) -> list[tuple[str, str, AclPermissionType]]:
    allow_hosts, deny_hosts = args.allow_host or ["*"], args.deny_host or ["*"]
    return ([(p, h, AclPermissionType.ALLOW) for p, h in product(args.allow_principal,
                                                                   allow_hosts)]
            + [(p, h, AclPermissionType.DENY) for p, h in product(args.deny_principal,
                                                                    deny_hosts)])


def build_bindings(args: argparse.Namespace) -> list[AclBinding]:
    """The bindings `acls add` creates (kafka-acls' expansion; module docstring)."""
    if args.resource_pattern_type not in (None, PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError("ACLs are added with --resource-pattern-type LITERAL or PREFIXED")
    pt = args.resource_pattern_type or PatternType.LITERAL
    pairs = _pairs(args)
    if not pairs:
        raise ValueError("give --allow-principal or --deny-principal")
    wanted: list[tuple[ResourcePattern, AclOperation]] = []
    if args.producer or args.consumer:
        if not args.topic:
            raise ValueError("--producer and --consumer need --topic")
        for t in args.topic:
            pattern = ResourcePattern(ResourceType.TOPIC, t, pt)
            ops = [_O.WRITE, _O.DESCRIBE, _O.CREATE] if args.producer else []
            ops += [_O.READ, _O.DESCRIBE] if args.consumer else []
            wanted += [(pattern, op) for op in dict.fromkeys(ops)]
        if args.producer:
            for tid in args.transactional_id:
                pattern = ResourcePattern(ResourceType.TRANSACTIONAL_ID, tid, pt)
                wanted += [(pattern, _O.WRITE), (pattern, _O.DESCRIBE)]
            if args.idempotent:
                wanted.append((ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME),
                               _O.IDEMPOTENT_WRITE))
        if args.consumer:
            if not args.group:
                raise ValueError("--consumer needs --group")
            wanted += [(ResourcePattern(ResourceType.GROUP, g, pt), _O.READ)
                       for g in args.group]
        wanted += [(r, op) for r in _patterns(args, pt) for op in args.operation]
    else:
        resources = _patterns(args, pt)
        if not resources:
            raise ValueError("give a resource: --topic, --group, --transactional-id or "
                             "--cluster")
        wanted = [(r, op) for r in resources for op in (args.operation or [_O.ALL])]
    bindings = list(dict.fromkeys(
        AclBinding(r, AccessControlEntry(principal, host, op, perm))
        for r, op in wanted for principal, host, perm in pairs))
    for b in bindings:
        problem = validate_binding(b)
        if problem is not None:
            raise ValueError(f"{_describe_entry(b.entry)} on {_describe(b.pattern)}: {problem}")
    return bindings


def _describe(p: ResourcePattern) -> str:
    return (f"ResourcePattern(resourceType={p.type.name}, name={p.name}, "
            f"patternType={p.pattern.name})")


def _describe_entry(e: AccessControlEntry) -> str:
    return (f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
            f"permissionType={e.permission.name})")


def print_bindings(bindings: list[AclBinding]) -> None:
    """kafka-acls' layout: each resource, then its entries indented."""
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for p in sorted(by_pattern, key=lambda p: (int(p.type), p.name, int(p.pattern))):
        print(f"Current ACLs for resource `{_describe(p)}`:")
        for e in sorted(by_pattern[p], key=lambda e: (e.principal, e.host, int(e.operation),
                                                       int(e.permission))):
            print(f" \t{_describe_entry(e)}")
        print()


async def _add(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    bindings = build_bindings(args)
    results = await admin.create_acls(bindings)
    failed = 0
    for b, err in zip(bindings, results, strict=False):
        if err is not None:
            print(f"Error adding {_describe_entry(b.entry)} on {_describe(b.pattern)}: {err}")
            failed += 1
    added = [b for b, err in zip(bindings, results, strict=False) if err is None]
    if added:
        print("Adding ACLs:")
        print_bindings(added)
    return 1 if failed else 0


def _filters(args: argparse.Namespace, default: PatternType) -> list[AclBindingFilter]:
    patterns = _patterns(args, default)
    if not patterns:
        return [AclBindingFilter(pattern=args.resource_pattern_type or PatternType.ANY)]
    return [AclBindingFilter(p.type, p.name, p.pattern) for p in patterns]


async def _list(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    found: list[AclBinding] = []
    for f in _filters(args, PatternType.ANY):
        if args.principal:
            f = AclBindingFilter(f.resource_type, f.name, f.pattern, principal=args.principal)
        found += await admin.describe_acls(f)
    found = list(dict.fromkeys(found))
    if not found:
        print_none("no ACLs")
    print_bindings(found)
    return 0


async def _remove(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    bases = _filters(args, PatternType.LITERAL)
    if not _patterns(args, PatternType.LITERAL):
        raise ValueError("give a resource to remove ACLs from (--topic, --group, "
                         "--transactional-id, --cluster)")
    entries: list[tuple[str | None, str | None, AclPermissionType]] = [
        (p, h, perm) for p, h, perm in _pairs(args)] or [(None, None, AclPermissionType.ANY)]
    hosts_given = bool(args.allow_host or args.deny_host)
    filters = [
        AclBindingFilter(b.resource_type, b.name, b.pattern, principal,
                         host if hosts_given else None, op, perm)
        for b in bases for principal, host, perm in entries
        for op in (args.operation or [AclOperation.ANY])]
    removed = await admin.delete_acls(filters)
    if not removed:
        print_none("no ACLs matched; nothing removed")
        return 0
    print("Removed ACLs:")
    print_bindings(removed)
    return 0


ACTIONS = {"add": _add, "list": _list, "remove": _remove}


def run(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with AsyncAdmin(client_settings(args, AdminConfig,
                                              {"client.id": "tidegate-acls"})) as admin:
            return await ACTIONS[args.action](admin, args)
    return run_client("acls", main)
