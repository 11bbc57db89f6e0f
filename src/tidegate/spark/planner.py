"""Driver-side lookups: which partitions a read covers and where its offsets are.

`OffsetPlanner` holds one admin client and one consumer (with the read's isolation
level, so "latest" is the last stable offset under read_committed and the high
watermark under read_uncommitted) and turns the options' offset specs — ``earliest``,
``latest``, Spark's offsets JSON, offsets by timestamp — into concrete offsets per
topic-partition. Topics that do not exist have no partitions (as in Spark's
connector); a partition the JSON names that does not exist is an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import TracebackType

from tidegate.client import Admin, Consumer, TopicPartition
from tidegate.spark.options import (
    EARLIEST,
    LATEST,
    Offsets,
    ReadOptions,
    client_config,
)

__all__ = ["OffsetPlanner"]

TP = tuple[str, int]


class OffsetPlanner:
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._admin = Admin(client_config(opts.kafka, "admin"))
        try:
            self._consumer = Consumer(opts.consumer_config)
        except BaseException:
            self._admin.close()
            raise

    def __enter__(self) -> OffsetPlanner:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._consumer.close()
        finally:
            self._admin.close()

    def partitions(self) -> list[TP]:
        """The topic-partitions the subscription covers now, sorted."""
        sub = self.opts.subscription
        if sub.assigned:
            return list(sub.assigned)
        topics = self._admin.list_topics()
        if sub.pattern is not None:
            rx = re.compile(sub.pattern)
            names = [t for t in topics if rx.fullmatch(t)]
        else:
            names = [t for t in sub.topics if t in topics]
        return sorted((t, p) for t in names for p in topics[t].partitions)

    def earliest(self, tps: Iterable[TP]) -> Offsets:
        found = self._consumer.beginning_offsets([TopicPartition(t, p) for t, p in tps])
        return {(tp.topic, tp.partition): off for tp, off in found.items()}

    def latest(self, tps: Iterable[TP]) -> Offsets:
        """The LSO under read_committed, else the high watermark."""
        found = self._consumer.end_offsets([TopicPartition(t, p) for t, p in tps])
        return {(tp.topic, tp.partition): off for tp, off in found.items()}

    def by_timestamp(self, stamps: Offsets, tps: list[TP], *, strict: bool) -> Offsets:
        """First offset at or after each timestamp; none found -> latest (or an error
        when `strict`, Spark's startingOffsetsByTimestampStrategy=error)."""
        self._check_known(stamps, tps, "offsets by timestamp")
        query: dict[TopicPartition | tuple[str, int], int] = {
            TopicPartition(t, p): ts for (t, p), ts in stamps.items()}
        found = self._consumer.offsets_for_times(query)
        out: Offsets = {}
        missing: list[TP] = []
        for tp, hit in found.items():
            if hit is None:
                missing.append((tp.topic, tp.partition))
            else:
                out[(tp.topic, tp.partition)] = hit.offset
        if missing and strict:
            raise ValueError(f"no offset at or after the given timestamp in {sorted(missing)}; "
                             "set startingOffsetsByTimestampStrategy=latest to start at the end")
        out.update(self.latest(missing))
        return out

    def resolve(self, spec: str | Offsets, by_ts: Offsets | None, tps: list[TP], *,
                strict_ts: bool = True) -> Offsets:
        """Concrete offsets for every partition in `tps`; as in Spark's connector, a
        JSON spec must name exactly the partitions read."""
        if by_ts is not None:
            return self.by_timestamp(by_ts, tps, strict=strict_ts)
        if spec == "earliest":
            return self.earliest(tps)
        if spec == "latest":
            return self.latest(tps)
        assert isinstance(spec, dict)
        self._check_known(spec, tps, "offsets")
        want_early = [tp for tp, off in spec.items() if off == EARLIEST]
        want_late = [tp for tp, off in spec.items() if off == LATEST]
        out = {tp: off for tp, off in spec.items() if off >= 0}
        bad = {tp: off for tp, off in spec.items() if off < EARLIEST}
        if bad:
            raise ValueError(f"invalid offsets {bad}: use -2 (earliest), -1 (latest) or >= 0")
        out.update(self.earliest(want_early))
        out.update(self.latest(want_late))
        return out

    @staticmethod
    def _check_known(spec: Offsets, tps: list[TP], what: str) -> None:
        unknown = sorted(set(spec) - set(tps))
        if unknown:
            raise ValueError(f"{what} name partitions that are not read or do not exist: "
                             f"{unknown}")
        left_out = sorted(set(tps) - set(spec))
        if left_out:
            raise ValueError(f"{what} must name every partition read; missing {left_out}")
