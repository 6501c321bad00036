"""Kafka's range rules: what the broker's cleaner would clean in a partition, and why not more.

The one implementation (pure: values in, decisions out) of ``LogCleanerManager.cleanableOffsets``,
``calculateCleanableBytes`` and ``maxCompactionDelay`` and of ``LogToClean``, shared by ``clean``,
``inspect dirty-ratio`` and Spark. Spec §6.2-§6.4, settled against Kafka 4.1's Java sources.

The log, in offsets::

    log start   first dirty        first uncleanable          active base    log end
        |-- clean --|--- cleanable ----|------ uncleanable ------|-- active --|
         clean_bytes    dirty_bytes        (not in the ratio)

* First dirty = the ``cleaner-offset-checkpoint`` entry (the log start if absent); an entry below
  the log start or past the log end is reset to the log start and rewritten.
* Raw first uncleanable (``first_uncleanable_dirty_offset``) = max(first dirty, min(caps)), the caps
  being the active segment's base, the last stable offset (the high watermark, or an earlier open
  transaction's first offset) and, when ``min.compaction.lag.ms`` > 0, the base of the first dirty
  non-active segment whose largest timestamp is newer than now - lag. ``first_uncleanable_offset``
  rounds it down to the base of the segment holding it (the active base at or past it).
* Sizes use Kafka's segment ranges (``LogSegments.values(from, to)``: from the segment *holding*
  ``from`` to the last one based before ``to``): a segment straddling the first dirty offset counts
  in both ``clean_bytes`` and ``dirty_bytes``; ratio = dirty / (clean + dirty).
* ``max.compaction.lag.ms``: delay = (now - lag) - the earliest positive first-batch timestamp
  of the dirty non-active segments, when positive. A log is picked when its ratio is strictly
  above ``min.cleanable.dirty.ratio``, or when the delay is positive and it has dirty bytes; the
  highest ratio goes first.

Beyond the spec, from Kafka's ``UnifiedLog``: the high watermark is clamped into [log start, log
end] and an open transaction's first offset is raised to the log start.

The values (inputs, the decision, the rule names) live in ``range_model.py`` and the decision in
words (``blocking_rule`` / ``blocking_detail``) in ``range_explanation.py``; every public name is
importable from here.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Sequence

from kcompact.cleaner.rules.range_explanation import explain_range
from kcompact.cleaner.rules.range_model import (
    CAP_ORDER,
    LONG_MAX,
    RESET_BELOW_LOG_START,
    RESET_MISSING,
    RESET_PAST_LOG_END,
    RULE_ACTIVE_SEGMENT,
    RULE_BELOW_DIRTY_RATIO,
    RULE_CHECKPOINT_RESET,
    RULE_CLEANUP_POLICY,
    RULE_HIGH_WATERMARK,
    RULE_MIN_COMPACTION_LAG,
    RULE_OPEN_TRANSACTION,
    CleanableRange,
    OpenTxn,
    RangeInputs,
    SegmentStats,
)
from kcompact.errors import CleanerStateError

__all__ = [
    "CAP_ORDER",
    "LONG_MAX",
    "RESET_BELOW_LOG_START",
    "RESET_MISSING",
    "RESET_PAST_LOG_END",
    "RULE_ACTIVE_SEGMENT",
    "RULE_BELOW_DIRTY_RATIO",
    "RULE_CHECKPOINT_RESET",
    "RULE_CLEANUP_POLICY",
    "RULE_HIGH_WATERMARK",
    "RULE_MIN_COMPACTION_LAG",
    "RULE_OPEN_TRANSACTION",
    "CleanableRange",
    "OpenTxn",
    "RangeInputs",
    "SegmentStats",
    "cleaner_order",
    "compute_cleanable_range",
]

_INVALID_CHECKPOINT = (RESET_BELOW_LOG_START, RESET_PAST_LOG_END)


def compute_cleanable_range(inp: RangeInputs, *, from_start: bool = False) -> CleanableRange:
    """Apply Kafka's cleaner range rules to one partition.

    Args:
        inp: the partition's segments, offsets, checkpoint, transactions, clock and config.
        from_start: take the log start as the first dirty offset (``clean --from-start``); the
            other caps still apply.

    Returns:
        The range with its sizes, ratio, eligibility and the rule that limits it.

    Raises:
        CleanerStateError: the segment base offsets are not strictly ascending.
    """
    segments = _checked_segments(inp)
    first_dirty, reset = _first_dirty(inp, from_start)
    hw = _clamp_high_watermark(inp)
    unstable = None
    if inp.first_unstable_offset is not None:
        unstable = max(inp.first_unstable_offset, inp.log_start_offset)
    lag_boundary = _lag_boundary(segments, first_dirty, inp.now_ms, inp.min_compaction_lag_ms)
    caps = _caps(segments[-1].base_offset, hw, unstable, lag_boundary)
    raw = max(first_dirty, min(offset for _, offset in caps))
    rounded = _round_to_segment(segments, raw)
    clean_bytes = _size(_segments_in(segments, -1, first_dirty))
    dirty_bytes = _size(_segments_in(segments, min(first_dirty, rounded), rounded))
    total = clean_bytes + dirty_bytes
    ratio = dirty_bytes / total if total > 0 else 0.0
    delay, earliest = _max_compaction_delay(segments, first_dirty, inp.now_ms, inp.max_compaction_lag_ms)
    must_clean = delay > 0 and dirty_bytes > 0
    eligible = "compact" in inp.policy and (must_clean or ratio > inp.min_cleanable_dirty_ratio)
    rng = CleanableRange(
        first_dirty_offset=first_dirty, checkpoint_offset=inp.checkpoint_offset,
        checkpoint_reset=reset, force_update_checkpoint=reset in _INVALID_CHECKPOINT,
        log_start_offset=inp.log_start_offset, log_end_offset=inp.log_end_offset,
        active_segment_base_offset=segments[-1].base_offset, high_watermark=hw,
        high_watermark_source=inp.high_watermark_source, first_unstable_offset=unstable,
        last_stable_offset=unstable if unstable is not None and unstable < hw else hw,
        lag_boundary_offset=lag_boundary, first_uncleanable_dirty_offset=raw,
        first_uncleanable_offset=rounded, clean_bytes=clean_bytes, dirty_bytes=dirty_bytes,
        total_bytes=total, dirty_ratio=ratio,
        min_cleanable_dirty_ratio=inp.min_cleanable_dirty_ratio, max_compaction_delay_ms=delay,
        need_compaction_now=delay > 0, must_clean=must_clean, eligible=total > 0 and eligible,
        from_start=from_start,
    )
    rule, detail = explain_range(inp, segments, rng, caps, earliest)
    return dataclasses.replace(rng, blocking_rule=rule, blocking_detail=detail)


def cleaner_order(ranges: Sequence[tuple[str, CleanableRange]]) -> list[tuple[str, int | None]]:
    """The order in which the broker's cleaner would pick these partitions.

    Eligible partitions come first, highest dirty ratio first (``must_clean`` makes a partition
    eligible but gives it no priority); equal ratios keep the given order, as Kafka's ``max`` keeps
    the first it meets.

    Args:
        ranges: (partition name, its range) pairs.

    Returns:
        (name, rank) pairs: ranks 1, 2, ... for the eligible partitions in pick order, then the
        others with rank None, in the given order.
    """
    picked = sorted((pair for pair in ranges if pair[1].eligible), key=lambda p: -p[1].dirty_ratio)
    order: list[tuple[str, int | None]] = [(n, rank) for rank, (n, _) in enumerate(picked, 1)]
    order.extend((name, None) for name, rng in ranges if not rng.eligible)
    return order


# -- Kafka's segment arithmetic -------------------------------------------------------------------


def _checked_segments(inp: RangeInputs) -> Sequence[SegmentStats]:
    """The segments; for a log with none, the empty active segment the broker would create."""
    if not inp.segments:
        start = inp.log_start_offset
        return (SegmentStats(start, 0, -1, -1, start),)
    for before, after in itertools.pairwise(inp.segments):
        if after.base_offset <= before.base_offset:
            raise CleanerStateError(
                f"segment base offsets out of order; expected a base offset above "
                f"{before.base_offset}, found {after.base_offset}"
            )
    return inp.segments


def _segments_in(segments: Sequence[SegmentStats], start: int, end: int) -> list[SegmentStats]:
    """``LogSegments.values(start, end)``: from the segment holding ``start`` to before ``end``."""
    if start >= end:
        return []
    floor = bisect.bisect_right(segments, start, key=lambda s: s.base_offset) - 1
    return [s for s in segments[max(floor, 0) :] if s.base_offset < end]


def _non_active_from(segments: Sequence[SegmentStats], start: int) -> list[SegmentStats]:
    """``nonActiveLogSegmentsFrom``: from the segment holding ``start``, without the active one."""
    active_base = segments[-1].base_offset
    return [] if start > active_base else _segments_in(segments, start, active_base)


def _round_to_segment(segments: Sequence[SegmentStats], offset: int) -> int:
    """Base of the segment holding ``offset``; the active base at or past it."""
    non_active = _non_active_from(segments, offset)
    return non_active[0].base_offset if non_active else segments[-1].base_offset


def _size(segments: Sequence[SegmentStats]) -> int:
    return sum(s.size_in_bytes for s in segments)


def _first_dirty(inp: RangeInputs, from_start: bool) -> tuple[int, str | None]:
    checkpoint, reset = inp.checkpoint_offset, None
    if checkpoint is None:
        checkpoint, reset = inp.log_start_offset, RESET_MISSING
    if checkpoint < inp.log_start_offset:
        checkpoint, reset = inp.log_start_offset, RESET_BELOW_LOG_START
    elif checkpoint > inp.log_end_offset:
        checkpoint, reset = inp.log_start_offset, RESET_PAST_LOG_END
    return (inp.log_start_offset if from_start else checkpoint), reset


def _clamp_high_watermark(inp: RangeInputs) -> int:
    if inp.high_watermark < inp.log_start_offset:
        return inp.log_start_offset
    return min(inp.high_watermark, inp.log_end_offset)


def _lag_boundary(
    segments: Sequence[SegmentStats], first_dirty: int, now_ms: int, min_lag_ms: int
) -> int | None:
    lag = max(min_lag_ms, 0)
    if lag == 0:
        return None
    for segment in _non_active_from(segments, first_dirty):
        if segment.largest_timestamp_ms > now_ms - lag:
            return segment.base_offset
    return None


def _max_compaction_delay(
    segments: Sequence[SegmentStats], first_dirty: int, now_ms: int, max_lag_ms: int
) -> tuple[int, int | None]:
    """(delay, earliest positive first-batch timestamp) over the dirty non-active segments."""
    stamps = (s.first_batch_timestamp_ms for s in _non_active_from(segments, first_dirty))
    earliest = min((ts for ts in stamps if ts > 0), default=None)
    clean_until = now_ms - max(max_lag_ms, 0)
    if earliest is not None and earliest < clean_until:
        return clean_until - earliest, earliest
    return 0, earliest


def _caps(
    active_base: int, hw: int, unstable: int | None, lag_boundary: int | None
) -> list[tuple[str, int]]:
    caps = [(RULE_ACTIVE_SEGMENT, active_base), (RULE_HIGH_WATERMARK, hw)]
    if unstable is not None and unstable < hw:
        caps.append((RULE_OPEN_TRANSACTION, unstable))
    if lag_boundary is not None:
        caps.append((RULE_MIN_COMPACTION_LAG, lag_boundary))
    return caps
