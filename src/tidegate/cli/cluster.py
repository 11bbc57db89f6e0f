"""`tidegate cluster up|status`: a development cluster on this machine, and a cluster's
health at a glance.

`up` is in cluster_up.py (processes) and cluster_plan.py (layout and settings). `status`
asks DescribeCluster (live brokers, controller) and Metadata (every partition's leader,
replicas and ISR, internal topics included) through the admin client, prints one table
of brokers and the partitions that need attention (health.py), and exits 1 when any
partition is under-replicated or offline, or there is no controller, so a script or a
health check can use it as is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tidegate.cli.cluster_plan import ClusterPlan, PlanError
from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.health import status_lines, summarize
from tidegate.cli.topics import run_client
from tidegate.client.admin import AsyncAdmin
from tidegate.client.config import AdminConfig

DEFAULT_DIR = Path("tidegate-cluster")

UP_EPILOG = """\
Data and logs go under --dir: broker-N/ (log.dirs of broker N), zookeeper/, logs/*.log.
Running `cluster up` again on the same directory finds the topics and data again.
Ctrl-C or SIGTERM stops the brokers one by one (SIGTERM, SIGKILL after --stop-timeout),
then ZooKeeper; a second Ctrl-C kills what is left at once.
Needs Debian's ZooKeeper (`apt-get install zookeeper`, or `make deps-system`).
Exit status: 0 after a clean stop, 1 if the cluster could not start, 2 for bad arguments."""

STATUS_EPILOG = """\
A partition is under-replicated when its in-sync replicas (ISR) are fewer than its
replicas, and offline when it has no live leader.
Exit status: 0 when healthy; 1 when any partition is under-replicated or offline, there
is no controller, or the cluster cannot be reached."""


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1..65535)")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cluster", help="start a development cluster here; show a cluster's health",
                       description="Run a cluster on this machine, or check a cluster.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    up = actions.add_parser(
        "up", help="start ZooKeeper and N brokers on this machine until Ctrl-C",
        description="Start a ZooKeeper and N brokers on this machine for development,\n"
                    "print the bootstrap list, and run until Ctrl-C.",
        epilog=UP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    up.add_argument("--brokers", type=_count, default=3, metavar="N",
                    help="number of brokers, ids 1..N (default 3)")
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                    help=f"directory for data and logs (default ./{DEFAULT_DIR})")
    up.add_argument("--base-port", type=_port, default=9092, metavar="PORT",
                    help="port of broker 1; broker N listens on PORT+N-1 (default 9092)")
    up.add_argument("--zk-port", type=_port, default=2181, metavar="PORT",
                    help="ZooKeeper's client port (default 2181)")
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config for every broker, e.g. --override "
                         "default.replication.factor=3 (repeatable)")
    up.add_argument("--stop-timeout", type=float, default=20.0, metavar="SECONDS",
                    help="how long each process may take to stop before it is killed "
                         "(default 20)")
    up.set_defaults(func=run_up)

    st = actions.add_parser(
        "status", help="brokers, controller, under-replicated and offline partitions",
        description="Show the brokers, the controller, the partitions each broker leads,\n"
                    "and the partitions that are under-replicated or offline.",
        epilog=STATUS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap(st)
    st.set_defaults(func=run_status)


def run_up(args: argparse.Namespace) -> int:
    from tidegate.cli.cluster_up import ClusterLauncher, LaunchError
    from tidegate.common.config import BrokerConfig
    from tidegate.common.errors import KafkaError

    try:
        plan = ClusterPlan.create(args.dir, args.brokers, args.base_port, args.zk_port,
                                  args.override)
        BrokerConfig.load(None, [f"{k}={v}" for k, v in plan.broker_config(1).items()])
    except PlanError as e:
        print(f"tidegate cluster: {e}", file=sys.stderr)
        return 2
    except KafkaError as e:  # a bad --override value, found before anything starts
        print(f"tidegate cluster: configuration error: {e}", file=sys.stderr)
        return 2
    try:
        return ClusterLauncher(plan, stop_timeout=args.stop_timeout).run()
    except (LaunchError, OSError) as e:
        print(f"tidegate cluster: {e}", file=sys.stderr)
        return 1


def run_status(args: argparse.Namespace) -> int:
    async def main() -> int:
        admin = AsyncAdmin(client_settings(args, AdminConfig,
                                           {"client.id": "tidegate-cluster"}))
        try:
            await admin.start()
            cluster = await admin.describe_cluster()
            topics = await admin.list_topics(include_internal=True)
        finally:
            await admin.close()
        health = summarize(cluster, topics)
        for line in status_lines(cluster, health):
            print(line)
        return 0 if health.healthy else 1
    return run_client("cluster", main)
