"""The model of one partition directory and the log dir around it (``LogManager``, ``LogLoader.load``).

``open_partition(path)`` lists the directory once and sorts every file into what Kafka's loader would see:
live segments (``<base>.log`` with their indexes), leftovers of an interrupted clean or split
(``.cleaned``, ``.swap``, ``.deleted``), orphaned indexes, producer snapshots, the partition's metadata
files, and strays Kafka would not load. It reads nothing but names and sizes; offsets that need the log's
contents (the log end offset) are computed on request from batch headers only.

A partition directory lives in a *log dir* (one entry of ``log.dirs``), whose top-level checkpoint files
(``cleaner-offset-checkpoint``, ``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``) hold one line per partition; :class:`LogDirFiles` names them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import field
from pathlib import Path

from kcompact.errors import KcompactError
from kcompact.segment.checkpoint import checkpoint_entry
from kcompact.segment.files import file_access
from kcompact.segment.log_file import LogFile
from kcompact.segment.log_reads import LogReads, open_log
from kcompact.segment.names import (
    PartitionDirName,
    parse_partition_dir_name,
    parse_segment_file_name,
)
from kcompact.value import frozen

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
META_PROPERTIES = "meta.properties"
METADATA_TOPIC = "__cluster_metadata"

# Files at the top of a log dir and never in a partition directory (``LogManager``): what makes a log dir.
LOG_DIR_FILES = (META_PROPERTIES, CLEANER_CHECKPOINT, REPLICATION_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                 LOG_START_CHECKPOINT)

# Files of a partition directory that are neither segments nor leftovers, and that Kafka expects.
KNOWN_PARTITION_FILES = frozenset({"leader-epoch-checkpoint", "partition.metadata", "quorum-state"})


@frozen
class LogDirFiles:
    """The top-level files of one log dir that concern the partitions in it."""

    path: Path

    @property
    def cleaner_checkpoint(self) -> Path:
        return self.path / CLEANER_CHECKPOINT

    @property
    def replication_checkpoint(self) -> Path:
        return self.path / REPLICATION_CHECKPOINT

    @property
    def log_start_checkpoint(self) -> Path:
        return self.path / LOG_START_CHECKPOINT


@frozen
class SegmentFiles:
    """One live segment: ``<base>.log`` and whichever of its index files exist."""

    base_offset: int
    log_path: Path
    size_in_bytes: int
    mtime_ns: int
    index_path: Path | None
    time_index_path: Path | None
    txn_index_path: Path | None

    @property
    def mtime_ms(self) -> int:
        return self.mtime_ns // 1_000_000

    def open(self) -> LogFile:
        """Open the ``.log`` read-only (use as a context manager)."""
        return LogFile(self.log_path)


@frozen
class Partition:
    """What is on disk for one partition, sorted the way Kafka's loader sorts it."""

    path: Path
    name: PartitionDirName
    segments: tuple[SegmentFiles, ...]
    leftovers: tuple[Path, ...]  # *.cleaned, *.swap, *.deleted
    orphan_indexes: tuple[Path, ...]  # index files whose .log is missing
    snapshots: tuple[Path, ...]  # <offset>.snapshot producer-state snapshots
    strays: tuple[Path, ...]  # files Kafka would not expect here
    # leader-epoch-checkpoint, partition.metadata, …
    other_files: tuple[Path, ...] = field(default=())

    @property
    def topic(self) -> str:
        return self.name.topic

    @property
    def partition(self) -> int:
        return self.name.partition

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.name.topic, self.name.partition)

    @property
    def log_dir(self) -> LogDirFiles:
        return LogDirFiles(self.path.parent)

    @property
    def active_segment(self) -> SegmentFiles | None:
        return self.segments[-1] if self.segments else None

    @property
    def is_metadata_log(self) -> bool:
        return self.name.topic == METADATA_TOPIC

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size_in_bytes for s in self.segments)

    def checkpointed(self, checkpoint: Path) -> int | None:
        """This partition's entry in one of the log dir's offset checkpoint files, if any."""
        return checkpoint_entry(checkpoint, self.topic_partition)

    def log_start_offset(self) -> int:
        """Kafka's logStartOffset: max(log-start-offset-checkpoint entry, first segment's base)."""
        first_base = self.segments[0].base_offset if self.segments else 0
        entry = self.checkpointed(self.log_dir.log_start_checkpoint)
        return max(first_base, entry) if entry is not None else first_base

    def log_end_offset(self, reads: LogReads | None = None) -> int:
        """Offset after the last batch of the last segment (its base when it is empty).

        Args:
            reads: a report's shared reads of the ``.log`` files (None: the segment is opened for this).
        """
        last = self.active_segment
        if last is None:
            return self.log_start_offset()
        end = segment_next_offset(last, reads)
        return last.base_offset if end is None else end


