"""A history of transactional sends and read_committed polls, and its checker.

In the style of Jepsen's Kafka queue workload. Worker processes (threads) append
operations to a `History`: each operation is an `invoke` followed by exactly one
completion by the same process — `ok` (it happened), `fail` (it certainly did not
happen) or `info` (unknown: it may or may not have happened).

Operations (`Op.f`):

- `txn`: a transaction of sends. Invoke value: the `Send`s; completion value: the
  `Write`s, with the offset a delivery report acknowledged (None when no report came).
  `ok` = committed, `fail` = never committed (aborted, or commit never attempted),
  `info` = commit attempted with an unknown outcome; its values must be all-or-nothing.
- `poll`: one read_committed poll. Completion value: the `Read`s in the order returned.
- `reset`: the process's consumer was (re)assigned, sought, rebalanced or recreated;
  offsets may go backwards after it. Recorded as a single `ok` op.
- `final-read`: a complete read_committed read of every partition after the faults
  stopped (recorded as a single `ok` op).
- `nemesis`: faults injected (informational; a single `info` op).

`check(history)` is pure (no I/O, no clock) and reports, with counts and examples:

- `lost`: a value of a committed (ok) transaction, or of an unknown (info) one that some
  read_committed poll returned, that the final read lacks (each value counted once; a
  polled value of a failed transaction is an aborted read instead);
- `duplicated`: a value at two different (partition, offset) positions;
- `aborted_read`: a value of a failed (fail) transaction seen by a poll or the final read;
- `torn_txn`: a transaction of unknown outcome (info) only partly in the final read;
- `inconsistent_offset`: one (partition, offset) seen with two different values (from
  reads and from delivery reports);
- `wrong_partition`: a value read from a partition other than the one it was sent to;
- `unexpected`: a value read that no transaction ever sent;
- `nonmonotonic`: within one consumer session, a partition's offset not increasing
  from one read to the next;
- `skipped`: within one consumer session, two successive reads of a partition jump
  over an offset that holds a committed value (per the final read).

Invariant: every anomaly kind is a key of `Report.anomalies`; `Report.valid` is true
only if all of them are empty.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

OpType = Literal["invoke", "ok", "fail", "info"]

ANOMALIES = (
    "lost",
    "duplicated",
    "aborted_read",
    "torn_txn",
    "inconsistent_offset",
    "wrong_partition",
    "unexpected",
    "nonmonotonic",
    "skipped",
)
EXAMPLES = 8  # examples kept per anomaly kind


class Send(NamedTuple):
    partition: int
    value: str


class Write(NamedTuple):
    partition: int
    offset: int | None
    value: str


class Read(NamedTuple):
    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class Op:
    index: int
    process: int | str
    type: OpType
    f: str
    value: Any = None
    time_ns: int = 0


class History:
    """Thread-safe, append-only operation log."""

    def __init__(self) -> None:
        self._ops: list[Op] = []
        self._lock = threading.Lock()

    def add(self, process: int | str, type_: OpType, f: str, value: Any = None) -> Op:
        with self._lock:
            op = Op(len(self._ops), process, type_, f, value, time.monotonic_ns())
            self._ops.append(op)
            return op

    def invoke(self, process: int | str, f: str, value: Any = None) -> Op:
        return self.add(process, "invoke", f, value)

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)


@dataclass
class Report:
    anomalies: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in ANOMALIES})
    counts: dict[str, int] = field(default_factory=lambda: {k: 0 for k in ANOMALIES})
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not any(self.counts.values())

    def add(self, kind: str, example: Any) -> None:
        self.counts[kind] += 1
        if len(self.anomalies[kind]) < EXAMPLES:
            self.anomalies[kind].append(example)

    def summary(self) -> str:
        lines = ["valid" if self.valid else "INVALID",
                 "stats: " + ", ".join(f"{k}={v}" for k, v in sorted(self.stats.items()))]
        for kind in ANOMALIES:
            if self.counts[kind]:
                lines.append(f"{kind}: {self.counts[kind]}, e.g. {self.anomalies[kind]}")
        return "\n".join(lines)


@dataclass
class _Txn:
    process: int | str
    sends: tuple[Send, ...]
    outcome: OpType = "invoke"
    writes: tuple[Write, ...] = ()


def _pair_txns(ops: Sequence[Op]) -> list[_Txn]:
    """Pairs each txn invoke with its process's next completion. A txn without a
    completion (the history ended first) counts as info."""
    open_: dict[int | str, _Txn] = {}
    txns: list[_Txn] = []
    for op in ops:
        if op.f != "txn":
            continue
        if op.type == "invoke":
            if op.process in open_:
                raise ValueError(f"process {op.process} invoked twice without completing: {op}")
            t = _Txn(op.process, tuple(Send(*s) for s in op.value))
            open_[op.process] = t
            txns.append(t)
        else:
            t = open_.pop(op.process)
            t.outcome = op.type
            t.writes = tuple(Write(*w) for w in (op.value or ()))
    for t in open_.values():
        t.outcome = "info"
    return txns


def _reads(ops: Sequence[Op], f: str) -> list[tuple[Op, list[Read]]]:
    return [(op, [Read(*r) for r in op.value]) for op in ops
            if op.f == f and op.type == "ok"]


def check(ops: Sequence[Op]) -> Report:
    report = Report()
    txns = _pair_txns(ops)
    polls = _reads(ops, "poll")
    finals = _reads(ops, "final-read")
    if len(finals) != 1:
        raise ValueError(f"expected exactly one final-read, found {len(finals)}")
    final = finals[0][1]
    report.stats = {
        "txns": len(txns),
        "ok": sum(t.outcome == "ok" for t in txns),
        "fail": sum(t.outcome == "fail" for t in txns),
        "info": sum(t.outcome == "info" for t in txns),
        "polls": len(polls),
        "polled": sum(len(r) for _op, r in polls),
        "final": len(final),
    }
    sent_by: dict[str, _Txn] = {}
    partition_of: dict[str, int] = {}
    for t in txns:
        for s in t.sends:
            sent_by[s.value] = t
            partition_of[s.value] = s.partition

    polled_values = {r.value for _op, reads in polls for r in reads}
    final_values = {r.value for r in final}
    _check_positions(report, txns, polls, final, partition_of)
    _check_outcomes(report, txns, polled_values, final_values)
    for v in sorted(polled_values - final_values):
        sender = sent_by.get(v)
        if sender is not None and sender.outcome not in ("ok", "fail"):
            report.add("lost", {"value": v, "why": "polled, missing from the final read",
                                "process": sender.process})
    for v in sorted((polled_values | final_values) - sent_by.keys()):
        report.add("unexpected", {"value": v})
    _check_sessions(report, ops, final)
    return report


def _check_positions(report: Report, txns: Iterable[_Txn],
                     polls: Sequence[tuple[Op, list[Read]]], final: Sequence[Read],
                     partition_of: dict[str, int]) -> None:
    """Duplicates, inconsistent offsets and wrong partitions over every observation:
    delivery reports (of any outcome: an aborted record still occupies its offset)
    and reads."""
    at: dict[tuple[int, int], set[str]] = defaultdict(set)
    where: dict[str, set[tuple[int, int]]] = defaultdict(set)
    observed: list[tuple[int, int, str]] = [
        (w.partition, w.offset, w.value) for t in txns for w in t.writes if w.offset is not None]
    reads = [r for _op, rs in polls for r in rs] + list(final)
    observed += [(r.partition, r.offset, r.value) for r in reads]
    for p, o, v in observed:
        at[(p, o)].add(v)
        where[v].add((p, o))
    for (p, o), values in sorted(at.items()):
        if len(values) > 1:
            report.add("inconsistent_offset", {"partition": p, "offset": o,
                                               "values": sorted(values)})
    for v, positions in sorted(where.items()):
        if len(positions) > 1:
            report.add("duplicated", {"value": v, "positions": sorted(positions)})
    misplaced = {(r.value, r.partition) for r in reads
                 if r.value in partition_of and partition_of[r.value] != r.partition}
    for v, p in sorted(misplaced):
        report.add("wrong_partition", {"value": v, "read_from": p, "sent_to": partition_of[v]})


def _check_outcomes(report: Report, txns: Iterable[_Txn], polled: set[str],
                    final: set[str]) -> None:
    for t in txns:
        values = [s.value for s in t.sends]
        if t.outcome == "ok":
            for v in values:
                if v not in final:
                    report.add("lost", {"value": v, "why": "committed, missing from the final "
                                        "read", "process": t.process, "polled": v in polled})
        elif t.outcome == "fail":
            for v in values:
                if v in polled or v in final:
                    report.add("aborted_read", {"value": v, "process": t.process,
                                                "in_final": v in final, "polled": v in polled})
        else:
            present = [v for v in values if v in final]
            missing = [v for v in values if v not in final]
            if present and missing:
                report.add("torn_txn", {"process": t.process, "in_final": present,
                                        "missing_from_final": missing})


def _check_sessions(report: Report, ops: Sequence[Op], final: Sequence[Read]) -> None:
    """Per process: within a session (between resets) each partition's offsets must
    increase, and two successive reads must not straddle a committed offset."""
    committed: dict[int, list[int]] = defaultdict(list)
    for r in final:
        committed[r.partition].append(r.offset)
    for offsets in committed.values():
        offsets.sort()
    last: dict[int | str, dict[int, int]] = defaultdict(dict)
    for op in ops:
        if op.f == "reset":
            last.pop(op.process, None)
            continue
        if op.f != "poll" or op.type != "ok":
            continue
        seen = last[op.process]
        for r in (Read(*x) for x in op.value):
            prev = seen.get(r.partition)
            if prev is not None:
                if r.offset <= prev:
                    report.add("nonmonotonic", {"process": op.process, "partition": r.partition,
                                                "from": prev, "to": r.offset, "op": op.index})
                else:
                    offs = committed.get(r.partition, [])
                    i = bisect.bisect_right(offs, prev)
                    if i < len(offs) and offs[i] < r.offset:
                        report.add("skipped", {"process": op.process,
                                               "partition": r.partition, "from": prev,
                                               "to": r.offset, "missed_offset": offs[i],
                                               "op": op.index})
            seen[r.partition] = r.offset if prev is None else max(prev, r.offset)
