"""``kcompact spark …``: the serial commands' work distributed over a Spark cluster (or local cores).

``spark clean``, ``spark inspect dirty-ratio`` and ``spark export`` each parse their options, start
(or join) a session with :func:`kcompact.spark.session.command_session`, call one job function of
``kcompact.spark``, and hand the result to ``spark_view``. Only click is imported at module level:
pyspark is loaded when a command runs, so ``kcompact --help`` works without the ``spark`` extra
(a command then exits 2 saying ``pip install 'kcompact[spark]'``).

This file is also the driver file to hand ``spark-submit``, which runs a *file*::

    spark-submit --master spark://host:7077 "$(python -m kcompact.cli.spark_cmds --path)" \\
        spark clean /shared/kafka-logs

Run that way, it takes its own directory off ``sys.path`` (``spark-submit`` puts it first) and runs
the ``kcompact`` command line; the session keeps the master ``spark-submit`` chose.
"""

from __future__ import annotations

import os
import sys

import click

from kcompact.cli.config_cmd import config_option, config_source_options, json_option, now_ms_option
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath

EXIT_BAD_INPUT = 2  # as kcompact.cli.main (not imported: main imports this module while it loads)
EXIT_BUG = 1
EPILOG = (
    "Exit codes: 0 success; 2 bad input or refused (one line on stderr names the file and byte "
    "position); 1 a bug in kcompact (with a traceback)."
)
STARTUP_NOTE = (
    "Starting Spark costs seconds (a JVM and Python workers): for one partition, or a few small "
    "ones, the serial command is faster."
)
SPARK_EPILOG = f"{STARTUP_NOTE}\n\n{EPILOG}"

_master = click.option("--master", default=None, metavar="URL",
                       help="Spark master (local[4], spark://host:7077, yarn…). Default: what "
                            "spark-submit set, else local[*].")
_verbose = click.option("--verbose", is_flag=True, help="Show Spark's own logs (INFO); default: errors only.")
_config = config_option("A topic configuration by Kafka's name. Repeatable.")
_now_ms = now_ms_option("The clock every task uses (default: the driver's now), in ms since the epoch.")
_config_sources = config_source_options("metadata.log.dir or its __cluster_metadata-0.")
_paths = click.argument("paths", nargs=-1, required=True, type=InputPath())
_local_paths = click.argument("paths", nargs=-1, required=True, type=InputPath(refuse_as="spark clean"))
_storage_option = click.option(
    "--storage-option", "storage_pairs", multiple=True, metavar="KEY=VALUE",
    help="An fsspec storage option for URL inputs (s3://, gs://, hdfs://…), e.g. "
         "endpoint_url=http://127.0.0.1:9000; or the usual environment (AWS_ENDPOINT_URL…). Repeatable.")


@click.group("spark", short_help="Run clean, dirty-ratio and export as Spark jobs.", epilog=with_examples(
    SPARK_EPILOG,
    "kcompact spark clean /shared/kafka-logs --master 'local[4]'",
    "kcompact spark inspect dirty-ratio /shared/kafka-logs --output ratio.parquet",
))
def spark_group() -> None:
    """Run clean, inspect dirty-ratio and export as Spark jobs: one task per partition (or segment),
    the same library code as the serial commands, results as DataFrames (--output writes Parquet).

    Needs the spark extra (pip install 'kcompact[spark]') and Java. Every executor must see the log
    dirs at the same paths (a shared file system), or run one job per broker host.
    """


@spark_group.command("clean", short_help="Clean partitions and log dirs as Spark tasks.", epilog=with_examples(
    SPARK_EPILOG,
    "kcompact spark clean /shared/kafka-logs --dry-run --json",
    "kcompact spark clean /shared/kafka-logs --map-budget 8589934592",
))
@_local_paths
@_master
@_verbose
@_config
@_now_ms
@click.option("--roll", is_flag=True, help="First roll a new empty active segment (as kcompact clean --roll).")
@click.option("--from-start", is_flag=True, help="Re-clean from the log start.")
@click.option("--dry-run", is_flag=True, help="Compute everything, write nothing.")
@click.option("--dedupe-buffer-size", type=click.IntRange(min=1), default=None, metavar="BYTES",
              help="Behave like a broker with this log.cleaner.dedupe.buffer.size (as kcompact "
                   "clean --dedupe-buffer-size; --config log.cleaner.dedupe.buffer.size=BYTES does "
                   "the same, this option wins).")
