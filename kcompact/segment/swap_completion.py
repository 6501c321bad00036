"""What Kafka's log loader does with an interrupted swap's leftovers: which files it deletes, which it renames.

Why: a clean or split interrupted between its renames (``LocalLog.replaceSegments``) leaves ``.cleaned``,
``.swap`` and ``.deleted`` files beside the segments. A broker starting on the directory settles them before
it loads a segment (``LogLoader.load``), and the log it then serves is the settled one: a ``.log.swap`` that
replaces segments whose records end higher gives a lower log end. ``kcompact clean`` settles its own
partition's leftovers the same way (``cleaner.disk.swap.recover_interrupted_swaps``, which acts on this plan);
``clean --replica-dirs`` reads another broker's copy as that broker would load it, without changing it
(:func:`loaded_segments`).

Kafka's passes, in its order (``LogLoader.load``, ``LogLoader.removeTempFilesAndCollectSwapFiles``):

1. delete every ``.deleted`` file (KRaft's ``.checkpoint.deleted`` snapshots excepted); delete every ``.swap``
   at or above the lowest ``.cleaned`` base offset (a split that never finished), then every ``.cleaned``;
2. delete every other file named with an offset in ``[lowest .log.swap base, highest .log.swap next offset)``
   (the segments the swap replaces; the next offset is ``LogSegment.readNextOffset`` of the swap);
3. rename every remaining ``.swap`` to its final name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from kcompact.errors import TruncatedDataError
from kcompact.segment.log_file import LogFile
from kcompact.segment.names import SegmentFileName, parse_segment_file_name, segment_file_name
from kcompact.segment.partition import Partition, SegmentFiles
from kcompact.value import frozen

__all__ = [
    "SettlingStep",
    "SwapCompletion",
    "loaded_segments",
    "orphaned_indexes",
    "plan_swap_completion",
    "read_next_offset",
    "settling_steps",
]

_DELETED_SUFFIX = ".deleted"
_KRAFT_DELETED_SUFFIX = ".checkpoint.deleted"  # KRaft snapshots: KafkaMetadataLog's business
_INDEX_ONLY_KINDS = ("index", "timeindex", "txnindex")  # Kafka's LogFileUtils.isIndexFile
_SETTLED_ENDINGS = (_DELETED_SUFFIX, ".cleaned", ".swap")  # what plan_swap_completion's passes act on


@frozen
class SwapCompletion:
    """Kafka's settling of one directory's leftovers, in its order.

    Attributes:
        deleted: ``(file, what to say)`` for each file deleted, in Kafka's order.
        renamed: ``(.swap file, final name)`` for each swap completed, the ``.log.swap`` files first.
    """

    deleted: tuple[tuple[Path, str], ...] = ()
    renamed: tuple[tuple[Path, Path], ...] = ()

    @property
    def changes(self) -> bool:
        return bool(self.deleted or self.renamed)


def plan_swap_completion(files: Sequence[Path]) -> SwapCompletion:
    """What Kafka's loader does with ``files`` (the module docstring's passes); nothing is changed.

    Args:
        files: every file of one partition directory.

    Returns:
        The files it deletes and the swaps it renames.

    Raises:
        FileAccessError: a ``.log.swap`` cannot be read.
        CorruptDataError: a ``.log.swap``'s framing does not parse.
    """
    named = [(p, parse_segment_file_name(p.name)) for p in sorted(files)]
    deleted = [(p, f"delete leftover {p.name}") for p, _n in named
               if p.name.endswith(_DELETED_SUFFIX) and not p.name.endswith(_KRAFT_DELETED_SUFFIX)]
    cleaned = [p for p, n in named if n is not None and n.temp_suffix == "cleaned"]
    min_cleaned = min((n.base_offset for _p, n in named if n is not None and n.temp_suffix == "cleaned"),
                      default=None)
    valid: list[tuple[Path, SegmentFileName]] = []
    for p, n in named:
        if n is None or n.temp_suffix != "swap":
            continue
        if min_cleaned is not None and n.base_offset >= min_cleaned:
            deleted.append((p, f"delete {p.name} (its swap never completed)"))
        else:
            valid.append((p, n))
    deleted += [(p, f"delete unfinished {p.name}") for p in cleaned]
    log_swaps = [(p, n) for p, n in valid if n.kind == "log"]
    if log_swaps:
        low = min(n.base_offset for _p, n in log_swaps)
        high = max(read_next_offset(p, n.base_offset) for p, n in log_swaps)
        deleted += [(p, f"delete {p.name} (replaced by the interrupted swap)") for p, n in named
                    if _replaced(n, low, high)]
    # Logs first: a recovery killed between two renames then leaves no .log.swap whose range would take
    # the indexes already renamed into place (Kafka renames in directory order and could lose one).
    ordered = sorted(valid, key=lambda item: (item[1].kind != "log", item[0].name))
    renamed = tuple((p, p.parent / segment_file_name(n.base_offset, n.kind)) for p, n in ordered)
    return SwapCompletion(tuple(deleted), renamed)


@frozen
class SettlingStep:
    """One step of Kafka's loader settling a partition directory: a delete, or a ``.swap`` renamed into place."""

    what: str  # in words a report prints
    path: Path
    rename_to: Path | None = None  # None: ``path`` is deleted


