"""A partition whose last segment ends in a torn append, said as what it is and what settles it.

A broker that dies mid-append (a full volume, ``kill -9``) can leave its active segment ending in an entry
cut short: a batch header declaring more bytes than the file holds. Kafka's recovery on the next start
(``LogLoader.recoverLog`` → ``LogSegment.recover``, for every segment from the recovery point on) reads the
segment batch by batch, stops at the first entry that does not parse and truncates the segment there
(``FileRecords.truncateTo``): the torn bytes never were a record of the log. The cleaner reads every batch,
so ``clean`` cannot go past them; instead of the reader's bare error it says which bytes are torn, that Kafka
truncates them, and the command that cuts them the same way (``kcompact repair``, whose backup copies the
segment: on a full volume it must go to another one).
"""

from __future__ import annotations

import os
from pathlib import Path

from kcompact.errors import TruncatedDataError
from kcompact.segment.names import parse_segment_file_name


def torn_tail_error(err: TruncatedDataError, partition_dir: Path) -> TruncatedDataError | None:
    """The torn-append error of ``partition_dir``'s last segment, or None when ``err`` is not one.

    Args:
        err: what reading the partition raised.
        partition_dir: the partition directory.

    Returns:
        The same file and position, the message saying what is torn, that Kafka's recovery truncates the
        segment there, and the repair command; None when ``err`` is not at the end of the last ``.log``.
    """
    if err.path is None or err.position is None:
        return None
    path = Path(err.path)
    parsed = parse_segment_file_name(path.name)
    if path.parent.resolve() != partition_dir.resolve() or parsed is None or parsed.kind != "log" \
            or parsed.temp_suffix is not None or not _is_last_segment(partition_dir, parsed.base_offset):
        return None
    try:
        size = os.stat(path).st_size
    except OSError:
        return None
    torn = size - err.position
    message = (f"a torn append: the last {torn} bytes of the partition's last segment (positions {err.position} to "
               f"{size}) are an entry cut short ({err.message}); Kafka's recovery truncates the segment at "
               f"position {err.position} on its next start (LogSegment.recover); cut it there first with "
               f"`kcompact repair {partition_dir} --backup-dir <a directory on another volume>` (its backup "
               f"copies the segment, so on a full volume it must go elsewhere), then clean")
    return TruncatedDataError(message, path=path, position=err.position, offset=err.offset)


def _is_last_segment(partition_dir: Path, base_offset: int) -> bool:
    try:
        names = os.listdir(partition_dir)
    except OSError:
        return False
    for name in names:
        other = parse_segment_file_name(name)
        if other is not None and other.kind == "log" and other.temp_suffix is None and other.base_offset > base_offset:
            return False
    return True