@click.option("--only-eligible", is_flag=True,
              help="For a log dir: clean only partitions the broker's cleaner would pick now.")
@click.option("--assume-compact", is_flag=True,
              help="As kcompact clean --assume-compact: compact partitions whose cleanup.policy is "
                   "unknown, except those whose data is mostly keyless.")
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
@_config_sources
@click.option("--output", type=click.Path(path_type=str), default=None, metavar="STATS.parquet",
              help="Also write the per-partition rows as Parquet (a new directory).")
@json_option("Print the rows as JSON.")
def spark_clean_command(
    paths: tuple[str, ...], master: str | None, verbose: bool, config_pairs: tuple[str, ...],
    now_ms: int | None, roll: bool, from_start: bool, dry_run: bool, dedupe_buffer_size: int | None,
    only_eligible: bool, assume_compact: bool, allow_keyless_loss: bool, map_budget: int | None,
    task_bytes: int | None,
    server_properties: str | None, metadata_dir: str | None, output: str | None, as_json: bool,
) -> None:
    """Clean partition directories and log dirs as Spark tasks (partitions packed into tasks by
    bytes): each partition runs the same clean_partition as `kcompact clean`, with one clock fixed by
    the driver, and ends byte-identical to a serial clean of each partition in turn (cleaner
    checkpoint included). A failing partition is reported and left untouched; the others finish.
    As with `kcompact clean`, a partition not known to be compacted is skipped (a log dir's) or
    fails (one named alone). Exits 2 when a partition failed, 1 on a bug.
    """
    from kcompact.cleaner.logdir.report_row import STATUS_BUG, STATUS_FAILED
    from kcompact.cleaner.partition import CleanOptions
    from kcompact.cli.spark_view import check_new_output, executors_line, render_spark_clean
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.spark.clean_job import spark_clean
    from kcompact.spark.output import write_frame
    from kcompact.spark.probe import check_executors
    from kcompact.spark.session import command_session

    overrides = parse_config_pairs(config_pairs)
    check_new_output(output)
    options = CleanOptions(now_ms=now_ms, from_start=from_start, dedupe_buffer_size=dedupe_buffer_size,
                           dry_run=dry_run, roll=roll)
    with command_session(master, verbose=verbose) as (spark, startup_s):
        executors_line(check_executors(spark.sparkContext, paths))
        run = spark_clean(spark, paths, cli_overrides=overrides, options=options,
                          only_eligible=only_eligible, server_properties=server_properties,
                          metadata_dir=metadata_dir, map_budget_bytes=map_budget, task_bytes=task_bytes,
                          assume_compact=assume_compact, allow_keyless_loss=allow_keyless_loss)
        if output is not None:
            write_frame(run.frame, output, spark.sparkContext.master)
    render_spark_clean(run, startup_s, as_json=as_json)
    statuses = {row["status"] for row in run.as_dicts()}
    if STATUS_BUG in statuses:
        raise click.exceptions.Exit(EXIT_BUG)
    if STATUS_FAILED in statuses:
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


@spark_group.group("inspect", short_help="Read-only reports computed by Spark tasks.",
                   epilog=with_examples(SPARK_EPILOG, "kcompact spark inspect dirty-ratio /shared/kafka-logs"))
def spark_inspect() -> None:
    """Read-only reports computed by Spark tasks."""


@spark_inspect.command("dirty-ratio", short_help="The rows of inspect dirty-ratio, computed by Spark tasks.",
                       epilog=with_examples(
                           SPARK_EPILOG,
                           "kcompact spark inspect dirty-ratio /shared/kafka-logs --json",
                           "kcompact spark inspect dirty-ratio /shared/kafka-logs --output r.parquet",
                       ))
