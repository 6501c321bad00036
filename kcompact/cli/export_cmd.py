"""``kcompact export``: records as Parquet on this machine, in-process (pyarrow), without Spark.

Parses the options, calls :func:`kcompact.inspect.export.export_parquet` with a progress bar, and prints
what it wrote. The same rows and schema as ``kcompact spark export`` (which reads with the same
functions), at a fraction of its fixed cost for a small partition: no JVM, no Python workers.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath, storage_option
from kcompact.cli.options import EPILOG, EXIT_BAD_INPUT, json_option, sole_replica_option
from kcompact.cli.partition_filter_options import partition_filter_options

if TYPE_CHECKING:
    from kcompact.inspect.export import ExportSummary
    from kcompact.segment.partition_filter import PartitionFilter


LATEST_HELP = ("Write the compacted view: per (topic, partition, key) the latest value, as a read_committed "
               "consumer reading from the log start ends up with it: nothing at or above the last stable "
               "offset (the first open transaction, else the high watermark; said per partition), no "
               "tombstones, control records, keyless records or aborted transactions.")


@click.command("export", short_help="Write records as Parquet here, without Spark.", epilog=with_examples(
    EPILOG,
    "kcompact export /var/kafka-logs/orders-0 --output orders.parquet",
    "kcompact export /var/kafka-logs --topic orders --output orders.parquet",
    "kcompact export s3://backups/logs --output out --storage-option anon=true",
))
@click.argument("paths", nargs=-1, required=True, type=InputPath())
@partition_filter_options("paths")
@click.option("--output", type=click.Path(path_type=str), required=True, metavar="DIR",
              help="A new directory for the Parquet file (part-00000.parquet, as Spark names it).")
@click.option("--latest", is_flag=True,
              help=LATEST_HELP)
@storage_option
@sole_replica_option
@json_option("Print the summary as JSON.")
def export_command(paths: tuple[str, ...], output: str, latest: bool, storage_pairs: tuple[str, ...],
                   sole_replica: bool, as_json: bool, selection: PartitionFilter | None = None) -> None:
    """Write the records of partition directories or log dirs as Parquet, in this process (pyarrow):
    the same columns and rows as `kcompact spark export` — topic, partition, offset, timestamp, key,
    value, headers, is_tombstone, is_control, is_transactional, producer_id — without Spark's
    start-up. Without --latest every stored record is written (control records and aborted
    transactions included, flagged). Every batch's CRC is checked first: a partition with one that
    fails is left out whole and named (exit 2); named alone, nothing is written. So is one whose segment
    changed since it was listed (its size, or its identity: times and inode, an object's ETag); changed
    after its check, the export stops and nothing is written (exit 2). A URL (s3://…, with
    --storage-option) is read through fsspec by byte range: each segment once to check it, once to export
    it (with --latest one partition at a time is copied locally, its view needing all of its files).
    Needs pyarrow (pip install 'kcompact[export]').
    """
    from kcompact.cli.progress_view import progress_bar
    from kcompact.inspect.export import export_parquet
    from kcompact.segment.remote import parse_storage_options

    started = time.perf_counter()
    with progress_bar(enabled=not as_json, verb="exporting") as progress:
        summary = export_parquet(paths, output, latest=latest, progress=progress, selection=selection,
                                 storage_options=parse_storage_options(storage_pairs), sole_replica=sole_replica)
    elapsed = time.perf_counter() - started
    if as_json:
        render.emit_json({**summary.as_dict(), "elapsed_s": round(elapsed, 3)})
    else:
        render_export_summary(summary, f" in {elapsed:.1f} s")
    if summary.failures:
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


def render_export_summary(summary: ExportSummary, took: str = "") -> None:
    """What an export wrote (stdout), where a read_committed view stops short of its log end or without
    a high watermark (stdout), then each partition it left out as an error line (stderr)."""
    from kcompact.inspect.export import STOP_LOG_END

    left_out = (f"; {render.plural(len(summary.failures), 'partition')} left out, their data failing its checks"
                if summary.failures else "")
    render.plain(f"{render.export_text(summary)} written to {summary.output}{took}{left_out}")
    for stop in summary.stops:
        if stop.reason != STOP_LOG_END or stop.high_watermark is None or stop.high_watermark_note is not None:
            render.plain(stop.describe())
    for failure in summary.failures:
        render.error_line(str(failure.error))
