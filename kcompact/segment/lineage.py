"""Leader-epoch lineages and where two of them part: the offset Kafka truncates a follower to.

Why: a replica's ``leader-epoch-checkpoint`` lists ``(epoch, start offset)``: the offsets from each start
to the next were written under that leader epoch. When a replica follows another, Kafka finds where their
logs part by the lineages alone and truncates the follower there (KIP-101, KIP-279): ``kcompact inspect
replicas`` reports that offset, and ``kcompact clean --replica-dirs`` fences its cleaning by it (a copy
whose records from that offset on Kafka truncates never receives what this copy holds above it).

The walk, as Kafka runs it:

* the leader's lineage gains a new epoch at its log end when it becomes leader
  (``Partition.makeLeader`` → ``UnifiedLog.assignEpochStartOffset``), above every epoch either replica knows;
* the follower sends its latest epoch (``lastFetchedEpoch`` of a fetch, or ``OffsetsForLeaderEpoch``);
  the leader answers ``LeaderEpochFileCache.endOffsetFor(epoch, logEndOffset)``: the largest epoch it knows
  at or below the one asked, and the start of its next higher epoch;
* the follower (``AbstractFetcherThread.getOffsetTruncationState``) looks the answered epoch up in its own
  lineage (``UnifiedLog.endOffsetForEpoch``): the same epoch, it truncates to the lower of the two end
  offsets and its log end, and is done; another epoch (it never had the leader's), it truncates to the end
  of its own epoch and asks again with its new latest epoch (``truncateFromEnd`` drops the later entries);
* a follower with no lineage sends no epoch and is cut only at the leader's log end (out of range).

A lineage is what ``LeaderEpochFileCache`` holds once a broker has loaded the log: the checkpoint's entries
assigned in order (``assign``: an entry removes those at or above its epoch or start offset), an epoch above the
latest from each batch recovery walks (``LogSegment.recover``), then cut to the log (``LogLoader.load``:
``truncateFromEnd(log end)``, ``truncateFromStart(log start)``).

Where the two lineages *part* is that truncation offset when it lies below both log ends (at or above
either, one log is only behind the other, not divergent), walked both ways (each replica following the
other), the lower of the two.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "Lineage",
    "assign",
    "end_offset_for",
    "epoch_at",
    "lineage_divergence",
    "loaded_lineage",
    "truncate_from_end",
    "truncate_from_start",
    "truncation_offset",
]

Lineage = Sequence[tuple[int, int]]  # (epoch, start offset), ascending in both
UNDEFINED_EPOCH = -1  # Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH / EpochEndOffset.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1  # EpochEndOffset.UNDEFINED_EPOCH_OFFSET


def assign(lineage: Lineage, epoch: int, start_offset: int) -> tuple[tuple[int, int], ...]:
    """``LeaderEpochFileCache.assign``: append an entry, first removing those that would break the order.

    Args:
        lineage: the entries so far.
        epoch: the new entry's epoch.
        start_offset: its start offset.

    Returns:
        The lineage with the entry (unchanged when the latest entry is that epoch at or below that start).
    """
    if lineage and lineage[-1][0] == epoch and start_offset >= lineage[-1][1]:
        return tuple(lineage)  # isUpdateNeeded: nothing new
    kept = list(lineage)
    while kept and (kept[-1][0] >= epoch or kept[-1][1] >= start_offset):  # maybeTruncateNonMonotonicEntries
        kept.pop()
    return (*kept, (epoch, start_offset))


def truncate_from_end(lineage: Lineage, end_offset: int) -> tuple[tuple[int, int], ...]:
    """``LeaderEpochFileCache.truncateFromEnd``: drop the entries starting at or above ``end_offset``."""
    return tuple(entry for entry in lineage if entry[1] < end_offset)


def truncate_from_start(lineage: Lineage, start_offset: int) -> tuple[tuple[int, int], ...]:
    """``LeaderEpochFileCache.truncateFromStart``: the entries starting at or below ``start_offset`` give way to
    the last of them, moved to start there."""
    below = [entry for entry in lineage if entry[1] <= start_offset]
    rest = tuple(entry for entry in lineage if entry[1] > start_offset)
    return rest if not below else ((below[-1][0], start_offset), *rest)


def loaded_lineage(entries: Iterable[tuple[int, int]], log_start_offset: int, log_end_offset: int,
                   recovered: Iterable[tuple[int, int]] = ()) -> tuple[tuple[int, int], ...]:
    """The lineage a broker holds once it has loaded a log: a checkpoint's entries assigned in order, the epochs
    of the batches recovery walked, then cut to the log as ``LogLoader.load`` cuts it.

    Args:
        entries: ``leader-epoch-checkpoint``'s ``(epoch, start offset)`` lines, in file order.
        log_start_offset: the log's start offset.
        log_end_offset: its end offset, as recovery leaves it.
        recovered: ``(partition leader epoch, base offset)`` of each batch recovery walked, in order
            (``LogSegment.recover`` assigns one above the latest epoch at its base offset).

    Returns:
        The lineage.
    """
    lineage: tuple[tuple[int, int], ...] = ()
    for epoch, start in entries:
        lineage = assign(lineage, epoch, start)
    for epoch, base_offset in recovered:
        if epoch >= 0 and (not lineage or epoch > lineage[-1][0]):
            lineage = assign(lineage, epoch, base_offset)
    return truncate_from_start(truncate_from_end(lineage, log_end_offset), log_start_offset)


def end_offset_for(lineage: Lineage, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
    """``LeaderEpochFileCache.endOffsetFor``: the largest epoch at or below ``requested_epoch`` and where it ends.

    Args:
        lineage: the replica's lineage.
        requested_epoch: the epoch asked for.
        log_end_offset: the replica's log end (the end of its latest epoch).

    Returns:
        ``(epoch, end offset)``; ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` when the epoch is undefined or
        above every epoch the lineage knows. An epoch below every known one is answered with itself and the
        first entry's start.
    """
    if requested_epoch == UNDEFINED_EPOCH:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if lineage and lineage[-1][0] == requested_epoch:
        return requested_epoch, log_end_offset
    epochs = [epoch for epoch, _start in lineage]
    higher = bisect.bisect_right(epochs, requested_epoch)
    if higher == len(lineage):
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if higher == 0:
        return requested_epoch, lineage[0][1]
    return lineage[higher - 1][0], lineage[higher][1]


def truncation_offset(follower: Lineage, follower_end: int, leader: Lineage, leader_end: int) -> int:
    """The log end Kafka leaves a follower at once it has followed ``leader`` (the walk in the module docstring).

    Args:
        follower: the follower's lineage, as loaded (:func:`loaded_lineage`).
        follower_end: its log end.
        leader: the leader's lineage, as loaded.
        leader_end: the leader's log end.

    Returns:
        The offset the follower's log is truncated to (its log end when nothing is truncated).
    """
    new_epoch = max((epoch for epoch, _start in (*follower, *leader)), default=-1) + 1
    leading = assign(leader, new_epoch, leader_end)  # Partition.makeLeader
    lineage, end = truncate_from_end(follower, follower_end), follower_end
    while lineage:
        leader_epoch, leader_offset = end_offset_for(leading, lineage[-1][0], leader_end)
        if leader_epoch == lineage[-1][0] and leader_offset >= end:
            break  # Partition.fetchRecords: no diverging epoch
        own_epoch, own_offset = end_offset_for(lineage, leader_epoch, end)
        if own_offset == UNDEFINED_EPOCH_OFFSET:
            return min(leader_offset, end)
        if own_epoch != leader_epoch:  # an epoch it never had: cut to its own epoch's end, ask again
            end = min(own_offset, end)
            lineage = truncate_from_end(lineage, end)
            continue
        return min(own_offset, leader_offset, end)
    return min(end, leader_end)  # a fetch past the leader's log end: AbstractFetcherThread.fetchOffsetAndTruncate


def lineage_divergence(a: Lineage, a_end: int, b: Lineage, b_end: int) -> int | None:
    """Where two replicas' lineages part: the lower truncation offset of each following the other, when it lies
    below both log ends.

    Args:
        a: one replica's lineage (as in its checkpoint; cut to ``a_end`` here).
        a_end: that replica's log end offset.
        b: the other's.
        b_end: its log end offset.

    Returns:
        The offset, or None when the two agree on every offset both hold (one log is behind the other, or one
        lineage is empty: nothing to compare).
    """
    a, b = loaded_lineage(a, 0, a_end), loaded_lineage(b, 0, b_end)
    if not a or not b:
        return None
    parted = min(truncation_offset(a, a_end, b, b_end), truncation_offset(b, b_end, a, a_end))
    return parted if parted < min(a_end, b_end) else None


def epoch_at(lineage: Lineage, offset: int) -> int | None:
    """The leader epoch ``lineage`` assigns to ``offset`` (None before its first entry).

    Args:
        lineage: ``(epoch, start offset)`` entries, ascending.
        offset: an offset.

    Returns:
        The epoch of the last entry starting at or below ``offset``.
    """
    i = bisect.bisect_right([start for _epoch, start in lineage], offset) - 1
    return lineage[i][0] if i >= 0 else None
