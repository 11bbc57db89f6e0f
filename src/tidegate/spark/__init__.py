"""Tidegate's PySpark data source: ``format("tidegate")``, Spark's Kafka connector options.

`register(spark)` makes the source known to a session. Reads return committed records
only (``kafka.isolation.level`` defaults to read_committed); see docs/spark.md. The
package imports only `tidegate.client` (import-linter checks it) and needs the
``spark`` extra: ``pip install tidegate[spark]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidegate.spark.source import TidegateDataSource, read_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["TidegateDataSource", "read_schema", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``tidegate`` format with `spark`."""
    spark.dataSource.register(TidegateDataSource)
