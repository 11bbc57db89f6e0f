"""Batch read: offset ranges between startingOffsets and endingOffsets, one task each.

`partitions()` runs on the driver: it resolves the partitions and both ends once (so
every task of the query sees the same snapshot; "latest" is the last stable offset
under read_committed, hence never inside an open transaction), then splits the ranges
(`ranges.split_ranges`). `read()` runs on executors and needs nothing but its
`RangePartition`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from tidegate.spark.options import ReadOptions
from tidegate.spark.planner import OffsetPlanner
from tidegate.spark.ranges import OffsetRange, RangePartition, read_range, split_ranges

__all__ = ["TidegateBatchReader", "make_partitions"]


def make_partitions(opts: ReadOptions, ranges: list[OffsetRange]) -> list[RangePartition]:
    config = opts.consumer_config
    return [RangePartition(r, config, opts.include_headers, opts.fail_on_data_loss,
                           opts.poll_timeout_ms, opts.arrow_batches)
            for r in split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)]


class TidegateBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        with OffsetPlanner(opts) as planner:
            tps = planner.partitions()
            start = planner.resolve(opts.starting, opts.starting_by_timestamp, tps,
                                    strict_ts=opts.timestamp_strategy == "error")
            end = planner.resolve(opts.ending, opts.ending_by_timestamp, tps, strict_ts=False)
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise ValueError(f"{tp[0]}-{tp[1]}: starting offset {start[tp]} is after the "
                                 f"ending offset {end[tp]}")
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        return make_partitions(opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        return read_range(partition)
