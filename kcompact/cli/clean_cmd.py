"""``kcompact clean``: the command, and its rendering: a readable report like Kafka's cleaner log line, or JSON (each
partition a :func:`~kcompact.cleaner.logdir.report_row.partition_row`, the row ``spark clean`` prints too).

Only click is imported at module level (``kcompact --help`` stays fast); the library, and rich where it
draws (the text report's tables; the progress bar is ``progress_view.py``'s), are imported where they are
used, so ``kcompact clean --json`` never pays for importing rich.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath
from kcompact.cli.options import (
    EPILOG,
    EXIT_BAD_INPUT,
    METADATA_DIRS_HELP,
    config_option,
    config_source_options,
    end_without_teardown,
    fence_options,
    json_option,
    now_ms_option,
    parse_jobs,
    sole_replica_option,
)
from kcompact.cli.partition_filter_options import partition_filter_options

if TYPE_CHECKING:
    from kcompact.cleaner.logdir.run import CleanRun
    from kcompact.cleaner.round.options import CleanResult
    from kcompact.segment.partition_filter import PartitionFilter


def render_clean(run: CleanRun, *, as_json: bool, verbose: bool = False, dry_run: bool = False) -> None:
    """Print the run's report: skipped partitions one line per reason (``run_summary.skipped_lines``), or each
    on its own line with ``verbose``."""
    from kcompact.cleaner.logdir.run_summary import (
        active_only_line,
        empty_partitions_line,
        repeated_warning_notes,
        skipped_lines,
    )

    if as_json:
        render.emit_json(run_json(run))
        return
    shown = set(run.notes)
    for note in dict.fromkeys(run.notes):
        render.warning_line(note)
    _render_freed_first(run)
    folded = bool(repeated_warning_notes([r.warnings for r in run.results]))  # counted in a note
    empty = [r for r in run.results if len(run.results) > 1 and _plain_empty(r)]
    active_only = [r for r in run.results if _plain_active_only(r)]
    if len(active_only) < 2:
        active_only = []
    for result in run.results:
        if result not in empty and result not in active_only:
            _render_one(result, shown, folded)
    if active_only:
        render.plain(active_only_line([f"{r.topic}-{r.partition}" for r in active_only]))
    if empty:
        render.plain(empty_partitions_line(len(empty)))
    named = [(Path(skip.partition_dir).name, skip.reason) for skip in run.skipped]
    for line in ([f"{name}: skipped — {reason}" for name, reason in named] if verbose else skipped_lines(named)):
        render.plain(line)
    for failure in run.failures:
        render.error_line(failure.error)
    if run.gives_back_with_roll is not None:
        render.plain(_with_roll_line(run))
    if len(run.results) + len(run.failures) + len(run.skipped) > 1:
        _render_summary(run, dry_run=dry_run or _is_dry_run(run))


def run_json(run: CleanRun) -> dict[str, object]:
    """The run's ``--json`` object: the rows every clean report shares (``kcompact spark clean`` adds to them)."""
    from kcompact.cleaner.logdir.report_row import partition_row

    return {
        "results": [partition_row(r.partition_dir, r) for r in run.results],
        "failures": [partition_row(f.partition_dir, None, error=f.error) for f in run.failures],
        "skipped": [partition_row(k.partition_dir, None, skipped=k.reason) for k in run.skipped],
        "notes": run.notes,
        "gives_back_with_roll": run.gives_back_with_roll,
        **_space_json(run),
    }


def _space_json(run: CleanRun) -> dict[str, object]:
    """A log dir's keys of the space: what was freed first, the order when it is not the broker's, a dry
    run's total (None for a partition named alone, or what was not measured)."""
    freed = run.freed_first
    return {
        "freed_first": None if freed is None else {"actions": freed.actions, "freed_bytes": freed.freed_bytes},
        "order": run.fit_order,
        "space": None if run.space is None else {"peak_bytes": run.space.peak_bytes,
                                                 "gives_back_bytes": run.space.gives_back_bytes,
                                                 "free_bytes": run.free_bytes,
                                                 "reserved_bytes": run.reserved_bytes},
    }


