"""A partition's log state loaded once for a log-dir clean: when ordering the partitions, reused by the round.

Kafka's cleaner loads nothing twice: ``LogCleanerManager.grabFilthiestCompactedLog`` ranks the logs from the
broker's memory and hands the chosen ``LogToClean`` to ``Cleaner.doClean``. Offline the facts come from a walk
of every batch header (:func:`~kcompact.log.state.log_state.load_log_state`), and a log-dir clean needs them
first to rank the partitions, then again in each round. :class:`KnownState` carries the first walk's result to
the round together with what it was read from; the round uses it only while that is provably unchanged: the
same configuration, the same files in the partition directory and the same entries for the partition in the
log dir's checkpoints. Anything else — a swap the round's recovery settled, a ``--roll``, another process's
clean in between — and the round loads the state again, under its lock.

A file is the same when its name, size, modification time, inode number and status-change time (``st_ctime_ns``)
are. The modification time alone is not enough: ``os.utime`` puts it back after a rewrite of the same size (an
ABORT marker made a COMMIT, and a reused state would drop the committed records as aborted), but no call sets
the status-change time, which every write and ``utime`` itself move to now, and a file written anew and
renamed into place has another inode.
"""

from __future__ import annotations

import os
from pathlib import Path

from kcompact.config.topic_config import TopicConfig
from kcompact.errors import KcompactError
from kcompact.log.rules.high_watermark import SoleReplica
from kcompact.log.state.log_state import LogState, load_log_state
from kcompact.segment.files import file_access
from kcompact.segment.log_reads import LogReads
from kcompact.segment.partition import Partition, open_partition
from kcompact.value import frozen

__all__ = ["KnownState", "known_state", "state_for_round"]

# (name, size, mtime_ns, inode, ctime_ns) of every entry of a partition directory, sorted by name
FilesSeen = tuple[tuple[str, int, int, int, int], ...]
# the partition's entries in cleaner-offset-checkpoint, replication-offset-checkpoint and
# log-start-offset-checkpoint
CheckpointsSeen = tuple[int | None, int | None, int | None]


@frozen
class KnownState:
    """A partition's loaded log state and what it was loaded from."""

    state: LogState
    config: TopicConfig
    files: FilesSeen
    checkpoints: CheckpointsSeen
    sole_replica: SoleReplica | None = None  # the high watermark is the log end (``rules.high_watermark``)


def known_state(partition: Partition, config: TopicConfig, sole_replica: SoleReplica | None = None,
                reads: LogReads | None = None) -> KnownState:
    """Load ``partition``'s state (:func:`load_log_state`, through the caller's shared ``reads`` of its
    ``.log`` files when given), noting what it is read from.

    The directory is looked at before the walk, so a change during the walk makes it stale, never missed.

    Raises:
        CorruptDataError: as :func:`load_log_state`.
        FileAccessError: the directory cannot be listed.
    """
    files = _files_seen(partition.path)
    checkpoints = _checkpoints_seen(partition)
    return KnownState(load_log_state(partition, config, reads, sole_replica=sole_replica), config, files,
                      checkpoints, sole_replica)


def state_for_round(known: KnownState | None, partition: Partition, config: TopicConfig,
                    sole_replica: SoleReplica | None = None) -> LogState:
    """The state a round plans on: ``known``'s while nothing it was read from has changed, else a fresh load
    (of a fresh listing where there is a ``known``: ``partition`` may be the listing it was loaded from; the
    state's ``partition`` is the listing the round goes on with).

    Raises:
        CorruptDataError: as :func:`load_log_state`.
        FileAccessError: the directory cannot be listed.
        KcompactError: it is no longer a partition directory.
    """
    if known is None:
        return load_log_state(partition, config, sole_replica=sole_replica)
    if known.sole_replica == sole_replica and _unchanged(known, partition, config):
        return known.state
    return load_log_state(open_partition(partition.path), config, sole_replica=sole_replica)


def _unchanged(known: KnownState, partition: Partition, config: TopicConfig) -> bool:
    if known.config != config or known.state.partition != partition:
        return False
    try:
        return known.checkpoints == _checkpoints_seen(partition) and known.files == _files_seen(partition.path)
    except KcompactError:  # a file vanished or cannot be read: the fresh load says what
        return False


def _files_seen(part_dir: Path) -> FilesSeen:
    seen = []
    with file_access(part_dir, "list"), os.scandir(part_dir) as entries:
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            seen.append((entry.name, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns))
    return tuple(sorted(seen))


def _checkpoints_seen(partition: Partition) -> CheckpointsSeen:
    log_dir = partition.log_dir
    return (partition.checkpointed(log_dir.cleaner_checkpoint),
            partition.checkpointed(log_dir.replication_checkpoint),
            partition.checkpointed(log_dir.log_start_checkpoint))
