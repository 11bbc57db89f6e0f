"""`tidegate topics reassign`: move a partition's replicas to other brokers, with its data
(like `kafka-reassign-partitions.sh`, one partition at a time).

    tidegate topics reassign --topic T --partition P --replicas 3,1,2 [--wait]
    tidegate topics reassign --topic T --partition P --cancel
    tidegate topics reassign --list [--topic T]

The controller adds the new replicas, which copy the partition by fetching from its
leader; once every new replica is in sync it moves leadership into the new list if
needed and drops the replicas that are not in it, which delete their data
(AlterPartitionReassignments, KIP-455). The first replica listed is the preferred
leader. `--wait` returns when the move is complete; `--list` shows the moves in progress
(ListPartitionReassignments); `--cancel` puts the partition back on its original
replicas.

This action belongs to `tidegate topics`: `extend_parser` adds it to that command's
parser (cli/main.py calls it after the subcommands are built).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from tidegate.cli.command_config import add_bootstrap
from tidegate.cli.leaders import partition_admin
from tidegate.cli.topics import print_none, run_client
from tidegate.client.types import TopicPartition

WAIT_POLL_S = 0.5


def extend_parser(sub: Any) -> None:
    """Add `reassign` to the actions of the `topics` command, if it is there."""
    topics = sub.choices.get("topics")
    if topics is None:
        return
    actions = next((a for a in topics._actions if isinstance(a, argparse._SubParsersAction)),
                   None)
    if actions is None:
        return
    r = actions.add_parser("reassign", help="move a partition's replicas to other brokers",
                           description="Move a partition's replicas, with its data (like "
                                       "kafka-reassign-partitions.sh).")
    r.add_argument("--topic")
    r.add_argument("--partition", type=int)
    what = r.add_mutually_exclusive_group(required=True)
    what.add_argument("--replicas", metavar="ID,ID,...",
                      help="the new replica list, preferred leader first")
    what.add_argument("--cancel", action="store_true",
                      help="cancel the partition's reassignment in progress")
    what.add_argument("--list", action="store_true", help="the reassignments in progress")
    r.add_argument("--wait", action="store_true",
                   help="with --replicas: return once the move is complete")
    add_bootstrap(r)
    r.set_defaults(func=_reassign)


def _broker_ids(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--replicas {text!r} must be broker ids separated by commas") from None
    if not ids:
        raise ValueError("--replicas names no broker")
    return ids


def _reassign(args: argparse.Namespace) -> int:
    if not args.list and (args.topic is None or args.partition is None):
        print("tidegate topics reassign: --replicas and --cancel need --topic and "
              "--partition", file=sys.stderr)
        return 2
    try:
        replicas = _broker_ids(args.replicas) if args.replicas else None
    except ValueError as e:
        print(f"tidegate topics reassign: {e}", file=sys.stderr)
        return 2

    async def main() -> int:
        admin, net = partition_admin(args)
        try:
            if args.list:
                ongoing = await admin.list_partition_reassignments()
                rows = {tp: r for tp, r in ongoing.items()
                        if args.topic is None or tp.topic == args.topic}
                if not rows:
                    print_none("no reassignments in progress")
                for (t, p), r in sorted(rows.items()):
                    print(f"{t}-{p}: replicas {list(r.replicas)}, adding {list(r.adding)}, "
                          f"removing {list(r.removing)}")
                return 0
            tp = TopicPartition(args.topic, args.partition)
            err = (await admin.alter_partition_reassignments({tp: replicas}))[tp]
            if err is not None:
                print(f"tidegate topics reassign: {err.name}: {err}", file=sys.stderr)
                return 1
            if replicas is None:
                print(f"Cancelled the reassignment of {tp.topic}-{tp.partition}")
                return 0
            print(f"Started the reassignment of {tp.topic}-{tp.partition} to replicas "
                  f"{replicas}")
            if args.wait:
                started = time.monotonic()
                while tp in await admin.list_partition_reassignments([tp]):
                    await asyncio.sleep(WAIT_POLL_S)
                print(f"Reassignment of {tp.topic}-{tp.partition} complete in "
                      f"{time.monotonic() - started:.1f} s")
            return 0
        finally:
            await net.close()

    return run_client("topics reassign", main)