def _render_freed_first(run: CleanRun) -> None:
    """What went before any clean, and the order used when it is not the broker's."""
    freed = run.freed_first
    if freed is not None and freed.actions:
        verb = "would free" if _is_dry_run(run) else "freed"
        render.plain(f"{verb} first, writing nothing Kafka keeps: {render.size_text(freed.freed_bytes)}")
        for action in freed.actions:
            render.plain(f"  {action}")
    if run.fit_order is not None:
        verb = "would clean" if _is_dry_run(run) else "cleaned"
        render.plain(f"{verb} in the order that fits the volume's free space (not the broker's): "
                     f"{', '.join(run.fit_order)}")


def _is_dry_run(run: CleanRun) -> bool:
    return any(r.dry_run for r in run.results)


def _plain_empty(result: CleanResult) -> bool:
    """An empty partition with nothing else to say (no recovery, no retention, no fence, no warning of its own)."""
    from kcompact.cleaner.logdir.run_summary import holds_no_records, is_summarised

    return (result.skipped_reason is not None and holds_no_records(result.range)
            and not result.recovery_actions and not (result.retention and result.retention.deleted_segments)
            and result.fence is None and all(is_summarised(w) for w in result.warnings))


def _plain_active_only(result: CleanResult) -> bool:
    """A partition whose records are all in its active segment, with nothing else to say (no fence either)."""
    from kcompact.cleaner.logdir.run_summary import holds_no_records, is_summarised
    from kcompact.log.rules.ranges import RULE_ACTIVE_SEGMENT

    rng = result.range
    return (result.skipped_reason is not None and rng is not None and rng.blocking_rule == RULE_ACTIVE_SEGMENT
            and not holds_no_records(rng) and not result.recovery_actions and not result.rolled
            and not (result.retention and result.retention.deleted_segments)
            and result.fence is None and all(is_summarised(w) for w in result.warnings))


