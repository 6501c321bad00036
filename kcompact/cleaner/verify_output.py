"""The self-check of a cleaned segment before it is swapped in (spec §11.3).

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
from typing import TYPE_CHECKING, Any

from kcompact.cleaner.swap import CleanedSegment
from kcompact.errors import CleanerStateError, CorruptDataError
from kcompact.segment.log_file import LogFile
from kcompact.segment.verify_index import LogFacts, verify_index_with_facts

if TYPE_CHECKING:
    from kcompact.records.batch import RecordBatch
    from kcompact.records.legacy import LegacyEntry

MAX_RELATIVE_OFFSET = 0x7FFFFFFF


def check_cleaned_segment(cleaned: CleanedSegment, group: Sequence[Any], first_uncleanable: int) -> None:
    """Raise CleanerStateError when the cleaned segment breaks an invariant (see the module docstring)."""
    log_path = cleaned.files.get("log")
    if log_path is None:
        return
    problems, walked = _check_log(log_path, cleaned.base_offset, first_uncleanable)
    for kind in ("index", "timeindex", "txnindex"):
        path = cleaned.files.get(kind)
        if path is not None:
            found = verify_index_with_facts(path, cleaned.base_offset, log_path, walked)
            problems += [f"{path.name}: {p}" for p in found]
    if problems:
        sources = ", ".join(s.files.log_path.name for s in group)
        raise CleanerStateError(
            f"{log_path}: the cleaned output of {sources} fails kcompact's self-check, nothing was "
            f"changed: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
        )


def _check_log(
    log_path: Path, base_offset: int, first_uncleanable: int
) -> tuple[list[str], LogFacts | Exception]:
    """The log's problems and, from the same walk, its facts for the index checks (or what stopped it)."""
    problems: list[str] = []
    facts = LogFacts()
    previous_last = base_offset - 1
    try:
        with LogFile(log_path) as log:
            for batch in log.iter_batches():
                _check_batch(batch, previous_last, base_offset, first_uncleanable, problems)
                facts.add(batch)
                previous_last = batch.last_offset
    except CorruptDataError as err:
        problems.append(str(err))
        return problems, err
    return problems, facts


def _check_batch(batch: RecordBatch | LegacyEntry, previous_last: int, base_offset: int,
                 first_uncleanable: int, problems: list[str]) -> None:
    where, last = f"batch at position {batch.position}", batch.last_offset
    if not batch.crc_valid():
        problems.append(
            f"{where} (offset {last}) fails its CRC; the source is corrupt (run `kcompact repair`)"
        )
    first = batch.base_offset
    if first <= previous_last:
        problems.append(f"{where}: offset {first} does not follow {previous_last}")
    if last - base_offset > MAX_RELATIVE_OFFSET:
        problems.append(f"{where}: offset {last} overflows the segment")
    if last >= first_uncleanable:
        problems.append(f"{where}: offset {last} is past the cleanable range")
