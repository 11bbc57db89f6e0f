"""`tidegate users add|list|remove`: SCRAM credentials on the broker (KIP-554 admin APIs).

`add` sets a user's password for one or more SCRAM mechanisms (both by default, so
clients configured for either log in); the password comes from `--password-file`
(its first line; `-` reads standard input) or is asked for twice on a terminal, and
never appears on the command line. The client salts and hashes it; the broker stores
only the derived keys. `list` shows each user's mechanisms and iteration counts (never
a secret: the broker does not have one to show). `remove` deletes the named mechanisms,
by default all the user has. Like every client command, these take `--command-config`
for a secured broker.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.topics import print_none, run_client
from tidegate.client.admin import AsyncAdmin
from tidegate.client.config import AdminConfig
from tidegate.client.scram_admin import DEFAULT_ITERATIONS, ScramCredentialInfo, ScramUpsertion
from tidegate.common.errors import KafkaError
from tidegate.common.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS

ALL_MECHANISMS = tuple(MECHANISMS)


def _mechanism(text: str) -> str:
    name = text.upper()
    if name not in MECHANISMS:
        raise argparse.ArgumentTypeError(f"unknown SCRAM mechanism {text!r}: use "
                                         f"{' or '.join(MECHANISMS)}")
    return name


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("users", help="add, list and remove SCRAM users (SASL/SCRAM logins)",
                       description="Manage SCRAM-SHA-256/512 credentials on the broker.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = actions.add_parser("add", help="create a user or change its password")
    a.add_argument("name")
    a.add_argument("--mechanism", action="append", type=_mechanism, metavar="MECHANISM",
                   help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default: both)")
    a.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"PBKDF2 iterations, {MIN_ITERATIONS}-{MAX_ITERATIONS} "
                        f"(default {DEFAULT_ITERATIONS})")
    a.add_argument("--password-file", metavar="FILE",
                   help="read the password from the first line of FILE ('-': standard "
                        "input); without it, ask on the terminal")
    lst = actions.add_parser("list", help="users and their SCRAM mechanisms")
    lst.add_argument("name", nargs="*", help="only these users (default: all)")
    rm = actions.add_parser("remove", help="delete a user's SCRAM credentials")
    rm.add_argument("name")
    rm.add_argument("--mechanism", action="append", type=_mechanism, metavar="MECHANISM",
                    help="only this mechanism (repeatable; default: every one the user has)")
    for leaf in (a, lst, rm):
        add_bootstrap(leaf)
    p.set_defaults(func=run)


def read_password(path: str | None) -> str:
    """The new password: from a file, standard input, or asked twice on a terminal."""
    if path == "-" or (path is None and not sys.stdin.isatty()):
        password = sys.stdin.readline().rstrip("\r\n")
    elif path is not None:
        with open(path, encoding="utf-8") as f:
            password = f.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != password:
            raise ValueError("the two passwords differ; nothing changed")
    if not password:
        raise ValueError("the password is empty; nothing changed")
    return password


def _describe(infos: list[ScramCredentialInfo]) -> str:
    return ", ".join(f"{i.mechanism} ({i.iterations} iterations)"
                     for i in sorted(infos, key=lambda i: i.mechanism))


async def _add(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise ValueError(f"--iterations must be in {MIN_ITERATIONS}-{MAX_ITERATIONS}")
    mechanisms = tuple(dict.fromkeys(args.mechanism or ALL_MECHANISMS))
    password = read_password(args.password_file)
    result = await admin.alter_user_scram_credentials(
        [ScramUpsertion(args.name, m, password, args.iterations) for m in mechanisms])
    err = result.get(args.name)
    if err is not None:
        raise err
    print(f"User {args.name!r} can now log in with {' or '.join(mechanisms)} "
          f"({args.iterations} iterations).")
    print(f"Client settings: security.protocol=SASL_SSL (or SASL_PLAINTEXT), "
          f"sasl.mechanism={mechanisms[-1]}, sasl.username={args.name}, sasl.password=...")
    return 0


async def _list(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    users = await admin.describe_user_scram_credentials(args.name or None)
    missing = 0
    if not users:
        print_none("no SCRAM users")
    width = max((len(u) for u in users), default=0)
    for user, infos in sorted(users.items()):
        if isinstance(infos, KafkaError):
            print(f"{user:<{width}}  (no SCRAM credentials)")
            missing += 1
        else:
            print(f"{user:<{width}}  {_describe(infos)}")
    return 1 if missing else 0


async def _remove(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    mechanisms = args.mechanism
    if not mechanisms:
        found = (await admin.describe_user_scram_credentials([args.name]))[args.name]
        if isinstance(found, KafkaError):
            raise ValueError(f"user {args.name!r} has no SCRAM credentials")
        mechanisms = [i.mechanism for i in found]
    mechanisms = list(dict.fromkeys(mechanisms))
    result = await admin.alter_user_scram_credentials(
        deletions=[(args.name, m) for m in mechanisms])
    err = result.get(args.name)
    if err is not None:
        raise err
    print(f"Removed {', '.join(mechanisms)} credentials of user {args.name!r}.")
    return 0


ACTIONS = {"add": _add, "list": _list, "remove": _remove}


def run(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with AsyncAdmin(client_settings(args, AdminConfig,
                                              {"client.id": "tidegate-users"})) as admin:
            return await ACTIONS[args.action](admin, args)
    return run_client("users", main)
