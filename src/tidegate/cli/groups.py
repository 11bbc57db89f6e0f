"""`tidegate groups list|describe|reset-offsets|delete`: consumer groups (like
`kafka-consumer-groups.sh`).

`describe` shows the group's state and members, then one line per partition with the
committed offset, the log end offset and the lag (and the member that owns it).
`reset-offsets` sets a group's committed offsets for one topic to the earliest or
latest offsets or a given one (clamped to what the log holds, as Kafka's tool does);
like Kafka's tool it refuses while the group has members. Group requests go straight
to the group's coordinator over the client's connections.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.topics import print_none, run_client
from tidegate.client.admin import AsyncAdmin
from tidegate.client.config import AdminConfig
from tidegate.client.net import BrokerConnection, parse_address
from tidegate.client.security import ClientSecurity
from tidegate.client.types import TopicPartition
from tidegate.common.errors import ErrorCode, KafkaError, UnsupportedVersionError, error_for_code
from tidegate.protocol.coordinator_records import assignment_partitions

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42
CONSUMER_GROUP_DESCRIBE = 69  # KIP-848 groups
# The versions this module reads and writes (the single-group forms).
_RANGES = {FIND_COORDINATOR: (1, 3), DESCRIBE_GROUPS: (0, 5), LIST_GROUPS: (0, 4),
           OFFSET_FETCH: (2, 7), OFFSET_COMMIT: (2, 8), DELETE_GROUPS: (0, 2),
           CONSUMER_GROUP_DESCRIBE: (0, 1)}
_RETRIABLE = {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
              ErrorCode.not_coordinator}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("groups", help="list, describe, reset and delete consumer groups",
                       description="Manage consumer groups (like kafka-consumer-groups.sh).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    lst = actions.add_parser("list", help="list groups with their state")
    d = actions.add_parser("describe", help="members, assignment, offsets and lag")
    d.add_argument("group")
    r = actions.add_parser("reset-offsets", help="set a group's committed offsets for a topic")
    r.add_argument("group")
    r.add_argument("--topic", required=True)
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offsets")
    to.add_argument("--to-latest", action="store_true", help="the log end offsets")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N in every partition")
    r.add_argument("--dry-run", action="store_true", help="show the new offsets, change nothing")
    rm = actions.add_parser("delete", help="delete an empty group and its offsets")
    rm.add_argument("group")
    for leaf in (lst, d, r, rm):
        add_bootstrap(leaf)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def main() -> int:
        client = GroupClient(client_settings(args, AdminConfig,
                                             {"client.id": "tidegate-groups"}))
        try:
            await client.start()
            return await ACTIONS[args.action](client, args)
        finally:
            await client.close()
    return run_client("groups", main)


@dataclass(frozen=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]]


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[Member]
    group_type: str = "classic"  # or "consumer" (KIP-848)


class GroupClient:
    """Group requests for one command: coordinator lookup, retries while it loads."""

    def __init__(self, settings: dict[str, object]) -> None:
        self.admin = AsyncAdmin(settings)
        self.security = ClientSecurity.from_config(self.admin.config)
        self.bootstrap = [parse_address(a) for a in self.admin.config.bootstrap_servers]
        self._conns: dict[tuple[str, int], BrokerConnection] = {}

    async def start(self) -> None:
        await self.admin.start()

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()
        await self.admin.close()

    async def _conn(self, host: str, port: int) -> BrokerConnection:
        conn = self._conns.get((host, port))
        if conn is None or conn.closed:
            conn = await BrokerConnection.open(host, port, client_id="tidegate-groups",
                                               security=self.security)
            self._conns[(host, port)] = conn
        return conn

    @staticmethod
    def _version(conn: BrokerConnection, api: int) -> int:
        lo, hi = _RANGES[api]
        theirs = conn.broker_versions.get(api)
        if theirs is None or theirs[1] < lo or theirs[0] > hi:
            raise UnsupportedVersionError(f"the broker does not support API {api} "
                                          f"at versions {lo}-{hi} (it has {theirs})")
        return min(hi, theirs[1])

    async def _call(self, conn: BrokerConnection, api: int, data: dict[str, Any]) -> Any:
        return await conn.request(api, data, version=self._version(conn, api))

    async def _retry(self, attempt: Callable[[], Awaitable[Any]]) -> Any:
        """Retry while the coordinator is loading or moving (up to ~30 s)."""
        for _ in range(60):
            try:
                return await attempt()
            except KafkaError as e:
                if e.code not in _RETRIABLE:
                    raise
            await asyncio.sleep(0.5)
        return await attempt()

    async def coordinator(self, group: str) -> BrokerConnection:
        async def find() -> BrokerConnection:
            conn = await self._conn(*self.bootstrap[0])
            resp = await self._call(conn, FIND_COORDINATOR, {"key": group, "key_type": 0})
            _check(resp.error_code, f"cannot find the coordinator of group {group!r}")
            return await self._conn(resp.host, int(resp.port))
        result: BrokerConnection = await self._retry(find)
        return result

    async def list_groups(self) -> list[tuple[str, str, str]]:
        cluster = await self.admin.describe_cluster()
        out: list[tuple[str, str, str]] = []
        for b in cluster.brokers:
            async def ask(host: str = b.host, port: int = b.port) -> Any:
                conn = await self._conn(host, port)
                resp = await self._call(conn, LIST_GROUPS, {"states_filter": []})
                _check(resp.error_code, "cannot list groups")
                return resp
            resp = await self._retry(ask)
            out += [(g.group_id, g.protocol_type, getattr(g, "group_state", ""))
                    for g in resp.groups]
        return sorted(out)

    async def describe(self, group: str) -> GroupInfo:
        async def ask() -> GroupInfo:
            conn = await self.coordinator(group)
            if CONSUMER_GROUP_DESCRIBE in conn.broker_versions:
                found = await self._describe_consumer(conn, group)
                if found is not None:
                    return found
            resp = await self._call(conn, DESCRIBE_GROUPS, {"groups": [group]})
            g = resp.groups[0]
            _check(g.error_code, f"cannot describe group {group!r}")
            members = [
                Member(m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                       m.client_host, assignment_partitions(bytes(m.member_assignment)) or {})
                for m in g.members
            ]
            return GroupInfo(g.group_id, g.group_state, g.protocol_type, g.protocol_data,
                             members)
        result: GroupInfo = await self._retry(ask)
        return result

    async def _describe_consumer(self, conn: BrokerConnection, group: str
                                 ) -> GroupInfo | None:
        """A KIP-848 group as ConsumerGroupDescribe shows it; None if not one."""
        resp = await self._call(conn, CONSUMER_GROUP_DESCRIBE, {"group_ids": [group]})
        g = resp.groups[0]
        if int(getattr(g.error_code, "value", g.error_code)) == \
                ErrorCode.group_id_not_found.value:
            return None  # a classic group (or none): DescribeGroups tells
        _check(g.error_code, f"cannot describe group {group!r}")
        members = [
            Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                   {str(t.topic_name): sorted(int(p) for p in t.partitions)
                    for t in m.assignment.topic_partitions})
            for m in g.members
        ]
        return GroupInfo(g.group_id, g.group_state, "consumer", g.assignor_name, members,
                         "consumer")

    async def committed(self, group: str) -> dict[tuple[str, int], int]:
        async def ask() -> dict[tuple[str, int], int]:
            conn = await self.coordinator(group)
            resp = await self._call(conn, OFFSET_FETCH, {"group_id": group, "topics": None})
            _check(resp.error_code, f"cannot fetch the offsets of group {group!r}")
            out = {}
            for t in resp.topics:
                for p in t.partitions:
                    _check(p.error_code, f"cannot fetch offsets of {t.name}-{p.partition_index}")
                    if int(p.committed_offset) >= 0:
                        out[(t.name, int(p.partition_index))] = int(p.committed_offset)
            return out
        result: dict[tuple[str, int], int] = await self._retry(ask)
        return result

    async def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, p), o in sorted(offsets.items()):
            topics.setdefault(topic, []).append(
                {"partition_index": p, "committed_offset": o, "committed_metadata": ""})

        async def ask() -> None:
            conn = await self.coordinator(group)
            resp = await self._call(conn, OFFSET_COMMIT, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "retention_time": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            for t in resp.topics:
                for p in t.partitions:
                    _check(p.error_code, f"cannot commit {t.name}-{p.partition_index}")
        await self._retry(ask)

    async def delete(self, group: str) -> None:
        async def ask() -> None:
            conn = await self.coordinator(group)
            resp = await self._call(conn, DELETE_GROUPS, {"groups_names": [group]})
            _check(resp.results[0].error_code, f"cannot delete group {group!r}")
        await self._retry(ask)

    async def end_offsets(self, tps: list[tuple[str, int]], which: int = -1
                          ) -> dict[tuple[str, int], int]:
        """Log end (-1) or start (-2) offsets; partitions that no longer exist are left
        out."""
        if not tps:
            return {}
        known = await self.admin.list_topics(include_internal=True)
        query = {TopicPartition(t, p): which for t, p in tps if t in known}
        found = await self.admin.list_offsets(query) if query else {}
        return {(tp.topic, tp.partition): o.offset for tp, o in found.items() if o is not None}


def _check(code: Any, what: str) -> None:
    value = int(getattr(code, "value", code))
    if value != 0:
        raise error_for_code(value, what)


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


async def _list(client: GroupClient, args: argparse.Namespace) -> int:
    groups = await client.list_groups()
    if groups:
        _table([["GROUP", "STATE", "PROTOCOL-TYPE"]] +
               [[g, s or "-", pt or "-"] for g, pt, s in groups])
    else:
        print_none("no consumer groups")
    return 0


async def _describe(client: GroupClient, args: argparse.Namespace) -> int:
    info = await client.describe(args.group)
    offsets = await client.committed(args.group)
    if info.state == "Dead" and not offsets:
        raise error_for_code(ErrorCode.group_id_not_found.value,
                             f"group {args.group!r} does not exist")
    owner: dict[tuple[str, int], Member] = {}
    for m in info.members:
        for topic, parts in m.assignment.items():
            for p in parts:
                owner[(topic, p)] = m
    protocol = f"{info.protocol_type or '-'}/{info.protocol or '-'}"
    print(f"GROUP {info.group_id}  TYPE {info.group_type}  STATE {info.state}  "
          f"PROTOCOL {protocol}  MEMBERS {len(info.members)}")
    if info.members:
        print()
        _table([["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"]] + [
            [m.member_id, m.instance_id or "-", m.client_id, m.host,
             ",".join(f"{t}-{p}" for t, ps in sorted(m.assignment.items()) for p in ps) or "-"]
            for m in info.members])
    tps = sorted(set(offsets) | set(owner))
    if not tps:
        print("\nno committed offsets")
        return 0
    ends = await client.end_offsets(tps)
    rows = [["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID"]]
    for tp in tps:
        cur, end = offsets.get(tp), ends.get(tp)
        lag = "-" if cur is None or end is None else str(max(end - cur, 0))
        holder = owner.get(tp)
        rows.append([tp[0], str(tp[1]), "-" if cur is None else str(cur),
                     "-" if end is None else str(end), lag, holder.member_id if holder else "-"])
    print()
    _table(rows)
    return 0


async def _reset(client: GroupClient, args: argparse.Namespace) -> int:
    info = await client.describe(args.group)
    if info.members:
        raise ValueError(f"group {args.group!r} has {len(info.members)} active members "
                         f"(state {info.state}); stop them before resetting its offsets")
    desc = await client.admin.describe_topics([args.topic], include_configs=False)
    tps = [(args.topic, p.partition) for p in desc[0].partitions]
    earliest = await client.end_offsets(tps, -2)
    latest = await client.end_offsets(tps, -1)
    new: dict[tuple[str, int], int] = {}
    for tp in tps:
        if args.to_earliest:
            new[tp] = earliest[tp]
        elif args.to_latest:
            new[tp] = latest[tp]
        else:
            new[tp] = min(max(args.to_offset, earliest[tp]), latest[tp])
    if not args.dry_run:
        await client.commit(args.group, new)
    _table([["TOPIC", "PARTITION", "NEW-OFFSET"]] +
           [[t, str(p), str(o)] for (t, p), o in sorted(new.items())])
    return 0


async def _delete(client: GroupClient, args: argparse.Namespace) -> int:
    await client.delete(args.group)
    print(f"Deleted group {args.group}.")
    return 0


ACTIONS: dict[str, Callable[[GroupClient, argparse.Namespace], Awaitable[int]]] = {
    "list": _list, "describe": _describe, "reset-offsets": _reset, "delete": _delete,
}
