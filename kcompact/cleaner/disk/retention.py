"""Segment retention for ``cleanup.policy`` with ``delete``: Kafka's ``UnifiedLog.deleteOldSegments``.

Whole segments only, oldest first, in Kafka's order (``UnifiedLog.deleteOldSegments``):

1. segments entirely below the log start offset (after a DeleteRecords) — for every policy;
2. with ``delete``: ``retention.bytes`` — while the log's total size minus ``retention.bytes`` still covers
   the oldest remaining segment's size, that segment goes;
3. with ``delete``: ``retention.ms`` — a segment goes while ``now − largest_timestamp > retention.ms``
   (the largest timestamp is the time index's last entry, else the ``.log`` mtime).

Each pass stops at the first segment that does not qualify, never deletes a segment that is not entirely
below the high watermark (``next segment's base ≤ high watermark``, the log end for the last), and never the
last segment when it is empty; when every segment qualifies, a new empty active segment is rolled first at
the log end, as the broker does. The log start offset then becomes the first remaining segment's base.

The cleaner plans the log-start rule before its round and applies it with the round's first change
(``cleaner.py``): a round that fails deletes nothing. Deletion is crash-safe the way Kafka's is: each segment's files
(and the producer snapshot named after it) are renamed ``.deleted``, oldest first, the directory is fsynced, then the
files are removed. A kill at any point leaves a log that simply starts later; Kafka's loader and
``swap.recover_interrupted_swaps`` remove leftover ``.deleted`` files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import field

from kcompact.cleaner.disk.swap import INDEX_KINDS
from kcompact.config.topic_config import TopicConfig
from kcompact.log.rules.ranges import clamp_high_watermark
from kcompact.log.state.log_state import LogState, SegmentState
from kcompact.segment.files import file_access, fsync_dir
from kcompact.segment.names import segment_file_name
from kcompact.value import mutable


@mutable
class RetentionResult:
    """What retention deleted (or, in a dry run, would delete), and why."""

    deleted_segments: list[int] = field(default_factory=list)  # base offsets
    reasons: dict[int, str] = field(default_factory=dict)  # base offset -> the rule that deleted it
    bytes_deleted: int = 0
    log_start_before: int = 0
    log_start_after: int = 0
    rolled: bool = False


def plan_retention(
    state: LogState, config: TopicConfig, now_ms: int, *, log_start_only: bool = False
) -> RetentionResult:
    """Which segments Kafka's retention would delete now (nothing is changed).

    Args:
        state: the partition's loaded facts.
        config: its configuration (size and time rules only apply when the policy has ``delete``).
        now_ms: the clock of the time rule.
        log_start_only: apply only the log-start rule (what a broker has done long before its cleaner
            would merge those segments).
    """
    result = RetentionResult(log_start_before=state.log_start_offset, log_start_after=state.log_start_offset)
    segments = list(state.segments)
    log_end = state.log_end_offset
    hw = clamp_high_watermark(state.high_watermark, state.log_start_offset, log_end)
    _apply(segments, result, hw, log_end, "log-start-offset",
           lambda seg, nxt: nxt is not None and nxt.base_offset <= state.log_start_offset)
    if log_start_only:
        pass
    elif config.has_delete and config.retention_bytes >= 0:
        diff = sum(s.size_in_bytes for s in segments) - config.retention_bytes
        budget = [diff]

        def size_breached(seg: SegmentState, _nxt: SegmentState | None) -> bool:
            if budget[0] - seg.size_in_bytes >= 0:
                budget[0] -= seg.size_in_bytes
                return True
            return False

        if diff >= 0:
            _apply(segments, result, hw, log_end, "retention.bytes", size_breached)
    if config.has_delete and config.retention_ms >= 0 and not log_start_only:
        _apply(segments, result, hw, log_end, "retention.ms",
               lambda seg, _nxt: now_ms - seg.largest_timestamp_ms > config.retention_ms)
    if result.deleted_segments:
        result.rolled = not segments  # every segment went: the broker rolls a new one first
        result.log_start_after = segments[0].base_offset if segments else log_end
    return result


def _apply(
    segments: list[SegmentState],
    result: RetentionResult,
    high_watermark: int,
    log_end: int,
    reason: str,
    predicate: Callable[[SegmentState, SegmentState | None], bool],
) -> None:
    """Kafka's deletableSegments: delete from the front while the predicate holds."""
    while segments:
        seg = segments[0]
        nxt = segments[1] if len(segments) > 1 else None
        upper = nxt.base_offset if nxt is not None else log_end
        if nxt is None and seg.size_in_bytes == 0:
            return  # never the last segment when it is empty
        if high_watermark < upper or not predicate(seg, nxt):
            return
        segments.pop(0)
        result.deleted_segments.append(seg.base_offset)
        result.reasons[seg.base_offset] = reason
        result.bytes_deleted += seg.size_in_bytes


def apply_retention(state: LogState, config: TopicConfig, plan: RetentionResult) -> None:
    """Delete the planned segments crash-safely (see the module docstring)."""
    if not plan.deleted_segments:
        return
    directory = state.partition.path
    if plan.rolled:
        from kcompact.cleaner.disk.roll import roll_active_segment

        rolled = roll_active_segment(state.partition, config)
        if rolled is not None:
            rolled.keep()  # part of this deletion, which only a crash interrupts
    doomed = set(plan.deleted_segments)
    renamed = []
    with file_access(directory, "delete"):
        for seg in _in_order(state.segments, doomed):
            for kind in (*INDEX_KINDS, "snapshot"):
                path = directory / segment_file_name(seg.base_offset, kind)
                if path.exists():
                    target = directory / segment_file_name(seg.base_offset, kind, "deleted")
                    path.replace(target)
                    renamed.append(target)
        fsync_dir(directory)
        for path in renamed:
            path.unlink(missing_ok=True)


def _in_order(segments: Sequence[SegmentState], doomed: set[int]) -> list[SegmentState]:
    return [s for s in segments if s.base_offset in doomed]
