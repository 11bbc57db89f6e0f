"""Tidegate's PySpark data source: ``format("tidegate")``, Spark's Kafka connector options.

`register(spark)` makes the source known to a session, after checking (local masters
only, `workers.check_worker_python`) that Spark's Python workers can import tidegate.
Reads return committed records
only (``kafka.isolation.level`` defaults to read_committed); see docs/spark.md. The
package imports only `tidegate.client` (import-linter checks it) and needs the
``spark`` extra: ``pip install tidegate[spark]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidegate.spark.source import TidegateDataSource, read_schema
from tidegate.spark.workers import WorkerPythonError, check_worker_python

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["TidegateDataSource", "WorkerPythonError", "read_schema", "register"]


def register(spark: SparkSession, *, check_workers: bool = True) -> None:
    """Register the ``tidegate`` format with `spark`. With a local master, first check
    that the Python Spark starts for its workers imports tidegate, and raise
    `WorkerPythonError` saying what to set if it does not (`check_workers=False`
    skips the check)."""
    if check_workers:
        check_worker_python(spark)
    spark.dataSource.register(TidegateDataSource)
