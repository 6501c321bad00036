"""``kcompact inspect dirty-ratio``: the command, and its rendering: a table with the ratio drawn against
its threshold, and advice.

Only click is imported at module level (``kcompact --help`` stays fast); the library and rich are
imported where they are used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath, storage_option
from kcompact.cli.options import (
    EPILOG,
    EXIT_BAD_INPUT,
    METADATA_DIRS_HELP,
    config_option,
    config_source_options,
    json_option,
    now_ms_option,
    sole_replica_option,
)
from kcompact.cli.partition_filter_options import partition_filter_options

if TYPE_CHECKING:
    from rich.console import JustifyMethod

    from kcompact.inspect.dirty_ratio import DirtyRatioRow
    from kcompact.segment.partition_filter import PartitionFilter

BAR_WIDTH = 12


def render_dirty_ratio(rows: Sequence[DirtyRatioRow], *, as_json: bool) -> None:
    """Print the rows: a JSON list, or a rich table plus one advice line per blocking rule; several empty
    partitions are counted in one line instead of listed, several whose data is all in the active
    segment are said once, and a detail several partitions share is one line with their count."""
    from kcompact.cleaner.disk.space import SpaceNeed
    from kcompact.cleaner.logdir.run_summary import (
        active_only_line,
        empty_partitions_line,
        partitions_text,
        warning_lines,
    )
    from kcompact.inspect.dirty_ratio import ADVICE

    if as_json:
        render.emit_json([row.as_dict() for row in rows])
        return
    empty = [row for row in rows if len(rows) > 1 and _plain_empty(row)]  # counted in one line, not listed
    empty_ids = {id(row) for row in empty}
    listed = [row for row in rows if id(row) not in empty_ids]
    console = render.console()
    if listed:
        _print_table(listed, console)
    active_only = [row for row in listed if _plain_active_only(row)]
    active_ids = {id(row) for row in active_only} if len(active_only) > 1 else set()
    details: dict[str, list[str]] = {}  # a detail -> the partitions it concerns: one line each, not one per row
    for row in listed:
        if row.error:
            render.error_line(row.error)
        elif row.blocking_detail and id(row) not in active_ids:
            details.setdefault(row.blocking_detail, []).append(f"{row.topic}-{row.partition}")
    for detail, names in details.items():
        console.print(f"{partitions_text(names)}: {detail}", highlight=False)
    if active_ids:
        console.print(active_only_line([f"{row.topic}-{row.partition}" for row in active_only]), highlight=False)
    for row in rows:
        if row.high_watermark_note is not None:  # as clean says it
            render.plain(f"{row.topic}-{row.partition}: {row.high_watermark_note}")
    for row in rows:
        if row.space_peak_bytes is not None and row.space_gives_back_bytes is not None and row.free_bytes is not None:
            need = SpaceNeed(row.space_peak_bytes, row.space_gives_back_bytes)
            render.plain(f"{row.topic}-{row.partition}: its clean {need.line(row.free_bytes)}")
    for rule in sorted({r.blocking_rule for r in listed if r.blocking_rule and not r.error}):  # not the empty ones
        console.print(f"[bold]{rule}[/bold]: {ADVICE.get(rule, '')}")
    if empty:
        render.plain(empty_partitions_line(len(empty)))
    for line in warning_lines([(f"{r.topic}-{r.partition}", r.warnings) for r in rows]):
        render.warning_line(line)


def _print_table(rows: Sequence[DirtyRatioRow], console: Any) -> None:
    """The table of ``rows``, one line each where the terminal is wide enough."""
    from rich.table import Table

    table = Table(title="dirty ratio (what the broker's cleaner sees)", title_justify="left")
    # On a narrow terminal the status column wraps at its spaces first; a partition name breaks only when
    # it is wider than what is left, and then after a '-', '.' or '_' (never mid-word while a separator
    # is near); the numbers and the bar stay on one line.
    justified: tuple[JustifyMethod, ...] = ("right", "left", "right", "right", "left", "left")
    for column, justify in zip(_HEADERS, justified, strict=True):
        table.add_column(column, justify=justify, overflow="fold", no_wrap=column != "status")
    cells = [(
        "-" if row.cleaner_rank is None else str(row.cleaner_rank),
        f"{row.topic}-{row.partition}",
        render.size_text(row.dirty_bytes),
        render.size_text(row.clean_bytes),
        _bar(row),
        _status(row),
    ) for row in rows]
    name_width = _name_width(cells, console.width)
    broken = [(rank, break_name(name, name_width), *rest) for rank, name, *rest in cells]
    if broken and _fits_unwrapped(broken, console.width):
        table.add_row(*stacked_cells(broken))
    else:
        for row_cells in broken:
            table.add_row(*row_cells)
    console.print(table)


def _plain_active_only(row: DirtyRatioRow) -> bool:
    """A partition holding records, all of them in its active segment, with nothing else to say."""
    from kcompact.log.rules.ranges import RULE_ACTIVE_SEGMENT

    return row.error is None and row.blocking_rule == RULE_ACTIVE_SEGMENT and not _plain_empty(row)


def _plain_empty(row: DirtyRatioRow) -> bool:
    """An empty partition with nothing else to say (no error, no blocking detail of its own beyond being
    empty)."""
    return row.holds_no_records


_HEADERS = ("rank", "partition", "dirty", "clean", "ratio", "status")


def _fits_unwrapped(rows: Sequence[tuple[str, ...]], width: int) -> bool:
    """Whether the table is as wide as its widest cells allow within ``width``: rich then wraps or
    shrinks no column, and a row is its cells' lines side by side (``stacked_cells`` holds)."""
    from rich.cells import cell_len

    widest = [len(header) for header in _HEADERS]
    for row in rows:
        for i, cell in enumerate(row):
            widest[i] = max(widest[i], *(cell_len(line) for line in cell.split("\n")))
    return sum(widest) + _TABLE_FRAME <= width


