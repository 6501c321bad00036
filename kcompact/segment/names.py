"""Names of the files and directories Kafka keeps in a log dir (``LogFileUtils``,
``UnifiedLog.parseTopicPartitionName``).

Kafka derives everything it knows about a segment file from its name: the digits before the first
``.`` are the segment's base offset (``LogFileUtils.offsetFromFileName``), the extension says what
the file holds, and a temporary suffix appended *after* the extension (``.log.cleaned``,
``.index.swap``, ``.snapshot.deleted``) says which step of a clean, split or deletion left it there.
A partition directory is named ``<topic>-<partition>`` and split at the last ``-``; directories
being deleted, moved between log dirs or left over as KRaft strays carry
``.<unique id>-delete|-future|-stray``. Getting these right decides which files Kafka's loader
keeps, finishes, or deletes at startup (``LogLoader.load``), so both directions (formatting and parsing)
live here and nowhere else.

Layouts::

    <20-digit base offset>.<kind>[.<temp suffix>]      kind: log index timeindex txnindex snapshot
    <20-digit end offset>-<10-digit epoch>.checkpoint[.deleted]   KRaft snapshot (metadata log)
    <topic>-<partition>[.<uuid, 32 hex digits>-delete|-future|-stray]
"""

from __future__ import annotations

import re
from functools import lru_cache

from kcompact.records.varint import INT32_MAX, INT64_MAX
from kcompact.value import frozen

OFFSET_DIGITS = 20
"""Offsets in file names have 20 digits, zero-padded (``LogFileUtils.filenamePrefixFromOffset``)."""

SEGMENT_KINDS = ("log", "index", "timeindex", "txnindex", "snapshot")
"""File kinds named ``<base offset>.<kind>``; KRaft ``.checkpoint`` files are only parsed."""

TEMP_SUFFIXES = ("cleaned", "swap", "deleted")
"""Temporary suffixes, after the kind: clean/split output, swap in progress, pending deletion."""

DIR_KINDS = {"delete": "delete", "future": "future", "stray": "stray"}
"""Directory suffix (after the unique id) → :attr:`PartitionDirName.kind`; plain: ``"live"``."""

# <digits>.<kind>[.<suffix>] — Kafka reads the offset as the digits before the first '.'.
_SEGMENT_RE = re.compile(
    r"(?P<offset>[0-9]+)\.(?P<kind>log|index|timeindex|txnindex|snapshot)"
    r"(?:\.(?P<suffix>cleaned|swap|deleted))?"
)
# <offset>-<epoch>.checkpoint[.deleted] — KRaft's snapshot files (raft Snapshots.parse).
_CHECKPOINT_RE = re.compile(
    r"(?P<offset>[0-9]{20})-(?P<epoch>[0-9]{10})\.checkpoint(?:\.(?P<suffix>deleted))?"
)
# <topic-partition>.<unique id>-<suffix>; Kafka's patterns accept any non-blank unique id.
_SPECIAL_DIR_RE = re.compile(r"(?P<tp>\S+)\.(?P<uid>[^\s.]+)-(?P<kind>delete|future|stray)")


@frozen
class SegmentFileName:
    """A parsed segment-related file name.

    Attributes:
        base_offset: the offset in the name (a segment's base offset; for ``snapshot`` the offset
            the producer state was taken at; for ``checkpoint`` the KRaft snapshot's end offset).
        kind: ``"log" | "index" | "timeindex" | "txnindex" | "snapshot" | "checkpoint"``.
        temp_suffix: ``None | "cleaned" | "swap" | "deleted"``.
        name: the file name exactly as found.
    """

    base_offset: int
    kind: str
    temp_suffix: str | None
    name: str


@frozen
class PartitionDirName:
    """A parsed partition directory name.

    Attributes:
        topic: the topic (may itself contain ``-`` and ``.``).
        partition: the partition number.
        kind: ``"live" | "delete" | "future" | "stray"``.
        unique_id: the id between the topic-partition and the suffix (``None`` for live
            directories).
    """

    topic: str
    partition: int
    kind: str
    unique_id: str | None


