"""``clean --roll``: start a new, empty active segment at the log end, as a broker does on ``segment.ms``.

Kafka never cleans the active segment. On a stopped broker whose last segment holds data, that data can only
be cleaned after a roll: a new empty ``<log-end>.log`` (with empty ``.index`` and ``.timeindex``) becomes the
active segment, and the old one — now inactive — gets its indexes rebuilt and trimmed exactly as Kafka's
``onBecomeInactiveSegment`` leaves them. A broker started afterwards resizes the new active indexes itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from kcompact.config.topic_config import TopicConfig
from kcompact.segment.files import file_access, fsync_dir, write_synced
from kcompact.segment.index_builder import build_indexes
from kcompact.segment.log_file import LogFile
from kcompact.segment.names import segment_file_name
from kcompact.segment.offset_index import encode_offset_index
from kcompact.segment.partition import Partition, segment_next_offset
from kcompact.segment.time_index import encode_time_index


def roll_active_segment(partition: Partition, config: TopicConfig) -> bool:
    """Roll when the active segment holds data; return whether a new segment was created.

    Raises:
        FileAccessError: a file cannot be written (a read-only partition directory, a full disk, …).
    """
    active = partition.active_segment
    if active is None:
        return False
    end = segment_next_offset(active)
    if end is None:
        return False  # the active segment is empty already
    with LogFile(active.log_path) as log:
        summaries = [(s.position, s.size_in_bytes, s.last_offset, s.max_timestamp) for s in log.summaries()]
    offsets, times = build_indexes(
        summaries, base_offset=active.base_offset, index_interval_bytes=config.index_interval_bytes
    )
    directory = partition.path
    with file_access(directory, "write"):
        _replace(directory / segment_file_name(active.base_offset, "index"),
                 encode_offset_index(offsets, active.base_offset), active.mtime_ns)
        _replace(directory / segment_file_name(active.base_offset, "timeindex"),
                 encode_time_index(times, active.base_offset), active.mtime_ns)
        for kind in ("index", "timeindex", "log"):  # the .log last: it is what makes the segment exist
            path = directory / segment_file_name(end, kind)
            with open(path, "xb") as fh:
                os.fsync(fh.fileno())
            os.chmod(path, active.log_path.stat().st_mode & 0o7777)
        fsync_dir(directory)
    return True


def _replace(path: Path, data: bytes, mtime_ns: int) -> None:
    tmp = path.with_name(path.name + ".kcompact-tmp")
    write_synced(tmp, data)
    os.utime(tmp, ns=(mtime_ns, mtime_ns))
    os.replace(tmp, path)
