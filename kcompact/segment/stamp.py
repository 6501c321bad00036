"""What a file was when it was listed — its size and a cheap identity — and the check that it still is.

A reader that reads a file in two passes (``export``: every batch's CRC checked before any row of its partition
is written, then the rows) must read the same bytes in both. A segment cut at a batch boundary between the
passes still parses, only shorter: the export would write fewer rows than were checked, and say nothing. So the
listing remembers each segment's size and identity (``inspect.export.SegmentRef``), and each pass compares them
again when it opens the file and when it is done with it; a difference is an error naming the file.

The identity costs no byte of the file: for a local file its ``st_mtime_ns``, inode and ``st_ctime_ns`` (a
write moves the first, a file renamed over it changes the second, a write that puts its modification time back
still moves the third); for an object behind a URL what its store says of its version
(:func:`kcompact.segment.remote.remote_identity`: an ETag, else a modification time). An empty identity (a
reference made by hand) compares sizes only.
"""

from __future__ import annotations

import os

from kcompact.errors import KcompactError
from kcompact.segment.files import file_access


def local_identity(status: os.stat_result) -> str:
    """A local file's identity (see the module docstring) from its ``stat``."""
    return f"mtime_ns={status.st_mtime_ns} inode={status.st_ino} ctime_ns={status.st_ctime_ns}"


def local_stamp(path: str | os.PathLike[str]) -> tuple[int, str]:
    """``(size in bytes, identity)`` of a local file, now.

    Raises:
        FileAccessError: the file cannot be stat'ed (gone, permissions).
    """
    with file_access(path, "read"):
        status = os.stat(path)
    return status.st_size, local_identity(status)


def refuse_changed(name: str, listed: tuple[int, str], found: tuple[int, str]) -> None:
    """Raise when a file is not what it was when listed (an empty listed identity: its size only).

    Args:
        name: the file as the user knows it (a path, or a URL).
        listed: ``(size in bytes, identity)`` when it was listed.
        found: the same, now.

    Raises:
        KcompactError: the size or the identity differ (one line naming the file, both stamps).
    """
    size, identity = listed
    if found[0] == size and (not identity or found[1] == identity):
        return
    now = f"{found[0]} bytes, {found[1] or 'no identity'}"
    raise KcompactError(f"{name}: changed while it was read (a file being written or replaced); expected it as "
                        f"listed, {size} bytes, {identity or 'any identity'}, found {now}: nothing of its "
                        "partition is exported (export a copy, or once its writer has stopped)")