def format_offset(offset: int) -> str:
    """Format an offset the way Kafka names files: 20 digits, zero-padded.

    Args:
        offset: a non-negative 64-bit offset.

    Returns:
        e.g. ``"00000000000000368769"`` for 368769.

    Raises:
        ValueError: the offset is negative or does not fit 64 bits (a caller bug, not bad input).
    """
    if not 0 <= offset <= INT64_MAX:
        raise ValueError(f"offset must be 0..{INT64_MAX}; found {offset}")
    return f"{offset:0{OFFSET_DIGITS}d}"


def segment_file_name(base_offset: int, kind: str, temp_suffix: str | None = None) -> str:
    """Name of one file of a segment.

    Args:
        base_offset: the segment's base offset (for ``snapshot``: the snapshot's offset).
        kind: one of :data:`SEGMENT_KINDS`.
        temp_suffix: ``None`` or one of :data:`TEMP_SUFFIXES`, appended after the extension.

    Returns:
        e.g. ``"00000000000000000042.log.cleaned"``.

    Raises:
        ValueError: unknown kind or suffix, or an offset :func:`format_offset` rejects.
    """
    if kind not in SEGMENT_KINDS:
        raise ValueError(f"segment file kind must be one of {SEGMENT_KINDS}; found {kind!r}")
    name = f"{format_offset(base_offset)}.{kind}"
    if temp_suffix is None:
        return name
    if temp_suffix not in TEMP_SUFFIXES:
        raise ValueError(f"temporary suffix must be one of {TEMP_SUFFIXES}; found {temp_suffix!r}")
    return f"{name}.{temp_suffix}"


@lru_cache(maxsize=1 << 14)  # a log dir's partitions share names (every first segment is 000…000.log)
def parse_segment_file_name(name: str) -> SegmentFileName | None:
    """Recognise a segment, index, producer-snapshot or KRaft snapshot file name.

    Like Kafka, the offset is whatever digits precede the first ``.``; a name with fewer than 20
    digits still parses (Kafka would load it), so compare ``name`` with :func:`segment_file_name` to
    spot non-canonical names.

    Args:
        name: a file name (no directory part).

    Returns:
        The parsed name, or ``None`` for every other file (``leader-epoch-checkpoint``,
        ``partition.metadata``, ``quorum-state``, ``*.tmp``, KRaft's ``*.checkpoint.part`` …).
    """
    match = _SEGMENT_RE.fullmatch(name) or _CHECKPOINT_RE.fullmatch(name)
    if match is None:
        return None
    kind = match.groupdict().get("kind") or "checkpoint"
    offset = int(match["offset"])
    if offset > INT64_MAX:
        return None
    return SegmentFileName(base_offset=offset, kind=kind, temp_suffix=match["suffix"], name=name)


def parse_partition_dir_name(name: str) -> PartitionDirName | None:
    """Parse a partition directory name the way Kafka's ``UnifiedLog.parseTopicPartitionName`` does.

    Args:
        name: a directory name (no parent part).

    Returns:
        The parsed name, or ``None`` when Kafka would not take it for a partition directory (Kafka's
        loader fails on such a directory, except for a few names it skips on purpose).
    """
    unique_id: str | None = None
    kind = "live"
    special = _SPECIAL_DIR_RE.fullmatch(name)
    if special is not None:
        name, unique_id, kind = special["tp"], special["uid"], DIR_KINDS[special["kind"]]
    topic, dash, partition_text = name.rpartition("-")
    if not dash or not topic or not partition_text.isascii() or not partition_text.isdigit():
        return None
    partition = int(partition_text)
    if partition > INT32_MAX:
        return None
    return PartitionDirName(topic=topic, partition=partition, kind=kind, unique_id=unique_id)
