"""Causes that belong to a whole log dir, found once before its partitions are read or changed.

A broker holding ``<log-dir>/.lock``, a log dir this process may not write, and a top-level offset
checkpoint file that cannot be read (``cleaner-offset-checkpoint``, ``replication-offset-checkpoint``,
``log-start-offset-checkpoint``) stop every partition of the log dir the same way. Checked partition by
partition they would fail each one with the same line; checked here they stop the command once, with
one line naming the file (a broker meets the same checkpoint files in ``LogManager.loadLogs`` and
``ReplicaManager``'s high-watermark checkpoints, and takes the whole log dir offline over them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kcompact.errors import CorruptCheckpointError
from kcompact.segment.checkpoint import read_checkpoint_cached
from kcompact.segment.files import require_writable
from kcompact.segment.lock import log_dir_write_guard
from kcompact.segment.partition import (
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    REPLICATION_CHECKPOINT,
)

CHECKPOINTS_READ = (CLEANER_CHECKPOINT, REPLICATION_CHECKPOINT, LOG_START_CHECKPOINT)
"""The log dir's checkpoint files a clean or a report reads for every partition."""

_REPAIR_HINTS = {
    CLEANER_CHECKPOINT: "`kcompact repair` on one of its partition directories rewrites it with the "
                        "entries that parse (the original goes to the backup)",
}
_NO_REPAIR_HINT = "a broker cannot load this log dir either; restore the file from a backup"


def check_log_dir_checkpoints(log_dir: str | os.PathLike[str]) -> None:
    """Read the log dir's offset checkpoint files once, so a damaged one is one error, not one per partition.

    Args:
        log_dir: the log dir.

    Raises:
        CorruptCheckpointError: a checkpoint file does not parse; the message says what fixes it
            (``kcompact repair`` for the cleaner checkpoint).
        FileAccessError: a checkpoint file cannot be read.
    """
    for name in CHECKPOINTS_READ:
        path = Path(log_dir) / name
        try:
            read_checkpoint_cached(path)
        except CorruptCheckpointError as err:
            hint = _REPAIR_HINTS.get(name, _NO_REPAIR_HINT)
            raise CorruptCheckpointError(f"{err.message}; {hint}", path=err.path, position=err.position,
                                         offset=err.offset) from err


@contextmanager
def log_dir_writer(log_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Refuse once, before any partition, a log dir that cannot be written or that a broker holds.

    The partitions' own guards then nest inside this one (see ``log_dir_write_guard``).

    Args:
        log_dir: the log dir about to be changed.

    Yields:
        Nothing; the shared lock on ``<log_dir>/.lock`` is held until the block exits.

    Raises:
        FileAccessError: the log dir is read-only or this process may not write it.
        RefusedError: a broker holds ``.lock``.
    """
    require_writable(log_dir)
    with log_dir_write_guard(log_dir):
        yield


def check_log_dir_writable(log_dir: str | os.PathLike[str]) -> None:
    """:func:`log_dir_writer`'s refusals, checked once and released (for a driver whose partitions are
    changed by other processes, as ``spark clean``'s executors do).

    Args:
        log_dir: the log dir about to be changed.

    Raises:
        FileAccessError: the log dir is read-only or this process may not write it.
        RefusedError: a broker holds ``.lock``.
    """
    with log_dir_writer(log_dir):
        pass
