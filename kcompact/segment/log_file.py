"""One ``<base>.log`` file, read through a read-only memory map.

A segment file is a plain concatenation of batches (v2) or legacy entries (magic 0/1), with no header or
trailer (Kafka's ``FileRecords``). This module opens it, walks its entries with
:func:`kcompact.records.batch.iter_batches` and turns the buffer-relative errors of the records layer into errors that
name this file and the absolute byte position. It never writes. A batch's CRC is checked on request
(:meth:`LogFile.check_crc`; the cleaner and the inspect reports ask for every batch they read), not by the walk itself:
``inspect dump`` and ``repair`` report a bad CRC and go on.

The map is what makes large segments cheap: batches are ``memoryview`` slices of it, so walking headers of a
1 GiB segment reads only the pages holding the headers, and the cleaner can copy a retained batch without
an intermediate copy. What it reads stays in the process's resident set, though, and with the pages the
kernel maps around each fault: the walks over whole files go a window at a time and let the pages behind go
(:meth:`LogFile.walk_headers`, :meth:`LogFile.forget_before`).

A file under ``READ_BELOW`` bytes is read into memory instead: mapping and unmapping cost more than reading
it, and ``inspect dirty-ratio`` over a log dir of many small partitions opens tens of thousands of them.
"""

from __future__ import annotations

import mmap
import os
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from kcompact.errors import BatchCrcError, CorruptDataError, UnsupportedFormatError
from kcompact.records.batch import iter_batches
from kcompact.segment.files import file_access
from kcompact.value import frozen

if TYPE_CHECKING:
    from kcompact.records.batch_header import RecordBatch
    from kcompact.records.legacy import LegacyEntry
    from kcompact.segment.source import ByteSource

    AnyBatch = RecordBatch | LegacyEntry
    # a C walk of batch headers (``records.scan.accel.batch_headers``, ``batch_producers``): the buffer, from
    # where, before where; ``(where it stopped, rows)`` or None (declined)
    HeaderWalk = Callable[[memoryview, int, int], "tuple[int, bytes] | None"]

READ_BELOW = 1 << 16  # files smaller than this are read, not mapped (module docstring)
HEADER_WINDOW = 8 << 20
"""The bytes of a file one C header walk is given at a time (:meth:`LogFile.walk_headers`)."""
_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)  # LogFile.forget_before; None: not here


@frozen
class BatchSummary:
    """What index building, range rules and reports need of one batch, without its bytes."""

    position: int
    size_in_bytes: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    magic: int


