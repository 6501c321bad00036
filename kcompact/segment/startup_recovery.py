"""Which segments of a partition a broker recovers when it starts on this log dir, rebuilding their indexes.

Kafka 4.1's loader (``LogManager.loadLogs``, ``LogLoader.recoverLog``) recovers nothing after a clean
shutdown — the log dir then holds the marker ``.kafka_cleanshutdown``, which the broker deletes as it starts
— and otherwise recovers every segment from the one holding the partition's recovery point (its
``recovery-point-offset-checkpoint`` entry; 0 when the entry is missing or the file cannot be read) to the
end. Recovery (``LogSegment.recover``) re-reads each such segment and rebuilds its offset and time indexes
from it, trimmed, whatever they held. KRaft's ``__cluster_metadata`` log is loaded apart from the others
(``KafkaMetadataLog.apply``) with recovery point 0 and as after an unclean shutdown: every segment is
recovered, every time. Whatever the shutdown, a segment without its ``.index`` is recovered too: the loader's
``LogSegment.sanityCheck`` throws ``NoSuchFileException`` and ``LogLoader.loadSegmentFiles`` recovers it. Any
other segment's indexes are used as they are (``LogSegment.sanityCheck`` creates a missing ``.timeindex`` empty
and checks only the ``.txnindex``; a ``.txnindex`` that fails it gets its segment recovered, which this module does
not judge).

So a preallocated index left by a broker that did not shut down cleanly — never trimmed, mostly zero
slots — is settled by Kafka in the active segment, where it occurs, while the marker is absent.
"""

from __future__ import annotations

from kcompact.errors import KcompactError
from kcompact.segment.checkpoint import read_checkpoint_cached
from kcompact.segment.partition import RECOVERY_POINT_CHECKPOINT, Partition

CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
"""The file a broker leaves in each log dir at a clean shutdown (``CleanShutdownFileHandler``)."""


def recovered_at_start(partition: Partition) -> frozenset[int]:
    """The base offsets of the segments a broker starting on this log dir recovers (module docstring).

    Args:
        partition: the partition, as on disk.

    Returns:
        The base offsets of those segments (after a clean shutdown only those without ``.index``).

    Raises:
        FileAccessError: the log dir cannot be listed.
    """
    if partition.is_metadata_log:
        return frozenset(seg.base_offset for seg in partition.segments)
    # LogLoader.loadSegmentFiles: no .index, NoSuchFileException from LogSegment.sanityCheck, recoverSegment
    without_index = frozenset(seg.base_offset for seg in partition.segments if seg.index_path is None)
    log_dir = partition.path.parent
    if (log_dir / CLEAN_SHUTDOWN_MARKER).exists():
        return without_index
    try:
        point = read_checkpoint_cached(log_dir / RECOVERY_POINT_CHECKPOINT).get(partition.topic_partition, 0)
    except KcompactError:  # the broker resets every recovery point of the log dir to 0
        point = 0
    bases = [seg.base_offset for seg in partition.segments]
    # LogSegments.values(recoveryPoint, Long.MAX_VALUE): from the segment holding the point (floorKey) on
    return without_index | frozenset(
        base for i, base in enumerate(bases) if i + 1 == len(bases) or bases[i + 1] > point)