def stacked_cells(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Every row of a table in one row: per column, the rows' cells one under the other, each padded
    with empty lines to its row's height. Rendered like the rows one by one when no cell wraps (the
    table has no lines between rows), and rich lays out six cells instead of six per row: ten thousand
    rows took longer to print than to read their partitions."""
    columns: list[list[str]] = [[] for _ in rows[0]]
    for row in rows:
        breaks = [cell.count("\n") for cell in row]
        height = max(breaks)
        for column, cell, cell_breaks in zip(columns, row, breaks, strict=True):
            column.append(cell + "\n" * (height - cell_breaks))
    return ["\n".join(column) for column in columns]


_NAME_SEPARATORS = "-._"
_TABLE_FRAME = 7 + 2 * 6  # the borders of six columns, and one space of padding each side of each cell


def _name_width(cells: Sequence[tuple[str, ...]], width: int) -> int:
    """The partition column's width: the longest name, or what the other columns leave of ``width`` (the
    status column keeps room for its longest word)."""
    fixed = [max((len(row[i]) for row in cells), default=0) for i in (0, 2, 3, 4)]
    status_word = max((len(word) for row in cells for word in row[5].split()), default=0)
    headers = (len("rank"), len("dirty"), len("clean"), len("ratio"))
    left = width - _TABLE_FRAME - sum(map(max, zip(fixed, headers, strict=True))) - max(status_word, 6)
    longest = max((len(row[1]) for row in cells), default=0)
    return max(min(longest, left), len("partition"))


def break_name(name: str, width: int) -> str:
    """``name`` in lines of at most ``width`` characters, each broken after a '-', '.' or '_' where one
    lies in the line, else (a run of ``width`` characters without one) cut at ``width``."""
    lines: list[str] = []
    while len(name) > width:
        cut = max(name.rfind(sep, 0, width) for sep in _NAME_SEPARATORS) + 1
        cut = cut if cut > 0 else width
        lines.append(name[:cut])
        name = name[cut:]
    return "\n".join([*lines, name])


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


@click.command("dirty-ratio", short_help="What the broker's cleaner sees: dirty ratio, eligibility, order.",
                 epilog=with_examples(
                     EPILOG,
                     "kcompact inspect dirty-ratio /tmp/kafka-logs",
                     "kcompact inspect dirty-ratio /tmp/kafka-logs/orders-0 --json",
    "kcompact inspect dirty-ratio /tmp/kafka-logs --topic 'orders.*' --partition 0",
                 ))
@click.argument("paths", nargs=-1, required=True, type=InputPath())
@partition_filter_options("paths")
@config_option("A topic configuration by Kafka's name (min.cleanable.dirty.ratio, …). Repeatable.")
@now_ms_option("The clock (default: now), in ms since the epoch.")
@config_source_options(METADATA_DIRS_HELP)
@storage_option
@click.option("--space", is_flag=True,
              help="Also say what each compacted partition's clean needs free at its peak and gives back, "
                   "against its volume's free space (runs the clean's dry run: reads the whole log).")
@sole_replica_option
@json_option("Print a JSON list of rows (also for one partition).")
def dirty_ratio_command(paths: tuple[str, ...], config_pairs: tuple[str, ...], now_ms: int | None,
                        server_properties: str | None, metadata_dir: str | None, storage_pairs: tuple[str, ...],
                        space: bool, sole_replica: bool, as_json: bool, selection: PartitionFilter | None = None
                        ) -> None:
    """What the broker's log cleaner sees, per partition of the given log dirs or partition dirs:
    clean and dirty bytes, the dirty ratio against min.cleanable.dirty.ratio, whether it is eligible,
    the rule that stops cleaning, and the order in which the cleaner would pick partitions.

    Reads sizes, checkpoints, index tails and batch headers, and checks the CRC of every batch of
    the dirty section (what the next clean's offset map reads; the clean section is not read). Exits
    2 when a partition's files do not parse or one of those batches fails its CRC (its row says why).
    """
    from kcompact.cli.progress_view import progress_bar
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.inspect.dirty_ratio import dirty_ratio_report
    from kcompact.segment.remote import local_inputs, parse_storage_options

    with (local_inputs(paths, parse_storage_options(storage_pairs)) as inputs,
          progress_bar(enabled=not as_json, verb="reading", counts=True) as progress):
        rows = inputs.named(dirty_ratio_report(
            inputs.paths, cli_overrides=parse_config_pairs(config_pairs), now_ms=now_ms,
            server_properties=server_properties, metadata_dir=metadata_dir, progress=progress,
            selection=selection, space=space, sole_replica=sole_replica))
    render_dirty_ratio(rows, as_json=as_json)
    if any(row.error for row in rows):
        raise click.exceptions.Exit(EXIT_BAD_INPUT)
