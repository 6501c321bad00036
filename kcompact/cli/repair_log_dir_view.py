"""``kcompact repair LOG_DIR``: run :func:`kcompact.repair.log_dir.repair_log_dir` and render its outcome.

Text: the full report of every partition with findings (what each gives up included), the log dir's own
findings once, then one summary table, one row per partition. ``--json``: one document holding the
summary ``rows``, the full report of every partition (``partitions``, as ``repair PARTITION_DIR --json``
prints each), the ``failures`` and the log dir's own findings. Exit 2 unless every partition is sound or
repaired (``__cluster_metadata``, reported only, decides nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

from kcompact.cli import render
from kcompact.cli.repair_view import render_partition

if TYPE_CHECKING:
    from rich.console import JustifyMethod

    from kcompact.repair.log_dir import LogDirRepair
    from kcompact.repair.repair import RepairOptions
    from kcompact.segment.partition_filter import PartitionFilter


def repair_log_dir_command_body(log_dir: str, options: RepairOptions, selection: PartitionFilter | None,
                                jobs: int | None, *, as_json: bool) -> tuple[dict[str, Any], bool]:
    """Repair (or with ``options.dry_run`` verify) every partition of ``log_dir`` and render the text report
    (not with ``as_json``).

    Returns:
        The ``--json`` object, and whether every partition is sound or repaired (else exit 2).
    """
    from kcompact.cli.progress_view import progress_bar
    from kcompact.repair.log_dir import repair_log_dir

    with progress_bar(enabled=not as_json, verb="reading") as progress:
        outcome = repair_log_dir(log_dir, options, selection=selection, jobs=jobs, progress=progress)
    if not as_json:
        render_log_dir_repair(outcome)
    return outcome.as_dict(), outcome.ok


def render_log_dir_repair(outcome: LogDirRepair) -> None:
    """The text report (see the module docstring)."""
    from kcompact.repair.log_dir import STATUS_SOUND

    for result in sorted(outcome.results, key=lambda r: r.partition_dir):
        if result.findings or outcome.status(result) != STATUS_SOUND:
            reported_only = result.partition_dir in outcome.reported_only and not outcome.dry_run
            render_partition(result, reported_only=reported_only)
            render.plain("")
    for finding in outcome.log_dir_findings:
        render.plain(f"{outcome.log_dir} (the log dir): [{finding.kind}] {finding.located()}")
        render.plain(f"      broker: {finding.broker_effect}")
    for failure in outcome.failures:
        render.error_line(f"{failure.partition_dir}: {failure.error}")
    for note in outcome.notes:
        render.plain(note)
    if outcome.backed_up:  # before the table, whose count of partitions stays the last line
        render.plain(f"backups: {outcome.backup_root} (undo the whole run: kcompact repair --undo "
                     f"{outcome.backup_root}; one partition: --undo {outcome.backup_root}/<partition>)")
    _summary_table(outcome)


def _summary_table(outcome: LogDirRepair) -> None:
    verb = "repair --dry-run" if outcome.dry_run else "repair"
    table = Table(title=f"{verb} {outcome.log_dir}", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("partition", "left"), ("status", "left"), ("problems", "right"), ("given up", "left"), ("backup", "left"))
    for column, justify in columns:
        table.add_column(column, justify=justify, overflow="fold")
    for row in outcome.rows():
        table.add_row(row["partition"], row["status"], _count(row["problems"]), _given_up_cell(row),
                      row["backup_dir"] or "-")
    render.console().print(table)
    counts: dict[str, int] = {}
    for row in outcome.rows():
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    render.plain(f"{render.plural(len(outcome.rows()), 'partition')}: "
                 + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))


def _count(value: Any) -> str:
    return "-" if value is None else str(value)


def _given_up_cell(row: dict[str, Any]) -> str:
    """``-`` (nothing), or ``2 regions, 180 B, 3 records`` / ``…, records unknown``."""
    if not row["regions_given_up"]:
        return "-"
    records = ("records unknown" if row["records_given_up"] is None
               else render.plural(row['records_given_up'], 'record'))
    return (f"{render.plural(row['regions_given_up'], 'region')}, {render.size_text(row['bytes_given_up'])}, "
            f"{records}")
