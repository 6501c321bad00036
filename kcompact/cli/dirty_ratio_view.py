"""Rendering of ``inspect dirty-ratio``: a table with the ratio drawn against its threshold, and advice."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from kcompact.cli import render
from kcompact.inspect.dirty_ratio import ADVICE, DirtyRatioRow

BAR_WIDTH = 12


def render_dirty_ratio(rows: Sequence[DirtyRatioRow], *, as_json: bool) -> None:
    """Print the rows: a JSON list, or a rich table plus one advice line per blocking rule."""
    if as_json:
        render.emit_json([row.as_dict() for row in rows])
        return
    table = Table(title="dirty ratio (what the broker's cleaner sees)", title_justify="left")
    # On a narrow terminal the partition and status columns fold (a name is never cut short); the
    # numbers and the bar stay on one line.
    for column, justify in (("rank", "right"), ("partition", "left"), ("dirty", "right"),
                            ("clean", "right"), ("ratio", "left"), ("status", "left")):
        folds = column in ("partition", "status")
        table.add_column(column, justify=justify, overflow="fold" if folds else "ellipsis",  # type: ignore[arg-type]
                         no_wrap=not folds)
    for row in rows:
        table.add_row(
            "-" if row.cleaner_rank is None else str(row.cleaner_rank),
            f"{row.topic}-{row.partition}",
            render.size_text(row.dirty_bytes),
            render.size_text(row.clean_bytes),
            _bar(row),
            _status(row),
        )
    console = render.console()
    console.print(table)
    for row in rows:
        if row.error:
            render.error_line(row.error)
        elif row.blocking_detail:
            console.print(f"{row.topic}-{row.partition}: {row.blocking_detail}", highlight=False)
    for rule in sorted({r.blocking_rule for r in rows if r.blocking_rule and not r.error}):
        console.print(f"[bold]{rule}[/bold]: {ADVICE.get(rule, '')}")
    for warning in sorted({w for r in rows for w in r.warnings}):
        render.warning_line(warning)


def _status(row: DirtyRatioRow) -> str:
    if row.error:
        return "error"
    if row.eligible:
        return "eligible" + (f" (up to {row.blocking_rule})" if row.blocking_rule else "")
    return row.blocking_rule or "-"


def _bar(row: DirtyRatioRow) -> str:
    filled = round(row.dirty_ratio * BAR_WIDTH)
    mark = round(row.min_cleanable_dirty_ratio * BAR_WIDTH)
    cells = ["#" if i < filled else "." for i in range(BAR_WIDTH)]
    if 0 <= mark < BAR_WIDTH:
        cells[mark] = "|"
    return f"{''.join(cells)} {row.dirty_ratio:.2f}"
