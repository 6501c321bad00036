"""What makes Kafka 4.1's own cleaner throw on a partition a broker otherwise serves, found offline.

The broker's cleaner thread catches any exception of a round and marks the partition uncleanable. Most
causes are damage that ``repair`` finds batch by batch (``repair.salvage``). Two shapes a broker loads and
serves without a word, so that only the cleaner trips on them, are found here for ``inspect`` as well:

* bytes after a segment's last whole entry too few to size an entry (< 12): Kafka's loader ignores them,
  but ``Cleaner.cleanInto`` reads every segment of the round to its end and ``growBuffersOrFail`` throws
  (``IllegalStateException: Could not determine next batch size``) — :func:`round_walk_problems`;
* a legacy entry that must be kept empty, below.

Legacy (magic 0/1) entries that make Kafka 4.1's cleaner throw: ``inspect`` reports them, ``repair``
converts them.

Kafka's ``Cleaner.cleanInto`` keeps the last batch of a cleaning round even when none of its records
survive (``BatchRetention.RETAIN_EMPTY`` for the batch whose next offset is the round's upper bound, so
the log end offset is preserved; ``Cleaner.doClean`` passes the round's first uncleanable offset as that
bound, not the end of its offset map), and ``MemoryRecords.filterTo`` can write such an empty batch only as
magic 2: for a legacy entry it throws ``IllegalStateException("Empty batches are only supported for magic
v2 and above")``. The cleaner thread then marks the partition uncleanable, every round again.

That bound is a segment boundary (``LogCleanerManager.cleanableOffsets``: the active segment's base offset,
or the base of the first segment ``min.compaction.lag.ms`` holds back — any closed segment's end as time
passes; a first unstable offset may fall there too), so the entry at risk is the *last* entry of a segment
below the active one, and it loses every record when none of them is a keyed value: keyless records are always removed
from a compacted topic, and tombstones once past the legacy delete horizon (a round's own map holds nothing after the
entry to supersede a keyed value). The active segment's last entry is at risk too: the cleaner never reads the active
segment, but a broker rolls it before its next append (``UnifiedLog.maybeRoll``), which leaves that entry the last of
the next round — and ``kcompact clean --roll`` rolls it the same way. A legacy partition a broker no longer
appends to is cleanable only after such a roll, so that entry is what stops its first clean.
:func:`find_legacy_hazards` lists those entries; the way out that keeps every record is to rewrite the
segment's legacy entries as magic 2 batches with the same records, offsets and timestamps — what Kafka's
cleaner writes for kept legacy data (``records.filter.filter_legacy_entry``).
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.errors import KcompactError
from kcompact.records.legacy import LegacyEntry, legacy_records
from kcompact.segment.fixed_index import read_index_file
from kcompact.segment.log_reads import LogReads, open_log
from kcompact.segment.offset_index import split_offset_index
from kcompact.segment.partition import Partition, SegmentFiles
from kcompact.text import plural
from kcompact.value import frozen

if TYPE_CHECKING:
    from kcompact.records.batch_header import RecordBatch

_LOG_OVERHEAD = 12  # offset and size: fewer bytes cannot be sized (ByteBufferLogInputStream.nextBatchSize)
KAFKA_EXCEPTION = ("IllegalStateException: Empty batches are only supported for magic v2 and above "
                   "(MemoryRecords.filterTo)")


@frozen
class LegacyHazard:
    """A segment whose last entry is legacy and would lose every record in a clean."""

    log_path: Path
    position: int  # of the entry in the .log
    offset: int  # the entry's last offset
    magic: int
    records: int
    keyless: int  # how many of its records have no key (the others are tombstones)
    next_to_active: bool  # the segment right below the active one: the end of a round without compaction lag
    next_base_offset: int  # the base offset of the segment after it (where a round ending here ends)
    active: bool = False  # the active segment: the end of the first round after it rolls

    def reason(self, when: str | None = None) -> str:
        """Why the broker's cleaner fails here, in one sentence (``when``: which round ends here)."""
        what = (f"all {plural(self.records, 'record')} keyless" if self.keyless == self.records
                else f"{plural(self.keyless, 'keyless record')}, the others tombstones")
        if when is None:
            when = ("every round that reaches the active segment ends with it" if self.next_to_active
                    else "the first round after the active segment rolls (a broker's next roll, or "
                    "`kcompact clean --roll`) ends with it" if self.active
                    else "a round ends with it while min.compaction.lag.ms holds the next segment back")
        return (f"the legacy entry at position {self.position} of {self.log_path.name} (magic "
                f"{self.magic}, offset {self.offset}, {what}) loses every record in a clean, and {when}: "
                f"Kafka's cleaner must keep it as an empty batch, which needs magic 2 ({KAFKA_EXCEPTION}), "
                f"so the broker marks the partition uncleanable")


def find_legacy_hazards(partition: Partition, *, below: int | None = None) -> list[LegacyHazard]:
    """The legacy entries of ``partition`` that make Kafka's cleaner throw (see the module docstring).

    Reads batch headers from the last offset index entry on (from the start when that fails), and the
    records of each segment's last entry when it is legacy. A segment that does not walk (damage) is
    skipped: ``repair`` reports the damage itself.

    Args:
        partition: the partition.
        below: only segments that end at or below this offset (a round's first uncleanable offset).

    Returns:
        One hazard per segment whose last entry is at risk, in offset order (the active segment's
        included when ``below`` is None).
    """
    segments = partition.segments
    hazards: list[LegacyHazard] = []
    for i, seg in enumerate(segments):
        active = i == len(segments) - 1
        if below is not None and (active or segments[i + 1].base_offset > below):
            break
        last = _last_entry(seg)
        if not isinstance(last, LegacyEntry):
            continue
        try:
            records = legacy_records(last)
        except KcompactError:
            continue
        if not records or any(r.key is not None and r.value is not None for r in records):
            continue
        keyless = sum(1 for r in records if r.key is None)
        next_base = last.last_offset + 1 if active else segments[i + 1].base_offset
        hazards.append(LegacyHazard(seg.log_path, last.position, last.last_offset, last.magic,
                                    len(records), keyless, i == len(segments) - 2, next_base, active))
    return hazards


