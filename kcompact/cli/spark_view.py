"""Rendering of the ``kcompact spark`` commands: a rich summary after Spark's own progress bar, or JSON.

``spark clean`` prints one table row per partition (the DataFrame's rows), the failures as error
lines, and a summary line with Spark's start-up time apart from the job's; ``--json`` prints the
rows with the DataFrame's column names. ``spark inspect dirty-ratio`` reuses the serial command's
renderer. Spark's progress bar and logs go to stderr, never into ``--json`` output.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from kcompact.cleaner.logdir.report_row import STATUS_SKIPPED
from kcompact.cleaner.logdir.run_summary import is_summarised, repeated_warning_notes
from kcompact.cli import render
from kcompact.spark.output import check_new_output as check_output

if TYPE_CHECKING:
    from kcompact.inspect.export import ExportSummary
    from kcompact.spark.clean_job import SparkCleanRun
    from kcompact.spark.probe import ExecutorCheck

def check_new_output(output: str | None) -> None:
    """Refuse an ``--output`` that exists before any Spark work starts (a URI other than ``file://``
    is checked by Spark when it writes).

    Raises:
        KcompactError: the path exists.
    """
    if output is not None:
        check_output(output)


def executors_line(check: ExecutorCheck) -> None:
    """Which Python the executors run, when kcompact chose it (stderr)."""
    note = check.note()
    if note is not None:
        render.err_console().print(note, highlight=False, soft_wrap=True)


def startup_line(startup_s: float) -> None:
    """Spark's start-up time, apart from the work (stderr, so it never mixes with results)."""
    render.err_console().print(f"Spark session start-up: {startup_s:.1f} s", highlight=False)


def render_spark_clean(run: SparkCleanRun, startup_s: float, *, as_json: bool) -> None:
    """Print a ``spark clean`` run: JSON rows, or notes, a table, error lines and a summary."""
    rows = run.as_dicts()
    counted = repeated_warning_notes([row["warnings"] for row in rows])  # each row keeps its own warning
    notes = [*run.notes, *counted]
    if as_json:
        render.emit_json({"now_ms": run.now_ms, "partitions": rows, "notes": notes,
                          "spark_tasks": run.spark_tasks, "startup_s": round(startup_s, 3)})
        return
    for note in notes:
        render.warning_line(note)
    if rows:
        render.console().print(_clean_table(rows))
    for row in rows:
        if row["skipped_reason"] is not None and row["status"] == STATUS_SKIPPED:
            render.plain(f"{row['topic']}-{row['partition']}: skipped — {row['skipped_reason']}")
    for row in rows:
        if row["error"] is not None:
            render.error_line(row["error"].rstrip())
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
    table = Table(title="spark clean", title_justify="left", box=box.SIMPLE_HEAD)
    for column, justify in (("partition", "left"), ("status", "left"), ("dirty offsets", "right"),
                            ("read", "right"), ("written", "right"), ("saved", "right"),
                            ("s", "right")):
        # on a narrow terminal the partition and status fold (a name is never cut short); numbers stay whole
        folds = column in ("partition", "status")
        table.add_column(column, justify=justify, overflow="fold" if folds else "ellipsis",  # type: ignore[arg-type]
                         no_wrap=not folds)
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
    return f"{len(rows)} partitions: {parts}; {read} bytes read, {written} bytes written"


def render_export(summary: ExportSummary, startup_s: float, *, as_json: bool) -> None:
    """Print what ``spark export`` wrote."""
    if as_json:
        render.emit_json({**dataclasses.asdict(summary), "startup_s": round(startup_s, 3)})
        return
    what = "latest live records (one per key)" if summary.latest else "records"
    render.plain(f"{summary.records} {what} of {summary.partitions} partitions "
                 f"({summary.segments} segments) written to {summary.output}")
    startup_line(startup_s)
