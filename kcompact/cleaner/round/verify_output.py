"""The self-check of a cleaned segment before it is swapped in (kcompact's own; Kafka has none).

A violation here means kcompact is about to write something a broker would not accept as its own cleaner's
work; the clean is aborted with every ``.cleaned`` file removed and the partition unchanged. Checked per
output segment: every batch frames and passes its CRC, offsets strictly increase across batches, the first
batch does not start below the segment's base, every offset fits the 32-bit relative window and lies below
the round's first uncleanable offset, the file holds no trailing bytes, and the offset and time indexes agree
with the log the way Kafka 4.1 builds them.

The output is read once: one walk of its batches applies the log's rules and gathers the
:class:`~kcompact.segment.verify_index.LogFacts` every index is then compared with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from kcompact.cleaner.disk.swap import CleanedSegment
from kcompact.errors import CleanerStateError, CorruptDataError, KcompactError
from kcompact.records.scan import accel
from kcompact.segment.fixed_index import MAX_RELATIVE_OFFSET
from kcompact.segment.log_file import LogFile
from kcompact.segment.partition import SegmentFiles
from kcompact.segment.verify_index import LogFacts, verify_index_with_facts
from kcompact.value import frozen

if TYPE_CHECKING:
    from kcompact.records.batch_header import RecordBatch
    from kcompact.records.legacy import LegacyEntry


class SourceSegment(Protocol):
    """A source segment of a group, as the check names it: its files."""

    @property
    def files(self) -> SegmentFiles: ...


def check_cleaned_segment(cleaned: CleanedSegment, group: Sequence[SourceSegment], first_uncleanable: int) -> None:
    """Raise CleanerStateError when the cleaned segment breaks an invariant (see the module docstring).

    Args:
        cleaned: the group's output, its ``.cleaned`` files complete.
        group: the source segments it replaces (each with ``.files``: their
            :class:`~kcompact.segment.partition.SegmentFiles`), in offset order.
        first_uncleanable: no output offset may reach it.

    Raises:
        CleanerStateError: the first problem found (and how many more). A batch's problem names the
            source segment the batch came from and its byte position there (a batch keeps its base
            offset through a clean), which is what a user can inspect or repair; a problem of the
            output's framing or indexes names the ``.cleaned`` file.
    """
    log_path = cleaned.files.get("log")
    if log_path is None:
        return
    problems, walked = _check_log(log_path, cleaned.base_offset, first_uncleanable)
    for kind in ("index", "timeindex", "txnindex"):
        path = cleaned.files.get(kind)
        if path is not None:
            found = verify_index_with_facts(path, cleaned.base_offset, log_path, walked, kind)
            problems += [_Problem(f"{path.name}: {p}") for p in found]
    if problems:
        sources = ", ".join(s.files.log_path.name for s in group)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        first = problems[0]
        where = None if first.batch is None else _source_of(first.batch, [s.files for s in group])
        if where is None:
            raise CleanerStateError(
                f"{log_path}: the cleaned output of {sources} fails kcompact's self-check, nothing was "
                f"changed: {first.describe()}{more}")
        raise CleanerStateError(
            f"{where[0]} at position {where[1]}: {first.batch} {first.what}; found by kcompact's self-check of the "
            f"cleaned output of {sources}, nothing was changed{more}")


@frozen
class _BatchPlace:
    position: int  # in the .cleaned file
    base_offset: int  # kept from the source batch, also when the batch was rebuilt
    last_offset: int

    def __str__(self) -> str:
        return f"batch (offsets {self.base_offset} to {self.last_offset})"


@frozen
class _Problem:
    """One broken invariant; ``batch`` is the output batch it concerns, when it concerns one."""

    what: str
    batch: _BatchPlace | None = None

    def describe(self) -> str:
        """The problem placed in the output file (when no source could be found for it)."""
        if self.batch is None:
            return self.what
        return f"{self.batch} at position {self.batch.position} {self.what}"


def _source_of(batch: _BatchPlace, sources: Sequence[SegmentFiles]) -> tuple[Path, int] | None:
    """The source segment and byte position of the batch the output batch came from (None: not found)."""
    below = [files for files in sources if files.base_offset <= batch.base_offset]
    if not below:
        return None
    files = max(below, key=lambda f: f.base_offset)
    try:
        with LogFile(files.log_path) as log:
            for summary in log.summaries():
                if summary.base_offset <= batch.base_offset <= summary.last_offset:
                    return files.log_path, summary.position
    except KcompactError:  # the source does not frame or cannot be read: name the output instead
        return None
    return None


def _check_log(
    log_path: Path, base_offset: int, first_uncleanable: int
) -> tuple[list[_Problem], LogFacts | Exception]:
    """The log's problems and, from the same walk, its facts for the index checks (or what stopped it)."""
    problems: list[_Problem] = []
    facts = LogFacts()
    previous_last = base_offset - 1
    try:
        with LogFile(log_path) as log:
            plain = _plain_facts(log, base_offset, first_uncleanable)
            if plain is not None:
                return problems, plain
            for batch in log.iter_batches():
                _check_batch(batch, previous_last, base_offset, first_uncleanable, problems)
                facts.add(batch)
                previous_last = batch.last_offset
    except CorruptDataError as err:
        problems.append(_Problem(str(err)))
        return problems, err
    return problems, facts


def _plain_facts(log: LogFile, base_offset: int, first_uncleanable: int) -> LogFacts | None:
    """The facts of an output of data batches only that breaks no rule of :func:`_check_batch`, from
    one C walk of its headers (``accel.batch_headers``); None: anything else (a control batch, a
    problem), which the walk batch by batch then reports."""
    found = log.walk_headers(accel.batch_headers)
    if found is None or found[0] != log.size_in_bytes:
        return None
    rows = np.frombuffer(found[1], dtype=np.int64).reshape(-1, 5)
    positions, first, last, max_timestamps, crc_ok = rows.T
    previous = np.concatenate(([base_offset - 1], last[:-1]))
    if not (crc_ok.all() and (first > previous).all() and (last - base_offset <= MAX_RELATIVE_OFFSET).all()
            and (last < first_uncleanable).all()):
        return None
    return LogFacts.of_columns(positions, last, max_timestamps)


def _check_batch(batch: RecordBatch | LegacyEntry, previous_last: int, base_offset: int,
                 first_uncleanable: int, problems: list[_Problem]) -> None:
    first, last = batch.base_offset, batch.last_offset
    place = _BatchPlace(batch.position, first, last)
    if not batch.crc_valid():
        # Pass 2 refused every source batch that fails its CRC, so this one went bad on its way out: a
        # fault of the disk or memory, or a kcompact bug. The source data is not blamed.
        problems.append(_Problem("fails its CRC in the cleaned output, though its source batch passed (a "
                                 "disk or memory fault, or a kcompact bug: please report it)", place))
    if first <= previous_last:
        problems.append(_Problem(f"does not follow offset {previous_last}", place))
    if last - base_offset > MAX_RELATIVE_OFFSET:
        problems.append(_Problem(f"overflows the segment based at {base_offset} (32-bit relative offsets)",
                                 place))
    if last >= first_uncleanable:
        problems.append(_Problem(f"reaches past the cleanable range, which ends before {first_uncleanable}",
                                 place))
