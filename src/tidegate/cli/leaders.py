"""`tidegate leaders elect`: move partition leadership (like `kafka-leader-election.sh`).

    tidegate leaders elect --topic T [--partition P] [--election-type preferred|unclean]
    tidegate leaders elect --all-topic-partitions [--election-type preferred|unclean]

A *preferred* election hands each partition back to its preferred replica (the first of
its assignment) when that replica is alive and in sync, which `auto.leader.rebalance.enable`
also does every `leader.imbalance.check.interval.seconds`. An *unclean* election gives a
partition whose leader is gone to a live replica outside the ISR when no in-sync replica
is left (records may be lost). The controller does both (ElectLeaders, KIP-460).

Prints one line per outcome, as Kafka's tool does; exits 1 if any election failed
(a partition that needed none is not a failure).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.topics import run_client
from tidegate.client.config import AdminConfig
from tidegate.client.types import TopicPartition
from tidegate.common.errors import ErrorCode, KafkaError

if TYPE_CHECKING:  # the admin modules are imported when a command runs, not for --help
    from tidegate.client.net import NetworkClient
    from tidegate.client.partition_admin import PartitionAdmin

TYPES = ("preferred", "unclean")  # partition_admin.PREFERRED and UNCLEAN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("leaders", help="elect partition leaders (preferred or unclean)",
                       description="Partition leadership (like kafka-leader-election.sh).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    e = actions.add_parser("elect", help="run leader elections on the controller")
    which = e.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the partitions of this topic")
    which.add_argument("--all-topic-partitions", action="store_true",
                       help="every partition of every topic")
    e.add_argument("--partition", type=int, help="only this partition of --topic")
    e.add_argument("--election-type", choices=sorted(TYPES), default="preferred",
                   help="preferred (default): back to the preferred replica; unclean: "
                        "to a live replica outside the ISR when no in-sync one is left")
    add_bootstrap(e)
    e.set_defaults(func=_elect)


def partition_admin(args: argparse.Namespace) -> tuple[PartitionAdmin, NetworkClient]:
    """A `PartitionAdmin` over its own connections (close the NetworkClient after)."""
    from tidegate.client.metadata import MetadataClient
    from tidegate.client.net import NetworkClient
    from tidegate.client.partition_admin import PartitionAdmin

    config = AdminConfig.from_dict(client_settings(args, AdminConfig))
    net = NetworkClient(config)
    md = MetadataClient(net, max_age_ms=config.metadata_max_age_ms, allow_auto_create=False,
                        retry_backoff_ms=config.retry_backoff_ms)
    return PartitionAdmin(md, config.default_api_timeout_ms, config.retry_backoff_ms), net


def _elect(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        print("tidegate leaders elect: --partition needs --topic", file=sys.stderr)
        return 2
    kind = args.election_type.upper()
    from tidegate.client.admin import AsyncAdmin
    from tidegate.client.partition_admin import PREFERRED, UNCLEAN

    async def main() -> int:
        partitions: list[TopicPartition] | None = None
        if args.topic is not None:
            if args.partition is not None:
                partitions = [TopicPartition(args.topic, args.partition)]
            else:
                async with AsyncAdmin(client_settings(args, AdminConfig)) as admin:
                    desc = (await admin.describe_topics([args.topic],
                                                        include_configs=False))[0]
                partitions = [TopicPartition(args.topic, p.partition) for p in desc.partitions]
        elections, net = partition_admin(args)
        try:
            results = await elections.elect_leaders(
                PREFERRED if args.election_type == "preferred" else UNCLEAN, partitions)
        finally:
            await net.close()
        return report(kind, results)

    return run_client("leaders elect", main)


def report(kind: str, results: dict[TopicPartition, KafkaError | None]) -> int:
    done = sorted(tp for tp, err in results.items() if err is None)
    not_needed = sorted(tp for tp, err in results.items()
                        if err is not None and err.code == ErrorCode.election_not_needed)
    failed = {tp: err for tp, err in sorted(results.items())
              if err is not None and err.code != ErrorCode.election_not_needed}
    if done:
        print(f"Successfully completed leader election ({kind}) for partitions "
              + ", ".join(f"{t}-{p}" for t, p in done))
    if not_needed:
        print("Valid replica already elected for partitions "
              + ", ".join(f"{t}-{p}" for t, p in not_needed))
    for (t, p), err in failed.items():
        print(f"Error completing leader election ({kind}) for partition {t}-{p}: "
              f"{err.name}: {err}", file=sys.stderr)
    if not results:
        print(f"No partition needed an election ({kind})", file=sys.stderr)
    return 1 if failed else 0
