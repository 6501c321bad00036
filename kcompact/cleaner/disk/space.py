"""The disk space a clean needs at its peak and gives back, against the volume's free space.

The order of a round's writes and deletes (``round.steps``: ``run_passes``, then ``commit_clean``; the steps
of ``disk.swap``) fixes its peak:

1. every group's ``.cleaned`` files are written — the ``.log`` and its ``.index``/``.timeindex`` (written
   trimmed to their entries, never preallocated), a ``.txnindex`` when it keeps aborted transactions — and
   all pass the self-check *before the first swap* (a round that fails before it changes nothing);
2. then, group by group, the swap renames (no space) and removes the group's old files right away (a log dir's
   pooled worker leaves their removal to its parent process, a moment later; it pools only where the volume's
   free space is not short, ``logdir.run``);
3. last the cleaner checkpoint is replaced (a new file, one block, renamed over the old one).

So the peak is the sum of every group's output, each file rounded up to the volume's block, while every
source is still held; what the round gives back is what its sources (and the segments below the log start
it deletes) hold on disk less that output. Kafka's own cleaner swaps each group as soon as it is written
(``Cleaner.cleanSegments``, ``LocalLog.replaceSegments``) but keeps the replaced files as ``.deleted`` for
``file.delete.delay.ms``; kcompact checks every output before the partition changes and pays the sum of its
groups for it.

The free space is what the broker may use: it runs as an unprivileged user, so ``statvfs``'s
``f_bavail * f_frsize``, never the blocks a file system keeps for root (``f_bfree`` beyond it: ext4's 5 % by
default), though kcompact may run as root. Where the two differ the space line says so (:meth:`SpaceNeed.line`):
a clean measured against root's view could leave the broker a volume it cannot write. Only a moment a clean
itself undoes uses the reserve: ``disk.scratch`` copies a group in beside its old segments through it, as root,
rather than evacuate the group (what the group gives back is then free again, to the broker too).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from kcompact.cleaner.disk.swap import INDEX_KINDS
from kcompact.segment.files import file_access
from kcompact.segment.names import segment_file_name
from kcompact.segment.partition import SegmentFiles
from kcompact.text import size_text
from kcompact.value import frozen

_ST_BLOCK = 512  # st_blocks counts 512-byte units on every POSIX system
_OFFSET_ENTRY_BYTES = 8  # OffsetIndex: relative offset, position
_TIME_ENTRY_BYTES = 12  # TimeIndex: timestamp, relative offset


@frozen
class SpaceNeed:
    """What one clean asks of the volume (bytes as allocated on it, whole blocks)."""

    peak_bytes: int  # free space needed while every .cleaned file is written and no source is gone yet
    gives_back_bytes: int  # freed once the clean is done (its sources and deleted segments, less its output)

    def fits(self, free_bytes: int) -> bool:
        """Whether the clean fits in ``free_bytes``."""
        return self.peak_bytes <= free_bytes

    def line(self, free_bytes: int, reserved_bytes: int = 0) -> str:
        """``needs 1.0 MiB free at peak, gives back 26.0 MiB; 0 B free`` (and root's reserve where there is one)."""
        return (f"needs {size_text(self.peak_bytes)} free at peak, gives back {size_text(self.gives_back_bytes)}; "
                f"{size_text(free_bytes)} free{reserve_text(reserved_bytes)}")


def reserve_text(reserved_bytes: int) -> str:
    """What follows a free space where the volume keeps blocks for root (empty where it keeps none)."""
    if not reserved_bytes:
        return ""
    return (f" to the broker (f_bavail; {size_text(reserved_bytes)} more is root's reserve, which a broker not "
            "run as root cannot use: not counted)")


@frozen
class Volume:
    """The free space and block size of the file system holding a path."""

    free_bytes: int  # to an unprivileged writer, the broker (f_bavail)
    block_bytes: int
    reserved_bytes: int = 0  # free to root only (f_bfree beyond f_bavail)

    def allocated(self, size_in_bytes: int) -> int:
        """What a new file of ``size_in_bytes`` takes on this volume: whole blocks."""
        return -(-size_in_bytes // self.block_bytes) * self.block_bytes


def volume_of(path: Path) -> Volume:
    """The volume holding ``path``, as ``statvfs`` sees it now.

    Raises:
        FileAccessError: ``path`` cannot be queried.
    """
    with file_access(path, "query the free space of"):
        st = os.statvfs(path)
    block = st.f_frsize or st.f_bsize or 4096
    return Volume(st.f_bavail * block, block, max(st.f_bfree - st.f_bavail, 0) * block)


def held_bytes(paths: Iterable[Path]) -> int:
    """What these files hold on disk (``st_blocks``), the ones that exist."""
    total = 0
    for path in paths:
        try:
            total += path.stat().st_blocks * _ST_BLOCK
        except FileNotFoundError:
            continue
    return total


def segment_paths(directory: Path, bases: Iterable[int], *, snapshots: bool = True) -> list[Path]:
    """The files of the segments at ``bases``: ``.log``, the indexes, and the producer snapshot named
    after each (which goes with it, as ``swap._mark_deleted`` and retention delete it)."""
    kinds = (*INDEX_KINDS, "snapshot") if snapshots else INDEX_KINDS
    return [directory / segment_file_name(base, kind) for base in bases for kind in kinds]


def round_need(
    directory: Path, groups: Sequence[tuple[Sequence[int], Sequence[int]]], volume: Volume,
    *, deleted: Sequence[int] = (), checkpoint: bool = True,
) -> SpaceNeed:
    """The peak and the give-back of a round (the order in the module docstring).

    Args:
        directory: the partition directory, its sources still in place.
        groups: per group, its source segments' base offsets and the sizes of its ``.cleaned`` files.
        volume: the partition's volume.
        deleted: base offsets of segments the round deletes whole (below the log start, retention).
        checkpoint: the round replaces the cleaner checkpoint (one new block at its end).

    Returns:
        The :class:`SpaceNeed`.
    """
    output = sum(volume.allocated(size) for _bases, sizes in groups for size in sizes)
    sources = sum(held_bytes(segment_paths(directory, bases[1:]))
                  + held_bytes(segment_paths(directory, bases[:1], snapshots=False))
                  for bases, _sizes in groups)
    freed = sources + held_bytes(segment_paths(directory, deleted))
    tail = volume.block_bytes if checkpoint else 0
    return SpaceNeed(max(output, output - sources + tail), freed - output)


def output_bound(segments: Sequence[SegmentFiles], groups: Sequence[Sequence[int]], index_interval_bytes: int,
                 volume: Volume) -> int:
    """About the most a round's ``.cleaned`` files can take: every source record kept, and an eighth more for
    the batches a clean rebuilds larger than they were (recompressed, wider timestamp deltas once a delete
    horizon is set: Kafka's ``MemoryRecords.filterTo`` writes them anyway), an index entry per
    ``index.interval.bytes`` (``LogSegment.append``). The round measures its output where this does not fit.

    Args:
        segments: the partition's segments as the round's listing saw them (``segment.partition``: their sizes
            and which have a ``.txnindex``; the partition is locked, and its commit checks them again).
        groups: per group, its source segments' base offsets (those the listing lacks count as empty).
        index_interval_bytes: the topic's ``index.interval.bytes``.
        volume: the partition's volume.

    Returns:
        Bytes as allocated on ``volume``.
    """
    by_base = {segment.base_offset: segment for segment in segments}
    total = 0
    for bases in groups:
        listed = [by_base[base] for base in bases if base in by_base]
        logs = sum(segment.size_in_bytes for segment in listed)
        txn = sum(_size(segment.txn_index_path) for segment in listed if segment.txn_index_path is not None)
        total += _group_bound(logs, len(bases), txn, index_interval_bytes, volume)
    return total


def segments_output_bound(segments: Sequence[SegmentFiles], index_interval_bytes: int, volume: Volume) -> int:
    """:func:`output_bound` of one group of ``segments`` as a listing saw them (``segment.partition``: their
    sizes and which have a ``.txnindex``), with no ``stat`` of a file the listing did not show.

    Returns:
        Bytes as allocated on ``volume``.
    """
    logs = sum(segment.size_in_bytes for segment in segments)
    txn = sum(_size(segment.txn_index_path) for segment in segments if segment.txn_index_path is not None)
    return _group_bound(logs, len(segments), txn, index_interval_bytes, volume)


def _group_bound(logs: int, segments: int, txn: int, index_interval_bytes: int, volume: Volume) -> int:
    """One group's bound (:func:`output_bound`) from its ``.log`` and ``.txnindex`` bytes."""
    entries = logs // max(index_interval_bytes, 1) + segments
    return (volume.allocated(logs + logs // 8) + volume.allocated(entries * _OFFSET_ENTRY_BYTES)
            + volume.allocated(entries * _TIME_ENTRY_BYTES) + volume.allocated(txn))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def no_space_line(part_dir: Path, need: SpaceNeed, free_bytes: int, reserved_bytes: int = 0) -> str:
    """The one line of a clean refused for space, with its numbers and the ways out."""
    short = need.peak_bytes - free_bytes
    return (f"{part_dir}: not cleaned: {need.line(free_bytes, reserved_bytes)}; ways out: free {size_text(short)} "
            f"more on its volume, or grow it, and run it again (a log dir's clean first frees its partitions' "
            f"crashed-clean leftovers and segments below the log start, then cleans those that fit first); nothing "
            f"was changed")