def round_end_hazard(partition: Partition, end_offset: int, reads: LogReads | None = None) -> LegacyHazard | None:
    """The hazard of a round that ends at ``end_offset``, if the entry ending right below it is at risk.

    That entry is the one Kafka's ``Cleaner.cleanInto`` must keep even when empty (its next offset is the
    round's upper bound); it may sit anywhere in a segment (the round can end at the high watermark or
    the last stable offset as well as at a segment boundary).

    Args:
        partition: the partition.
        end_offset: the round's first uncleanable offset.
        reads: the report's shared reads of the ``.log`` files (None: the segment is opened for this).

    Returns:
        The hazard, or None when that entry is magic 2, has a keyed record, or does not exist. Only
        keyless records are certain to go in this round (a legacy tombstone stays while its segment is
        newer than the legacy delete horizon), so a tombstone makes it no certain failure.
    """
    segments = partition.segments
    holding = [i for i, seg in enumerate(segments) if seg.base_offset < end_offset]
    if not holding:
        return None
    i = holding[-1]
    try:
        with open_log(segments[i], reads) as log:
            entry = next((b for b in log.iter_batches() if b.last_offset == end_offset - 1), None)
            if not isinstance(entry, LegacyEntry):
                return None
            records = legacy_records(entry)
    except KcompactError:
        return None
    if not records or any(r.key is not None for r in records):
        return None
    keyless = len(records)
    next_base = segments[i + 1].base_offset if i + 1 < len(segments) else end_offset
    return LegacyHazard(segments[i].log_path, entry.position, entry.last_offset, entry.magic,
                        len(records), keyless, i == len(segments) - 2, next_base)


def _last_entry(seg: SegmentFiles) -> RecordBatch | LegacyEntry | None:
    """The segment's last entry, walked from its last offset index entry (or from the start)."""
    start = 0
    if seg.index_path is not None:
        with suppress(KcompactError, OSError):
            # a crashed broker's preallocated index: its trailing zero slots are not decoded one by one
            entries = read_index_file(seg.index_path, lambda data: split_offset_index(data, seg.base_offset)[0])
            start = entries[-1].position if entries else 0
            if not 0 <= start < seg.log_path.stat().st_size:  # a damaged index: walk it all
                start = 0
    for begin in dict.fromkeys((start, 0)):
        try:
            with seg.open() as log:
                last = None
                for batch in log.iter_batches(begin):
                    last = batch
                if last is not None or begin == 0:
                    return last
        except KcompactError:
            continue
    return None


def round_walk_problems(
    partition: Partition, first_offset: int, end_offset: int, reads: LogReads | None = None
) -> list[tuple[Path, int, str]]:
    """Where Kafka's cleaner throws walking the segments that hold ``[first_offset, end_offset)``.

    Args:
        partition: the partition.
        first_offset: the first offset the round reads (its first dirty offset, for a report).
        end_offset: the round's first uncleanable offset.
        reads: the report's shared reads of the ``.log`` files (None: each is opened for this walk).

    Returns:
        ``(file, position, why)`` per problem: trailing bytes too few to size an entry in a segment the
        round reads to its end, and batches whose offsets do not increase (the cleaned segment's offset
        index append throws ``InvalidOffsetException`` when it indexes one). A segment that does not
        walk is left to the reports that walk it (they name the damage).
    """
    segments = partition.segments
    out: list[tuple[Path, int, str]] = []
    previous = -1
    for i, seg in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if seg.base_offset >= end_offset or (upper is not None and upper <= first_offset):
            continue
        try:
            found, previous, end, size = _walk(seg, previous, reads)
        except (KcompactError, OSError):
            continue
        out += found
        if upper is not None and upper <= end_offset and 0 < size - end < _LOG_OVERHEAD:
            why = (f"{plural(size - end, 'byte')} after the last batch, too few to size an entry: Kafka's "
                   "loader ignores them, its cleaner throws (IllegalStateException: Could not "
                   "determine next batch size)")
            out.append((seg.log_path, end, why))
    return out


def _walk(
    seg: SegmentFiles, previous: int, reads: LogReads | None
) -> tuple[list[tuple[Path, int, str]], int, int, int]:
    """Offsets that go backwards in ``seg`` after ``previous``; the new previous; the end of its batches;
    the size of the file."""
    out: list[tuple[Path, int, str]] = []
    end = 0
    with open_log(seg, reads) as log:
        for batch in log.iter_batches():
            if batch.base_offset <= previous:
                why = (f"offsets go backwards (batch {batch.base_offset}..{batch.last_offset} after "
                       f"offset {previous}): the cleaned segment's offset index append throws "
                       "InvalidOffsetException when it indexes it")
                out.append((seg.log_path, batch.position, why))
            previous = max(previous, batch.last_offset)
            end = batch.position + batch.size_in_bytes
        size = log.size_in_bytes
    return out, previous, end, size
