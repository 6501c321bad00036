"""Rendering of ``kcompact clean``: a readable report like Kafka's cleaner log line, or JSON (each
partition a :func:`~kcompact.cleaner.logdir.report_row.partition_row`, the row ``spark clean`` prints too).

rich is imported only where it draws (the text report's tables; the progress bar is
``progress_view.py``'s), so ``kcompact clean --json`` never pays for importing it.
"""

from __future__ import annotations

from pathlib import Path

from kcompact.cleaner.logdir.report_row import partition_row
from kcompact.cleaner.logdir.run import CleanRun
from kcompact.cleaner.logdir.run_summary import (
    empty_partitions_line,
    holds_no_records,
    is_summarised,
    repeated_warning_notes,
)
from kcompact.cleaner.partition import CleanResult
from kcompact.cli import render


def render_clean(run: CleanRun, *, as_json: bool) -> None:
    """Print the run's report."""
    if as_json:  # the rows every clean report shares (``kcompact spark clean`` adds to them)
        render.emit_json({
            "results": [partition_row(r.partition_dir, r) for r in run.results],
            "failures": [partition_row(f.partition_dir, None, error=f.error) for f in run.failures],
            "skipped": [partition_row(k.partition_dir, None, skipped=k.reason) for k in run.skipped],
            "notes": run.notes,
        })
        return
    shown = set(run.notes)
    for note in dict.fromkeys(run.notes):
        render.warning_line(note)
    folded = bool(repeated_warning_notes([r.warnings for r in run.results]))  # counted in a note
    empty = [r for r in run.results if len(run.results) > 1 and _plain_empty(r)]
    for result in run.results:
        if result not in empty:
            _render_one(result, shown, folded)
    if empty:
        render.plain(empty_partitions_line(len(empty)))
    for skip in run.skipped:
        render.plain(f"{Path(skip.partition_dir).name}: skipped — {skip.reason}")
    for failure in run.failures:
        render.error_line(failure.error)
    if len(run.results) + len(run.failures) + len(run.skipped) > 1:
        _render_summary(run)


def _plain_empty(result: CleanResult) -> bool:
    """An empty partition with nothing else to say (no recovery, no retention, no warning of its own)."""
    return (result.skipped_reason is not None and holds_no_records(result.range)
            and not result.recovery_actions and not (result.retention and result.retention.deleted_segments)
            and all(is_summarised(w) for w in result.warnings))


def _render_one(result: CleanResult, shown: set[str], folded: bool) -> None:
    console = render.console()
    verb = "would clean" if result.dry_run else "cleaned"
    name = f"{result.topic}-{result.partition}"
    for action in result.recovery_actions:
        console.print(f"{name}: recovered interrupted clean: {action}")
    for warning in result.warnings:
        if warning not in shown and not (folded and is_summarised(warning)):
            render.warning_line(f"{name}: {warning}")
    if result.rolled:
        at = "would roll" if result.dry_run else "rolled"
        console.print(f"{name}: {at} a new empty active segment at the log end (--roll)")
    _render_retention(name, result)
    if result.skipped_reason is not None:
        console.print(f"{name}: nothing to clean — {result.skipped_reason}")
        return
    s, rng = result.stats, result.range
    assert rng is not None  # set whenever a clean ran
    rate = s.bytes_read / render.MIB / s.elapsed_s if s.elapsed_s else 0.0
    console.print(
        f"{name}: {verb} dirty section [{rng.first_dirty_offset}, {result.end_offset})"
        f" (dirty ratio {rng.dirty_ratio:.3f})"
    )
    from rich.table import Table

    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_row("read", f"{render.size_text(s.bytes_read)}, {s.records_read} records in "
                          f"{s.elapsed_s:.2f} s ({rate:.1f} MiB/s)")
    table.add_row("written", f"{render.size_text(s.bytes_written)}, {s.records_written} records")
    table.add_row("size reduction", render.percent_text(s.size_reduction))
    table.add_row("removed", (
        f"{s.superseded_removed} superseded, {s.tombstones_removed} tombstones, "
        f"{s.aborted_records_removed} aborted, {s.markers_removed} markers, {s.invalid_records} keyless"
    ))
    table.add_row("batches", (
        f"{s.batches_copied} copied, {s.batches_rebuilt} rebuilt, "
        f"{s.empty_batches_retained} kept empty, {s.batches_dropped} dropped"
    ))
    table.add_row("offset map", f"{s.map_entries} keys, {render.size_text(s.map_memory_bytes)}")
    checkpoint = "not written (dry run)" if result.dry_run else (
        f"{'none' if result.checkpoint_before is None else result.checkpoint_before} -> {result.end_offset}"
        if result.checkpoint_written else "unchanged")
    table.add_row("checkpoint", checkpoint)
    console.print(table)


def _render_retention(name: str, result: CleanResult) -> None:
    plan = result.retention
    if plan is None or not plan.deleted_segments:
        return
    verb = "would delete" if result.dry_run else "deleted"
    reasons = ", ".join(sorted(set(plan.reasons.values())))
    render.plain(
        f"{name}: retention {verb} {len(plan.deleted_segments)} segments ({plan.bytes_deleted} bytes, "
        f"{reasons}); log start {plan.log_start_before} -> {plan.log_start_after}"
        + (" after rolling a new active segment" if plan.rolled else "")
    )


def _render_summary(run: CleanRun) -> None:
    total_read = sum(r.stats.bytes_read for r in run.results)
    total_written = sum(r.stats.bytes_written for r in run.results)
    cleaned = sum(1 for r in run.results if r.skipped_reason is None)
    render.plain(
        f"{cleaned} partitions cleaned, {len(run.results) - cleaned} had nothing to clean, "
        f"{len(run.skipped)} skipped, {len(run.failures)} failed; "
        f"{total_read} bytes read, {total_written} bytes written"
    )
