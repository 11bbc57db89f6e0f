"""`tidegate topics create|list|describe|delete|alter-config`: manage topics.

Mirrors `kafka-topics.sh` / `kafka-configs.sh` on top of the admin client. Every
subcommand takes `--bootstrap-server` (default localhost:9092). Failures print one
line saying what went wrong and what to do, and exit non-zero.

`describe` prints kafka-topics' lines (leader, replicas, ISR per partition), adds
`UnderReplicated: true` or `Offline: true` to a partition that is so (health.py), and
ends with one line per broker log directory: its free space (DescribeLogDirs v4) and a
warning when that is under the broker's `log.dir.free.space.warn.bytes`. With
`--under-replicated-partitions` / `--unavailable-partitions` it prints only the
matching partition lines (of every topic, internal ones included, unless one is named),
as kafka-topics does.

`list` prints one name per line; with no topic it prints "no topics" on stderr (as the
other list commands do), so a script reading stdout still gets nothing.

This module also holds the two helpers the client commands share (`add_bootstrap`,
`run_client`), to keep the CLI to one module per command.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.health import ids, is_offline, is_under_replicated
from tidegate.client.config import AdminConfig
from tidegate.client.errors import ConfigError, explain
from tidegate.client.types import ConfigResource, LogDirDescription, NewTopic, PartitionInfo
from tidegate.common.errors import KafkaError

if TYPE_CHECKING:  # imported when a command runs, not for `tidegate topics ... --help`
    from tidegate.client.admin import AsyncAdmin

FREE_SPACE_WARN_KEY = "log.dir.free.space.warn.bytes"


def run_client(command: str, main: Callable[[], Awaitable[int]]) -> int:
    """Run an async command; turn client errors into one line on stderr and exit 1."""
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(_guard(main))
        return int(uvloop.run(_guard(main)))
    except BrokenPipeError:
        raise  # the reader went away (e.g. `| head`): cli.main exits quietly
    except (KafkaError, ConfigError, OSError, ValueError) as e:
        print(f"tidegate {command}: {explain(e)}", file=sys.stderr)
        return 1


async def _guard(main: Callable[[], Awaitable[int]]) -> int:
    return await main()


def print_none(message: str) -> None:
    """A list command found nothing: say so on stderr, for the person at the terminal
    (stdout stays empty for scripts that read the names or rows)."""
    print(message, file=sys.stderr)


def parse_pairs(items: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} {item!r} must look like KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def add_parser(sub: Any) -> None:
    p = sub.add_parser("topics", help="create, list, describe, delete and configure topics",
                       description="Manage topics (like kafka-topics.sh).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    c = actions.add_parser("create", help="create a topic")
    c.add_argument("name")
    c.add_argument("--partitions", type=int, default=1, help="partition count (default 1)")
    c.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                   help="replicas per partition (default: the broker's "
                        "default.replication.factor, 1 unless set)")
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config, e.g. --config retention.ms=3600000 (repeatable)")
    c.add_argument("--if-not-exists", action="store_true",
                   help="succeed if the topic already exists")

    lst = actions.add_parser("list", help="list topic names")
    lst.add_argument("--include-internal", action="store_true",
                     help="also list internal topics such as __consumer_offsets")

    d = actions.add_parser("describe", help="show partitions, leaders, replicas, ISR and configs")
    d.add_argument("name", nargs="?", help="topic (default: every topic)")
    d.add_argument("--include-internal", action="store_true",
                   help="with no topic named, also describe internal topics")
    d.add_argument("--under-replicated-partitions", action="store_true",
                   help="only partitions whose ISR is smaller than their replicas")
    d.add_argument("--unavailable-partitions", action="store_true",
                   help="only partitions without a live leader")

    rm = actions.add_parser("delete", help="delete a topic and its data")
    rm.add_argument("name")

    a = actions.add_parser("alter-config", help="set or delete topic configs")
    a.add_argument("name")
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="set a config (repeatable)")
    a.add_argument("--delete", action="append", default=[], metavar="KEY",
                   help="revert a config to its default (repeatable)")

    for leaf in (c, lst, d, rm, a):
        add_bootstrap(leaf)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tidegate.client.admin import AsyncAdmin

    async def main() -> int:
        admin = AsyncAdmin(client_settings(args, AdminConfig,
                                           {"client.id": "tidegate-topics"}))
        try:
            await admin.start()
            return await ACTIONS[args.action](admin, args)
        finally:
            await admin.close()
    return run_client("topics", main)


async def _create(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    configs = parse_pairs(args.config, "--config")
    result = await admin.create_topics(
        [NewTopic(args.name, args.partitions, args.replication_factor, configs)])
    err = result.get(args.name)
    if err is not None:
        if args.if_not_exists and err.name == "TOPIC_ALREADY_EXISTS":
            return 0
        raise err
    print(f"Created topic {args.name}.")
    return 0


async def _list(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    names = await admin.list_topics(include_internal=args.include_internal)
    for name in names:
        print(name)
    if not names:
        print_none("no topics" + ("" if args.include_internal else
                                  " (internal topics are listed with --include-internal)"))
    return 0


def partition_line(topic: str, p: PartitionInfo, live: set[int]) -> str:
    """kafka-topics' describe line, marked when the partition needs attention."""
    line = (f"\tTopic: {topic}\tPartition: {p.partition}\t"
            f"Leader: {p.leader if p.leader >= 0 else 'none'}\t"
            f"Replicas: {ids(p.replicas)}\tIsr: {ids(p.isr)}")
    if p.offline_replicas:
        line += f"\tOfflineReplicas: {ids(p.offline_replicas)}"
    if is_offline(p, live):
        line += "\tOffline: true"
    elif is_under_replicated(p, live):
        line += "\tUnderReplicated: true"
    return line