def segment_next_offset(segment: SegmentFiles, reads: LogReads | None = None) -> int | None:
    """Offset after the last batch of ``segment``, or None when it holds no batch."""
    if segment.size_in_bytes == 0:
        return None
    with open_log(segment, reads) as log:
        last = log.last_summary()
    return None if last is None else last.last_offset + 1


def open_partition(path: str | os.PathLike[str]) -> Partition:
    """List a partition directory and classify its files.

    Args:
        path: the partition directory (``<topic>-<partition>``, possibly ``…-delete``/``-future``/``-stray``).

    Returns:
        The :class:`Partition`; nothing is read but names and sizes.

    Raises:
        KcompactError: the path is not a directory or its name is not a partition name.
        FileAccessError: the directory cannot be listed (permissions, an I/O error).
    """
    directory = named_path(path)
    if not directory.is_dir():
        raise KcompactError(f"{directory}: not a partition directory (no such directory)")
    name = parse_partition_dir_name(directory.name)
    if name is None:
        raise KcompactError(
            f"{directory}: not a partition directory; expected a name like <topic>-<partition>"
        )
    logs: dict[int, Path] = {}
    indexes: dict[tuple[int, str], Path] = {}
    leftovers: list[Path] = []
    snapshots: list[Path] = []
    strays: list[Path] = []
    others: list[Path] = []
    with file_access(directory, "list"):
        with os.scandir(directory) as listing:  # is_file() from the listing's file types: no stat each
            entries = sorted(listing, key=lambda e: e.name)
        _refuse_log_dir(directory, entries)
        for entry in entries:
            _classify(directory / entry.name, entry.name, entry.is_file, logs, indexes, leftovers,
                      snapshots, strays, others)
        segments = tuple(_segment(base, logs[base], indexes) for base in sorted(logs))
    orphans = tuple(sorted(p for (base, _kind), p in indexes.items() if base not in logs))
    return Partition(
        path=directory,
        name=name,
        segments=segments,
        leftovers=tuple(leftovers),
        orphan_indexes=orphans,
        snapshots=tuple(snapshots),
        strays=tuple(strays),
        other_files=tuple(others),
    )


def refuse_log_dir(path: str | os.PathLike[str]) -> None:
    """Refuse a directory named like a partition that is a log dir by what it holds (``kafka-logs-1``).

    Raises:
        KcompactError: naming what it holds.
        FileAccessError: it cannot be listed.
    """
    directory = named_path(path)
    with file_access(directory, "list"), os.scandir(directory) as listing:
        _refuse_log_dir(directory, list(listing))


def _refuse_log_dir(directory: Path, entries: list[os.DirEntry[str]]) -> None:
    """A log dir named like a partition (``kafka-logs-1``) is no partition (:func:`is_log_dir_listing`)."""
    dirs = [entry.name for entry in entries if entry.is_dir()]
    files = [entry.name for entry in entries if not entry.is_dir()]
    if is_log_dir_listing(files, dirs):
        held = next((name for name in files if name in LOG_DIR_FILES), None)
        what = held if held is not None else next(n for n in dirs if parse_partition_dir_name(n) is not None)
        raise KcompactError(f"{directory}: a log dir (it holds {what}), not a partition directory; expected "
                            "one of its <topic>-<partition> directories")


