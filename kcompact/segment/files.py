"""Durable writes: the primitives every writer of a partition directory needs.

A file is durable once its bytes are fsynced; a rename or unlink is durable once its directory is fsynced.
Every writer (indexes, cleaned segments, swaps, rolls, scratch copies, repair backups) makes its changes durable
with these: :func:`write_synced` and :func:`fsync_dir`; those that stream into a file they opened themselves
(swap's ``CleanedSegmentWriter``, scratch's copy-in and manifest, a roll's empty new files) fsync it and then
call :func:`fsync_dir`. Built on them are :func:`replacing` (a file or directory written under a temporary
name, then renamed over its final one: checkpoints, manifests, undone files, a roll's indexes, exports) and
:func:`link_or_else` (a second name for a file). The segment swap keeps its own renames (``cleaner.disk.swap``):
its steps are Kafka's. Both raise ``OSError`` as the OS does: the swap protocol tells apart a failure it must
recover from, and its callers say what the partition was left as. A file kcompact creates in place of a
broker's takes that file's mode and owner (:func:`copy_ownership`), so the broker's user can still open it for
writing.

Readers of the user's files (segments, indexes, checkpoints, directory listings) wrap their I/O in
:func:`file_access`, which turns an ``OSError`` into a one-line :class:`~kcompact.errors.FileAccessError`
naming the file: an unreadable file is bad input, never a traceback.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Literal

from kcompact.errors import FileAccessError


def write_synced(path: str | os.PathLike[str], data: bytes) -> None:
    """Create or replace ``path`` with ``data`` and fsync it before returning."""
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def truncate_synced(path: str | os.PathLike[str], size_in_bytes: int) -> None:
    """Cut ``path`` to its first ``size_in_bytes`` bytes in place (as Kafka's ``FileRecords.truncateTo``) and
    fsync it, its modification time kept: no byte is written, so it needs no free space."""
    stat = os.stat(path)
    with open(path, "r+b") as file:
        os.ftruncate(file.fileno(), size_in_bytes)
        os.fsync(file.fileno())
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Have the kernel start writing ``fd``'s dirty pages in ``[offset, offset + length)`` to the disk, without
    waiting (Linux's ``sync_file_range(SYNC_FILE_RANGE_WRITE)``), so that the ``fsync`` that makes the file
    durable later finds little left to write. Advice only: nothing where the call does not exist, errors
    ignored; durability still comes from that ``fsync`` alone."""
    call = _sync_file_range()
    if call is not None:
        call(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writeback of the range's dirty pages, do not wait


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range`` (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # numpy has imported it by the time a clean writes

    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make renames, creations and unlinks in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replacing(path: str | os.PathLike[str], temporary: str | os.PathLike[str] | None = None, *,
              sync_directory: bool = True) -> Iterator[Path]:
    """Replace ``path`` atomically and durably with what the block writes under a temporary name.

    The block creates the new file (or directory) at the yielded path and makes its bytes durable
    (:func:`write_synced` does). When the block returns, the temporary is renamed over ``path``
    (``os.replace``) and the directory holding both fsynced: a crash leaves either the old ``path`` or the
    new one, never a torn one. When the block raises, the temporary is removed and ``path`` is as it was.

    Args:
        path: the file or directory to create or replace.
        temporary: the temporary name (beside ``path``, on the same file system); ``<name>.tmp`` by default.
        sync_directory: False where the caller fsyncs the directory once after several replacements
            (a roll's two indexes); the rename is durable only then.

    Yields:
        The temporary path to write.
    """
    target = Path(path)
    scratch = Path(temporary) if temporary is not None else target.with_name(target.name + ".tmp")
    try:
        yield scratch
        os.replace(scratch, target)
    except BaseException:
        if scratch.is_dir() and not scratch.is_symlink():
            import shutil  # here and in link_or_else only: a clean that never fails a write never loads it (~3 ms)

            shutil.rmtree(scratch, ignore_errors=True)
        else:
            scratch.unlink(missing_ok=True)
        raise
    if sync_directory:
        fsync_dir(target.parent)


def write_replacing(path: str | os.PathLike[str], data: bytes,
                    temporary: str | os.PathLike[str] | None = None) -> None:
    """Create or replace the file ``path`` with ``data``, atomically and durably (see :func:`replacing`)."""
    with replacing(path, temporary) as scratch:
        write_synced(scratch, data)


class file_access:  # lower case: used as the function it was, ``with file_access(path, "list"):``
    """Turn an ``OSError`` raised inside the block into a :class:`~kcompact.errors.FileAccessError`.

    A class, not a generator context manager: a clean enters one for every file it opens (dozens per
    partition), and this costs a quarter of what a ``@contextmanager`` does.

    Args:
        path: the file or directory the block works on (named when the error names none).
        action: what the block does, as a verb for the message (``"read"``, ``"list"``, ``"write"``).

    Raises:
        FileAccessError: the OS refused (permissions, a vanished file, an I/O error).
    """

    __slots__ = ("action", "path")

    def __init__(self, path: str | os.PathLike[str], action: str = "read") -> None:
        self.path = path
        self.action = action

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, OSError):
            raise FileAccessError.from_os_error(exc, self.path, self.action) from exc


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


def link_or_else(source: Path, target: Path, otherwise: Literal["copy", "symlink"]) -> None:
    """Give ``source`` a second name ``target``: a hard link, or where the file system refuses links (another
    file system, links not allowed) a copy with its mode and times (``"copy"``: keeping an original intact
    while its name is given to a new file) or a symbolic link to it (``"symlink"``: staging a whole partition,
    where copying segments would cost their size)."""
    try:
        os.link(source, target)
    except OSError:
        if otherwise == "copy":
            import shutil

            shutil.copy2(source, target)
        else:
            os.symlink(source.resolve(), target)


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

