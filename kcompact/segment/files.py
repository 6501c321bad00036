"""Durable writes: the two primitives every writer of a partition directory needs.

A file is durable once its bytes are fsynced; a rename or unlink is durable once its directory is fsynced.
Every writer (indexes, cleaned segments, swaps, rolls, repair backups) goes through these two, so the
crash-safety argument has one place to check. Both raise ``OSError`` as the OS does: the swap protocol
tells apart a failure it must recover from, and its callers say what the partition was left as. A file
kcompact creates in place of a broker's takes that file's mode and owner (:func:`copy_ownership`), so the
broker's user can still open it for writing.

Readers of the user's files (segments, indexes, checkpoints, directory listings) wrap their I/O in
:func:`file_access`, which turns an ``OSError`` into a one-line :class:`~kcompact.errors.FileAccessError`
naming the file: an unreadable file is bad input, never a traceback.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kcompact.errors import FileAccessError


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


@contextmanager
def file_access(path: str | os.PathLike[str], action: str = "read") -> Iterator[None]:
    """Turn an ``OSError`` raised inside the block into a :class:`~kcompact.errors.FileAccessError`.

    Args:
        path: the file or directory the block works on (named when the error names none).
        action: what the block does, as a verb for the message (``"read"``, ``"list"``, ``"write"``).

    Raises:
        FileAccessError: the OS refused (permissions, a vanished file, an I/O error).
    """
    try:
        yield
    except OSError as err:
        raise FileAccessError.from_os_error(err, path, action) from err


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The whole of one of the user's files (an index, a checkpoint, a snapshot, metadata).

    Args:
        path: the file.

    Returns:
        Its bytes.

    Raises:
        FileNotFoundError: the file does not exist (each caller decides what a missing file means).
        FileAccessError: any other refusal of the OS (permissions, an I/O error), naming the file.
    """
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        raise
    except OSError as err:
        raise FileAccessError.from_os_error(err, path, "read") from err


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


def require_writable(directory: str | os.PathLike[str]) -> None:
    """Refuse, before any change, a directory where files cannot be created, renamed and removed.

    A clean writes in two directories (the partition's, and the log dir's checkpoint and lock files):
    finding out that the second is read-only after the first was changed would leave a half-change.

    Args:
        directory: the directory a writer is about to change.

    Raises:
        FileAccessError: the directory is on a read-only file system or this process may not write it.
    """
    if os.access(directory, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        return
    try:
        read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    raise FileAccessError(directory, "write", "Read-only file system" if read_only else "Permission denied")

