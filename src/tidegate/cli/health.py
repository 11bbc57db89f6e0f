"""Partition health as Kafka's tools judge it, and the tables `tidegate cluster status`
prints. Pure functions over the admin client's metadata types: no I/O, unit-tested.

The two conditions never overlap, so every partition is counted once:

- *offline* (kafka-topics' "unavailable"): no leader, or a leader that is not a live
  broker. Nobody can produce to or consume from it.
- *under-replicated*: a live leader but fewer in-sync replicas than replicas. It serves
  clients, but one more failure may lose acknowledged data or availability.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tidegate.client.types import ClusterDescription, PartitionInfo, TopicInfo

__all__ = [
    "ClusterHealth",
    "Problem",
    "ids",
    "is_offline",
    "is_under_replicated",
    "plural",
    "status_lines",
    "summarize",
    "table",
]

MAX_PROBLEM_ROWS = 20  # beyond this, `topics describe` with the filters lists them all


def is_offline(p: PartitionInfo, live: Collection[int]) -> bool:
    return p.leader < 0 or p.leader not in live


def is_under_replicated(p: PartitionInfo, live: Collection[int]) -> bool:
    return not is_offline(p, live) and len(p.isr) < len(p.replicas)


def ids(values: Iterable[int]) -> str:
    """Broker ids as Kafka's tools print them: comma-separated, '' for none."""
    return ",".join(str(v) for v in values)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart, as the other `tidegate` tables."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


@dataclass(frozen=True)
class Problem:
    topic: str
    partition: PartitionInfo
    offline: bool  # else under-replicated

    def describe(self, live: Collection[int]) -> str:
        p = self.partition
        if not self.offline:
            missing = [r for r in p.replicas if r not in p.isr]
            return f"under-replicated: {ids(missing)} not in ISR"
        if p.leader < 0:
            return "offline: no leader"
        return f"offline: leader {p.leader} is not a live broker"


@dataclass
class ClusterHealth:
    live: set[int]
    controller: int = -1  # -1 or an id that is not live: no controller right now
    leaders: dict[int, int] = field(default_factory=dict)  # broker -> partitions led
    replicas: dict[int, int] = field(default_factory=dict)  # broker -> replicas held
    topics: int = 0
    internal_topics: int = 0
    partitions: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def offline(self) -> int:
        return sum(1 for x in self.problems if x.offline)

    @property
    def under_replicated(self) -> int:
        return sum(1 for x in self.problems if not x.offline)

    @property
    def has_controller(self) -> bool:
        return self.controller in self.live

    @property
    def healthy(self) -> bool:
        return not self.problems and self.has_controller


def summarize(cluster: ClusterDescription, topics: Mapping[str, TopicInfo]) -> ClusterHealth:
    live = {b.node_id for b in cluster.brokers}
    h = ClusterHealth(live, cluster.controller_id, leaders=dict.fromkeys(live, 0),
                      replicas=dict.fromkeys(live, 0))
    for name in sorted(topics):
        info = topics[name]
        h.topics += 1
        h.internal_topics += info.is_internal
        for pid in sorted(info.partitions):
            p = info.partitions[pid]
            h.partitions += 1
            if p.leader >= 0:
                h.leaders[p.leader] = h.leaders.get(p.leader, 0) + 1
            for r in p.replicas:
                h.replicas[r] = h.replicas.get(r, 0) + 1
            if is_offline(p, live) or is_under_replicated(p, live):
                h.problems.append(Problem(name, p, is_offline(p, live)))
    return h


def status_lines(cluster: ClusterDescription, h: ClusterHealth) -> list[str]:
    """What `tidegate cluster status` prints: the brokers, a count line, the problem
    partitions (at most MAX_PROBLEM_ROWS) and a verdict."""
    controller = f"broker {h.controller}" if h.has_controller else "none"
    out = [f"Cluster id: {cluster.cluster_id or '-'}  Controller: {controller}  "
           f"Brokers: {len(h.live)}"]
    rows = [["BROKER", "ADDRESS", "RACK", "ROLE", "LEADERS", "REPLICAS"]]
    for b in sorted(cluster.brokers, key=lambda b: b.node_id):
        role = "controller" if b.node_id == cluster.controller_id else "broker"
        rows.append([str(b.node_id), f"{b.host}:{b.port}", b.rack or "-", role,
                     str(h.leaders.get(b.node_id, 0)), str(h.replicas.get(b.node_id, 0))])
    # brokers that partitions name but that are not registered: down, or gone for good
    for bid in sorted(set(h.replicas) - h.live):
        rows.append([str(bid), "-", "-", "not live", str(h.leaders.get(bid, 0)),
                     str(h.replicas[bid])])
    out += table(rows)
    user = h.topics - h.internal_topics
    out.append(f"Topics: {user} (+{h.internal_topics} internal)  Partitions: {h.partitions}  "
               f"Under-replicated: {h.under_replicated}  Offline: {h.offline}")
    if h.healthy:
        out.append("Healthy: every partition has a live leader and all its replicas in sync.")
        return out
    if not h.problems:  # only the controller is missing
        out.append("Not healthy: no controller (brokers elect one through ZooKeeper within "
                   "seconds; if this lasts, check that ZooKeeper is up).")
        return out
    rows = [["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "PROBLEM"]]
    for x in h.problems[:MAX_PROBLEM_ROWS]:
        p = x.partition
        rows.append([x.topic, str(p.partition), str(p.leader) if p.leader >= 0 else "none",
                     ids(p.replicas) or "-", ids(p.isr) or "-", x.describe(h.live)])
    out.append("")
    out += table(rows)
    more = len(h.problems) - MAX_PROBLEM_ROWS
    if more > 0:
        out.append(f"... and {more} more: `tidegate topics describe --under-replicated-partitions "
                   f"--unavailable-partitions` lists them all")
    parts = [plural(n, f"{what} partition") for n, what in
             ((h.under_replicated, "under-replicated"), (h.offline, "offline")) if n]
    if not h.has_controller:
        parts.append("no controller")
    out.append(f"Not healthy: {' and '.join(parts)}.")
    return out
