"""Batch read: offset ranges between startingOffsets and endingOffsets, one task each.

`partitions()` runs on the driver: it resolves the partitions and both ends once (so
every task of the query sees the same snapshot; "latest" is the last stable offset
under read_committed, hence never inside an open transaction), then splits the ranges
(`ranges.split_ranges`) and, with ``maxPartitions``, packs them into that many tasks
(`ranges.pack_ranges`). `read()` runs on executors and needs nothing but its
`RangePartition`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from tidegate.spark.options import ReadOptions
from tidegate.spark.planner import OffsetPlanner
from tidegate.spark.ranges import (
    OffsetRange,
    RangeGroup,
    RangePartition,
    pack_ranges,
    read_group,
    read_range,
    split_ranges,
)

__all__ = ["TidegateBatchReader", "make_partitions", "read_partition"]


def make_partitions(opts: ReadOptions, ranges: list[OffsetRange]
                    ) -> list[RangePartition] | list[RangeGroup]:
    config = opts.consumer_config
    parts = [RangePartition(r, config, opts.include_headers, opts.fail_on_data_loss,
                            opts.poll_timeout_ms, opts.arrow_batches, opts.columnar_decode,
                            opts.select)
             for r in split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)]
    return pack_ranges(parts, opts.max_partitions)


def read_partition(partition: InputPartition) -> Iterator[Any]:
    """A task's output: one range (`read_range`) or a packed group (`read_group`)."""
    if isinstance(partition, RangeGroup):
        return read_group(partition)
    assert isinstance(partition, RangePartition)
    return read_range(partition)


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
        return read_partition(partition)