def _render_one(result: CleanResult, shown: set[str], folded: bool) -> None:
    from kcompact.cleaner.logdir.run_summary import is_summarised
    from kcompact.log.rules.fence import fence_lines

    verb = "would clean" if result.dry_run else "cleaned"
    name = f"{result.topic}-{result.partition}"
    for action in result.recovery_actions:
        render.print_line(f"{name}: recovered interrupted clean: {action}")
    for action in result.scratch_actions:
        render.print_line(f"{name}: scratch dir: {action}")
    for warning in result.warnings:
        if warning not in shown and not (folded and is_summarised(warning)):
            render.warning_line(f"{name}: {warning}")
    if result.rolled:
        at = "would roll" if result.dry_run else "rolled"
        render.print_line(f"{name}: {at} a new empty active segment at the log end (--roll)")
    _render_retention(name, result)
    if result.high_watermark_note is not None:
        render.plain(f"{name}: {result.high_watermark_note}")
    fence, limit = result.fence, result.clean_limit
    for line in fence_lines(None if fence is None else fence.as_dict(), None if limit is None else limit.as_dict()):
        render.plain(f"{name}: {line}")
    if result.skipped_reason is not None:
        render.print_line(f"{name}: nothing to clean — {result.skipped_reason}")
        return
    s, rng = result.stats, result.range
    assert rng is not None  # set whenever a clean ran
    render.print_line(
        f"{name}: {verb} dirty section [{rng.first_dirty_offset}, {result.end_offset})"
        f" (dirty ratio {rng.dirty_ratio:.3f})"
    )
    if s.invalid_records:  # what was given up comes before what it buys
        gone, lost = ("would delete", "would be lost") if result.dry_run else ("deleted", "is gone")
        render.print_line(f"{name}: {gone} {render.plural(s.invalid_records, 'record')} with no key "
                          f"({s.invalid_records} of the {s.records_read} records read): their data {lost}, "
                          "not compacted")
    from rich.table import Table

    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_row("read", f"{render.size_text(s.bytes_read)}, {render.plural(s.records_read, 'record')} in "
                          f"{s.elapsed_s:.2f} s ({render.rate_text(s.bytes_read, s.elapsed_s)})")
    table.add_row("written", f"{render.size_text(s.bytes_written)}, {render.plural(s.records_written, 'record')}")
    reduction = render.percent_text(s.size_reduction)
    if s.invalid_records:
        reduction += f" (with {render.plural(s.invalid_records, 'keyless record')} deleted)"
    table.add_row("size reduction", reduction)
    table.add_row("removed", (
        f"{s.superseded_removed} superseded, {render.plural(s.tombstones_removed, 'tombstone')}, "
        f"{s.aborted_records_removed} aborted, {render.plural(s.markers_removed, 'marker')}, "
        f"{s.invalid_records} keyless"
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
    if result.space is not None and result.free_bytes is not None:
        table.add_row("space", result.space.line(result.free_bytes, result.reserved_bytes))
    if result.scratch_peak_bytes is not None and result.scratch_free_bytes is not None:
        table.add_row("scratch dir", f"needs {render.size_text(result.scratch_peak_bytes)} free at peak; "
                                     f"{render.size_text(result.scratch_free_bytes)} free")
    render.console().print(table)


def _render_retention(name: str, result: CleanResult) -> None:
    plan = result.retention
    if plan is None or not plan.deleted_segments:
        return
    verb = "would delete" if result.dry_run else "deleted"
    reasons = ", ".join(sorted(set(plan.reasons.values())))
    render.plain(
        f"{name}: retention {verb} {render.plural(len(plan.deleted_segments), 'segment')} "
        f"({render.size_text(plan.bytes_deleted)}, "
        f"{reasons}); log start {plan.log_start_before} -> {plan.log_start_after}"
        + (" after rolling a new active segment" if plan.rolled else "")
    )


def _with_roll_line(run: CleanRun) -> str:
    """A dry run without --roll where data waits in active segments: what a clean gives back now, and with --roll."""
    from kcompact.cleaner.logdir.with_roll import log_bytes_given_back, waits_in_active_segment

    now = sum(log_bytes_given_back(r) for r in run.results)
    waiting = sum(1 for r in run.results if waits_in_active_segment(r))
    return (f"a clean now would give back {render.size_text(now)} of .log files; with --roll "
            f"{render.size_text(run.gives_back_with_roll or 0)} ({render.plural(waiting, 'partition')} with records "
            "in the active segment, which only a roll makes cleanable)")


def _render_summary(run: CleanRun, *, dry_run: bool) -> None:
    total_read = sum(r.stats.bytes_read for r in run.results)
    total_written = sum(r.stats.bytes_written for r in run.results)
    cleaned = sum(1 for r in run.results if r.skipped_reason is None)
    # before the summary, which stays the last line; a run that writes and frees nothing has no space to tell
    if run.space is not None and run.free_bytes is not None and (run.space.peak_bytes or run.space.gives_back_bytes):
        render.plain(f"the run {run.space.line(run.free_bytes, run.reserved_bytes)}")
    if dry_run:  # nothing happened: every count is what the run would do
        render.plain(
            f"would clean {render.plural(cleaned, 'partition')}, {len(run.results) - cleaned} have nothing to "
            f"clean, {len(run.skipped)} would be skipped, {len(run.failures)} failed; would read "
            f"{render.size_text(total_read)}, would write {render.size_text(total_written)} (dry run: nothing "
            "changed)"
        )
        return
    render.plain(
        f"{render.plural(cleaned, 'partition')} cleaned, {len(run.results) - cleaned} had nothing to clean, "
        f"{len(run.skipped)} skipped, {len(run.failures)} failed; "
        f"{render.size_text(total_read)} read, {render.size_text(total_written)} written"
    )


@click.command("clean", short_help="Compact a partition or a log dir as Kafka's log cleaner would.",
             epilog=with_examples(
                 EPILOG,
                 "kcompact clean /tmp/kafka-logs/orders-0 --dry-run",
                 "kcompact clean /tmp/kafka-logs --topic 'orders.*' --roll --jobs 4 --json",
                 "kcompact clean /var/zk-era-logs --assume-compact --dry-run",
             ))
@click.argument("paths", nargs=-1, required=True, metavar="PATH...", type=InputPath(refuse_as="clean"))
@partition_filter_options("paths")
@config_option("A topic configuration, by Kafka's name (cleanup.policy, segment.bytes, "
               "delete.retention.ms, min.compaction.lag.ms, …). Repeatable.")
@now_ms_option("The clock the time rules use (default: now), in ms since the epoch.")
@click.option("--roll", is_flag=True,
              help="First roll a new empty active segment at the log end, so data in the current "
                   "active segment becomes cleanable (as a broker does on segment.ms).")
@click.option("--from-start", is_flag=True,
              help="Re-clean from the log start (drops expired tombstones and markers everywhere).")
@click.option("--dry-run", is_flag=True,
              help="Compute everything and report what would go; no file under PATH is written, renamed or "
                   "deleted. With --roll, or an interrupted clean's leftovers to settle, the round is previewed "
                   "on a staged copy: a directory .kcompact-rehearsal-* beside the log dir (in the temporary "
                   "directory where that is not writable) of hard links to the partition's files and the log "
                   "dir's checkpoint files (symbolic links, or for the checkpoints copies, where hard links are "
                   "refused), removed when the preview ends.")
@click.option("--verbose", is_flag=True,
              help="List every skipped partition with its own reason (by default those sharing a reason are "
                   "one line, with their count and a few names; --json lists each).")
@click.option("--dedupe-buffer-size", type=click.IntRange(min=1), default=None, metavar="BYTES",
              help="Behave like a broker with this log.cleaner.dedupe.buffer.size: each cleaner "
                   "thread's map holds BYTES / log.cleaner.threads (at most 2 GiB), and the round "
                   "stops where it is full. --config log.cleaner.dedupe.buffer.size=BYTES does the "
                   "same (this option wins); a value in server.properties or a dynamic broker config "
                   "bounds nothing (it is the broker's memory budget). Default: no bound, one round "
                   "cleans everything.")
@click.option("--only-eligible", is_flag=True,
              help="For a log dir: clean only partitions the broker's cleaner would pick now.")
@click.option("--assume-compact", is_flag=True,
              help="Compact partitions whose cleanup.policy is unknown (no metadata log, an "
                   "incomplete history, a topic id it does not know; no --config), except those "
                   "whose data is mostly keyless. Never a topic the metadata log shows without an "
                   "override (known: Kafka's default delete), nor one whose last known policy is an "
                   "explicit one without compact (a delete override in an incomplete history, a broker "
                   "config, server.properties): only --config cleanup.policy=compact with the partition "
                   "named alone compacts those. Without it they are skipped (refused when named alone).")
@click.option("--allow-keyless-loss", is_flag=True,
              help="Compact a partition whose cleanup.policy includes compact from an explicit "
                   "source (topic override, broker config, --config with the partition named "
                   "alone) although most of its records have no key: compaction deletes them (a "
                   "topic made compacted after they were written). Without it such a partition is "
                   "skipped (refused when named alone) with the count of keyless records.")
@click.option("--scratch-dir", type=click.Path(exists=True, file_okay=False, writable=True), default=None,
              metavar="DIR",
              help="Write the cleaned segments in DIR (on another volume: the log dir's has no room) and "
                   "bring each group in from there, freeing the full volume as it goes. Where the volume "
                   "has not one byte free, a group's old files are deleted before its cleaned files are "
                   "copied in (they are verified and fsynced in DIR first); a run killed then is settled "
                   "by the next clean with the same --scratch-dir, and until then a clean without it "
                   "refuses the partition. Do not start a broker before that (ARCHITECTURE.md). DIR may be "
                   "another log dir of the broker (JBOD: its volume's free space): the scratch is then files "
                   "at its top, kcompact-scratch.<partition>.*, which a broker's start passes over; a "
                   "directory inside a log dir is refused (Kafka would not start).")
@sole_replica_option
@fence_options
@config_source_options(METADATA_DIRS_HELP)
@click.option("--jobs", default=None, callback=parse_jobs, metavar="N|auto",
              help="Worker processes for a log dir's partitions (for one partition: its own "
                   "parallelism). Default auto: one per core once there is enough to do (about "
                   "80 ms of work: 20 MiB, counting 1.5 MiB per partition), else 1. A larger N "
                   "than the usable cores or the work (partitions; a partition's segment ranges) "
                   "is clamped to them, and the report says so.")
@json_option("Print the report as JSON.")
def clean_command(
    paths: tuple[str, ...],
    config_pairs: tuple[str, ...],
    now_ms: int | None,
    roll: bool,
    from_start: bool,
    dry_run: bool,
    verbose: bool,
    dedupe_buffer_size: int | None,
    only_eligible: bool,
    assume_compact: bool,
    allow_keyless_loss: bool,
    sole_replica: bool,
    replica_dirs: tuple[str, ...],
    safe_offset: int | None,
    server_properties: str | None,
    metadata_dir: str | None,
    jobs: int | None,
    as_json: bool,
    scratch_dir: str | None = None,
    selection: PartitionFilter | None = None,
) -> None:
    """Compact PATH (a partition directory, or every compacted partition of a log dir) exactly as one
    round of Kafka 4.1's log cleaner would, while the broker is stopped. Several PATHs (a broker's log.dirs)
    are cleaned one after the other, each as if given alone, each with its report (--json: {"runs": [...]},
    each run's object with its "path"); one that is refused stops the command there (exit 2).

    Compacts only a partition known to be compacted: its cleanup.policy includes compact by
    --config, a topic override in the KRaft metadata log, a broker config, or because it is
    __consumer_offsets/__transaction_state. Others are skipped with the reason (exit 0 for a log
    dir; exit 2 for a partition named alone); see --assume-compact. A partition whose records are
    mostly keyless is compacted only with --allow-keyless-loss.

    Refuses to write while a broker holds the log dir's .lock. Crash-safe: an interrupted clean is
    finished or rolled back by the next run (and by a broker), and the cleaner checkpoint is advanced
    only after every segment is swapped in. The dirty ratio is reported, it does not gate a manual clean.
    """
    from kcompact.cleaner.logdir.run import clean_path
    from kcompact.cleaner.round.options import CleanOptions
    from kcompact.cli.progress_view import progress_bar
    from kcompact.config.topic_config import parse_config_pairs

    end_without_teardown()
    overrides = parse_config_pairs(config_pairs)
    options = CleanOptions(now_ms=now_ms, from_start=from_start, dedupe_buffer_size=dedupe_buffer_size,
                           dry_run=dry_run, roll=roll, replica_dirs=replica_dirs, safe_offset=safe_offset,
                           scratch_dir=scratch_dir)
    runs: list[tuple[str, CleanRun]] = []
    for path in paths:
        if len(paths) > 1 and selection is not None and not _matches_any(path, selection):
            continue  # the filter matched under another PATH (checked over all of them)
        if len(paths) > 1 and not as_json:
            render.plain(f"{path}:" if not runs else f"\n{path}:")
        with progress_bar(enabled=not as_json) as progress:
            run = clean_path(path, cli_overrides=overrides, options=options, only_eligible=only_eligible,
                             progress=progress, server_properties=server_properties,
                             metadata_dir=metadata_dir, jobs=jobs, assume_compact=assume_compact,
                             allow_keyless_loss=allow_keyless_loss, selection=selection, sole_replica=sole_replica)
        runs.append((path, run))
        if not as_json:
            render_clean(run, as_json=False, verbose=verbose, dry_run=dry_run)
    if as_json:
        render.emit_json(run_json(runs[0][1]) if len(paths) == 1
                         else {"runs": [{"path": path, **run_json(run)} for path, run in runs]})
    if any(run.failures for _path, run in runs):
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


def _matches_any(path: str, selection: PartitionFilter) -> bool:
    """Whether the topic filters keep a partition under ``path`` (``count_matches`` refuses none)."""
    from kcompact.errors import KcompactError
    from kcompact.segment.partition_filter import count_matches

    try:
        count_matches([path], selection)
    except KcompactError:
        return False
    return True
