"""``spark inspect replicas``: the copies of every partition of a cluster compared, one Spark task each.

Given one log dir per broker (copies of a whole cluster's disks), every partition with a copy in two or
more of them is compared by :func:`kcompact.inspect.replicas.replicas_row`, which runs the serial
``inspect replicas`` report: a row holds its verdict and the serial command's ``--json`` object, so the
distributed run and the serial one agree field for field. A partition is a task (the report reads every
record of every copy; partitions differ in size far more than tasks cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING

from kcompact.inspect.replicas import ReplicaSet, ReplicasRow, replicas_row
from kcompact.spark.rows import dataclass_columns, ddl
from kcompact.spark.session import local_properties

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPLICAS_COLUMNS = dataclass_columns(ReplicasRow)


@dataclass(slots=True)
class SparkReplicas:
    """The rows (by topic and partition) and the same rows as a DataFrame."""

    rows: list[ReplicasRow]
    frame: DataFrame


def spark_replicas(spark: SparkSession, sets: Sequence[ReplicaSet], *, max_keys: int) -> SparkReplicas:
    """Compare the copies of every partition of ``sets``, on Spark.

    Args:
        spark: the session.
        sets: from :func:`kcompact.inspect.replicas.replica_sets` over the brokers' log dirs, listed
            (on the driver, before Spark starts) by absolute paths the executors see.
        max_keys: divergent keys listed per partition (all are counted).

    Returns:
        One row per partition, equal to :func:`~kcompact.inspect.replicas.replicas_row`'s.
    """
    rows: list[ReplicasRow] = []
    if sets:
        spark.sparkContext.setJobDescription(f"kcompact spark inspect replicas: {len(sets)} partitions")
        try:
            rdd = spark.sparkContext.parallelize([(s, max_keys) for s in sets], len(sets))
            rows = rdd.map(run_replicas_task).collect()
        finally:
            local_properties(spark.sparkContext).setJobDescription(None)
    frame = spark.createDataFrame([astuple(row) for row in rows], ddl(REPLICAS_COLUMNS))
    return SparkReplicas(rows, frame)


def run_replicas_task(task: tuple[ReplicaSet, int]) -> ReplicasRow:
    """The body of one Spark task: the serial comparison of one partition's copies."""
    replica_set, max_keys = task
    return replicas_row(replica_set, max_keys)