@_paths
@_master
@_verbose
@_config
@_now_ms
@_config_sources
@_storage_option
@click.option("--output", type=click.Path(path_type=str), default=None, metavar="REPORT.parquet",
              help="Also write the rows as Parquet (a new directory), same fields as --json.")
@json_option("Print a JSON list of rows (as kcompact inspect dirty-ratio).")
def spark_dirty_ratio_command(
    paths: tuple[str, ...], master: str | None, verbose: bool, config_pairs: tuple[str, ...],
    now_ms: int | None, server_properties: str | None, metadata_dir: str | None, storage_pairs: tuple[str, ...],
    output: str | None, as_json: bool,
) -> None:
    """The rows of `kcompact inspect dirty-ratio` (same fields, same values, same order), computed
    by Spark tasks over slices of the log dirs (local paths, or fsspec URLs such as s3://… read on
    the executors). Exits 2 when a partition's files do not parse.
    """
    from kcompact.cli.dirty_ratio_view import render_dirty_ratio
    from kcompact.cli.spark_view import check_new_output, executors_line, startup_line
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.segment.remote import parse_storage_options
    from kcompact.spark.inspect_job import spark_dirty_ratio
    from kcompact.spark.output import write_frame
    from kcompact.spark.probe import check_executors
    from kcompact.spark.session import command_session

    overrides = parse_config_pairs(config_pairs)
    check_new_output(output)
    with command_session(master, verbose=verbose) as (spark, startup_s):
        executors_line(check_executors(spark.sparkContext, paths))
        report = spark_dirty_ratio(spark, paths, cli_overrides=overrides, now_ms=now_ms,
                                   server_properties=server_properties, metadata_dir=metadata_dir,
                                   storage_options=parse_storage_options(storage_pairs))
        if output is not None:
            write_frame(report.frame, output, spark.sparkContext.master)
    render_dirty_ratio(report.rows, as_json=as_json)
    if not as_json:
        startup_line(startup_s)
    if any(row.error for row in report.rows):
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


@spark_group.command("export", short_help="Write records as Parquet: all, or the latest value per key.",
                     epilog=with_examples(
                         SPARK_EPILOG,
                         "kcompact spark export /shared/kafka-logs --output records.parquet",
                         "kcompact spark export /shared/kafka-logs/orders-0 --latest --output o.parquet",
                     ))
@_paths
@click.option("--output", type=click.Path(path_type=str), required=True, metavar="DIR",
              help="A new directory for the Parquet files.")
@click.option("--latest", is_flag=True,
              help="Write the compacted view: per (topic, partition, key) the latest value, as a "
                   "read_committed consumer reading from the log start ends up with it (no "
                   "tombstones, control records, keyless records, aborted or still-open "
                   "transactions).")
@_master
@_verbose
@_storage_option
@json_option("Print the summary as JSON.")
def spark_export_command(paths: tuple[str, ...], output: str, latest: bool, master: str | None,
                         verbose: bool, storage_pairs: tuple[str, ...], as_json: bool) -> None:
    """Write the records of partition directories or log dirs as Parquet: topic, partition, offset,
    timestamp, key, value, headers (key string, value binary), is_tombstone, is_control,
    is_transactional, producer_id. Without --latest every stored record is written (read_uncommitted:
    control records and aborted transactions included, flagged). Each Spark task reads about 64 MiB
    of segments. PATHS may be fsspec URLs (s3://, gs://, hdfs://, file://: backups and archived
    copies), read on the executors.
    """
    from kcompact.cli.spark_view import check_new_output, executors_line, render_export
    from kcompact.segment.remote import parse_storage_options
    from kcompact.spark.export import spark_export
    from kcompact.spark.probe import check_executors
    from kcompact.spark.session import command_session

    check_new_output(output)
    with command_session(master, verbose=verbose) as (spark, startup_s):
        executors_line(check_executors(spark.sparkContext, paths))
        summary = spark_export(spark, paths, output, latest=latest,
                               storage_options=parse_storage_options(storage_pairs))
    render_export(summary, startup_s, as_json=as_json)


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
