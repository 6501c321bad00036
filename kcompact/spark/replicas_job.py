"""``spark inspect replicas``: the copies of every partition of a cluster compared, one Spark task each.

Given one log dir per broker (copies of a whole cluster's disks), every partition with a copy in two or
more of them is compared by :func:`kcompact.inspect.replicas.replicas_row`, which runs the serial
``inspect replicas`` report: a row holds its verdict and the serial command's ``--json`` object, so the
distributed run and the serial one agree field for field. A partition is a task (the report reads every
record of every copy; partitions differ in size far more than tasks cost).

A task lost (its Python worker or executor died) or the JVM gone gives no row at all: the comparison is one
line saying so, and that nothing was changed (:func:`kcompact.spark.job_failure.one_line_job`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple
from typing import TYPE_CHECKING

from kcompact.inspect.replicas import ReplicaSet, ReplicasRow, replicas_row
from kcompact.spark.job_failure import one_line_job
from kcompact.spark.rows import dataclass_columns, ddl
from kcompact.value import mutable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPLICAS_COLUMNS = dataclass_columns(ReplicasRow)
COMPARING_JOB = "spark inspect replicas: the comparing job"
READ_ONLY = "nothing was changed (spark inspect replicas only reads): run it again"


@mutable
class SparkReplicas:
    """The rows (by topic and partition) and the same rows as a DataFrame."""

    rows: list[ReplicasRow]
    frame: DataFrame


def spark_replicas(spark: SparkSession, sets: Sequence[ReplicaSet], *, max_keys: int, job: str = COMPARING_JOB,
                   state: str = READ_ONLY, verbose: bool = False) -> SparkReplicas:
    """Compare the copies of every partition of ``sets``, on Spark.

    Args:
        spark: the session.
        sets: from :func:`kcompact.inspect.replicas.replica_sets` over the brokers' log dirs, listed
            (on the driver, before Spark starts) by absolute paths the executors see.
        max_keys: divergent keys listed per partition (all are counted).
        job: the command and job a failed job's line names (``spark report`` runs this job too).
        state: what that line says a failed job leaves.
        verbose: keep Spark's own log lines about a failing task.

    Returns:
        One row per partition, equal to :func:`~kcompact.inspect.replicas.replicas_row`'s.

    Raises:
        KcompactError: a task was lost or the JVM died (or a task raised a kcompact error), as one line.
    """
    rows: list[ReplicasRow] = []
    if sets:
        context = spark.sparkContext
        with one_line_job(context, f"kcompact spark inspect replicas: {len(sets)} partitions", job, state,
                          verbose=verbose):
            rows = context.parallelize([(s, max_keys) for s in sets], len(sets)).map(run_replicas_task).collect()
    frame = spark.createDataFrame([astuple(row) for row in rows], ddl(REPLICAS_COLUMNS))
    return SparkReplicas(rows, frame)


def run_replicas_task(task: tuple[ReplicaSet, int]) -> ReplicasRow:
    """The body of one Spark task: the serial comparison of one partition's copies."""
    replica_set, max_keys = task
    return replicas_row(replica_set, max_keys)
