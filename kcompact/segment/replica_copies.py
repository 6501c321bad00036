"""Copies of one partition taken from several brokers: find the partition directory in each.

Why: ``kcompact inspect replicas`` compares the replicas of a partition, and ``kcompact clean
--replica-dirs`` fences its cleaning by them. An operator hands over what they copied from each
broker: the partition directory itself (``<copy>/orders-0``), or the whole log dir
(``<copy>/kafka-logs``, holding ``orders-0`` among others, and the ``replication-offset-checkpoint``
the high watermark lives in). Both name one partition directory once the topic and partition are
known.

A copy's log end is what a broker loading and recovering it would keep (``segment.recovery``): an
interrupted swap completed as ``LogLoader.load`` completes it, a batch that fails its CRC ends the copy
there, as the broker's restart on it would, whatever later batch headers say. Its leader-epoch lineage
(``leader-epoch-checkpoint``, cut to that log as the loader cuts it) says where Kafka truncates it when it
follows the copy being cleaned, or truncates that one when it follows the copy (``segment.lineage``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.errors import KcompactError
from kcompact.segment.checkpoint import read_leader_epoch_checkpoint
from kcompact.segment.partition import Partition, is_partition_dir, named_path, open_partition
from kcompact.value import frozen

if TYPE_CHECKING:
    from kcompact.segment.lineage import Lineage
    from kcompact.segment.recovery import RecoveredEnd

__all__ = ["LEADER_EPOCH_CHECKPOINT", "ReplicaCopy", "loaded_log_start", "locate_replica", "partition_lineage",
           "replica_copies", "replica_copy_dirs", "replica_log_ends", "swap_warnings", "truncation_warnings"]

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


@frozen
class ReplicaCopy:
    """One other replica's copy, as Kafka would load it, against the copy being cleaned.

    Attributes:
        path: its partition directory.
        end: its log end as loading and recovery leave it.
        lineage_parts_at: where its leader-epoch lineage parts from the cleaned copy's (Kafka's truncation
            offset, walked both ways; ``segment.lineage.lineage_divergence``), None where they agree.
    """

    path: Path
    end: RecoveredEnd
    lineage_parts_at: int | None


def locate_replica(path: str | os.PathLike[str], topic: str | None, partition: int | None) -> Path:
    """The partition directory of one replica copy.

    Args:
        path: a partition directory, or a log dir holding ``<topic>-<partition>``.
        topic: the topic (needed for a log dir; for a partition directory, it must match when given).
        partition: the partition number (likewise).

    Returns:
        The partition directory.

    Raises:
        KcompactError: the path is neither, the log dir has no such partition, the topic or
            partition is missing for a log dir, or a partition directory names another partition.
    """
    target = named_path(path)
    if is_partition_dir(target):
        wanted = None if topic is None or partition is None else f"{topic}-{partition}"
        if wanted is not None and target.name != wanted:
            raise KcompactError(f"{target}: a copy of partition {wanted}; found {target.name}")
        return target
    if not target.is_dir():
        raise KcompactError(f"{target}: no such partition directory or log dir")
    if topic is None or partition is None:
        raise KcompactError(
            f"{target}: a log dir; expected a partition directory, or --topic and --partition to find "
            "one in it")
    found = target / f"{topic}-{partition}"
    if not is_partition_dir(found):
        raise KcompactError(f"{found}: no such partition directory in the log dir {target}")
    return found


def replica_copy_dirs(paths: tuple[str, ...], topic: str, partition: int) -> list[Path]:
    """The partition directories of the copies of ``topic``-``partition`` among ``paths``.

    A log dir without the partition, or a partition directory of another partition, holds no copy of
    it (a broker is a replica of some partitions only; ``--replica-dirs`` serves a whole log dir's clean).

    Args:
        paths: partition directories and/or log dirs of the other replicas.
        topic: the topic.
        partition: the partition number.

    Returns:
        One partition directory per copy found, in the order of ``paths``.

    Raises:
        KcompactError: a path is not a directory.
    """
    wanted = f"{topic}-{partition}"
    found = []
    for raw in paths:
        target = named_path(raw)
        if not target.is_dir():
            raise KcompactError(f"{target}: no such partition directory or log dir")
        copy = target if is_partition_dir(target) else target / wanted
        if copy.name == wanted and is_partition_dir(copy):
            found.append(copy)
    return found


def replica_log_ends(paths: tuple[str, ...], topic: str, partition: int) -> list[RecoveredEnd]:
    """The log ends of the copies of ``topic``-``partition`` among ``paths``, as recovery leaves them:
    each copy's end is that of its valid prefix (``segment.recovery.recovered_log_end``), not its last
    batch header's.

    Args:
        paths: partition directories and/or log dirs of the other replicas.
        topic: the topic.
        partition: the partition number.

    Returns:
        One recovered log end per copy found (:func:`replica_copy_dirs`), in the order of ``paths``.

    Raises:
        KcompactError: a path is not a directory, or a copy's files cannot be read.
    """
    from kcompact.segment.recovery import recovered_log_end  # kept off a clean's start-up: --replica-dirs only

    return [recovered_log_end(open_partition(copy)) for copy in replica_copy_dirs(paths, topic, partition)]


def truncation_warnings(ends: list[RecoveredEnd]) -> list[str]:
    """One line per copy whose recovery truncates it: where, and the log end the fence takes."""
    return [f"--replica-dirs: {path} at position {position}: a broker recovering this copy truncates it "
            "there (the entry there fails its framing or CRC check, or is partial), so its log end is taken "
            f"as {end.log_end_offset}"
            for end in ends if end.stopped_at is not None for path, position in (end.stopped_at,)]


def partition_lineage(partition: Partition, log_start_offset: int, log_end_offset: int,
                      recovered: tuple[tuple[int, int], ...] = ()) -> Lineage:
    """A partition's leader-epoch lineage as a broker loading it holds it (``segment.lineage.loaded_lineage``).

    Args:
        partition: the partition.
        log_start_offset: its log start.
        log_end_offset: its log end.
        recovered: the epochs of the batches recovery walked (``RecoveredEnd.recovered_epochs``); none for
            the cleaned copy, whose batches are not walked here (its checkpoint alone).

    Returns:
        The lineage (empty without a ``leader-epoch-checkpoint``).

    Raises:
        CorruptCheckpointError: the checkpoint does not parse (names the file and line).
        FileAccessError: it cannot be read.
    """
    from kcompact.segment.lineage import loaded_lineage  # kept off a clean's start-up: only --replica-dirs needs it

    entries = read_leader_epoch_checkpoint(partition.path / LEADER_EPOCH_CHECKPOINT)
    return loaded_lineage(entries, log_start_offset, log_end_offset, recovered)


def replica_copies(paths: tuple[str, ...], cleaned: Partition, log_end_offset: int) -> list[ReplicaCopy]:
    """The copies of ``cleaned``'s partition among ``paths``, each as Kafka would load it and where its lineage
    parts from ``cleaned``'s.

    Args:
        paths: partition directories and/or log dirs of the other replicas.
        cleaned: the copy being cleaned.
        log_end_offset: its log end.

    Returns:
        One per copy found (:func:`replica_copy_dirs`), in the order of ``paths``.

    Raises:
        KcompactError: a path is not a directory, it is the cleaned copy itself, or a copy's files or
            checkpoint cannot be read.
    """
    dirs = replica_copy_dirs(paths, cleaned.topic, cleaned.partition)
    if not dirs:
        return []
    # kept off a clean's start-up: a clean without --replica-dirs walks no copy
    from kcompact.segment.lineage import lineage_divergence
    from kcompact.segment.recovery import recovered_log_end

    mine = partition_lineage(cleaned, loaded_log_start(cleaned), log_end_offset)
    found = []
    for path in dirs:
        if path.resolve() == cleaned.path.resolve():
            raise KcompactError(f"{path}: --replica-dirs names the copy being cleaned, not another replica's; "
                                "give the other brokers' copies (their partition directories or log dirs)")
        copy = open_partition(path)
        end = recovered_log_end(copy)
        theirs = partition_lineage(copy, loaded_log_start(copy), end.log_end_offset, end.recovered_epochs)
        parted = lineage_divergence(mine, log_end_offset, theirs, end.log_end_offset)
        found.append(ReplicaCopy(path, end, parted))
    return found


def loaded_log_start(partition: Partition) -> int:
    """The log start ``LogLoader.load`` cuts the lineage at: the ``log-start-offset-checkpoint`` entry, 0 without
    one (``LogManager.loadLog``), not raised to the first segment's base as the log's own start is."""
    entry = partition.checkpointed(partition.log_dir.log_start_checkpoint)
    return 0 if entry is None else entry


def swap_warnings(ends: list[RecoveredEnd]) -> list[str]:
    """One line per copy holding an interrupted swap: which, and that its log end is taken with it completed."""
    return [f"--replica-dirs: {swaps[0].parent}: an interrupted swap ({', '.join(p.name for p in swaps)}); a broker "
            "loading this copy completes it first (LogLoader), so its log end is taken as "
            f"{end.log_end_offset}"
            for end in ends if (swaps := end.completed_swaps)]
