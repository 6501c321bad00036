"""The item constructors shared by the ``inspect dump`` dumpers: one ``dict`` per thing reported.

Why: the ``.log`` walk (:mod:`kcompact.inspect.dump.log`), the index dumper
(:mod:`kcompact.inspect.dump.index`) and the directory/file dispatch (:mod:`kcompact.inspect.dump`)
all report ``file``, ``problem`` and ``warning`` items; building them in one place keeps their names
and key order, which are part of kcompact's interface (see :mod:`kcompact.inspect.dump`), identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

Item = dict[str, Any]


def file_item(path: Path, kind: str, base_offset: int | None, size_in_bytes: int) -> Item:
    """A ``file`` item: the items of ``path`` (a ``kind`` file of segment ``base_offset``) follow."""
    return {"type": "file", "file": str(path), "kind": kind, "base_offset": base_offset,
            "size_in_bytes": size_in_bytes}


def problem_item(path: Path, position: int | None, message: str) -> Item:
    """A ``problem`` item: something in ``path`` at ``position`` is wrong."""
    return {"type": "problem", "file": str(path), "position": position, "message": message}


def warning_item(path: Path, message: str) -> Item:
    """A ``warning`` item about ``path``: worth knowing, not bad input."""
    return {"type": "warning", "file": str(path), "message": message}
