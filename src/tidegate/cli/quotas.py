"""`tidegate quotas set|describe`: client quotas on the broker (KIP-546 admin APIs).

The entity is named as with Kafka's `kafka-configs.sh --entity-type users/clients`:
`--user NAME` or `--user-defaults`, `--client-id NAME` or `--client-defaults`, either
or both. `set` takes `--add-config 'producer_byte_rate=1048576,consumer_byte_rate=...'`
and/or `--delete-config 'request_percentage,...'`. `describe` with an entity shows that
entity only; with none, every quota the broker holds; `--user NAME --any-client` shows
that user's own quota and each of its per-client ones. Like every client command,
these take `--command-config` for a secured broker.
"""

from __future__ import annotations

import argparse

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.topics import print_none, run_client
from tidegate.client.admin import AsyncAdmin
from tidegate.client.config import AdminConfig
from tidegate.client.quota_admin import QuotaAlteration

KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
        "controller_mutation_rate")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("quotas", help="set and describe client quotas (throttling)",
                       description="Client quotas by user, client id or both: "
                                   + ", ".join(KEYS) + ".")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = actions.add_parser("set", help="add, change or delete an entity's quotas")
    s.add_argument("--add-config", metavar="K=V,...", default="",
                   help="quotas to set, e.g. producer_byte_rate=1048576")
    s.add_argument("--delete-config", metavar="K,...", default="",
                   help="quotas to remove, e.g. consumer_byte_rate")
    s.add_argument("--validate-only", action="store_true",
                   help="let the broker check the change without making it")
    d = actions.add_parser("describe", help="show quotas (all, or one entity's)")
    d.add_argument("--any-client", action="store_true",
                   help="with --user/--user-defaults: also each of that user's "
                        "per-client quotas")
    for leaf in (s, d):
        user = leaf.add_mutually_exclusive_group()
        user.add_argument("--user", metavar="NAME", help="the user (principal name)")
        user.add_argument("--user-defaults", action="store_true",
                          help="the default of every user (<default>)")
        client = leaf.add_mutually_exclusive_group()
        client.add_argument("--client-id", metavar="NAME", help="the client id")
        client.add_argument("--client-defaults", action="store_true",
                            help="the default of every client id (<default>)")
        add_bootstrap(leaf)
    p.set_defaults(func=run)


def entity_of(args: argparse.Namespace) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    if args.user is not None or args.user_defaults:
        out["user"] = args.user  # None: the default
    if args.client_id is not None or args.client_defaults:
        out["client-id"] = args.client_id
    return out


def parse_add(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--add-config item {item!r} must be KEY=VALUE")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--add-config {key.strip()}: {value!r} is not a number") from None
    return out


def describe_entity(entity: tuple[tuple[str, str | None], ...]) -> str:
    parts = dict(entity)
    out = []
    if "user" in parts:
        out += ["users", parts["user"] or "<default>"]
    if "client-id" in parts:
        out += ["clients", parts["client-id"] or "<default>"]
    return "/".join(out)


def _value(v: float) -> str:
    return str(int(v)) if v == int(v) else str(v)


async def _set(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    entity = entity_of(args)
    if not entity:
        raise ValueError("name an entity: --user/--user-defaults and/or "
                         "--client-id/--client-defaults")
    add = parse_add(args.add_config)
    remove = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not add and not remove:
        raise ValueError("nothing to do: give --add-config and/or --delete-config")
    [err] = await admin.alter_client_quotas([QuotaAlteration(entity, add, remove)],
                                            validate_only=args.validate_only)
    if err is not None:
        raise err
    name = describe_entity(tuple(sorted(entity.items())))
    verb = "would be" if args.validate_only else "are"
    changes = [f"{k}={_value(v)}" for k, v in add.items()] + [f"-{k}" for k in remove]
    print(f"Quotas of {name} {verb} changed: {', '.join(changes)}")
    return 0


async def _describe(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    entity = entity_of(args)
    # strict: that entity alone; not strict (--any-client): also the entities with a
    # client-id beside the named user
    strict = bool(entity) and not args.any_client
    found = await admin.describe_client_quotas(list(entity.items()), strict=strict)
    if not found:
        print_none("no client quotas")
        return 0
    rows = sorted((describe_entity(e), c) for e, c in found.items())
    width = max(len(name) for name, _ in rows)
    for name, configs in rows:
        values = ", ".join(f"{k}={_value(v)}" for k, v in sorted(configs.items()))
        print(f"{name:<{width}}  {values}")
    return 0


ACTIONS = {"set": _set, "describe": _describe}


def run(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with AsyncAdmin(client_settings(args, AdminConfig,
                                              {"client.id": "tidegate-quotas"})) as admin:
            return await ACTIONS[args.action](admin, args)
    return run_client("quotas", main)
