"""``kcompact report``: parse, call one library function, write the page (or print its data).

Only click is imported at module level (``kcompact --help`` stays fast); the library, plotly and rich are
imported where they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.options import (
    EXIT_BAD_INPUT,
    EXIT_DIVERGED,
    METADATA_DIRS_HELP,
    config_option,
    config_source_options,
    json_option,
    now_ms_option,
    sole_replica_option,
)
from kcompact.cli.partition_filter_options import partition_filter_options

if TYPE_CHECKING:
    from kcompact.report.model import Report
    from kcompact.segment.partition_filter import PartitionFilter

REPORT_EPILOG = (
    "Exit codes: 0 every partition read and, with several log dirs, every shared partition's copies agree; "
    "3 some partition's replica copies diverge (as inspect replicas; one line on stderr names them); 2 bad "
    "input, or a partition that fails to read or whose copies cannot be compared (one line each on stderr, a "
    "row in the page); 1 a bug in kcompact (with a traceback). The page is written first, whatever the code."
)
DIVERGED_NAMED = 10  # partitions named in the line saying replicas diverge (the page lists them all)


@click.command("report", short_help="One offline HTML page: disk use, what a clean frees, what blocks it.",
               epilog=with_examples(
                   REPORT_EPILOG,
                   "kcompact report /tmp/kafka-logs --output report.html",
                   "kcompact report b1/kafka-logs b2/kafka-logs b3/kafka-logs --output c.html",
                   "kcompact report --from ratio.parquet --output cluster.html",
               ))
@click.argument("paths", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=str))
@partition_filter_options("paths")
@click.option("--output", type=click.Path(dir_okay=False, path_type=str), default=None, metavar="FILE.html",
              help="The HTML page to write (created or replaced). Required unless --json.")
@click.option("--from", "from_parquet", type=click.Path(exists=True, path_type=str), default=None,
              metavar="PARQUET", help="Make the page from the Parquet that `kcompact spark inspect dirty-ratio "
                                      "--output` wrote (a cluster's worth: aggregated by topic, the largest "
                                      "partitions listed) instead of reading PATHS.")
@config_option("A topic configuration by Kafka's name (min.cleanable.dirty.ratio, …). Repeatable.")
@now_ms_option("The clock (default: now), in ms since the epoch.")
@config_source_options(METADATA_DIRS_HELP)
@sole_replica_option
@json_option("Print the report's data as one JSON object (with --output, the page is written too).")
def report_command(paths: tuple[str, ...], output: str | None, from_parquet: str | None,
                   config_pairs: tuple[str, ...], now_ms: int | None, server_properties: str | None,
                   metadata_dir: str | None, sole_replica: bool, as_json: bool,
                   selection: PartitionFilter | None = None) -> None:
    """One self-contained HTML page about the given log dirs (several: one per broker) or partitions:
    bytes on disk by topic and what a clean now would give back (the cleaner's dry run, as inspect keys
    projects it), which partitions the broker's cleaner would pick and what blocks the others (inspect
    dirty-ratio's rules), when each was last cleaned (inspect last-clean), hanging transactions and
    their abort lines (inspect transactions) and, with several log dirs, whether the replicas' copies
    agree (inspect replicas). Charts and sortable tables; the file opens with no network.

    Reads every partition's log (the dry-run clean reads its dirty section); writes only the page.
    Exits 3 when replicas diverge, 2 when a partition fails to read (its row in the page says why).
    """
    if (not paths) == (from_parquet is None):
        raise click.UsageError("give either log dirs / partition dirs (PATHS) or --from PARQUET, not both")
    if output is None and not as_json:
        raise click.UsageError("--output FILE.html is required (or --json for the report's data)")
    report = _make_report(paths, from_parquet, config_pairs, now_ms, server_properties, metadata_dir,
                          selection, as_json, sole_replica)
    finish_report(report, output, as_json=as_json)


def finish_report(report: Report, output: str | None, *, as_json: bool) -> None:
    """Print the report's data (``--json``) and/or write its page, name the partitions that failed to read
    (stderr), and exit as the report's ``--help`` says (``report`` and ``spark report`` alike)."""
    if as_json:
        render.emit_json(report.as_dict())
    if output is not None:
        from kcompact.report.page import write_page

        size = write_page(report, output)
        click.echo(f"kcompact: wrote {output} ({render.plural(report.totals.partitions, 'partition')}, "
                   f"{render.size_text(size)})", err=as_json)
    failing = [p for p in report.partitions if p.errors]
    for entry in failing:
        render.error_line(f"{entry.topic}-{entry.partition} ({entry.log_dir}): {'; '.join(entry.errors)}")
    for replica in report.replicas:
        if replica.error is not None:
            render.error_line(f"{replica.topic}-{replica.partition}: inspect replicas: {replica.error}")
    diverged = [f"{r.topic}-{r.partition}" for r in report.replicas if r.agree is False]
    if diverged:
        more = f" and {len(diverged) - DIVERGED_NAMED} more" if len(diverged) > DIVERGED_NAMED else ""
        render.warning_line(f"the replica copies of {render.plural(len(diverged), 'partition')} diverge: "
                            f"{', '.join(diverged[:DIVERGED_NAMED])}{more} (kcompact inspect replicas says how)")
    if failing or report.totals.errors or any(r.error is not None for r in report.replicas):
        raise click.exceptions.Exit(EXIT_BAD_INPUT)
    if diverged:
        raise click.exceptions.Exit(EXIT_DIVERGED)


def _make_report(paths: tuple[str, ...], from_parquet: str | None, config_pairs: tuple[str, ...],
                 now_ms: int | None, server_properties: str | None, metadata_dir: str | None,
                 selection: PartitionFilter | None, as_json: bool, sole_replica: bool = False) -> Report:
    """The report, from the partitions (with a progress bar on stderr) or from the Parquet rows."""
    if from_parquet is not None:
        from kcompact.report.scale import parquet_report

        return parquet_report(from_parquet, selection=selection, now_ms=now_ms)
    from kcompact.cli.progress_view import progress_bar
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.report.gather import ConfigInputs, log_dir_report

    config = ConfigInputs(parse_config_pairs(config_pairs), server_properties, metadata_dir, sole_replica)
    with progress_bar(enabled=not as_json, verb="reading", counts=True) as progress:
        return log_dir_report(paths, config, now_ms=now_ms, selection=selection, progress=progress)
