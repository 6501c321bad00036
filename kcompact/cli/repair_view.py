"""How one partition's ``kcompact repair`` reads in text: its findings, the plan or what was done, what was
given up, and the clean that followed (``--json`` prints the result's own dict instead)."""

from __future__ import annotations

from typing import Any

from kcompact.cli import render

EXIT_PROBLEMS = 2  # problems found by a dry run, left after the repair, or a repair that failed or was refused

REPORTED_ONLY = "reported only, nothing written (kcompact never rewrites KRaft's metadata log); not done:"
"""Where a real ``repair LOG_DIR`` shows what it left alone in ``__cluster_metadata``."""


SETTLED_PLAN = "plan (dry run, nothing written; a broker settles each of these itself):"
"""A dry run's plan heading where every step is one Kafka's loader or cleaner does itself (exit 0)."""


def render_partition(result: Any, *, reported_only: bool = False) -> None:
    """One partition's report; ``reported_only``: a real run's ``__cluster_metadata``, verified only."""
    name = result.partition_dir
    verdict = ("the broker's cleaner would mark it uncleanable" if result.uncleanable
               else "nothing in it stops the broker's cleaner")
    notes = sum(1 for f in result.findings if f.informational)
    settled = sum(1 for f in result.findings if f.settled)
    also = f" and {render.plural(notes, 'informational finding')}" if notes else ""
    also += f" and {render.plural(settled, 'finding')} Kafka settles itself" if settled else ""
    problems = render.plural(result.problems, "problem")
    render.plain(f"{name}: {problems}{also} found; {verdict}")
    for finding in result.findings:
        _finding_lines(finding, reported_only=reported_only)
    if result.dry_run:
        heading = (REPORTED_ONLY if reported_only else "plan (dry run, nothing written):" if result.problems
                   else SETTLED_PLAN)
        render.plain(heading if result.plan else "nothing to repair")
        for step in result.plan:
            render.plain(f"  - {step}")
        if result.plan:
            _given_up_lines(result.given_up, "would give up")
        return
    for action in result.actions:
        render.plain(f"done: {action}")
    if result.quarantined:
        total = sum(q.size_in_bytes for q in result.quarantined)
        render.plain(f"quarantined: {render.plural(len(result.quarantined), 'region')}, {render.size_text(total)}")
    if result.backup_dir is not None:
        _given_up_lines(result.given_up, "given up")
        render.plain(f"backup: {result.backup_dir} (undo: kcompact repair --undo {result.backup_dir})")
    if result.clean is not None:
        from kcompact.log.rules.fence import fence_lines

        for run in result.clean.results:
            render.plain(f"clean: {run.skipped_reason or f'cleaned up to offset {run.end_offset}'}")
            fence, limit = run.fence, run.clean_limit
            for line in fence_lines(None if fence is None else fence.as_dict(),
                                    None if limit is None else limit.as_dict()):
                render.plain(f"clean: {line}")
    if result.nothing_changed:
        render.plain("nothing changed: nothing needed a repair and the clean changed nothing (no backup kept)")
    if result.clean_error is not None:
        render.error_line(f"clean failed: {result.clean_error}")
    left = [f for f in result.remaining if f.blocks_cleaning or f.action]
    render.plain("after the repair: nothing left to repair" if not left
                 else f"after the repair: {render.plural(len(left), 'problem')} left")
    for finding in left:
        _finding_lines(finding)


"""One partition's repair report in text (also each partition of a log dir's)."""


def _given_up_lines(given_up: Any, verb: str) -> None:
    """What the quarantine takes out of the log: per region its bytes, offsets and records."""
    if not given_up:
        render.plain(f"{verb}: nothing (every batch that passes its CRC stays in the log)")
        return
    total = sum(g.size_in_bytes for g in given_up)
    render.plain(f"{verb} ({render.plural(len(given_up), 'region')}, {render.size_text(total)}, "
                 "moved to the quarantine):")
    for entry in given_up:
        render.plain(f"  - {entry.text()}")


def _finding_lines(finding: Any, *, reported_only: bool = False) -> None:
    render.plain(f"  [{finding.kind}] {finding.located()}")
    render.plain(f"      impact: {finding.impact_text(repaired=not reported_only)}")
    if finding.cleaner_effect:
        mark = "uncleanable" if finding.blocks_cleaning else "cleaner"
        render.plain(f"      {mark}: {finding.cleaner_effect}")
    if finding.broker_effect:
        render.plain(f"      broker: {finding.broker_effect}")
    action = None if reported_only else finding.action
    render.plain(f"      repair: {action or 'none (reported only)'}")