def wanted_partition(p: PartitionInfo, live: set[int], under_replicated: bool,
                     unavailable: bool) -> bool:
    """The filters of kafka-topics --describe: none given keeps all, several are ORed."""
    if not under_replicated and not unavailable:
        return True
    return ((under_replicated and is_under_replicated(p, live))
            or (unavailable and is_offline(p, live)))


async def _describe(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    live = {b.node_id for b in (await admin.describe_cluster()).brokers}
    if args.under_replicated_partitions or args.unavailable_partitions:
        return await _describe_filtered(admin, args, live)
    names = None
    if args.name is not None:
        names = [args.name]
    elif args.include_internal:
        names = list(await admin.list_topics(include_internal=True))
    for desc in await admin.describe_topics(names):
        rf = max((len(p.replicas) for p in desc.partitions), default=0)
        overrides = ",".join(f"{k}={e.value}" for k, e in sorted(desc.configs.items())
                             if not e.is_default and not e.is_sensitive)
        print(f"Topic: {desc.name}\tTopicId: {desc.topic_id}\t"
              f"PartitionCount: {len(desc.partitions)}\tReplicationFactor: {rf}\t"
              f"Configs: {overrides}")
        for p in desc.partitions:
            print(partition_line(desc.name, p, live))
    try:
        dirs = await admin.describe_log_dirs()
    except (KafkaError, ConfigError) as e:  # e.g. a broker without DescribeLogDirs v4
        print(f"LogDirs: unknown ({explain(e)})")
        return 0
    for d in dirs:
        print(await _log_dir_line(admin, d))
    return 0


async def _describe_filtered(admin: AsyncAdmin, args: argparse.Namespace,
                             live: set[int]) -> int:
    """Only the matching partition lines, no topic headers nor log dirs (kafka-topics);
    a health check reads an empty stdout as "nothing to fix"."""
    names = ([args.name] if args.name is not None
             else list(await admin.list_topics(include_internal=True)))
    found = 0
    for desc in await admin.describe_topics(names, include_configs=False):
        for p in desc.partitions:
            if wanted_partition(p, live, args.under_replicated_partitions,
                                args.unavailable_partitions):
                print(partition_line(desc.name, p, live))
                found += 1
    if not found:
        what = " or ".join(w for w, on in (("under-replicated", args.under_replicated_partitions),
                                          ("unavailable", args.unavailable_partitions)) if on)
        print_none(f"no {what} partitions")
    return 0


def _size(n: int) -> str:
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


async def _log_dir_line(admin: AsyncAdmin, d: LogDirDescription) -> str:
    where = f"LogDir: {d.path}\tBroker: {d.broker_id}"
    if d.error is not None:
        return f"{where}\tError: {d.error}"
    if d.usable_bytes < 0 or d.total_bytes <= 0:
        return f"{where}\tFree: unknown"
    line = (f"{where}\tFree: {_size(d.usable_bytes)} of {_size(d.total_bytes)} "
            f"({100 * d.usable_bytes / d.total_bytes:.1f}%)")
    threshold = await _warn_threshold(admin, d.broker_id)
    if threshold and d.usable_bytes < threshold:
        line += (f"\tWARNING: free space is under {FREE_SPACE_WARN_KEY} ({_size(threshold)}); "
                 f"produce requests fail with KAFKA_STORAGE_ERROR once the disk is full")
    return line


async def _warn_threshold(admin: AsyncAdmin, broker_id: int) -> int | None:
    resource = ConfigResource.broker(broker_id)
    try:
        entry = (await admin.describe_configs([resource]))[resource].get(FREE_SPACE_WARN_KEY)
    except KafkaError:
        return None
    try:
        return None if entry is None or entry.value is None else int(entry.value)
    except ValueError:
        return None


async def _delete(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    await admin.delete_topic(args.name)
    print(f"Deleted topic {args.name}.")
    return 0


async def _alter(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    to_set = parse_pairs(args.set, "--set")
    if not to_set and not args.delete:
        raise ValueError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    await admin.incremental_alter_configs(ConfigResource.topic(args.name), to_set, args.delete)
    changes = [f"{k}={v}" for k, v in to_set.items()] + [f"-{k}" for k in args.delete]
    print(f"Updated configs of topic {args.name}: {', '.join(changes)}.")
    return 0


ACTIONS: dict[str, Callable[[AsyncAdmin, argparse.Namespace], Awaitable[int]]] = {
    "create": _create, "list": _list, "describe": _describe, "delete": _delete,
    "alter-config": _alter,
}
