"""Durable writes: the two primitives every writer of a partition directory needs.

A file is durable once its bytes are fsynced; a rename or unlink is durable once its directory is fsynced.
Every writer (indexes, cleaned segments, swaps, rolls, repair backups) goes through these two, so the
crash-safety argument has one place to check. A file kcompact creates in place of a broker's takes that file's
mode and owner (:func:`copy_ownership`), so the broker's user can still open it for writing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


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


def copy_ownership(template: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Give ``path`` the permission bits, and when we may, the owner and group of ``template``."""
    st = os.stat(template)
    os.chmod(path, st.st_mode & 0o7777)
    own = os.stat(path)
    if hasattr(os, "chown") and (st.st_uid, st.st_gid) != (own.st_uid, own.st_gid):
        try:
            os.chown(path, st.st_uid, st.st_gid)
        except PermissionError:
            pass  # not root: the files stay ours, which the broker's user may still read


def link_or_copy(source: Path, target: Path) -> None:
    """Give ``source`` a second name ``target`` (a hard link; a copy with its mode and times where the file
    system refuses links). Used to keep an original intact while its name is given to a new file."""
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed: a real copy
        shutil.copy2(source, target)
