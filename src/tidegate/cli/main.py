"""`tidegate` command line: serve, cluster, topics, produce, consume, groups, txn, users,
quotas, acls, outbox, notify, sagas, tcc.

Every command that talks to a broker takes `--bootstrap-server` and `--command-config
FILE` (Kafka client properties, for TLS and SASL: cli/command_config.py).

Each subcommand lives in its own module exposing `add_parser(subparsers)`; the parser
sets `func`, which returns the process exit code. When the first argument names a
subcommand only that module (and what extends it) is imported: importing all of them
cost `tidegate serve` about 0.7 s of its start. A command line naming none
(``tidegate --help``) gets `overview_parser`, built from `SUMMARIES`, importing none.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from tidegate import __version__

# each subcommand's one-line help, as its module's `add_parser` gives it (a unit test
# compares the two), so that `tidegate --help` need not import every module
SUMMARIES = {
    "serve": "run a broker",
    "cluster": "start a development cluster here; show a cluster's health",
    "topics": "create, list, describe, delete and configure topics",
    "leaders": "elect partition leaders (preferred or unclean)",
    "produce": "send lines from stdin or a file as records",
    "consume": "print records of a topic",
    "groups": "list, describe, reset and delete consumer groups",
    "txn": "list, describe, find and abort (hanging) transactions",
    "users": "add, list and remove SCRAM users (SASL/SCRAM logins)",
    "quotas": "set and describe client quotas (throttling)",
    "acls": "add, list and remove ACLs (like kafka-acls)",
    "outbox": "transactional outbox relay (local message table)",
    "notify": "best-effort notification of a topic to HTTP endpoints",
    "sagas": "Saga orchestration: run, start, list, describe",
    "tcc": "TCC global transactions: list, describe, recover",
    "console": "the web console, against any Kafka cluster",
    "top": "live throughput, lag and open transactions",
}
SUBCOMMANDS = tuple(SUMMARIES)
# modules adding actions to a subcommand of another module (`topics reassign`)
EXTENSIONS = {"reassign": "topics"}


def _top_parser() -> tuple[argparse.ArgumentParser,
                           argparse._SubParsersAction[argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="tidegate",
        description="Tidegate: a Kafka-compatible streaming log built for exactly-once.",
    )
    parser.add_argument("--version", action="version", version=f"tidegate {__version__}")
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND")


def overview_parser() -> argparse.ArgumentParser:
    """The parser for a command line naming no subcommand (``tidegate --help``, a typo):
    the subcommands as names and one-line helps only, no module imported."""
    parser, sub = _top_parser()
    for name, summary in SUMMARIES.items():
        sub.add_parser(name, help=summary)
    return parser


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with `only` just that subcommand's (the others unimported)."""
    parser, sub = _top_parser()
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
    if first not in SUBCOMMANDS:
        # --help, --version, a typo or nothing: the overview answers without importing
        # a command (argparse exits for the first three)
        overview = overview_parser()
        overview.parse_args(args_list)
        overview.print_help()
        return 2
    parser = build_parser(first)
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
