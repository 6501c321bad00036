"""``clean --roll``: start a new, empty active segment at the log end, as a broker does on ``segment.ms``.

Kafka never cleans the active segment. On a stopped broker whose last segment holds data, that data can only
be cleaned after a roll: a new empty ``<log-end>.log`` (with empty ``.index`` and ``.timeindex``) becomes the
active segment, and the old one — now inactive — gets its indexes rebuilt and trimmed exactly as Kafka's
``onBecomeInactiveSegment`` leaves them. A broker started afterwards resizes the new active indexes itself.

**All or nothing.** The round that follows a roll may still fail (corrupt data, a self-check refusal, a
full disk), and a failed clean must leave the partition as it was. So a roll is *pending* until the
cleaner keeps it (:meth:`Roll.keep`, called just before the round's first change to the partition) or
undoes it (:meth:`Roll.undo`: the round failed before that, or changed nothing at all). While pending,
each index file the roll rebuilt keeps its original as a hard link named ``<base>.index.deleted`` /
``<base>.timeindex.deleted``: undoing renames the original back (its bytes, mode, owner and times — the
very file; a link not yet replaced is simply removed, as renaming a file onto itself does nothing), and
removes the new segment's files, ``.log`` first. Keeping removes the ``.deleted`` originals.

A kill while the roll is pending leaves the rolled partition plus those ``.deleted`` files, and a kill
while it creates the new segment leaves its ``.index`` (and ``.timeindex``) without the ``.log``, which is
created last. Kafka's loader deletes every ``*.deleted`` file and every index file whose ``.log`` is missing
(``LogLoader.loadSegmentFiles``) at startup, and so does kcompact's recovery (``swap.py``): both settle on
the old active segment with its rebuilt indexes, or on the rolled partition — a new empty active segment,
no record lost, no segment group touched.
"""

from __future__ import annotations

import os
from dataclasses import field
from pathlib import Path

from kcompact.config.topic_config import TopicConfig
from kcompact.errors import KcompactError
from kcompact.segment.files import (
    copy_ownership,
    file_access,
    fsync_dir,
    link_or_else,
    replacing,
    write_synced,
)
from kcompact.segment.index_builder import IndexBuilder
from kcompact.segment.log_file import LogFile
from kcompact.segment.names import segment_file_name
from kcompact.segment.offset_index import encode_offset_index
from kcompact.segment.partition import Partition, SegmentFiles
from kcompact.segment.time_index import encode_time_index
from kcompact.value import mutable


@mutable
class Roll:
    """A roll done on disk but not yet kept: what undoing it takes (see the module docstring)."""

    directory: Path
    created: list[Path] = field(default_factory=list)  # the new segment's files, in creation order
    replaced: list[tuple[Path, Path | None]] = field(default_factory=list)  # (index, its original's link)
    settled: bool = False

    def keep(self) -> None:
        """Make the roll final: drop the originals of the rebuilt indexes. Idempotent."""
        if self.settled:
            return
        self.settled = True
        for _path, original in self.replaced:
            if original is not None:
                try:
                    original.unlink(missing_ok=True)
                except OSError:
                    pass  # a stray .deleted file: Kafka's loader and kcompact's recovery delete it

    def undo(self) -> None:
        """Put the partition back as it was before the roll, unless it was kept. Idempotent.

        Raises:
            KcompactError: a file could not be removed or renamed back (the message names it).
        """
        if self.settled:
            return
        self.settled = True
        path = self.directory
        try:
            for path in reversed(self.created):  # the .log first: without it the rest are orphans
                path.unlink(missing_ok=True)
            for path, original in self.replaced:
                if original is None:
                    path.unlink(missing_ok=True)
                elif path.exists() and os.path.samefile(original, path):
                    original.unlink()  # not replaced yet; rename(2) of a file onto itself does nothing
                else:
                    os.replace(original, path)
            fsync_dir(self.directory)
        except OSError as err:
            raise KcompactError(
                f"{path}: cannot undo the roll of the active segment ({err.strerror or err}); the partition "
                "is rolled (a new empty active segment), which Kafka's loader accepts"
            ) from err


def roll_active_segment(partition: Partition, config: TopicConfig) -> Roll | None:
    """Roll when the active segment holds data.

    Args:
        partition: the opened partition.
        config: its configuration (``index.interval.bytes`` for the rebuilt indexes).

    Returns:
        The pending :class:`Roll` (the caller keeps or undoes it), or None when the active segment is
        empty already or there is none.

    Raises:
        CorruptDataError: the active segment's framing does not parse (nothing was written).
        FileAccessError: a file cannot be written (a read-only partition directory, a full disk, …);
            what was written so far is undone.
    """
    active = partition.active_segment
    if active is None:
        return None
    if active.size_in_bytes == 0:
        return None  # the active segment is empty already
    with LogFile(active.log_path) as log:
        sizes, last_offsets, max_timestamps = log.index_columns()  # one walk: indexes and next offset
    if not sizes:
        return None  # no batch: as empty
    end = last_offsets[-1] + 1
    builder = IndexBuilder(active.base_offset, config.index_interval_bytes)
    builder.append_run(0, sizes, last_offsets, max_timestamps)
    offsets, times = builder.finish()
    roll = Roll(partition.path)
    try:
        with file_access(partition.path, "write"):
            _replace(roll, active, "index", encode_offset_index(offsets, active.base_offset))
            _replace(roll, active, "timeindex", encode_time_index(times, active.base_offset))
            for kind in ("index", "timeindex", "log"):  # the .log last: it is what makes the segment exist
                path = partition.path / segment_file_name(end, kind)
                with open(path, "xb") as fh:
                    roll.created.append(path)
                    os.fsync(fh.fileno())
                copy_ownership(active.log_path, path)
            fsync_dir(partition.path)
    except BaseException:
        roll.undo()
        raise
    return roll


def _replace(roll: Roll, active: SegmentFiles, kind: str, data: bytes) -> None:
    """Write ``data`` as the active segment's ``kind`` index, its original kept as ``….deleted``."""
    path = roll.directory / segment_file_name(active.base_offset, kind)
    original = roll.directory / segment_file_name(active.base_offset, kind, "deleted")
    with replacing(path, path.with_name(path.name + ".kcompact-tmp"), sync_directory=False) as tmp:
        write_synced(tmp, data)
        os.utime(tmp, ns=(active.mtime_ns, active.mtime_ns))
        copy_ownership(path if path.exists() else active.log_path, tmp)
        if path.exists():
            original.unlink(missing_ok=True)
            link_or_else(path, original, "copy")
            roll.replaced.append((path, original))
        else:
            roll.replaced.append((path, None))
