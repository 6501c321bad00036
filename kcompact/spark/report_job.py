"""``spark report``: ``kcompact report``'s per-partition reading done by Spark tasks, the page's data on the driver.

Each task takes a slice of one log dir's partitions (sliced as ``spark inspect dirty-ratio`` slices them,
:mod:`kcompact.spark.inspect_job`) and runs the serial report's own code on it: the slice's ``inspect
dirty-ratio`` rows, then for each partition :func:`kcompact.report.gather.partition_entry` (``inspect keys``'
projection, ``inspect last-clean``, ``inspect transactions``). What a task sends back is one small
:class:`~kcompact.report.model.PartitionEntry` per partition (numbers, a few lines of text: no record, no key).

The driver then does what only it can: it ranks the eligible partitions across slices (as ``spark inspect
dirty-ratio`` does, :func:`kcompact.log.rules.ranges.pick_ranks`), compares the replicas when the paths
hold several log dirs (``spark inspect replicas``' tasks), and counts every partition into its topic, listing
only the largest (:func:`kcompact.report.scale.aggregate`, as ``report --from``): the page stays small however
many partitions the cluster has, and its totals are those of the serial ``kcompact report`` of the same paths.

A Spark job that fails because a task was lost (its Python worker or executor died) or the JVM died gives no
row at all (``collect`` hands back nothing): the report is not made, and that is one line
(:func:`kcompact.spark.job_failure.one_line_job`) saying so, and that nothing was changed (the report only reads).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.clock import run_clock_ms
from kcompact.inspect.dirty_ratio import dirty_ratio_report, partition_dirs
from kcompact.inspect.replicas import DEFAULT_MAX_KEYS
from kcompact.log.rules.ranges import pick_ranks
from kcompact.report.gather import (
    ConfigInputs,
    broker_of,
    entries_advice,
    partition_entry,
    replica_entry,
    reported_replica_sets,
)
from kcompact.report.model import SOURCE_SPARK, PartitionEntry, Report
from kcompact.report.scale import LISTED_PARTITIONS, aggregate
from kcompact.segment.log_dir_check import check_log_dir_checkpoints
from kcompact.segment.partition_filter import PartitionFilter
from kcompact.spark.inspect_job import SLICES_PER_CORE, ReportSlice, slices_of
from kcompact.spark.job_failure import one_line_job
from kcompact.spark.replicas_job import spark_replicas
from kcompact.value import frozen

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NO_REPORT = "nothing was changed (spark report only reads) and no report was made: run it again"


@frozen
class ReportPlan:
    """What ``spark report`` will read, found on the driver before Spark starts (a bad path fails in a second)."""

    inputs: tuple[str, ...]  # the paths as given
    partition_dirs: tuple[str, ...]  # absolute: the executors have another cwd
    log_dirs: tuple[str, ...]
    config: ConfigInputs
    now_ms: int


def plan_report(paths: Iterable[str | Path], config: ConfigInputs, *, now_ms: int | None = None,
                selection: PartitionFilter | None = None) -> ReportPlan:
    """The partitions under ``paths``, their log dirs' checkpoint files checked (as the serial report checks
    them, before any partition).

    Args:
        paths: log dirs (several: one per broker) and/or partition directories, at paths the executors see.
        config: ``--config``, ``--server-properties``, ``--metadata-dir``.
        now_ms: the one clock of every task (default: the driver's now).
        selection: ``--topic``, ``--exclude-topic``, ``--partition`` (None: every partition).

    Returns:
        The plan.

    Raises:
        KcompactError: a path is neither a log dir nor a partition directory, ``selection`` matches nothing, or
            a log dir's checkpoint file does not parse.
    """
    given = tuple(str(p) for p in paths)
    found = tuple(str(d) for d in partition_dirs([Path(p).absolute() for p in given], selection))
    log_dirs = tuple(sorted({d.rsplit("/", 1)[0] for d in found}))
    for log_dir in log_dirs:
        check_log_dir_checkpoints(log_dir)
    return ReportPlan(given, found, log_dirs, config, run_clock_ms(now_ms))


def spark_report(spark: SparkSession, plan: ReportPlan, *, listed: int = LISTED_PARTITIONS,
                 verbose: bool = False) -> Report:
    """The report of the plan's partitions, their per-partition reading done by Spark tasks.

    Args:
        spark: the session.
        plan: from :func:`plan_report`.
        listed: how many of the largest partitions the report lists one by one.
        verbose: keep Spark's own log lines about a failing task.

    Returns:
        The report: its totals and topics count every partition (equal to the serial report's), its
        partitions are the largest ``listed`` and any other with an error or a hanging transaction.

    Raises:
        KcompactError: a task raised one (a log dir whose checkpoint file no longer parses), as its one line; or
            a Spark job failed because a task was lost or the JVM died (no report is made).
    """
    config, now = plan.config, plan.now_ms
    slices = slices_of(plan.partition_dirs, spark.sparkContext.defaultParallelism * SLICES_PER_CORE,
                       lambda dirs: ReportSlice(dirs, dict(config.cli_overrides), now, _text(config.server_properties),
                                                _text(config.metadata_dir), sole_replica=config.sole_replica))
    entries: list[PartitionEntry] = []
    if slices:
        context = spark.sparkContext
        # a task's KcompactError (a log dir changed since the plan), a lost task, a JVM gone: one line
        with one_line_job(context, f"kcompact spark report: {len(slices)} slices", "spark report: the reading job",
                          NO_REPORT, verbose=verbose):
            found = context.parallelize(slices, len(slices)).map(run_report_task).collect()
        entries = [entry for part in found for entry in part]
    ranks = pick_ranks([(entry.cleaner_rank is not None, entry.dirty_ratio) for entry in entries])
    for entry, rank in zip(entries, ranks, strict=True):
        entry.cleaner_rank = rank
    totals, topics, partitions = aggregate(entries, listed=listed)
    totals.log_dirs = len(plan.log_dirs)
    replicas = []
    if len(plan.log_dirs) > 1:
        sets = reported_replica_sets(list(plan.log_dirs), {(e.topic, e.partition) for e in entries})
        compared = spark_replicas(spark, sets, max_keys=DEFAULT_MAX_KEYS, job="spark report: the replicas job",
                                  state=NO_REPORT, verbose=verbose).rows
        replicas = [replica_entry(row) for row in compared]
    return Report(SOURCE_SPARK, list(plan.inputs), now,
                  [{"path": d, "broker": broker_of(Path(d))} for d in plan.log_dirs], totals, topics, partitions,
                  len(partitions), replicas, entries_advice(entries))


def run_report_task(part: ReportSlice) -> list[PartitionEntry]:
    """The body of one Spark task: the serial report's per-partition work over one slice.

    Args:
        part: the slice (partition directories of one log dir, the configuration sources, the clock).

    Returns:
        One entry per partition, ranked within the slice (a partition that fails to read: its ``errors``).
    """
    rows = dirty_ratio_report(part.partition_dirs, cli_overrides=part.cli_overrides, now_ms=part.now_ms,
                              server_properties=part.server_properties, metadata_dir=part.metadata_dir,
                              sole_replica=part.sole_replica)
    config = ConfigInputs(part.cli_overrides, part.server_properties, part.metadata_dir, part.sole_replica)
    return [partition_entry(row, config, part.now_ms) for row in rows]


def _text(path: str | Path | None) -> str | None:
    return None if path is None else str(path)
