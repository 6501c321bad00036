"""What a broker recovering a partition's log keeps of it: the end of its valid prefix.

Why: ``kcompact clean --replica-dirs`` fences its cleaning at the log end of the partition's other
copies. A copy's log end read from its last batch header is the offset a broker *would* resume from if
every byte before it were sound; a broker restarting on that copy after an unclean shutdown first recovers
it (``LogLoader.recoverLog``, ``LogSegment.recover``) and truncates at the first batch that fails its
checks, then fetches from there. The fence must not sit above that offset: a tombstone between the two
would be removed here while the follower, after its restart, still needs it.

Kafka's recovery, as modelled here:

* an interrupted swap's leftovers are settled first, read in place (``segment.swap_completion``,
  ``LogLoader.load``): a ``.log.swap`` replaces the segments it covers, which may end the log lower;
* it walks every segment from the one holding the partition's recovery point
  (``recovery-point-offset-checkpoint`` of the log dir; no entry: the whole log) to the active segment,
  batch by batch (``LogSegment.recover``);
* each batch must frame (a size of at least the legacy minimum, magic 0..2, wholly inside the file) and
  pass ``RecordBatch.ensureValid`` (its CRC; a v2 batch at least its header long); the first one that does
  not ends the segment's valid bytes there, a partial batch at the end likewise;
* a segment truncated that way is the last one kept (``LogLoader.recoverLog`` deletes every later segment),
  so the log end is the offset after its last valid batch;
* a segment with no valid batch at all (its first batch already fails) ends nothing: the log end is that
  of the segments before it (walked the same way), the lowest offset the broker may resume from.

A clean-shutdown marker makes Kafka skip recovery; the copy's marker is not trusted here (a copy taken from
a running or crashed broker has none that counts), so the answer can only be lower than the header's: a
lower fence keeps more tombstones, never fewer.
"""

from __future__ import annotations

from pathlib import Path

from kcompact.errors import CorruptDataError, KcompactError, UnsupportedFormatError
from kcompact.records.batch import iter_batches
from kcompact.segment.partition import RECOVERY_POINT_CHECKPOINT, Partition, SegmentFiles
from kcompact.segment.swap_completion import loaded_segments
from kcompact.value import frozen

__all__ = ["RecoveredEnd", "recovered_log_end", "segment_valid_prefix"]


@frozen
class ValidPrefix:
    """One segment walked as ``LogSegment.recover`` walks it."""

    next_offset: int | None  # offset after its last valid batch; None: no valid batch
    valid_bytes: int  # where its valid batches end
    size_in_bytes: int  # the file's size; above ``valid_bytes``: recovery truncates it
    epochs: tuple[tuple[int, int], ...] = ()  # (partition leader epoch, base offset) of its valid v2 batches

    @property
    def truncated(self) -> bool:
        return self.valid_bytes < self.size_in_bytes


@frozen
class RecoveredEnd:
    """A log's end as a broker's recovery leaves it.

    Attributes:
        log_end_offset: the offset after the last batch recovery keeps.
        stopped_at: the segment file and byte position where recovery stops, when it truncates
            (None: every batch walked is valid).
        completed_swaps: the ``.log.swap`` files of an interrupted swap, which ``LogLoader.load`` completes
            before it recovers (``segment.swap_completion``): their segments replace those they cover.
        swapped_end: the log end is that of a segment completed from its ``.log.swap``.
        recovered_epochs: ``(partition leader epoch, base offset)`` of every valid v2 batch recovery walked, in
            order: ``LogSegment.recover`` assigns an epoch above the cache's latest at its batch's base offset
            (``segment.lineage.loaded_lineage`` applies them).
    """

    log_end_offset: int
    stopped_at: tuple[Path, int] | None = None
    completed_swaps: tuple[Path, ...] = ()  # the ``.log.swap`` files the loader completes first
    swapped_end: bool = False  # the log end is that of a segment completed from its ``.log.swap``
    recovered_epochs: tuple[tuple[int, int], ...] = ()  # (epoch, base offset) of each batch recovery walked


def segment_valid_prefix(segment: SegmentFiles) -> ValidPrefix:
    """Walk one segment's batches until the first that fails its framing or its CRC.

    Args:
        segment: the segment.

    Returns:
        Where its valid batches end, in offsets and in bytes.

    Raises:
        FileAccessError: the file cannot be read.
    """
    next_offset: int | None = None
    valid_bytes = 0
    epochs: list[tuple[int, int]] = []
    with segment.open() as log:
        size = log.size_in_bytes
        try:
            for batch in iter_batches(log.buffer, 0, size):
                if not batch.crc_valid():  # RecordBatch.ensureValid
                    break
                next_offset = batch.last_offset + 1
                valid_bytes = batch.position + batch.size_in_bytes
                if batch.partition_leader_epoch >= 0:  # legacy entries have none (-1)
                    epochs.append((batch.partition_leader_epoch, batch.base_offset))
        except (CorruptDataError, UnsupportedFormatError):
            pass  # framing refused: recovery stops at the end of the last valid batch
    return ValidPrefix(next_offset, valid_bytes, size, tuple(epochs))


def recovered_log_end(partition: Partition) -> RecoveredEnd:
    """The log end offset a broker keeps after loading and recovering ``partition`` (see the module
    docstring): an interrupted swap completed first, as ``LogLoader.load`` completes it.

    Args:
        partition: the partition (a copy of it from another broker, typically).

    Returns:
        The recovered log end, where recovery stops when it truncates, and the swaps completed.

    Raises:
        FileAccessError: a segment cannot be read.
        CorruptDataError: a ``.log.swap`` to be completed does not parse.
    """
    segments, completion = loaded_segments(partition)
    swaps = tuple(swap for swap, final in completion.renamed if final.suffix == ".log")
    if not segments:
        return RecoveredEnd(partition.log_start_offset(), completed_swaps=swaps)
    recovery_point = _recovery_point(partition)
    first = max((i for i, s in enumerate(segments) if s.base_offset <= recovery_point), default=0)
    prefix: ValidPrefix | None = None
    epochs: list[tuple[int, int]] = []
    for index in range(first, len(segments)):
        prefix = segment_valid_prefix(segments[index])
        epochs += prefix.epochs
        if prefix.truncated:
            stopped = (segments[index].log_path, prefix.valid_bytes)
            if prefix.next_offset is not None:
                return RecoveredEnd(prefix.next_offset, stopped, swaps, segments[index].log_path in swaps,
                                    tuple(epochs))
            return RecoveredEnd(_end_before(segments, index), stopped, swaps, recovered_epochs=tuple(epochs))
    # every segment walked is whole: the active one ends the log (at its base when it is empty)
    end = prefix.next_offset if prefix is not None else None
    return RecoveredEnd(segments[-1].base_offset if end is None else end, None, swaps,
                        segments[-1].log_path in swaps, tuple(epochs))


def _end_before(segments: tuple[SegmentFiles, ...], index: int) -> int:
    """The log end when segment ``index`` keeps nothing: the valid end of the segments before it."""
    for earlier in reversed(segments[:index]):
        prefix = segment_valid_prefix(earlier)
        if prefix.next_offset is not None:
            return prefix.next_offset
    return segments[0].base_offset


def _recovery_point(partition: Partition) -> int:
    """The partition's recovery point (0, the whole log, when its log dir has none or it is unreadable)."""
    try:
        entry = partition.checkpointed(partition.path.parent / RECOVERY_POINT_CHECKPOINT)
    except KcompactError:
        return 0
    return 0 if entry is None else entry
