"""How many of a partition's records carry no key: evidence about a topic whose policy is not known.

Why: a compacted topic's records all carry keys (a broker refuses a keyless record on produce to one,
and its cleaner deletes any it meets). A partition whose data is mostly keyless is therefore almost
certainly a ``delete`` topic, and compacting it would delete those records. ``clean`` uses this when
it decides about a partition: to say so when it skips one, and to refuse to compact a mostly keyless
one without ``--allow-keyless-loss``.

First only a sample is read — the first :data:`SAMPLE_BYTES` of batches from the cleaner checkpoint
(else the log start) — so a log dir of thousands of partitions costs little. Only a partition that
would be compacted and whose sample is mostly keyless is then counted in full
(:func:`count_keyless`): every record from the cleaner checkpoint to the log end, the figure an early
refusal states. Both are evidence, not checks: data that does not parse or cannot be read ends the
count where it stands (the clean itself then reports it). What a sample misses (keyed records first,
keyless ones past it) the round catches: it counts every record it reads and refuses before its first
change (``CleanOptions.keyless_guard``), counting the same way over its dirty section
(``round.key_counts.count_dirty_keyless``).
"""

from __future__ import annotations

from kcompact.cleaner.round.key_counts import iter_key_counts
from kcompact.cleaner.round.options import MOSTLY_KEYLESS
from kcompact.errors import KcompactError
from kcompact.segment.log_reads import LogReads, open_log
from kcompact.segment.partition import Partition, SegmentFiles
from kcompact.value import frozen

SAMPLE_BYTES = 256 * 1024  # batches read at most per partition (at least one batch)
MOSTLY = MOSTLY_KEYLESS  # a share of keyless records above this is "mostly keyless"


@frozen
class KeylessSample:
    """The data records of a sample of a partition and how many of them have a null key.

    Attributes:
        records: data records counted (control records are not).
        keyless: those with a null key.
        start: the offset counting began at (the cleaner checkpoint, else 0).
        exhaustive: every record from ``start`` to the log end was counted (not a sample).
    """

    records: int
    keyless: int
    start: int = 0
    exhaustive: bool = False

    @property
    def mostly_keyless(self) -> bool:
        """Whether more than half of the counted records have no key (False when none were counted)."""
        return self.records > 0 and self.keyless > MOSTLY * self.records

    def describe(self) -> str:
        """``"96 of 100 records sampled have no key"``, ``"all 100 records sampled carry a key"``, or for
        an exhaustive count ``"13 of the 13 records past the cleaner checkpoint (offset 40) have no key"``."""
        if self.exhaustive:
            where = (f"past the cleaner checkpoint (offset {self.start})" if self.start
                     else "of the partition")
            return f"{self.keyless} of the {self.records} records {where} have no key"
        if self.keyless == 0:
            return f"all {self.records} records sampled carry a key"
        return f"{self.keyless} of {self.records} records sampled have no key"


def sample_keyless(partition: Partition, budget_bytes: int | None = SAMPLE_BYTES,
                   reads: LogReads | None = None) -> KeylessSample:
    """Count keyless records among the first ``budget_bytes`` of batches of the dirty data.

    Args:
        partition: the partition.
        budget_bytes: batches read at most (the batch that crosses it is counted whole); None reads
            every batch from the cleaner checkpoint to the log end (an exact count of what a clean
            would delete as keyless, the active segment's included).
        reads: the caller's shared reads of the ``.log`` files (None: each is opened for this count).

    Returns:
        The :class:`KeylessSample` (control batches are not counted; legacy entries are). It is
        ``exhaustive`` when ``budget_bytes`` is None and the count reached the log end.
    """
    records = keyless = read = start = 0
    try:
        start = partition.checkpointed(partition.log_dir.cleaner_checkpoint) or 0
        for seg in _segments_from(partition, start):
            with open_log(seg, reads) as log:
                left = None if budget_bytes is None else budget_bytes - read
                for size, count, missing in iter_key_counts(log, start, budget=left):
                    records += count
                    keyless += missing
                    read += size
                    if budget_bytes is not None and read >= budget_bytes:
                        return KeylessSample(records, keyless, start)
    except (KcompactError, OSError):
        return KeylessSample(records, keyless, start)  # evidence only: what was read so far stands
    return KeylessSample(records, keyless, start, exhaustive=budget_bytes is None)


def count_keyless(partition: Partition) -> KeylessSample:
    """Every record from the cleaner checkpoint to the log end, and how many have no key (exact).

    Args:
        partition: the partition.

    Returns:
        The count (not ``exhaustive`` when data that does not parse ended it early).
    """
    return sample_keyless(partition, None)


def _segments_from(partition: Partition, offset: int) -> list[SegmentFiles]:
    """The segments that may hold ``offset`` or later (the one it falls in, then the rest)."""
    segments = list(partition.segments)
    first = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= offset:
            first = i
    return segments[first:]
