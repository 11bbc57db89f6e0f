"""`tidegate` command line: serve, cluster, topics, produce, consume, groups, txn, users,
quotas, acls, outbox, notify, sagas, tcc.

Every command that talks to a broker takes `--bootstrap-server` and `--command-config
FILE` (Kafka client properties, for TLS and SASL: cli/command_config.py).

Each subcommand lives in its own module exposing `add_parser(subparsers)`; the parser
sets `func`, which returns the process exit code. When the first argument names a
subcommand only that module (and what extends it) is imported: importing all of them
cost `tidegate serve` about 0.7 s of its start.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from tidegate import __version__

SUBCOMMANDS = ("serve", "cluster", "topics", "leaders", "produce", "consume", "groups", "txn",
               "users", "quotas", "acls", "outbox", "notify", "sagas", "tcc", "console", "top")
# modules adding actions to a subcommand of another module (`topics reassign`)
EXTENSIONS = {"reassign": "topics"}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with `only` just that subcommand's (the others unimported)."""
    parser = argparse.ArgumentParser(
        prog="tidegate",
        description="Tidegate: a Kafka-compatible streaming log built for exactly-once.",
    )
    parser.add_argument("--version", action="version", version=f"tidegate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(f"tidegate.cli.{name}")
        except ImportError:
            continue
        module.add_parser(sub)
    for name, extends in EXTENSIONS.items():
        if only is None or only == extends:
            importlib.import_module(f"tidegate.cli.{name}").extend_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = args_list[0] if args_list else None
    parser = build_parser(first if first in SUBCOMMANDS else None)
    args = parser.parse_args(args_list)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
