"""Where a segment's bytes come from: a local file (mapped or read, :class:`~kcompact.segment.log_file.LogFile`)
or any other :class:`ByteSource` — an object in a store read by byte range (``kcompact.segment.remote``).

The format layer reads a source by range and names it by :attr:`ByteSource.path` in what it reports; it never
learns what stands behind it (a URL, a file system, credentials). A source that is not a local file gives a
path that names it for the reader (its caller renames results and errors to what the user gave).
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Protocol

SPOOL_ABOVE = 64 << 20  # a source bigger than this is read into an anonymous temporary file, then mapped
SPOOL_CHUNK = 8 << 20  # bytes per read when spooling


class ByteSource(Protocol):
    """Bytes read by range from somewhere other than a local path.

    Attributes:
        path: what reports and errors name it by.
        size_in_bytes: its size, as listed.
    """

    @property
    def path(self) -> Path: ...

    @property
    def size_in_bytes(self) -> int: ...

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (fewer when the source ends before ``end``).

        Raises:
            KcompactError: the bytes cannot be read (one line naming the source).
        """
        ...


def read_whole(source: ByteSource) -> memoryview:
    """Every byte of ``source``, read once, in ranges: in memory, or spooled to an anonymous temporary file
    and mapped when it is bigger than :data:`SPOOL_ABOVE` (a 1 GiB segment does not sit in memory).

    Returns:
        A view of the bytes (shorter than ``size_in_bytes`` when the source ended early).
    """
    size = source.size_in_bytes
    if size <= SPOOL_ABOVE:
        return memoryview(source.read(0, size))
    import tempfile  # only for a large remote segment: a local command never loads it (~5 ms of CPU)

    with tempfile.TemporaryFile(prefix="kcompact-range-") as spool:
        written = 0
        while written < size:
            chunk = source.read(written, min(size, written + SPOOL_CHUNK))
            if not chunk:
                break
            spool.write(chunk)
            written += len(chunk)
        spool.flush()
        if written == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(spool.fileno(), written, access=mmap.ACCESS_READ))
