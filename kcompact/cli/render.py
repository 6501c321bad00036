"""The one place that writes to the terminal: a rich Console for people, plain lines for scripts.

Commands hand their results here. ``--json`` output bypasses rich entirely (no markup, no wrapping, one
JSON document or one JSON object per line), so scripts can parse it whatever the terminal width.

On a terminal, tables and text keep to its width (identifier columns fold rather than cut). When stdout
is not a terminal (``| grep``, ``| less``, a file, a script) the Console is :data:`PIPE_WIDTH` wide,
whatever ``COLUMNS`` says: tables take their natural width and no line is wrapped, so every topic name,
path and key reaches the pipe whole, one row a line.
Errors go to stderr as a single line. Every line and every cell reaches the terminal through
:func:`kcompact.text.visible`: a bidi override or an escape sequence in a partition directory's name is shown
escaped, never obeyed. rich is imported on the first use of a Console, not with this
module: ``kcompact --help``, ``--json`` output and lines to a pipe (:func:`print_line`) never need it
(about 40 ms of CPU; json is imported where it is written, 2 ms more).
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from kcompact import text
from kcompact.cli.options import EXIT_BAD_INPUT

if TYPE_CHECKING:
    from rich.console import Console

_console: Console | None = None
_err_console: Console | None = None

PIPE_WIDTH = 1 << 16
"""The width of stdout when it is not a terminal: more than any row kcompact prints (a topic name is at
most 249 characters, a path 4096), so nothing is cut, folded or wrapped."""


def console() -> Console:
    """The stdout console (created on first use, so tests can redirect stdout); :data:`PIPE_WIDTH`
    wide when stdout is not a terminal."""
    global _console
    if _console is None or _console.file is not sys.stdout:
        _console = _visible_console()(file=sys.stdout, highlight=False, soft_wrap=False)
        if not _console.is_terminal:
            _console.width = PIPE_WIDTH
    return _console


def print_line(line: str) -> None:
    """A line for people on stdout, as :func:`console` prints it. To a pipe or a file that console neither wraps
    nor styles a line, so it is written directly there: a command that prints only lines never loads rich
    (about 40 ms of CPU)."""
    if may_be_terminal(sys.stdout):
        console().print(line)
    else:
        plain(line)


def may_be_terminal(stream: Any) -> bool:
    """Whether rich may take ``stream`` for a terminal, answered without loading it: False where rich's
    ``Console.is_terminal`` says False too (its ``TTY_COMPATIBLE`` and ``FORCE_COLOR`` overrides, else the
    stream's ``isatty()``)."""
    tty_compatible = os.environ.get("TTY_COMPATIBLE", "")
    if tty_compatible in ("0", "1"):
        return tty_compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream: rich says False
        return False


def err_console() -> Console:
    """The stderr console, for warnings and progress."""
    global _err_console
    if _err_console is None or _err_console.file is not sys.stderr:
        _err_console = _visible_console()(file=sys.stderr, highlight=False)
    return _err_console


def _visible_console() -> type[Console]:
    """rich's Console whose text segments pass through :func:`kcompact.text.visible` (its own control segments,
    a progress bar's cursor moves, and the styles it renders around text are left as they are)."""
    from rich.console import Console
    from rich.segment import Segment

    class VisibleConsole(Console):
        def _render_buffer(self, buffer: Iterable[Segment]) -> str:
            return super()._render_buffer(
                segment if segment.control else Segment(text.visible(segment.text), segment.style)
                for segment in buffer)

    return VisibleConsole


def percent_text(fraction: float) -> str:
    """A share for people to one decimal, never rounded to a bound it does not reach: ``79.9%``,
    ``> 99.9%`` (not ``100.0%`` while anything is left), ``< 0.1%`` (not ``0.0%`` once anything went)."""
    text = f"{100 * fraction:.1f}%"
    if text == "100.0%" and fraction < 1:
        return "> 99.9%"
    if text in ("0.0%", "-0.0%") and fraction > 0:
        return "< 0.1%"
    return text


def emit_json_line(obj: Any) -> None:
    """One compact JSON object on its own line (the ``--json`` form of streaming commands)."""
    import json

    click.echo(json.dumps(obj, separators=(",", ":"), sort_keys=False))


def emit_json(obj: Any) -> None:
    """One JSON document (the ``--json`` form of report commands), indented for readability."""
    import json

    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def plain(line: str) -> None:
    """A line of text with no rich markup interpretation."""
    click.echo(text.visible(line))


def error_line(message: str) -> None:
    """The one-line error a failing command prints on stderr."""
    click.echo(f"kcompact: error: {text.visible(message)}", err=True)


def warning_line(message: str) -> None:
    """A one-line warning on stderr (not part of ``--json`` output)."""
    click.echo(f"kcompact: warning: {text.visible(message)}", err=True)


LABEL_WIDTH = 14
TEXT_WIDTH = 80
Entry = tuple[str, list[str]]  # a label and its lines (before wrapping)


def print_entries(entries: list[Entry]) -> None:
    """Labelled entries, wrapped at 80 columns under a 14-column label (paths are not broken)."""
    for label, parts in entries:
        for i, part in enumerate(parts):
            first = (label if i == 0 else "").ljust(LABEL_WIDTH)
            plain(textwrap.fill(part, width=TEXT_WIDTH, initial_indent=first,
                                subsequent_indent=" " * LABEL_WIDTH,
                                break_on_hyphens=False, break_long_words=False))


def utc_text(ms: int | None) -> str:
    """A time in ms since the epoch as ISO-8601 UTC to the second; ``-`` when absent."""
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


plural = text.plural
"""``1 batch``, ``2 batches`` (``kcompact.text.plural``): the CLI counts as the library's messages do."""
size_text = text.size_text
"""``512 B``, ``1.5 KiB`` (``kcompact.text.size_text``): the CLI's sizes are the library's."""


def rate_text(size_in_bytes: int, elapsed_s: float) -> str:
    """A throughput for people: ``1.5 MiB/s``, ``3.9 KiB/s`` (never ``0.1 MiB/s`` for a few KiB)."""
    return f"{size_text(int(size_in_bytes / elapsed_s))}/s" if elapsed_s > 0 else "-"


def export_text(summary: Any) -> str:
    """What an export wrote (``export``, ``spark export``): ``3 records of 1 partition (1 segment)``."""
    what = "latest live record (one per key)" if summary.latest else "record"
    whats = "latest live records (one per key)" if summary.latest else "records"
    return (f"{plural(summary.records, what, whats)} of {plural(summary.partitions, 'partition')} "
            f"({plural(summary.segments, 'segment')})")


def printable(text: str) -> str:
    """Text as is when printable, else with escapes: data must not drive the terminal."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def corrupt_entry(report: Any) -> list[Entry]:
    """The ``corrupt`` entry of a report with ``corrupt_batches`` (``inspect keys``, ``last-clean``)."""
    if not report.corrupt_batches:
        return []
    failing = plural(report.corrupt_batches, "batch fails its CRC", "batches fail their CRC")
    line = f"{failing}; `kcompact clean` refuses the partition, `kcompact repair` sets them aside"
    return [("corrupt", [line])]


def exit_if_corrupt(report: Any) -> None:
    """After the report: exit 2 with the first CRC failure when a batch failed its CRC."""
    if report.corrupt_batches:
        more = report.corrupt_batches - 1
        failing = plural(more, "more batch fails its CRC", "more batches fail their CRCs")
        error_line(report.crc_error + (f" ({failing})" if more else ""))
        raise click.exceptions.Exit(EXIT_BAD_INPUT)
