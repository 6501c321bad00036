"""How many of a partition's records carry no key: evidence about a topic whose policy is not known.

Why: a compacted topic's records all carry keys (a broker refuses a keyless record on produce to one,
and its cleaner deletes any it meets). A partition whose data is mostly keyless is therefore almost
certainly a ``delete`` topic, and compacting it would delete those records. ``clean`` uses this when
it decides about a partition whose ``cleanup.policy`` no source sets: to say so when it skips one,
and to refuse ``--assume-compact`` on one.

Only a sample is read — the first :data:`SAMPLE_BYTES` of batches from the cleaner checkpoint (else
the log start) — so a log dir of thousands of partitions costs little. The sample is evidence, not a
check: data that does not parse or cannot be read ends the sample where it stands.
"""

from __future__ import annotations

from dataclasses import dataclass

from kcompact.cleaner.mapping import batch_keys
from kcompact.errors import KcompactError
from kcompact.segment.partition import Partition, SegmentFiles

SAMPLE_BYTES = 256 * 1024  # batches read at most per partition (at least one batch)
MOSTLY = 0.5  # a share of keyless records above this is "mostly keyless"


@dataclass(frozen=True, slots=True)
class KeylessSample:
    """The data records of a sample of a partition and how many of them have a null key."""

    records: int
    keyless: int

    @property
    def mostly_keyless(self) -> bool:
        """Whether more than half of the sampled records have no key (False for an empty sample)."""
        return self.records > 0 and self.keyless > MOSTLY * self.records

    def describe(self) -> str:
        """``"96 of 100 records sampled have no key"``, or ``"all 100 records sampled carry a key"``."""
        if self.keyless == 0:
            return f"all {self.records} records sampled carry a key"
        return f"{self.keyless} of {self.records} records sampled have no key"


def sample_keyless(partition: Partition, budget_bytes: int = SAMPLE_BYTES) -> KeylessSample:
    """Count keyless records among the first ``budget_bytes`` of batches of the dirty data.

    Args:
        partition: the partition.
        budget_bytes: batches read at most (the batch that crosses it is counted whole).

    Returns:
        The :class:`KeylessSample` (control batches are not counted; legacy entries are).
    """
    records = keyless = read = 0
    try:
        start = partition.checkpointed(partition.log_dir.cleaner_checkpoint) or 0
        for seg in _segments_from(partition, start):
            with seg.open() as log:
                for batch in log.iter_batches():
                    if batch.last_offset < start or batch.is_control:
                        continue
                    _offsets, keys = batch_keys(batch, log)
                    records += len(keys)
                    keyless += keys.count(None)
                    read += batch.size_in_bytes
                    if read >= budget_bytes:
                        return KeylessSample(records, keyless)
    except (KcompactError, OSError):
        pass  # evidence only: what was read so far stands
    return KeylessSample(records, keyless)


def _segments_from(partition: Partition, offset: int) -> list[SegmentFiles]:
    """The segments that may hold ``offset`` or later (the one it falls in, then the rest)."""
    segments = list(partition.segments)
    first = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= offset:
            first = i
    return segments[first:]
