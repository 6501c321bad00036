"""``kcompact spark …``: the serial commands' work distributed over a Spark cluster (or local cores).

``spark clean``, ``spark inspect dirty-ratio`` and ``spark export`` each parse their options, start
(or join) a session with :func:`kcompact.spark.session.command_session`, call one job function of
``kcompact.spark``, and render the result (below). Only click is imported at module level:
pyspark is loaded when a command runs, so ``kcompact --help`` works without the ``spark`` extra
(a command then exits 2 saying ``pip install 'kcompact[spark]'``).

The rendering: a rich summary after Spark's own progress bar, or JSON. ``spark clean`` prints one table
row per partition (the DataFrame's rows), the failures as error lines, and a summary line with Spark's
start-up time apart from the job's; ``--json`` prints the rows with the DataFrame's column names.
``spark inspect dirty-ratio`` reuses the serial command's renderer. Spark's progress bar and logs go to
stderr, never into ``--json`` output.

This file is also the driver file to hand ``spark-submit``, which runs a *file*::

    spark-submit --master spark://host:7077 "$(python -m kcompact.cli.spark_cmds --path)" \\
        spark clean /shared/kafka-logs

Run that way, it takes its own directory off ``sys.path`` (``spark-submit`` puts it first) and runs
the ``kcompact`` command line; the session keeps the master ``spark-submit`` chose.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from kcompact.cli import render
from kcompact.cli.export_cmd import LATEST_HELP
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath, storage_option
from kcompact.cli.options import (
    EPILOG,
    EXIT_BAD_INPUT,
    EXIT_BUG,
    GROUP_EPILOG,
    config_option,
    config_source_options,
    fence_options,
    json_option,
    now_ms_option,
    sole_replica_option,
)
from kcompact.cli.partition_filter_options import partition_filter_options
from kcompact.cli.replicas_cmd import spark_replicas_command
from kcompact.cli.report_cmd import REPORT_EPILOG
from kcompact.cli.spark_checks import (
    check_new_output,
    checks_before_session,
    checks_in_session,
    startup_line,
)
from kcompact.cli.spark_options import session_options

if TYPE_CHECKING:
    from rich.console import JustifyMethod
    from rich.table import Table

    from kcompact.inspect.export import ExportSummary
    from kcompact.segment.partition_filter import PartitionFilter
    from kcompact.spark.clean_job import SparkCleanRun

STARTUP_NOTE = (
    "Starting Spark costs seconds (a JVM and Python workers): for one partition, or a few small "
    "ones, the serial command is faster."
)
SPARK_EPILOG = f"{STARTUP_NOTE}\n\n{EPILOG}"

_config = config_option("A topic configuration by Kafka's name. Repeatable.")
_now_ms = now_ms_option("The clock every task uses (default: the driver's now), in ms since the epoch.")
_config_sources = config_source_options("metadata.log.dir or its __cluster_metadata-0.")
_paths = click.argument("paths", nargs=-1, required=True, type=InputPath(host_paths=True))
_local_paths = click.argument("paths", nargs=-1, required=True,
                              type=InputPath(refuse_as="spark clean", host_paths=True))
REPORT_HOST_PATHS_REFUSED = (
    "spark report plans its page on the driver before Spark starts (the partitions listed, each log dir's "
    "checkpoint files read) and compares replicas in tasks that read every broker's copy, so a HOST:/path (a "
    "broker host's own disk) cannot be read; expected log dirs the driver and every executor see at the same "
    "path (or spark inspect dirty-ratio HOST:/path for the rows)")
_local_report_paths = click.argument(  # local paths only, as `kcompact report`
    "paths", nargs=-1, required=True, type=InputPath(host_paths_refused=REPORT_HOST_PATHS_REFUSED, urls=False))
_storage_option = storage_option
_filter = partition_filter_options("paths")


@click.group("spark", short_help="Run clean, dirty-ratio, replicas, export, report on Spark.", epilog=with_examples(
    f"{STARTUP_NOTE}\n\n{GROUP_EPILOG}",
    "kcompact spark clean /shared/kafka-logs --master 'local[4]'",
    "kcompact spark inspect dirty-ratio /shared/kafka-logs --output ratio.parquet",
))
def spark_group() -> None:
    """Run clean, inspect dirty-ratio, inspect replicas, export and report as Spark jobs: one task per
    partition (or segment), the same library code as the serial commands, results as DataFrames
    (--output writes Parquet).

    Needs the spark extra (pip install 'kcompact[spark]') and Java. Every executor must see the log
    dirs at the same paths (a shared file system); or give clean, inspect dirty-ratio and export each
    log dir as HOST:/path (a broker host's own disk: its tasks prefer that host), or run one job per
    broker host.
    """


@spark_group.command("clean", short_help="Clean partitions and log dirs as Spark tasks.", epilog=with_examples(
    SPARK_EPILOG,
    "kcompact spark clean /shared/kafka-logs --dry-run --json",
    "kcompact spark clean /shared/kafka-logs --map-budget 8589934592",
    "kcompact spark clean b1:/kafka-logs b2:/kafka-logs --master spark://m:7077",
))
@_local_paths
@_filter
@session_options
@_config
@_now_ms
@click.option("--roll", is_flag=True, help="First roll a new empty active segment (as kcompact clean --roll).")
@click.option("--from-start", is_flag=True, help="Re-clean from the log start.")
@click.option("--dry-run", is_flag=True,
              help="Compute everything; no file under PATH is written, renamed or deleted. As kcompact clean "
                   "--dry-run, a partition with --roll or an interrupted clean's leftovers is previewed on a "
                   "staged copy of links, a .kcompact-rehearsal-* directory beside its log dir on the "
                   "executor's host, removed when the preview ends.")
@click.option("--dedupe-buffer-size", type=click.IntRange(min=1), default=None, metavar="BYTES",
              help="Behave like a broker with this log.cleaner.dedupe.buffer.size (as kcompact "
                   "clean --dedupe-buffer-size; --config log.cleaner.dedupe.buffer.size=BYTES does "
                   "the same, this option wins).")
@click.option("--only-eligible", is_flag=True,
              help="For a log dir: clean only partitions the broker's cleaner would pick now.")
@click.option("--assume-compact", is_flag=True,
              help="As kcompact clean --assume-compact: compact partitions whose cleanup.policy is "
                   "unknown, except those whose data is mostly keyless; never one whose last known "
                   "policy is an explicit one without compact.")
@click.option("--allow-keyless-loss", is_flag=True,
              help="As kcompact clean --allow-keyless-loss: compact an explicitly compacted "
                   "partition although most of its records have no key (they are deleted).")
@click.option("--map-budget", type=click.IntRange(min=1), default=None, metavar="BYTES",
              help="A partition whose offset map would exceed BYTES is cleaned with a distributed "
                   "offset map, driven from the driver, instead of in one task.")
@click.option("--task-bytes", type=click.IntRange(min=1), default=None, metavar="BYTES",
              help="Pack partitions into Spark tasks of about BYTES each, a partition counting as its "
                   "segment bytes + 4 MiB (a Spark task's fixed cost is that of cleaning a few MiB); "
                   "never fewer tasks than cores. Default: two tasks a core, ~256 MiB at most unless "
                   "one partition is larger; 1: one task per partition.")
@fence_options
@_config_sources
@click.option("--output", type=click.Path(path_type=str), default=None, metavar="STATS.parquet",
              help="Also write the per-partition rows as Parquet (a new directory).")
@sole_replica_option
@json_option("Print the rows as JSON.")
def spark_clean_command(
    paths: tuple[str, ...], master: str | None, verbose: bool, spark_conf_pairs: tuple[str, ...],
    executor_python: str | None, config_pairs: tuple[str, ...], now_ms: int | None, roll: bool,
    from_start: bool, dry_run: bool, dedupe_buffer_size: int | None,
    only_eligible: bool, assume_compact: bool, allow_keyless_loss: bool, map_budget: int | None,
    task_bytes: int | None, replica_dirs: tuple[str, ...], safe_offset: int | None,
    server_properties: str | None, metadata_dir: str | None, output: str | None, sole_replica: bool, as_json: bool,
    selection: PartitionFilter | None = None,
) -> None:
    """Clean partition directories and log dirs as Spark tasks (partitions packed into tasks by
    bytes): each partition runs the same clean_partition as `kcompact clean`, with one clock fixed by
    the driver, and ends byte-identical to a serial clean of each partition in turn (cleaner
    checkpoint included). A failing partition is reported and left untouched; the others finish.
    As with `kcompact clean`, a partition not known to be compacted is skipped (a log dir's) or
    fails (one named alone). A Spark task lost (its Python worker or the JVM died) is one error line:
    the partitions that finished are reported, the others named; the next run settles them (Spark's
    own error with --verbose). Exits 2 when a partition failed or was not finished, or when --output
    could not be written (one error line after the rows), 1 on a bug.
    A PATH given as HOST:/path is on that host's own disk (a broker's log dir): its partitions are
    planned and cleaned by tasks preferring that host (one executor per broker host), and a task that runs
    on another host refuses them (their rows failed, nothing changed); a plain path is on a file system
    every executor sees at that path.
    """
    from kcompact.cleaner.logdir.report_row import STATUS_BUG, STATUS_FAILED
    from kcompact.cleaner.round.options import CleanOptions
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.spark.clean_job import refuse_live_brokers, spark_clean
    from kcompact.spark.locality import plain_paths
    from kcompact.spark.session import command_session

    overrides = parse_config_pairs(config_pairs)
    check_new_output(output)
    if not dry_run:
        refuse_live_brokers(paths)
    conf = checks_before_session(paths, output=output, master=master, spark_conf_pairs=spark_conf_pairs,
                                 executor_python=executor_python)
    options = CleanOptions(now_ms=now_ms, from_start=from_start, dedupe_buffer_size=dedupe_buffer_size,
                           dry_run=dry_run, roll=roll, replica_dirs=replica_dirs, safe_offset=safe_offset)
    with command_session(master, verbose=verbose, conf=conf, executor_python=executor_python) as (spark, startup_s):
        # a HOST:/path is seen by that host's executor, not necessarily by the one the probe lands on
        checks_in_session(spark, tuple(plain_paths(paths)), output=output, verbose=verbose)
        run = spark_clean(spark, paths, cli_overrides=overrides, options=options,
                          only_eligible=only_eligible, server_properties=server_properties,
                          metadata_dir=metadata_dir, map_budget_bytes=map_budget, task_bytes=task_bytes,
                          assume_compact=assume_compact, allow_keyless_loss=allow_keyless_loss,
                          selection=selection, verbose=verbose, sole_replica=sole_replica)
        lost_jvm = run.job_failure is not None and run.job_failure.jvm_lost
        output_error = None
        if output is not None and not lost_jvm:
            output_error = run.write_rows(output, verbose=verbose)
        elif output is not None:
            run.notes.append(f"{output}: not written: Spark's JVM is gone (the rows are in this report)")
    render_spark_clean(run, startup_s, as_json=as_json, verbose=verbose, output_error=output_error)
    statuses = {row["status"] for row in run.as_dicts()}
    if STATUS_BUG in statuses:
        raise click.exceptions.Exit(EXIT_BUG)
    if STATUS_FAILED in statuses or output_error is not None:
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


@spark_group.group("inspect", short_help="Read-only reports computed by Spark tasks.",
                   epilog=with_examples(f"{STARTUP_NOTE}\n\n{GROUP_EPILOG}",
                                        "kcompact spark inspect dirty-ratio /shared/kafka-logs"))
def spark_inspect() -> None:
    """Read-only reports computed by Spark tasks."""


spark_inspect.add_command(spark_replicas_command)


@spark_inspect.command("dirty-ratio", short_help="The rows of inspect dirty-ratio, computed by Spark tasks.",
                       epilog=with_examples(
                           SPARK_EPILOG,
                           "kcompact spark inspect dirty-ratio /shared/kafka-logs --json",
                           "kcompact spark inspect dirty-ratio /shared/kafka-logs --output r.parquet",
                           "kcompact spark inspect dirty-ratio /shared/kafka-logs --exclude-topic '__.*'",
                       ))
@_paths
@_filter
@session_options
@_config
@_now_ms
@_config_sources
@_storage_option
@click.option("--output", type=click.Path(path_type=str), default=None, metavar="REPORT.parquet",
              help="Also write the rows as Parquet (a new directory), same fields as --json.")
@json_option("Print a JSON list of rows (as kcompact inspect dirty-ratio).")
def spark_dirty_ratio_command(
    paths: tuple[str, ...], master: str | None, verbose: bool, spark_conf_pairs: tuple[str, ...],
    executor_python: str | None, config_pairs: tuple[str, ...], now_ms: int | None,
    server_properties: str | None, metadata_dir: str | None, storage_pairs: tuple[str, ...],
    output: str | None, as_json: bool, selection: PartitionFilter | None = None,
) -> None:
    """The rows of `kcompact inspect dirty-ratio` (same fields, same values, same order), computed
    by Spark tasks over slices of the log dirs (local paths, or fsspec URLs such as s3://… read on
    the executors). Exits 2 when a partition's files do not parse, or when a Spark task is lost (its Python
    worker or the JVM died: one error line, nothing changed, nothing at --output). A PATH given as HOST:/path
    is on that host's own disk (a broker's log dir): it is listed and read by tasks preferring that host
    (one that runs on another host refuses it: one error line).
    """
    from kcompact.cli.dirty_ratio_cmd import render_dirty_ratio
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.segment.remote import parse_storage_options
    from kcompact.spark.inspect_job import spark_dirty_ratio
    from kcompact.spark.locality import plain_paths
    from kcompact.spark.output import write_frame
    from kcompact.spark.session import command_session

    overrides = parse_config_pairs(config_pairs)
    storage_options = parse_storage_options(storage_pairs)
    check_new_output(output)
    conf = checks_before_session(paths, output=output, master=master, spark_conf_pairs=spark_conf_pairs,
                                 executor_python=executor_python, storage_options=storage_options)
    with command_session(master, verbose=verbose, conf=conf, executor_python=executor_python) as (spark, startup_s):
        checks_in_session(spark, tuple(plain_paths(paths)), output=output, verbose=verbose)
        report = spark_dirty_ratio(spark, paths, cli_overrides=overrides, now_ms=now_ms,
                                   server_properties=server_properties, metadata_dir=metadata_dir,
                                   selection=selection, storage_options=storage_options, verbose=verbose,
                                   output=output)
        if output is not None:
            write_frame(report.frame, output, spark.sparkContext, job="spark inspect dirty-ratio: the write job",
                        verbose=verbose)
    render_dirty_ratio(report.rows, as_json=as_json)
    if not as_json:
        startup_line(startup_s)
    if any(row.error for row in report.rows):
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


@spark_group.command("report", short_help="kcompact report's page, each partition read by a Spark task.",
                     epilog=with_examples(
                         f"{STARTUP_NOTE}\n\n{REPORT_EPILOG}",
                         "kcompact spark report b1/kafka-logs b2/kafka-logs --output cluster.html",
                         "kcompact spark report /logs --master spark://host:7077 --output r.html",
                         "kcompact spark report /shared/kafka-logs --json > report.json",
                     ))
@_local_report_paths
@_filter
@session_options
@_config
@_now_ms
@_config_sources
@click.option("--output", type=click.Path(dir_okay=False, path_type=str), default=None, metavar="FILE.html",
              help="The HTML page to write (created or replaced). Required unless --json.")
@sole_replica_option
@json_option("Print the report's data as one JSON object (with --output, the page is written too).")
def spark_report_command(
    paths: tuple[str, ...], master: str | None, verbose: bool, spark_conf_pairs: tuple[str, ...],
    executor_python: str | None, config_pairs: tuple[str, ...], now_ms: int | None, server_properties: str | None,
    metadata_dir: str | None, output: str | None, sole_replica: bool, as_json: bool,
    selection: PartitionFilter | None = None,
) -> None:
    """The page of `kcompact report` for a cluster's worth of partitions: each partition is read by a
    Spark task as `kcompact report` reads it (bytes on disk and after a clean now as inspect keys projects
    them, the dirty ratio and what blocks the cleaner, the last clean, hanging transactions), only a small
    row per partition comes back to the driver, and the page counts every partition into its topic and
    lists the largest (and any with an error or a hanging transaction), as `report --from` does. Its
    totals are those of `kcompact report` of the same paths. With several log dirs, the replicas are
    compared by Spark tasks too. Executors must see the log dirs at the same paths. Exits 3 when
    replicas diverge, 2 when a partition fails to read, or when a Spark task is lost (its Python worker or
    the JVM died: one error line, no report made).
    """
    from kcompact.cli.report_cmd import finish_report
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.report.gather import ConfigInputs
    from kcompact.spark.report_job import plan_report, spark_report
    from kcompact.spark.session import command_session

    if output is None and not as_json:
        raise click.UsageError("--output FILE.html is required (or --json for the report's data)")
    config = ConfigInputs(parse_config_pairs(config_pairs), server_properties, metadata_dir, sole_replica)
    plan = plan_report(paths, config, now_ms=now_ms, selection=selection)  # a bad path: before Spark starts
    # the page is written by the driver, not by Spark: no output for Spark's file systems to check
    conf = checks_before_session(paths, output=None, master=master, spark_conf_pairs=spark_conf_pairs,
                                 executor_python=executor_python)
    with command_session(master, verbose=verbose, conf=conf, executor_python=executor_python) as (spark, startup_s):
        checks_in_session(spark, paths, output=None, verbose=verbose)
        report = spark_report(spark, plan, verbose=verbose)
    if not as_json:
        startup_line(startup_s)
    finish_report(report, output, as_json=as_json)


@spark_group.command("export", short_help="Write records as Parquet: all, or the latest value per key.",
                     epilog=with_examples(
                         SPARK_EPILOG,
                         "kcompact spark export /shared/kafka-logs --output records.parquet",
                         "kcompact spark export /shared/kafka-logs/orders-0 --latest --output o.parquet",
                         "kcompact spark export /shared/kafka-logs --topic orders --output o.parquet",
                     ))
@_paths
@_filter
@click.option("--output", type=click.Path(path_type=str), required=True, metavar="DIR",
              help="A new directory for the Parquet files.")
@click.option("--latest", is_flag=True,
              help=LATEST_HELP)
@session_options
@_storage_option
@sole_replica_option
@json_option("Print the summary as JSON.")
def spark_export_command(paths: tuple[str, ...], output: str, latest: bool, master: str | None,
                         verbose: bool, spark_conf_pairs: tuple[str, ...], executor_python: str | None,
                         storage_pairs: tuple[str, ...], sole_replica: bool, as_json: bool,
                         selection: PartitionFilter | None = None) -> None:
    """Write the records of partition directories or log dirs as Parquet: topic, partition, offset,
    timestamp, key, value, headers (key string, value binary), is_tombstone, is_control,
    is_transactional, producer_id. Without --latest every stored record is written (read_uncommitted:
    control records and aborted transactions included, flagged). Each Spark task reads about 64 MiB
    of segments. PATHS may be fsspec URLs (s3://, gs://, hdfs://, file://: backups and archived
    copies), read on the executors. Every batch's CRC is checked first: a partition with one that
    fails is left out whole and named (exit 2); named alone, nothing is written. A Spark task lost (its
    Python worker or the JVM died) is one error line saying what is at --output: nothing, or an incomplete
    directory without _SUCCESS that must not be used (exit 2). A PATH given as
    HOST:/path is on that host's own disk (a broker's log dir): its segments are listed, checked and read
    by tasks preferring that host (one that runs on another host refuses them: one error line). A segment
    that changed since it was listed leaves its partition out; changed after its check, nothing is written.
    """
    from kcompact.segment.remote import parse_storage_options
    from kcompact.spark.export import spark_export
    from kcompact.spark.locality import plain_paths
    from kcompact.spark.session import command_session

    storage_options = parse_storage_options(storage_pairs)
    check_new_output(output)
    conf = checks_before_session(paths, output=output, master=master, spark_conf_pairs=spark_conf_pairs,
                                 executor_python=executor_python, storage_options=storage_options)
    with command_session(master, verbose=verbose, conf=conf, executor_python=executor_python) as (spark, startup_s):
        checks_in_session(spark, tuple(plain_paths(paths)), output=output, verbose=verbose)
        summary = spark_export(spark, paths, output, latest=latest, selection=selection,
                               storage_options=storage_options, verbose=verbose, sole_replica=sole_replica)
    render_export(summary, startup_s, as_json=as_json)
    if summary.failures:
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


# --- rendering -----------------------------------------------------------------------------------------


def render_spark_clean(run: SparkCleanRun, startup_s: float, *, as_json: bool, verbose: bool = False,
                       output_error: str | None = None) -> None:
    """Print a ``spark clean`` run: JSON rows, or notes, a table, error lines and a summary; a failed
    Spark job as one error line (its whole error too with ``verbose``), and so a failed ``--output`` write
    (``output_error``)."""
    from kcompact.cleaner.logdir.report_row import STATUS_SKIPPED
    from kcompact.cleaner.logdir.run_summary import is_summarised, repeated_warning_notes, skipped_lines
    from kcompact.log.rules.fence import fence_lines

    rows = run.as_dicts()
    counted = repeated_warning_notes([row["warnings"] for row in rows])  # each row keeps its own warning
    notes = [*run.notes, *counted]
    failure_line = run.failure_line()
    if verbose and run.job_failure is not None:
        render.err_console().print(run.job_failure.detail, highlight=False, markup=False, soft_wrap=True)
    if as_json:
        render.emit_json({"now_ms": run.now_ms, "partitions": rows, "notes": notes,
                          "spark_tasks": run.spark_tasks, "startup_s": round(startup_s, 3),
                          "job_error": failure_line, "not_finished": run.unreported, "output_error": output_error})
        for line in (failure_line, output_error):
            if line is not None:
                render.error_line(line)
        return
    for note in notes:
        render.warning_line(note)
    if rows:
        render.console().print(_clean_table(rows))
    for row in rows:
        for line in fence_lines(row["fence"], row["clean_limit"]):
            render.plain(f"{row['topic']}-{row['partition']}: {line}")
    skipped = [(f"{row['topic']}-{row['partition']}", row["skipped_reason"]) for row in rows
               if row["skipped_reason"] is not None and row["status"] == STATUS_SKIPPED]
    for line in ([f"{name}: skipped — {why}" for name, why in skipped] if verbose else skipped_lines(skipped)):
        render.plain(line)  # one line per reason (``clean``'s), each partition's with --verbose or --json
    unreported = set(run.unreported)  # said together in the failure line
    for row in rows:
        if row["error"] is not None and row["partition_dir"] not in unreported:
            render.error_line(row["error"].rstrip())
    for line in (failure_line, output_error):
        if line is not None:
            render.error_line(line)
    for row in rows:
        for warning in row["warnings"]:
            if not (counted and is_summarised(warning)):
                render.warning_line(f"{row['topic']}-{row['partition']}: {warning}")
    render.plain(_clean_summary(rows))
    startup_line(startup_s)
    if run.spark_tasks:
        render.err_console().print(f"Spark tasks: {run.spark_tasks} (partitions packed by bytes; --task-bytes "
                                   "to choose)", highlight=False)


def _clean_table(rows: list[dict[str, Any]]) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(title="spark clean", title_justify="left", box=box.SIMPLE_HEAD)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("partition", "left"), ("status", "left"), ("dirty offsets", "right"), ("read", "right"),
        ("written", "right"), ("saved", "right"), ("s", "right"))
    for column, justify in columns:
        # on a narrow terminal the partition and status fold (a name is never cut short); numbers stay whole
        folds = column in ("partition", "status")
        table.add_column(column, justify=justify, overflow="fold" if folds else "ellipsis", no_wrap=not folds)
    for row in rows:
        done = row["bytes_read"] is not None
        span = ("-" if row["first_dirty_offset"] is None or row["end_offset"] is None
                else f"[{row['first_dirty_offset']}, {row['end_offset']})")
        table.add_row(
            f"{row['topic']}-{row['partition']}" if row["topic"] else row["partition_dir"],
            row["status"] + (" (distributed map)" if row["distributed_map"] else ""),
            span,
            render.size_text(row["bytes_read"]) if done else "-",
            render.size_text(row["bytes_written"]) if done else "-",
            render.percent_text(row["size_reduction"]) if done else "-",
            f"{row['elapsed_s']:.2f}" if done else "-",
        )
    return table


def _clean_summary(rows: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    read = sum(row["bytes_read"] or 0 for row in rows)
    written = sum(row["bytes_written"] or 0 for row in rows)
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no partitions"
    if any(row["dry_run"] for row in rows):  # nothing was done: what it would read and write
        return (f"{render.plural(len(rows), 'partition')}: {parts}; would read {render.size_text(read)}, write "
                f"{render.size_text(written)}")
    return (f"{render.plural(len(rows), 'partition')}: {parts}; {render.size_text(read)} read, "
            f"{render.size_text(written)} written")


def render_export(summary: ExportSummary, startup_s: float, *, as_json: bool) -> None:
    """Print what ``spark export`` wrote, and the partitions it left out."""
    from kcompact.cli.export_cmd import render_export_summary

    if as_json:
        render.emit_json({**summary.as_dict(), "startup_s": round(startup_s, 3)})
        return
    render_export_summary(summary)
    startup_line(startup_s)


def submit_main() -> None:
    """The ``spark-submit`` driver: run ``kcompact`` with this process's arguments (``--path`` alone
    prints this file's path instead)."""
    if sys.argv[1:] == ["--path"]:
        click.echo(os.path.abspath(__file__))
        return
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        del sys.path[0]
    from kcompact.cli.main import main

    sys.argv[0] = "kcompact"
    main()


if __name__ == "__main__":
    submit_main()
