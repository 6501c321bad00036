"""Bulk results of worker processes, handed over through temporary files instead of the pool's pipe.

Why: a ``multiprocessing`` pool sends a result by pickling it into a pipe, which the parent reads in
pieces, joins and unpickles — measured here, 64 MiB of results cost the parent 0.18 s of CPU and 0.4 s of
wall time that way, against 0.03 s and under 0.1 s written to a file by the worker and read back from the
page cache. A cleaning round ships about 24 bytes per map entry (pass 1) and its whole output (pass 2),
so only small values (counts, per-batch sizes, counters) go through the pipe.

Files live in one directory per pool (:func:`spool`), under the system's temporary directory
(``TMPDIR``), never in the partition directory; each is removed as soon as it is read, and the directory
when the pool ends, whatever happened.

Layout of an array file: the arrays' raw bytes back to back, in the order and with the dtypes and lengths
recorded in its :class:`Spilled` (every dtype is 8 bytes wide, so each array stays aligned).
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from kcompact.value import frozen

_WRITE_BUFFER_SIZE = 1 << 20


@contextmanager
def spool() -> Iterator[Path]:
    """A fresh directory for one pool's result files, removed with everything in it at the end."""
    directory = Path(tempfile.mkdtemp(prefix="kcompact-clean-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@frozen
class Spilled:
    """Arrays written to a file: where, and each one's dtype and length, in file order."""

    path: str
    columns: tuple[tuple[str, int], ...]


def spill_arrays(directory: Path, arrays: Sequence[npt.NDArray[np.generic]]) -> Spilled:
    """Write 8-byte-wide arrays back to back into a new file of ``directory``."""
    fd, path = tempfile.mkstemp(dir=directory, suffix=".keys")
    with os.fdopen(fd, "wb") as out:
        for column in arrays:
            out.write(np.ascontiguousarray(column).tobytes())
    return Spilled(path, tuple((column.dtype.str, len(column)) for column in arrays))


def load_arrays(spilled: Spilled) -> list[npt.NDArray[np.generic]]:
    """Read the arrays of a :class:`Spilled` back (one read each, into its own memory: the offset map
    keeps pass 1's digest and offset columns until its next flush, and they keep nothing else alive)
    and remove its file."""
    with open(spilled.path, "rb") as file:
        arrays = [np.fromfile(file, dtype=np.dtype(dtype_str), count=length)
                  for dtype_str, length in spilled.columns]
    os.unlink(spilled.path)
    return arrays


class SpillWriter:
    """Output batches written back to back into a new file of ``directory`` (a worker's pass 2)."""

    def __init__(self, directory: Path) -> None:
        fd, self.path = tempfile.mkstemp(dir=directory, suffix=".batches")
        self._out: BinaryIO = os.fdopen(fd, "wb", buffering=_WRITE_BUFFER_SIZE)

    def write(self, data: bytes | memoryview) -> None:
        """Append one batch's bytes."""
        self._out.write(data)

    def close(self) -> str:
        """Flush and close; return the file's path."""
        self._out.close()
        return self.path


@contextmanager
def read_spilled(path: str) -> Iterator[memoryview]:
    """The bytes of a :class:`SpillWriter`'s file, mapped; the file is removed afterwards."""
    try:
        with open(path, "rb") as file:
            if os.fstat(file.fileno()).st_size == 0:
                yield memoryview(b"")
                return
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    yield view
                finally:
                    view.release()
    finally:
        os.unlink(path)
