"""The progress bar of long reads and cleans: rich on stderr, only when stderr is a terminal.

The library reports progress through a plain callback (``kcompact.segment.progress.ProgressCallback``,
``(what, bytes done, bytes total)``) and never imports rich; this module is the one that draws it. With
``--json``, or when stderr is a pipe or a file, there is no callback at all, so nothing reaches a script.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from kcompact.cli import render
from kcompact.segment.progress import ProgressCallback


@contextlib.contextmanager
def progress_bar(*, enabled: bool, verb: str = "cleaning", counts: bool = False
                 ) -> Iterator[ProgressCallback | None]:
    """A rich progress bar on stderr, shown only when stderr is a terminal (else no callback at all).

    The bar (and its refresh thread) starts on the first update, not before: ``clean_path`` forks its
    worker processes before any progress arrives, and a fork must not copy a thread mid-write.

    Args:
        enabled: False for ``--json`` (no bar whatever stderr is).
        verb: what a line of the bar says is happening to the named thing (``"cleaning orders-0"``).
        counts: the callback counts things (``12/50``), not bytes (``1.2/5.0 GiB``).

    Yields:
        The callback to hand to the library, or None.
    """
    console = render.err_console() if enabled and render.may_be_terminal(sys.stderr) else None
    if console is None or not console.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"), BarColumn(),
        MofNCompleteColumn() if counts else DownloadColumn(binary_units=True),
        TimeRemainingColumn(), console=console, transient=True,
    )
    tasks: dict[str, Any] = {}

    def update(name: str, done: int, total: int) -> None:
        if not tasks:
            bar.start()
        if name not in tasks:
            tasks[name] = bar.add_task(f"{verb} {name}", total=total)
        bar.update(tasks[name], completed=done)

    try:
        yield update
    finally:
        bar.stop()
