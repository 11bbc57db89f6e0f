"""The console's data: what every page and `tidegate top` show, through Tidegate's client.

`ConsoleClient` asks a cluster with Kafka requests only (the admin client, the group
requests of `cli/groups.py`, the transaction tools of KIP-664), never the broker's
insides, so the same console works against any Kafka broker. It returns plain
dataclasses; rendering is elsewhere (`pages.py`, `top.py`). Transactions and the
message browser live in `txns.py` and `fetch.py`, on top of this class.

Offsets per partition come from ListOffsets: earliest (log start), latest read_uncommitted
(high watermark) and latest read_committed (last stable offset). Sizes come from
DescribeLogDirs when the broker answers it (else they are unknown, -1).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tidegate import __version__
from tidegate.cli.groups import GroupClient, Member
from tidegate.client.types import ConfigEntry, PartitionInfo, TopicPartition
from tidegate.common.errors import ErrorCode, KafkaError, error_for_code

__all__ = ["ConsoleClient", "GroupDetail", "GroupSummary", "Overview", "PartitionOffsets",
           "TopicDetail", "TopicSummary"]

EARLIEST, LATEST = -2, -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    log_start: int
    high_watermark: int
    last_stable: int

    @property
    def pinned(self) -> int:
        """HW - LSO: records a read_committed consumer cannot read yet."""
        return max(self.high_watermark - self.last_stable, 0)


@dataclass(frozen=True, slots=True)
class TopicSummary:
    name: str
    partitions: int
    messages: int  # sum of HW - log start (offsets, markers included)
    size_bytes: int  # -1: unknown
    pinned: int  # sum of HW - LSO
    internal: bool = False


@dataclass(frozen=True, slots=True)
class PartitionRow:
    info: PartitionInfo
    offsets: PartitionOffsets
    size_bytes: int


@dataclass(frozen=True, slots=True)
class TopicDetail:
    name: str
    topic_id: str
    internal: bool
    partitions: list[PartitionRow]
    configs: dict[str, ConfigEntry]


@dataclass(frozen=True, slots=True)
class Overview:
    cluster_id: str
    controller_id: int
    brokers: list[tuple[int, str, int, str]]  # id, host, port, rack
    topics: int
    partitions: int
    groups: int
    console_version: str = __version__


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    members: int = -1
    lag: int = -1
    committed: int = -1  # sum of its committed offsets: its change is what it consumed


@dataclass(frozen=True, slots=True)
class LagRow:
    topic: str
    partition: int
    committed: int  # -1: none
    offsets: PartitionOffsets | None
    owner: str  # member id or ""

    @property
    def lag(self) -> int:
        if self.committed < 0 or self.offsets is None:
            return -1
        return max(self.offsets.high_watermark - self.committed, 0)

    @property
    def behind_lso(self) -> bool:
        """The LSO is pinned ahead of the committed offset: a read_committed consumer
        stops there until the transaction that pins it ends (what lies between its
        position and the LSO may all be aborted records and markers)."""
        o = self.offsets
        return o is not None and 0 <= self.committed <= o.last_stable < o.high_watermark


@dataclass(frozen=True, slots=True)
class GroupDetail:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[Member]
    partitions: list[LagRow] = field(default_factory=list)

    @property
    def lag(self) -> int:
        return sum(max(r.lag, 0) for r in self.partitions)


class ConsoleClient:
    """See the module docstring. Created on the event loop that serves the pages."""

    def __init__(self, settings: Mapping[str, object]) -> None:
        self.settings = dict(settings)
        self.groups = GroupClient(dict(settings, **{"client.id": "tidegate-console"}))
        self.admin = self.groups.admin
        self._started = False
        self._start_lock = asyncio.Lock()

    async def ensure_started(self) -> None:
        async with self._start_lock:
            if not self._started:
                await self.groups.start()
                self._started = True

    async def close(self) -> None:
        if self._started:
            await self.groups.close()
            self._started = False

    # -- offsets -----------------------------------------------------------------------

    async def partition_offsets(self, tps: Iterable[TopicPartition]
                                ) -> dict[TopicPartition, PartitionOffsets]:
        wanted = list(dict.fromkeys(tps))
        if not wanted:
            return {}
        start, hw, lso = await asyncio.gather(
            self.admin.list_offsets(dict.fromkeys(wanted, EARLIEST)),
            self.admin.list_offsets(dict.fromkeys(wanted, LATEST)),
            self.admin.list_offsets(dict.fromkeys(wanted, LATEST),
                                    isolation_level=READ_COMMITTED))
        out = {}
        for tp in wanted:
            s, h, c = start.get(tp), hw.get(tp), lso.get(tp)
            if s is None or h is None:
                continue
            out[tp] = PartitionOffsets(s.offset, h.offset, h.offset if c is None else c.offset)
        return out

    async def sizes(self) -> dict[TopicPartition, int]:
        """Bytes on disk per partition (the largest replica's); {} if the broker does not
        answer DescribeLogDirs."""
        try:
            dirs = await self.admin.describe_log_dirs()
        except KafkaError:
            return {}
        out: dict[TopicPartition, int] = {}
        for d in dirs:
            for tp, size in d.partition_sizes.items():
                out[tp] = max(out.get(tp, 0), size)
        return out

    # -- overview and topics -----------------------------------------------------------

    async def overview(self) -> Overview:
        cluster = await self.admin.describe_cluster()
        topics = await self.admin.list_topics()
        groups = await self.groups.list_groups()
        return Overview(cluster.cluster_id or "-", cluster.controller_id,
                        [(b.node_id, b.host, b.port, b.rack or "") for b in cluster.brokers],
                        len(topics), sum(t.partition_count for t in topics.values()),
                        len(groups))

    async def topics(self, include_internal: bool = False) -> list[TopicSummary]:
        found = await self.admin.list_topics(include_internal=include_internal)
        tps = [TopicPartition(n, p) for n, t in found.items() for p in t.partitions]
        offsets, sizes = await asyncio.gather(self.partition_offsets(tps), self.sizes())
        out = []
        for name, t in found.items():
            mine = [TopicPartition(name, p) for p in t.partitions]
            offs = [offsets[tp] for tp in mine if tp in offsets]
            size = sum(sizes.get(tp, 0) for tp in mine) if sizes else -1
            out.append(TopicSummary(name, t.partition_count,
                                    sum(o.high_watermark - o.log_start for o in offs), size,
                                    sum(o.pinned for o in offs), t.is_internal))
        return out

    async def topic(self, name: str) -> TopicDetail:
        desc = (await self.admin.describe_topics([name]))[0]
        tps = [TopicPartition(name, p.partition) for p in desc.partitions]
        offsets, sizes = await asyncio.gather(self.partition_offsets(tps), self.sizes())
        rows = [PartitionRow(p, offsets.get(TopicPartition(name, p.partition),
                                            PartitionOffsets(-1, -1, -1)),
                             sizes.get(TopicPartition(name, p.partition), -1))
                for p in desc.partitions]
        return TopicDetail(name, str(desc.topic_id), desc.is_internal, rows, desc.configs)

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> None:
        await self.admin.create_topic(name, partitions, replication_factor, configs)

    async def delete_topic(self, name: str) -> None:
        await self.admin.delete_topic(name)

    # -- groups ------------------------------------------------------------------------

    async def group_list(self) -> list[GroupSummary]:
        out = []
        for gid, ptype, state in await self.groups.list_groups():
            try:
                d = await self.group(gid)
                out.append(GroupSummary(gid, d.state, ptype, len(d.members), d.lag,
                                        sum(max(r.committed, 0) for r in d.partitions)))
            except KafkaError:
                out.append(GroupSummary(gid, state, ptype))
        return out

    async def group(self, group_id: str) -> GroupDetail:
        info, committed = await asyncio.gather(self.groups.describe(group_id),
                                               self.groups.committed(group_id))
        if info.state == "Dead" and not committed:
            raise error_for_code(ErrorCode.group_id_not_found.value,
                                 f"group {group_id!r} does not exist")
        owner: dict[tuple[str, int], str] = {}
        for m in info.members:
            for topic, parts in m.assignment.items():
                for p in parts:
                    owner[(topic, p)] = m.member_id
        keys = sorted(set(committed) | set(owner))
        known = await self.admin.list_topics(include_internal=True)
        offsets = await self.partition_offsets(
            TopicPartition(t, p) for t, p in keys if t in known)
        rows = [LagRow(t, p, committed.get((t, p), -1), offsets.get(TopicPartition(t, p)),
                       owner.get((t, p), "")) for t, p in keys]
        return GroupDetail(info.group_id, info.state, info.protocol_type, info.protocol,
                           info.members, rows)

    async def reset_plan(self, group_id: str, topic: str, to: str, offset: int
                         ) -> dict[int, tuple[int, int]]:
        """partition -> (current committed or -1, new offset) for resetting `group_id`
        on `topic` to earliest/latest/offset (clamped to the log, as Kafka's tool)."""
        desc = (await self.admin.describe_topics([topic], include_configs=False))[0]
        tps = [TopicPartition(topic, p.partition) for p in desc.partitions]
        offsets = await self.partition_offsets(tps)
        committed = await self.groups.committed(group_id)
        plan = {}
        for tp in tps:
            o = offsets[tp]
            new = {"earliest": o.log_start, "latest": o.high_watermark}.get(
                to, min(max(offset, o.log_start), o.high_watermark))
            plan[tp.partition] = (committed.get((topic, tp.partition), -1), new)
        return plan

    async def apply_reset(self, group_id: str, topic: str, plan: Mapping[int, int]) -> None:
        info = await self.groups.describe(group_id)
        if info.members:
            raise ValueError(f"group {group_id!r} has {len(info.members)} active members "
                             f"(state {info.state}); stop them before resetting its offsets")
        await self.groups.commit(group_id, {(topic, p): o for p, o in plan.items()})

    # -- throughput --------------------------------------------------------------------

    async def offset_totals(self) -> tuple[float, dict[str, int], int]:
        """(time, produced offsets per topic (sum of HWs), consumed (sum of every
        group's committed offsets)): two samples' difference is the throughput."""
        now = time.time()
        found = await self.admin.list_topics()
        tps = [TopicPartition(n, p) for n, t in found.items() for p in t.partitions]
        hws = await self.admin.list_offsets(dict.fromkeys(tps, LATEST)) if tps else {}
        produced: dict[str, int] = dict.fromkeys(found, 0)
        for tp, o in hws.items():
            if o is not None:
                produced[tp.topic] += o.offset
        consumed = 0
        for gid, _, _ in await self.groups.list_groups():
            try:
                consumed += sum((await self.groups.committed(gid)).values())
            except KafkaError:
                continue
        return now, produced, consumed
