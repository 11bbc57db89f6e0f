"""`tidegate top`'s screen: throughput, lag and open transactions as text (sans-IO render).

`collect()` takes one `Snapshot` through the console's data functions (`data.py`,
`txns.py`): every topic's end offsets, every group's committed offsets and lag, the open
transactions and the partitions whose LSO they pin. `render()` turns two consecutive
snapshots into the lines of one screen; rates are the change of end offsets (produced)
and of committed offsets (consumed) between them, per second. The command
(`cli/top.py`) redraws it in place with ANSI escapes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tidegate.console.data import ConsoleClient, GroupSummary
from tidegate.console.txns import TxnView, transactions

__all__ = ["Snapshot", "collect", "render"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    at: float  # seconds (wall clock)
    produced: dict[str, int]  # topic -> sum of its end offsets
    groups: list[GroupSummary]
    txns: TxnView


async def collect(client: ConsoleClient) -> Snapshot:
    at, produced, _ = await client.offset_totals()
    return Snapshot(at, produced, await client.group_list(), await transactions(client))


def _rate(now: int, before: int | None, seconds: float) -> str:
    if before is None or seconds <= 0:
        return "-"
    return f"{max(now - before, 0) / seconds:.1f}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def render(cur: Snapshot, prev: Snapshot | None, source: str, width: int = 120) -> list[str]:
    dt = cur.at - prev.at if prev else 0.0
    when = time.strftime("%H:%M:%S", time.localtime(cur.at))
    lines = [f"tidegate top — {source} — {when} (Ctrl-C quits)", ""]
    rows = [["TOPIC", "END-OFFSETS", "PRODUCED/S"]]
    for topic, total in sorted(cur.produced.items()):
        rows.append([topic, str(total),
                     _rate(total, prev.produced.get(topic) if prev else None, dt)])
    lines += _table(rows) if len(rows) > 1 else ["no topics"]
    lines.append("")
    before = {g.group_id: g.committed for g in prev.groups} if prev else {}
    rows = [["GROUP", "STATE", "MEMBERS", "LAG", "CONSUMED/S"]]
    for g in cur.groups:
        rows.append([g.group_id, g.state, "-" if g.members < 0 else str(g.members),
                     "-" if g.lag < 0 else str(g.lag),
                     _rate(g.committed, before.get(g.group_id), dt)
                     if g.committed >= 0 else "-"])
    lines += _table(rows) if len(rows) > 1 else ["no consumer groups"]
    lines.append("")
    now_ms = int(cur.at * 1000)
    rows = [["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "AGE-S", "PARTITIONS"]]
    for t in cur.txns.open:
        d, age = t.description, t.age_ms(now_ms)
        rows.append([d.transactional_id, d.state, str(d.producer_id),
                     "-" if age < 0 else f"{age / 1000:.1f}",
                     ",".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions) or "-"])
    lines += _table(rows) if len(rows) > 1 else ["no open transactions"]
    if cur.txns.pinned:
        lines.append("")
        rows = [["PINNED PARTITION", "LSO", "HW", "BY PRODUCER", "TRANSACTIONAL-ID", "HANGING"]]
        for p in cur.txns.pinned:
            rows.append([f"{p.tp.topic}-{p.tp.partition}", str(p.offsets.last_stable),
                         str(p.offsets.high_watermark),
                         "-" if p.producer_id < 0 else str(p.producer_id),
                         p.transactional_id or "-", p.hanging or "-"])
        lines += _table(rows)
    # names come from the cluster: drop control characters so they cannot move the cursor
    clean = ["".join(ch for ch in line if ch >= " " or ch == "\t") for line in lines]
    return [line[:width] for line in clean]
