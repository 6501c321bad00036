"""Which segments of a partition a broker recovers when it starts on this log dir, rebuilding their indexes.

Kafka 4.1's loader (``LogManager.loadLogs``, ``LogLoader.recoverLog``) recovers nothing after a clean
shutdown — the log dir then holds the marker ``.kafka_cleanshutdown``, which the broker deletes as it starts
— and otherwise recovers every segment from the one holding the partition's recovery point (its
``recovery-point-offset-checkpoint`` entry; 0 when the entry is missing or the file cannot be read) to the
end. Recovery (``LogSegment.recover``) re-reads each such segment and rebuilds its offset and time indexes
from it, trimmed, whatever they held. KRaft's ``__cluster_metadata`` log is loaded apart from the others
(``KafkaMetadataLog.apply``) with recovery point 0 and as after an unclean shutdown: every segment is
recovered, every time. Whatever the shutdown, ``LogLoader.loadSegmentFiles`` recovers two more kinds of segment
when ``LogSegment.sanityCheck`` throws: one without its ``.index`` (``NoSuchFileException``) and one whose
``.txnindex`` has an entry ending below the segment's base offset (``TransactionIndex.sanityCheck``,
``CorruptIndexException``). Any other segment's indexes are used as they are (``LogSegment.sanityCheck`` creates a
missing ``.timeindex`` empty and checks nothing else).

So a preallocated index left by a broker that did not shut down cleanly — never trimmed, mostly zero
slots — is settled by Kafka in the active segment, where it occurs, while the marker is absent.
"""

from __future__ import annotations

from pathlib import Path

from kcompact.errors import KcompactError
from kcompact.segment.checkpoint import read_checkpoint_cached
from kcompact.segment.files import read_file
from kcompact.segment.partition import RECOVERY_POINT_CHECKPOINT, Partition
from kcompact.segment.txn_index import TXN_INDEX_ENTRY, TXN_INDEX_ENTRY_SIZE, TXN_INDEX_VERSION

CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
"""The file a broker leaves in each log dir at a clean shutdown (``CleanShutdownFileHandler``)."""


def recovered_at_start(partition: Partition) -> frozenset[int]:
    """The base offsets of the segments a broker starting on this log dir recovers (module docstring).

    Args:
        partition: the partition, as on disk.

    Returns:
        The base offsets of those segments (after a clean shutdown only those the loader's sanity check sends
        to recovery).

    Raises:
        FileAccessError: the log dir cannot be listed.
    """
    if partition.is_metadata_log:
        return frozenset(seg.base_offset for seg in partition.segments)
    # LogLoader.loadSegmentFiles: LogSegment.sanityCheck throws (no .index; a .txnindex it refuses), recoverSegment
    sent_to_recovery = frozenset(seg.base_offset for seg in partition.segments if seg.index_path is None or (
        seg.txn_index_path is not None and txn_index_fails_sanity_check(seg.txn_index_path, seg.base_offset)))
    log_dir = partition.path.parent
    if (log_dir / CLEAN_SHUTDOWN_MARKER).exists():
        return sent_to_recovery
    try:
        point = read_checkpoint_cached(log_dir / RECOVERY_POINT_CHECKPOINT).get(partition.topic_partition, 0)
    except KcompactError:  # the broker resets every recovery point of the log dir to 0
        point = 0
    bases = [seg.base_offset for seg in partition.segments]
    # LogSegments.values(recoveryPoint, Long.MAX_VALUE): from the segment holding the point (floorKey) on
    return sent_to_recovery | frozenset(
        base for i, base in enumerate(bases) if i + 1 == len(bases) or bases[i + 1] > point)


def txn_index_fails_sanity_check(path: Path, base_offset: int) -> bool:
    """Whether ``TransactionIndex.sanityCheck`` refuses a ``.txnindex`` (``CorruptIndexException``: the loader
    recovers its segment): an entry whose last offset is below the segment's base offset, among the whole
    entries Kafka reads, in order, up to one of a version it does not know (which it refuses otherwise).

    Args:
        path: the ``.txnindex``.
        base_offset: its segment's base offset.

    Returns:
        True when the check fails; False when it passes or the file cannot be read (its reader says why).
    """
    try:
        data = read_file(path)
    except (KcompactError, OSError):
        return False
    whole = len(data) - len(data) % TXN_INDEX_ENTRY_SIZE  # TransactionIndex reads whole entries only
    for version, _producer_id, _first_offset, last_offset, _lso in TXN_INDEX_ENTRY.iter_unpack(data[:whole]):
        if version != TXN_INDEX_VERSION:
            return False
        if last_offset < base_offset:
            return True
    return False
