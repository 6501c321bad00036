"""The self-check of a cleaned segment before it is swapped in (spec §11.3).

A violation here means kcompact is about to write something a broker would not accept as its own cleaner's
work; the clean is aborted with every ``.cleaned`` file removed and the partition unchanged. Checked per
output segment: every batch frames and passes its CRC, offsets strictly increase across batches, the first
batch does not start below the segment's base, every offset fits the 32-bit relative window and lies below
the round's first uncleanable offset, the file holds no trailing bytes, and the offset and time indexes agree
with the log the way Kafka 4.1 builds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kcompact.cleaner.swap import CleanedSegment
from kcompact.errors import CleanerStateError, CorruptDataError
from kcompact.segment.log_file import LogFile
from kcompact.segment.verify_index import verify_index_file

MAX_RELATIVE_OFFSET = 0x7FFFFFFF


def check_cleaned_segment(cleaned: CleanedSegment, group: Sequence[Any], first_uncleanable: int) -> None:
    """Raise CleanerStateError when the cleaned segment breaks an invariant (see the module docstring)."""
    log_path = cleaned.files.get("log")
    if log_path is None:
        return
    problems = _check_log(log_path, cleaned.base_offset, first_uncleanable)
    for kind in ("index", "timeindex", "txnindex"):
        path = cleaned.files.get(kind)
        if path is not None:
            problems += [f"{path.name}: {p}" for p in verify_index_file(path, cleaned.base_offset, log_path)]
    if problems:
        sources = ", ".join(s.files.log_path.name for s in group)
        raise CleanerStateError(
            f"{log_path}: the cleaned output of {sources} fails kcompact's self-check, nothing was "
            f"changed: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
        )


def _check_log(log_path: Any, base_offset: int, first_uncleanable: int) -> list[str]:
    problems: list[str] = []
    previous_last = base_offset - 1
    try:
        with LogFile(log_path) as log:
            for batch in log.iter_batches():
                where = f"batch at position {batch.position}"
                if not batch.crc_valid():
                    problems.append(
                        f"{where} (offset {batch.last_offset}) fails its CRC; the source is corrupt "
                        "(run `kcompact repair`)"
                    )
                first = batch.base_offset
                if first <= previous_last:
                    problems.append(f"{where}: offset {first} does not follow {previous_last}")
                if batch.last_offset - base_offset > MAX_RELATIVE_OFFSET:
                    problems.append(f"{where}: offset {batch.last_offset} overflows the segment")
                if batch.last_offset >= first_uncleanable:
                    problems.append(f"{where}: offset {batch.last_offset} is past the cleanable range")
                previous_last = batch.last_offset
    except CorruptDataError as err:
        problems.append(str(err))
    return problems
