"""Streaming read: micro-batches of offset ranges, bounded by the LSO and the read limit.

Offsets are Spark's offsets JSON (``{"topic": {"0": 42}}``, `options.offsets_to_dict`
order: topics sorted, partitions by number), so a checkpointed batch replays from its
offsets alone: `partitions(start, end)` is a pure function of them, and each
`RangePartition` carries everything its task needs (``maxPartitions`` packs them into
`RangeGroup`s, also a pure function of the offsets).

Rules of `latestOffset(start, limit)`:
- an end is never above the last stable offset under read_committed (the high
  watermark under read_uncommitted), so a batch never reaches into an open transaction;
  offsets of markers and aborted records inside a range are simply not returned;
- ``maxOffsetsPerTrigger`` (Spark's `ReadMaxRows`) is shared among the partitions in
  proportion to what each has to read, at least one offset each while any is left;
- a partition that appears later (new topic matching the pattern, more partitions)
  starts at offset 0, read leniently: what retention removed there is not data loss;
- a partition that vanished fails the query when ``failOnDataLoss`` (the default), else
  it is dropped; offsets removed by retention under a partition being read are checked
  by the tasks (`ranges.read_range`);
- ``Trigger.AvailableNow``: `prepareForTriggerAvailableNow` fixes the target offsets;
  ends never pass them, so the query stops.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from tidegate.spark.options import Offsets, ReadOptions, offsets_from_json, offsets_to_dict
from tidegate.spark.planner import OffsetPlanner
from tidegate.spark.ranges import DataLossError, OffsetRange, RangePartition, pack_ranges
from tidegate.spark.reader import read_partition

__all__ = ["TidegateStreamReader", "share_limit"]


def share_limit(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """Ends that read at most `max_rows` offsets in all, shared by lag (deterministic:
    rounding down, then the remainder one by one in topic-partition order)."""
    lag = {tp: max(0, latest[tp] - start[tp]) for tp in sorted(latest)}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(latest)
    give = {tp: lag[tp] * max_rows // total for tp in lag}
    left = max_rows - sum(give.values())
    for tp in lag:
        if left <= 0:
            break
        if give[tp] < lag[tp]:
            give[tp] += 1
            left -= 1
    return {tp: start[tp] + give[tp] for tp in lag}


class TidegateStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._planner: OffsetPlanner | None = None
        self._target: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Tasks get a pickled copy: without the driver's clients.
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    @property
    def planner(self) -> OffsetPlanner:
        if self._planner is None:
            self._planner = OffsetPlanner(self.opts)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        opts = self.opts
        tps = self.planner.partitions()
        start = self.planner.resolve(opts.starting, opts.starting_by_timestamp, tps,
                                     strict_ts=opts.timestamp_strategy == "error")
        return offsets_to_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()

    def _available(self) -> Offsets:
        planner = self.planner
        return planner.latest(planner.partitions())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_json(start, "start offset")
        latest = self._available() if self._target is None else dict(self._target)
        gone = sorted(set(begin) - set(latest))
        if gone and self.opts.fail_on_data_loss:
            raise DataLossError(f"partitions {gone} no longer exist; set failOnDataLoss=false "
                                "to carry on without them")
        for tp in latest:
            begin.setdefault(tp, 0)  # a new partition: read from its start
            latest[tp] = max(latest[tp], begin[tp])  # never move backwards
        if isinstance(limit, ReadMaxRows):
            latest = share_limit(begin, latest, limit.max_rows)
        return offsets_to_dict(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_to_dict(self._available())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        opts = self.opts
        begin = offsets_from_json(start, "start offset")
        finish = offsets_from_json(end, "end offset")
        config = opts.consumer_config
        out: list[RangePartition] = []
        for tp in sorted(finish):
            known = tp in begin
            rng = OffsetRange(tp[0], tp[1], begin.get(tp, 0), finish[tp])
            if rng.size > 0:
                out.append(RangePartition(rng, config, opts.include_headers,
                                          opts.fail_on_data_loss and known,
                                          opts.poll_timeout_ms, opts.arrow_batches,
                                          opts.columnar_decode, opts.select))
        return pack_ranges(out, opts.max_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the query's checkpoint holds the offsets (as in Spark's source)."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
