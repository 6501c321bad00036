"""Durable writes: the two primitives every writer of a partition directory needs.

A file is durable once its bytes are fsynced; a rename or unlink is durable once its directory is fsynced.
Every writer (indexes, cleaned segments, swaps, rolls, repair backups) goes through these two, so the
crash-safety argument has one place to check.
"""

from __future__ import annotations

import os


def write_synced(path: str | os.PathLike[str], data: bytes) -> None:
    """Create or replace ``path`` with ``data`` and fsync it before returning."""
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make renames, creations and unlinks in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