def settling_steps(directory: Path) -> list[SettlingStep]:
    """Every step Kafka's loader takes to settle ``directory``'s leftovers, in its order: :func:`plan_swap_completion`'s
    deletes and renames, then the index files it would find orphaned (``loadSegmentFiles``); nothing is changed.

    Raises:
        OSError: the directory cannot be listed.
        CorruptDataError: a ``.log.swap`` to be completed does not parse.
    """
    names = sorted(_file_names(directory))
    # the passes act on .deleted, .cleaned and .swap files alone: a directory without one (every round's start
    # but a crashed one's) is planned with no path built
    settles = any(name.endswith(_SETTLED_ENDINGS) for name in names)
    plan = plan_swap_completion([directory / name for name in names]) if settles else SwapCompletion()
    steps = [SettlingStep(what, path) for path, what in plan.deleted]
    steps += [SettlingStep(f"rename {swap.name} to {final.name}", swap, final) for swap, final in plan.renamed]
    renamed = [(swap, name) for swap, _final in plan.renamed
               if (name := parse_segment_file_name(swap.name)) is not None]
    orphans = orphaned_indexes(directory, renamed=renamed, deleted=[path for path, _what in plan.deleted],
                               listed=names)
    return steps + [SettlingStep(f"delete orphaned {p.name} (no {p.stem}.log)", p) for p in orphans]


def orphaned_indexes(directory: Path, *, renamed: Sequence[tuple[Path, SegmentFileName]] = (),
                     deleted: Sequence[Path] = (), listed: Sequence[str] | None = None) -> list[Path]:
    """Index files whose ``<base>.log`` does not exist: Kafka's loader deletes them (``loadSegmentFiles``).

    Args:
        directory: the partition directory.
        renamed: ``.swap`` files about to be renamed into place (seen under their final name).
        deleted: files about to be deleted (not seen).
        listed: the names of its files as the caller just listed them (None: listed here).

    Returns:
        The orphaned ``.index``/``.timeindex``/``.txnindex`` files, by name.
    """
    gone = {p.name for p in deleted}
    names = {name for name in (_file_names(directory) if listed is None else listed) if name not in gone}
    names |= {segment_file_name(n.base_offset, n.kind) for _p, n in renamed}
    out = []
    for name in sorted(names):
        n = parse_segment_file_name(name)
        if (n is not None and n.temp_suffix is None and n.kind in _INDEX_ONLY_KINDS
                and segment_file_name(n.base_offset, "log") not in names):
            out.append(directory / name)
    return out


def _file_names(directory: Path) -> list[str]:
    """The names of the files of ``directory`` (symbolic links followed, as ``Path.is_file``): the listing's
    file types decide, with no ``stat`` for each (a log dir of thousands of partitions lists each one several
    times)."""
    with os.scandir(directory) as listing:
        return [entry.name for entry in listing if entry.is_file()]


def _replaced(name: SegmentFileName | None, low: int, high: int) -> bool:
    """Kafka's pass 2: a non-temporary file named with an offset in ``[low, high)``.

    KRaft's ``<offset>-<epoch>.checkpoint`` names fail Kafka's offset parse, so they are never included.
    """
    return (
        name is not None and name.temp_suffix is None and name.kind != "checkpoint"
        and low <= name.base_offset < high
    )


def read_next_offset(path: Path, base_offset: int) -> int:
    """Kafka's ``LogSegment.readNextOffset``: the offset after the last whole batch (a partial tail is ignored).

    Args:
        path: the segment's ``.log`` (or ``.log.swap``).
        base_offset: its base offset (the answer when it holds no batch).

    Returns:
        The next offset.

    Raises:
        FileAccessError: the file cannot be read.
        CorruptDataError: a batch's framing does not parse.
    """
    last = base_offset - 1
    with LogFile(path) as log:
        try:
            for summary in log.summaries():
                last = summary.last_offset
        except TruncatedDataError:
            pass  # FileLogInputStream stops at an entry that runs past the end of the file
    return last + 1


def loaded_segments(partition: Partition) -> tuple[tuple[SegmentFiles, ...], SwapCompletion]:
    """The segments a broker loading ``partition`` would see once its leftovers are settled, read in place:
    a completed swap's segment is its ``.log.swap`` file (nothing is renamed or deleted here).

    Args:
        partition: the partition directory (a copy from another broker, typically).

    Returns:
        The segments by base offset (only their ``.log`` paths, sizes and times; no indexes), and the plan
        (no changes: ``partition.segments`` as they are).

    Raises:
        FileAccessError: a file cannot be read.
        CorruptDataError: a ``.log.swap``'s framing does not parse.
    """
    if not partition.leftovers:
        return partition.segments, SwapCompletion()
    plan = plan_swap_completion([*partition.leftovers, *(s.log_path for s in partition.segments)])
    gone = {p for p, _what in plan.deleted}
    logs = {s.base_offset: s for s in partition.segments if s.log_path not in gone}
    for swap, final in plan.renamed:
        name = parse_segment_file_name(final.name)
        if name is not None and name.kind == "log":
            st = swap.stat()
            logs[name.base_offset] = SegmentFiles(name.base_offset, swap, st.st_size, st.st_mtime_ns,
                                                  None, None, None)
    return tuple(logs[base] for base in sorted(logs)), plan
