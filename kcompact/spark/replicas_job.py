"""``spark inspect replicas``: the copies of every partition of a cluster compared, one Spark task each.

Given one log dir per broker (copies of a whole cluster's disks), every partition with a copy in two or
more of them is compared by :func:`kcompact.inspect.replicas.replicas_row`, which runs the serial
``inspect replicas`` report: a row holds its verdict and the serial command's ``--json`` object, so the
distributed run and the serial one agree field for field. A partition is a task (the report reads every
record of every copy; partitions differ in size far more than tasks cost).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.inspect.replicas import ReplicaSet, ReplicasRow, replica_sets, replicas_row
from kcompact.spark.rows import dataclass_columns, ddl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPLICAS_COLUMNS = dataclass_columns(ReplicasRow)


@dataclass(slots=True)
class SparkReplicas:
    """The rows (by topic and partition) and the same rows as a DataFrame."""

    rows: list[ReplicasRow]
    frame: DataFrame


def spark_replicas(spark: SparkSession, log_dirs: Iterable[str | Path], *, max_keys: int) -> SparkReplicas:
    """Compare the copies of every partition found in two or more of ``log_dirs``, on Spark.

    Args:
        spark: the session.
        log_dirs: one log dir per broker (executors must see them at these paths).
        max_keys: divergent keys listed per partition (all are counted).

    Returns:
        One row per partition, equal to :func:`~kcompact.inspect.replicas.replicas_row`'s.

    Raises:
        KcompactError: a path is not a log dir.
    """
    sets = replica_sets([Path(p).absolute() for p in log_dirs])  # executors have another cwd
    rows: list[ReplicasRow] = []
    if sets:
        spark.sparkContext.setJobDescription(f"kcompact spark inspect replicas: {len(sets)} partitions")
        try:
            rdd = spark.sparkContext.parallelize([(s, max_keys) for s in sets], len(sets))
            rows = rdd.map(run_replicas_task).collect()
        finally:
            spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
    frame = spark.createDataFrame([astuple(row) for row in rows], ddl(REPLICAS_COLUMNS))
    return SparkReplicas(rows, frame)


def run_replicas_task(task: tuple[ReplicaSet, int]) -> ReplicasRow:
    """The body of one Spark task: the serial comparison of one partition's copies."""
    replica_set, max_keys = task
    return replicas_row(replica_set, max_keys)