def _classify(
    entry: Path,
    name: str,
    is_file: Callable[[], bool],
    logs: dict[int, Path],
    indexes: dict[tuple[int, str], Path],
    leftovers: list[Path],
    snapshots: list[Path],
    strays: list[Path],
    others: list[Path],
) -> None:
    parsed = parse_segment_file_name(name)
    if parsed is None or not is_file():
        (others if name in KNOWN_PARTITION_FILES else strays).append(entry)
    elif parsed.temp_suffix is not None:
        leftovers.append(entry)
    elif parsed.kind == "log":
        logs[parsed.base_offset] = entry
    elif parsed.kind in ("index", "timeindex", "txnindex"):
        indexes[(parsed.base_offset, parsed.kind)] = entry
    elif parsed.kind == "snapshot":
        snapshots.append(entry)
    else:  # KRaft snapshot checkpoints and other recognised kinds
        others.append(entry)


def _segment(base: int, log_path: Path, indexes: dict[tuple[int, str], Path]) -> SegmentFiles:
    st = os.stat(log_path)
    return SegmentFiles(
        base_offset=base,
        log_path=log_path,
        size_in_bytes=st.st_size,
        mtime_ns=st.st_mtime_ns,
        index_path=indexes.get((base, "index")),
        time_index_path=indexes.get((base, "timeindex")),
        txn_index_path=indexes.get((base, "txnindex")),
    )


def holds_log_dir_files(path: str | os.PathLike[str]) -> bool:
    """Whether the directory ``path`` is a log dir by what it holds (:func:`is_log_dir_listing`).

    Raises:
        FileAccessError: the directory cannot be listed.
    """
    with file_access(path, "list"), os.scandir(path) as listing:
        entries = [(entry.name, entry.is_dir()) for entry in listing]
    return is_log_dir_listing([name for name, is_dir in entries if not is_dir],
                              [name for name, is_dir in entries if is_dir])


def is_log_dir_listing(file_names: Iterable[str], dir_names: Iterable[str]) -> bool:
    """Whether a directory holding these entries is a log dir, whatever its own name: it holds its
    ``meta.properties``, one of its offset checkpoint files, or a partition directory (``LogManager``
    keeps all of them at a log dir's top, never in a partition directory). So a log dir named like a
    partition (Kafka's quickstart ``kafka-logs-1``) is still a log dir.

    Args:
        file_names: the names of the files directly in it.
        dir_names: the names of the directories directly in it.

    Returns:
        True when any of them says log dir.
    """
    return (any(name in LOG_DIR_FILES for name in file_names)
            or any(parse_partition_dir_name(name) is not None for name in dir_names))


def is_set_aside(name: PartitionDirName) -> bool:
    """Whether Kafka has set this partition directory aside (``UnifiedLog``'s ``-delete``: being deleted,
    ``-future``: being moved to this log dir, ``-stray``: not a replica here): it is none of the log dir's
    partitions the broker serves or cleans, so no command lists it as one (name it alone to read it)."""
    return name.kind != "live"


def iter_partition_dirs(log_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Every partition directory of a log dir, sorted by name (other entries and the directories Kafka set
    aside, :func:`is_set_aside`, are skipped).

    Raises:
        FileAccessError: the log dir cannot be listed.
    """
    for entry, name in _named_dirs(log_dir):
        if not is_set_aside(name):
            yield entry


def iter_set_aside_dirs(log_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """The partition directories of a log dir Kafka set aside (:func:`is_set_aside`), sorted by name.

    Raises:
        FileAccessError: the log dir cannot be listed.
    """
    for entry, name in _named_dirs(log_dir):
        if is_set_aside(name):
            yield entry


def _named_dirs(log_dir: str | os.PathLike[str]) -> Iterator[tuple[Path, PartitionDirName]]:
    root = Path(log_dir)
    with file_access(root, "list"):
        entries = sorted(root.iterdir())
    for entry in entries:
        name = parse_partition_dir_name(entry.name)
        if name is not None and entry.is_dir():
            yield entry, name


def is_partition_dir(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a directory named like a partition that is not a log dir by what it holds
    (:func:`holds_log_dir_files`): the one test of partition directory against log dir of every command."""
    p = named_path(path)
    return p.is_dir() and parse_partition_dir_name(p.name) is not None and not holds_log_dir_files(p)


def named_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as given, or made absolute where its last component is no name (``.``, ``..``, ``a/..``).

    ``kcompact clean .`` inside a partition directory must see that directory's name (the topic and
    partition) and its parent, the log dir; a path that already ends in a name is kept as the user wrote it,
    so messages name files the way the user did.
    """
    p = Path(path)
    return p if p.name not in ("", "..") else Path(os.path.abspath(p))
