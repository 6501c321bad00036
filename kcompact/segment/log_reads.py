"""A partition's small ``.log`` files each read and walked once, however many checks of one report read them.

``inspect dirty-ratio`` reads a partition's segments for four things: its loaded state
(``log.state.log_state``), the CRCs of its dirty section, and the two places Kafka's cleaner throws on
(``log.state.cleaner_throws``). Each opened, read and walked the file again; over a log dir of
10 000 small partitions those repeats were a third of the report. A :class:`LogReads` hands out one
:class:`~kcompact.segment.log_file.LogFile` per segment instead, kept open while the bytes it keeps stay
under a budget, and remembers the batches of its first whole walk so the next walk costs no parsing. Past
the budget, and for a file too large to be read whole (``READ_BELOW``: it is mapped), each ask opens the
file again, as without it, so a partition of many segments costs no more memory than the budget.

What a check sees is the same either way: the same bytes, the same batches, and the same error at the
same position for a segment that does not parse (a walk that fails is not remembered; the next one walks
the same bytes again and fails the same way).

A caller whose checks walk each file only once (a log dir's ranking: the keyless sample counts in C, then the
state walks) says ``replay_walks=False``: the file is still read once, and the state's walk takes the C path
(``log_state._data_only``) instead of a Python walk kept for checks that never come.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self

from kcompact.segment.log_file import READ_BELOW, LogFile

if TYPE_CHECKING:
    from kcompact.segment.log_file import AnyBatch

KEEP_BUDGET = 4 << 20  # bytes of .log data one LogReads keeps (64 files of READ_BELOW at least)


class SegmentLog(Protocol):
    """What a :class:`LogReads` needs of a segment (``segment.partition.SegmentFiles`` is one)."""

    @property
    def log_path(self) -> Path: ...

    @property
    def size_in_bytes(self) -> int: ...

    def open(self) -> LogFile: ...


class LogReads:
    """The ``.log`` files of one partition's report, each read once while they fit ``budget``.

    Use as a context manager (leaving it releases what it kept); :meth:`open` replaces
    ``SegmentFiles.open()`` in every check that shares it.

    Args:
        budget: the most bytes of file data kept at once.
        replay_walks: keep each file's first whole batch walk for the checks after it (they walk it again);
            False where each file is walked once: the walks are not kept, and a state's walk may take C's path.
    """

    def __init__(self, budget: int = KEEP_BUDGET, *, replay_walks: bool = True) -> None:
        self._budget = budget
        self._kept: dict[str, _KeptLog] = {}
        self.replays_walks = replay_walks

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self, segment: SegmentLog) -> LogFile:
        """The segment's ``.log``, open (use as a context manager, as ``SegmentFiles.open()``).

        Raises:
            FileAccessError: the file cannot be opened or read.
        """
        key = os.fspath(segment.log_path)
        kept = self._kept.get(key)
        if kept is not None:
            return kept
        if not self._fits(segment.size_in_bytes):
            return segment.open()
        kept = _KeptLog(segment.log_path, self.replays_walks)
        if not self._fits(kept.size_in_bytes):  # it grew since it was listed: mapped, or past the budget
            return kept.detached()
        self._budget -= kept.size_in_bytes
        self._kept[key] = kept
        return kept

    def _fits(self, size: int) -> bool:
        return size < READ_BELOW and size <= self._budget

    def close(self) -> None:
        """Release every kept file."""
        for kept in self._kept.values():
            kept.release()
        self._kept.clear()


def open_log(segment: SegmentLog, reads: LogReads | None) -> LogFile:
    """``segment``'s ``.log``, through ``reads`` when given (else opened afresh)."""
    return segment.open() if reads is None else reads.open(segment)


class _KeptLog(LogFile):
    """A :class:`LogFile` that stays open when a check closes it, and replays its first whole walk."""

    def __init__(self, path: str | os.PathLike[str], replays: bool = True) -> None:
        super().__init__(path)
        self._walked: list[AnyBatch] | None = None
        self._detached = False
        self._replays = replays

    def detached(self) -> Self:
        """This file, closed by the first check that closes it (not kept)."""
        self._detached = True
        return self

    def close(self) -> None:
        if self._detached:
            self.release()

    def release(self) -> None:
        """Close the file for good."""
        LogFile.close(self)

    def iter_batches(self, start: int = 0, end: int | None = None) -> Iterator[AnyBatch]:
        if start != 0 or end is not None or self._detached or not self._replays:
            yield from super().iter_batches(start, end)
            return
        if self._walked is not None:
            yield from self._walked
            return
        walked: list[AnyBatch] = []
        for batch in super().iter_batches():
            walked.append(batch)
            yield batch
        self._walked = walked