class LogFile:
    """A read-only view of one segment ``.log`` file.

    Use as a context manager; batches yielded by :meth:`iter_batches` are views into the map and must not
    be used after the file is closed (copy ``bytes(batch.buffer)`` to keep one).

    Args:
        path: the ``.log`` file (a ``.log.cleaned`` / ``.log.swap`` works too), or a
            :class:`~kcompact.segment.source.ByteSource` (read whole, by range; named by its ``path``).

    Raises:
        FileAccessError: the file cannot be opened or mapped (permissions, a vanished file, …).
        KcompactError: a source cannot be read.
    """

    def __init__(self, path: str | os.PathLike[str] | ByteSource) -> None:
        self._map: mmap.mmap | None = None
        self.buffer: memoryview
        if not isinstance(path, (str, os.PathLike)):
            # kept off a clean's start-up: only a URL input (a remote segment) is read by range
            from kcompact.segment.source import read_whole

            self.path = path.path
            self.buffer = read_whole(path)
            self.size_in_bytes = len(self.buffer)
            return
        self.path = path if isinstance(path, Path) else Path(path)
        with file_access(self.path, "read"):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                if size >= READ_BELOW:
                    self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                    self.buffer = memoryview(self._map)
                else:
                    data = _read_up_to(fd, size)
                    size = len(data)  # what was read, should the file have shrunk
                    self.buffer = memoryview(data)
            finally:
                os.close(fd)  # read whole, or mapped (a map holds its own descriptor)
        self.size_in_bytes = size

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the map or the bytes read. Outstanding batch views make the map linger until dropped."""
        self.buffer.release()
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                # A caller still holds a view; the map is freed when the last view goes.
                pass
            self._map = None

    def forget_before(self, position: int) -> None:
        """Let this process's resident set drop the mapped pages before ``position`` (a pass that is past
        them): ``madvise(MADV_DONTNEED)``, which leaves them in the page cache — reading them again maps them
        back, with the file's bytes. Nothing for a file read whole or where the platform has no madvise.

        From the file's start every time, not from where the last call ended: a walk reads batches behind it
        again (pass 2 writes out a window of batches after walking past it), and each such read maps back the
        pages around it — whole page-cache folios, up to 2 MiB each — which would stay for the rest of the walk.
        Where nothing is mapped the kernel skips the range quickly."""
        if self._map is None or _DONTNEED is None:
            return
        end = min(position, self.size_in_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
        if end > 0:
            self._map.madvise(_DONTNEED, 0, end)

    def walk_headers(self, walk: HeaderWalk) -> tuple[int, bytes] | None:
        """Run a C walk of batch headers over the whole file, :data:`HEADER_WINDOW` bytes at a time, letting
        the pages behind each window go (:meth:`forget_before`).

        Why windows: the walk reads only headers, but the page faults that bring a header in map the pages
        around it too (the kernel's fault-around), so one call over a whole file left all of it resident: a
        clean's peak RSS grew with the segment size (a 253 MB segment: 276 MiB; Kafka's default segment is
        1 GiB).

        Returns:
            What one call over the whole file gives: ``(where the walk stopped, rows)`` (the file's size when it
            took every batch), or None where the walk declined.
        """
        size, position, parts = self.size_in_bytes, 0, []
        while True:
            end = min(size, position + HEADER_WINDOW)
            found = walk(self.buffer, position, end)
            if found is None:
                return None
            reached, rows = found
            parts.append(rows)
            self.forget_before(reached)
            if reached < end or reached >= size:  # a batch the walk does not take, or the end
                return reached, b"".join(parts)
            position = reached

    def iter_batches(self, start: int = 0, end: int | None = None) -> Iterator[AnyBatch]:
        """Yield every batch from byte ``start`` (a batch boundary) to ``end``.

        Every :data:`HEADER_WINDOW` bytes the pages behind the walk go (:meth:`forget_before`): a batch yielded
        before is still readable (its pages come back, with the file's bytes), at the cost of mapping them again.

        Raises:
            CorruptDataError: (a subclass) naming this file and the absolute position of the bad entry.
        """
        stop = self.size_in_bytes if end is None else end
        let_go = start + HEADER_WINDOW  # as walk_headers: the pages behind the walk go, a window at a time
        try:
            for batch in iter_batches(self.buffer, start, stop):
                if batch.position >= let_go:
                    self.forget_before(batch.position)
                    let_go = batch.position + HEADER_WINDOW
                yield batch
        except CorruptDataError as err:
            raise err.located(self.path) from err
        except UnsupportedFormatError as err:
            # the buffer is the whole file, so its positions are file positions
            raise UnsupportedFormatError(f"{self.path}: {err}") from err

    def check_crc(self, batch: AnyBatch) -> None:
        """Raise when ``batch`` (one of this file's) fails its CRC (CRC-32C for v2, CRC-32 for v0/v1).

        Raises:
            BatchCrcError: naming this file, the batch's position and both checksums, and pointing
                to ``kcompact repair`` (which sets such batches aside).
        """
        if not batch.crc_valid():
            raise crc_error(self.path, batch)

    def summaries(self, start: int = 0) -> Iterator[BatchSummary]:
        """Yield the header facts of every batch from ``start``; cheap (no record is decoded)."""
        for batch in self.iter_batches(start):
            yield BatchSummary(
                position=batch.position,
                size_in_bytes=batch.size_in_bytes,
                base_offset=batch.base_offset,
                last_offset=batch.last_offset,
                max_timestamp=batch.max_timestamp,
                magic=batch.magic,
            )

    def index_columns(self) -> tuple[array[int], array[int], array[int]]:
        """``(sizes_in_bytes, last_offsets, max_timestamps)`` of every batch, in file order from position
        0: what the offset and time indexes are built from (``IndexBuilder.append_run``). Runs of legacy
        entries are read by one C walk each (``records.scan.legacy_rows``), compressed wrappers
        included: none is decompressed here.

        Raises:
            CorruptDataError: as :meth:`iter_batches`.
        """
        sizes, last_offsets, max_timestamps = array("q"), array("q"), array("q")
        batches = self.iter_batches()
        while (batch := next(batches, None)) is not None:
            if batch.magic < 2:
                # kept off a clean's start-up: only legacy (magic 0/1) entries need it
                from kcompact.records.scan.legacy_rows import (
                    LEGACY_COMPRESSED,
                    OFFSET,
                    ROW_FIELDS,
                    SIZE,
                    TIMESTAMP,
                    legacy_entries,
                )

                run = legacy_entries(self.buffer, batch.position, self.size_in_bytes, 1 << 62,
                                     LEGACY_COMPRESSED)
                if run is not None and run[0] != batch.position:
                    rows = array("q", run[1])
                    sizes += rows[SIZE::ROW_FIELDS]
                    last_offsets += rows[OFFSET::ROW_FIELDS]
                    max_timestamps += rows[TIMESTAMP::ROW_FIELDS]
                    batches = self.iter_batches(run[0])
                    continue
            sizes.append(batch.size_in_bytes)
            last_offsets.append(batch.last_offset)
            max_timestamps.append(batch.max_timestamp)
        return sizes, last_offsets, max_timestamps

    def last_summary(self, start: int = 0) -> BatchSummary | None:
        """The last batch of the file, walking from ``start`` (0 or an offset-index position)."""
        last: BatchSummary | None = None
        for summary in self.summaries(start):
            last = summary
        return last


def _read_up_to(fd: int, size: int) -> bytes:
    """The first ``size`` bytes of the file open at ``fd`` (fewer if it ends before)."""
    chunks = []
    while size > 0:
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def crc_error(path: Path, batch: AnyBatch) -> BatchCrcError:
    """The error for a batch of the ``.log`` at ``path`` that fails its CRC (see :meth:`LogFile.check_crc`).

    Args:
        path: the segment file.
        batch: the batch (its ``crc_valid()`` is false).

    Returns:
        The error, one line: where, expected (computed) and found (stored) checksums, what to do.
    """
    return BatchCrcError(
        f"batch (last offset {batch.last_offset}) fails its CRC; expected {batch.compute_crc():#010x}, "
        f"found {batch.crc:#010x}; the data is corrupt (`kcompact repair {path.parent}` sets such "
        "batches aside and keeps every batch that passes)",
        path=path, position=batch.position, offset=batch.last_offset,
    )


def crc_error_or(err: CorruptDataError, path: Path, batch: AnyBatch) -> CorruptDataError:
    """What to raise when ``batch`` of ``path`` did not parse: its CRC error when it also fails its CRC
    (the likelier cause, and what ``kcompact repair`` acts on), else ``err`` located in ``path``.

    Args:
        err: the parse error (its position relative to the batch when it has no path yet).
        path: the segment file.
        batch: the batch that did not parse.

    Returns:
        The error to raise (``raise crc_error_or(err, path, batch) from err``).
    """
    if not batch.crc_valid():
        return crc_error(path, batch)
    return err.located(path, batch.position) if err.path is None else err
