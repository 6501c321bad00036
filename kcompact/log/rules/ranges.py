"""Kafka's range rules: what the broker's cleaner would clean in a partition, and why not more.

The one implementation (pure: values in, decisions out) of ``LogCleanerManager.cleanableOffsets``,
``calculateCleanableBytes`` and ``maxCompactionDelay`` and of ``LogToClean``, shared by ``clean``,
``inspect dirty-ratio`` and Spark, settled against Kafka 4.1's Java sources.

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

From Kafka's ``UnifiedLog``: the high watermark is clamped into [log start, log
end] and an open transaction's first offset is raised to the log start.

In this module, in reading order: the values (what goes in: ``SegmentStats`` and ``RangeInputs``, read
from disk and config by ``log.state.log_state``; what comes out: ``CleanableRange``, every number of
the decision with the ``RULE_*`` that limits it), the rules, and the decision in words for people
(``blocking_rule`` / ``blocking_detail``: which cap or threshold holds the log back, with the offsets,
ages and times that decide it).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Sequence
from datetime import UTC, datetime

from kcompact.errors import CleanerStateError
from kcompact.records.varint import INT64_MAX
from kcompact.text import size_text
from kcompact.value import frozen

RULE_ACTIVE_SEGMENT = "active-segment"
RULE_HIGH_WATERMARK = "high-watermark"
RULE_OPEN_TRANSACTION = "open-transaction"
RULE_MIN_COMPACTION_LAG = "min-compaction-lag"
RULE_CLEAN_LIMIT = "clean-limit"  # clean --replica-dirs: a copy's lineage parts from this one (``rules.fence``)
RULE_BELOW_DIRTY_RATIO = "below-dirty-ratio"
RULE_CHECKPOINT_RESET = "checkpoint-reset"
RULE_CLEANUP_POLICY = "cleanup-policy"
CAP_ORDER = (  # ties between caps go to the earlier one
    RULE_ACTIVE_SEGMENT, RULE_HIGH_WATERMARK, RULE_OPEN_TRANSACTION, RULE_MIN_COMPACTION_LAG, RULE_CLEAN_LIMIT,
)

RESET_BELOW_LOG_START = "below-log-start"
RESET_PAST_LOG_END = "past-log-end"
RESET_MISSING = "missing"


@frozen
class SegmentStats:
    """What the range rules need to know of one segment (the caller reads it from disk)."""

    base_offset: int
    size_in_bytes: int
    largest_timestamp_ms: int  # last time-index timestamp if >= 0, else the .log mtime
    first_batch_timestamp_ms: int  # first batch's max_timestamp, -1 if none/empty
    next_offset: int  # offset after the last batch (the base if empty)


@frozen
class OpenTxn:
    """An undecided transaction, for the report (any object with these attributes will do)."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    first_timestamp_ms: int = -1  # timestamp of its first batch, -1 if unknown


@frozen
class RangeInputs:
    """One partition's state and topic config, as the broker's cleaner would see them."""

    segments: Sequence[SegmentStats]  # ascending; the last one is the active segment
    log_start_offset: int
    log_end_offset: int
    checkpoint_offset: int | None  # cleaner-offset-checkpoint entry, None if absent
    high_watermark: int
    high_watermark_source: str  # e.g. "replication-offset-checkpoint", "log-end (no entry)"
    first_unstable_offset: int | None  # earliest open transaction's first offset, None if none
    open_txn: object | None  # for the report: producer_id, producer_epoch, first_timestamp_ms
    now_ms: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    segment_ms: int
    segment_bytes: int
    policy: tuple[str, ...]  # cleanup.policy


@frozen
class CleanableRange:
    """Every number of the broker's decision for one partition, and the rule that limits it."""

    first_dirty_offset: int
    checkpoint_offset: int | None
    checkpoint_reset: str | None  # None | "below-log-start" | "past-log-end" | "missing"
    force_update_checkpoint: bool  # the broker rewrites the checkpoint (below / past resets)
    log_start_offset: int
    log_end_offset: int
    active_segment_base_offset: int
    high_watermark: int  # clamped into [log start, log end], as UnifiedLog does
    high_watermark_source: str
    first_unstable_offset: int | None  # raised to the log start, as UnifiedLog does
    last_stable_offset: int
    lag_boundary_offset: int | None  # the min.compaction.lag.ms cap, None when there is none
    first_uncleanable_dirty_offset: int  # raw: max(first dirty, min(caps))
    first_uncleanable_offset: int  # rounded down to a segment base, as LogToClean does
    clean_bytes: int
    dirty_bytes: int  # LogToClean.cleanableBytes
    total_bytes: int
    dirty_ratio: float  # LogToClean.cleanableRatio; 0.0 when total_bytes is 0
    min_cleanable_dirty_ratio: float
    max_compaction_delay_ms: int
    need_compaction_now: bool  # Kafka's flag: max_compaction_delay_ms > 0
    must_clean: bool  # need_compaction_now and dirty_bytes > 0
    eligible: bool  # the broker's cleaner would pick this log (when it is the dirtiest)
    from_start: bool
    blocking_rule: str = ""
    blocking_detail: str = ""


_INVALID_CHECKPOINT = (RESET_BELOW_LOG_START, RESET_PAST_LOG_END)


def compute_cleanable_range(inp: RangeInputs, *, from_start: bool = False,
                            clean_limit: int | None = None) -> CleanableRange:
    """Apply Kafka's cleaner range rules to one partition.

    Args:
        inp: the partition's segments, offsets, checkpoint, transactions, clock and config.
        from_start: take the log start as the first dirty offset (``clean --from-start``); the
            other caps still apply.
        clean_limit: one more cap, kcompact's own (``rules.fence.clean_limit``: Kafka may truncate this
            copy from there); None: Kafka's caps alone.

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
    if clean_limit is not None:
        caps.append((RULE_CLEAN_LIMIT, clean_limit))
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
    ranks = pick_ranks([(rng.eligible, rng.dirty_ratio) for _name, rng in ranges])
    picked = sorted((rank, name) for (name, _rng), rank in zip(ranges, ranks, strict=True) if rank is not None)
    order: list[tuple[str, int | None]] = [(name, rank) for rank, name in picked]
    order.extend((name, None) for (name, _rng), rank in zip(ranges, ranks, strict=True) if rank is None)
    return order


def pick_order(candidates: Sequence[tuple[bool, float]]) -> list[int]:
    """The broker cleaner's pick order (``LogCleanerManager.grabFilthiestCompactedLog``): the eligible
    candidates, highest dirty ratio first, equal ratios in the given order.

    Kafka picks the ``max`` by ``LogToClean``'s cleanable ratio, cleans it, and picks again (a cleaned
    log's ratio drops), so its picks follow the ratios downwards. Among equal ratios ``max`` keeps the
    first it meets, in the iteration order of the cleaner's pool of logs, a hash map with no defined
    order; kcompact gives the order it lists partitions in (by name), so a run does not vary. This is
    the one pick order: ``inspect dirty-ratio``'s ranks, ``spark inspect dirty-ratio``'s ranks and the
    order ``clean`` cleans a log dir in (``logdir.run.cleaner_order``) all come from here.

    Args:
        candidates: (eligible, dirty ratio) of each partition, in listing order.

    Returns:
        The indices of the eligible candidates, the first picked first.
    """
    return sorted((i for i, (ok, _ratio) in enumerate(candidates) if ok), key=lambda i: -candidates[i][1])


def pick_ranks(candidates: Sequence[tuple[bool, float]]) -> list[int | None]:
    """Each candidate's place in :func:`pick_order`.

    Args:
        candidates: (eligible, dirty ratio) of each partition, in listing order.

    Returns:
        Each candidate's rank (1 is picked first), or None for one that is not eligible.
    """
    ranks: list[int | None] = [None] * len(candidates)
    for rank, i in enumerate(pick_order(candidates), 1):
        ranks[i] = rank
    return ranks


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
    return clamp_high_watermark(inp.high_watermark, inp.log_start_offset, inp.log_end_offset)


def clamp_high_watermark(high_watermark: int, log_start_offset: int, log_end_offset: int) -> int:
    """The high watermark a broker holds: ``UnifiedLog.updateHighWatermark`` bounds it below by the log
    start and above by the log end."""
    if high_watermark < log_start_offset:
        return log_start_offset
    return min(high_watermark, log_end_offset)


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


def explain_range(
    inp: RangeInputs,
    segments: Sequence[SegmentStats],
    rng: CleanableRange,
    caps: list[tuple[str, int]],
    earliest_dirty_timestamp_ms: int | None,
) -> tuple[str, str]:
    """The rule that limits a computed range, and that rule in words.

    Args:
        inp: the partition's inputs the range was computed from.
        segments: its segments (the last one active), as the range rules saw them.
        rng: the computed range (its ``blocking_rule`` / ``blocking_detail`` are not read).
        caps: (rule, offset) pairs capping the first uncleanable offset.
        earliest_dirty_timestamp_ms: the earliest positive first-batch timestamp of the dirty
            non-active segments (the ``max.compaction.lag.ms`` clock), None if there is none.

    Returns:
        (blocking rule, detail): one of the ``RULE_*`` names and a sentence for people.
    """
    if "compact" not in inp.policy:
        return RULE_CLEANUP_POLICY, (
            f"cleanup.policy is {','.join(inp.policy) or 'empty'}; the broker's cleaner only "
            f"compacts logs whose policy includes compact"
        )
    rule, offset = min(caps, key=lambda cap: (cap[1], CAP_ORDER.index(cap[0])))
    if rng.dirty_bytes > 0 and not rng.eligible:
        rule, detail = RULE_BELOW_DIRTY_RATIO, _ratio_detail(inp, rng, earliest_dirty_timestamp_ms)
    else:
        detail = _cap_detail(rule, offset, inp, segments, rng)
    if rng.force_update_checkpoint and not rng.from_start:
        where = (
            f"below the log start offset {rng.log_start_offset}"
            if rng.checkpoint_reset == RESET_BELOW_LOG_START
            else f"past the log end offset {rng.log_end_offset}"
        )
        detail = (
            f"cleaner-offset-checkpoint holds {rng.checkpoint_offset}, {where}; the broker resets "
            f"the first dirty offset to the log start offset {rng.log_start_offset} and rewrites "
            f"the checkpoint; then {detail}"
        )
        rule = RULE_CHECKPOINT_RESET
    return rule, detail


def checkpoint_reset_warning(rng: CleanableRange) -> str | None:
    """What ``LogCleanerManager.cleanableOffsets`` logs when the checkpoint lies outside the log, None
    when it does not (or ``--from-start`` ignores it): the reset must never pass without a word.

    Args:
        rng: the computed range.

    Returns:
        One sentence naming the checkpointed offset, the bound it crosses and the offset it resets to.
    """
    if not rng.force_update_checkpoint or rng.from_start:
        return None
    where = (f"below the log start offset {rng.log_start_offset}" if rng.checkpoint_reset == RESET_BELOW_LOG_START
             else f"past the log end offset {rng.log_end_offset}")
    return (f"cleaner-offset-checkpoint holds {rng.checkpoint_offset} for this partition, {where}: reset to "
            f"the log start offset {rng.log_start_offset}, as the broker's cleaner does "
            f"(LogCleanerManager), so the whole log counts as dirty")


def _cap_detail(
    rule: str, offset: int, inp: RangeInputs, segments: Sequence[SegmentStats], rng: CleanableRange
) -> str:
    if rule == RULE_ACTIVE_SEGMENT:
        return _active_detail(inp, segments[-1])
    held = f"the segment holding it (base offset {rng.first_uncleanable_offset}) and all after it"
    if rule == RULE_HIGH_WATERMARK:
        clamped = "" if offset == inp.high_watermark else f", clamped from {inp.high_watermark}"
        return (
            f"the high watermark {offset} (from {inp.high_watermark_source}{clamped}) caps "
            f"cleaning: offsets from it on are not known to be replicated, so {held} stay dirty"
        )
    if rule == RULE_OPEN_TRANSACTION:
        txn = _txn_words(inp.open_txn, offset, inp.now_ms)
        return f"{txn} is undecided, so {held} wait for its commit or abort"
    if rule == RULE_CLEAN_LIMIT:
        return (f"another replica's leader-epoch lineage parts from this copy at offset {offset} (--replica-dirs): "
                f"Kafka may truncate this copy from there, so {held} stay dirty")
    segment = next(s for s in segments if s.base_offset == offset)
    ready_ms = segment.largest_timestamp_ms + max(inp.min_compaction_lag_ms, 0)
    return (
        f"segment {offset} holds data {_age(inp.now_ms - segment.largest_timestamp_ms)} "
        f"(largest timestamp {_utc(segment.largest_timestamp_ms)}), within min.compaction.lag.ms "
        f"{_duration(inp.min_compaction_lag_ms)}; it becomes cleanable at {_utc(ready_ms)} "
        f"(in {_duration(ready_ms - inp.now_ms)})"
    )


def _active_detail(inp: RangeInputs, active: SegmentStats) -> str:
    head = (
        f"the active segment (base offset {active.base_offset}, {size_text(active.size_in_bytes)}) "
        f"is never cleaned"
    )
    if active.size_in_bytes == 0:
        return f"{head}; it is empty and rolls only once data is appended"
    by_size = (
        f"an append that would take it past segment.bytes {size_text(inp.segment_bytes)} "
        f"({size_text(max(inp.segment_bytes - active.size_in_bytes, 0))} left) rolls it"
    )
    first_ts = active.first_batch_timestamp_ms
    if first_ts < 0:
        return (
            f"{head}; its first batch has no timestamp, so time rolls it only once the broker has "
            f"held it open for segment.ms; or {by_size}"
        )
    # LogConfig.maxSegmentMs: a compacted log also rolls on max.compaction.lag.ms. The clock is the
    # new batch's timestamp against the first batch's (LogSegment.timeWaitedForRoll).
    roll_ms, roll_key = inp.segment_ms, "segment.ms"
    if "compact" in inp.policy and 0 < inp.max_compaction_lag_ms < inp.segment_ms:
        roll_ms, roll_key = inp.max_compaction_lag_ms, "max.compaction.lag.ms"
    due_ms = first_ts + roll_ms
    by_time = (
        f"a batch stamped now is past {roll_key} {_duration(roll_ms)}, so the next append rolls it"
        if inp.now_ms > due_ms
        else f"a batch stamped after {_utc(due_ms)} (in {_duration(due_ms - inp.now_ms)}; "
        f"{roll_key} {_duration(roll_ms)}) rolls it"
    )
    return f"{head}; its first batch is {_age(inp.now_ms - first_ts)}; {by_time}; or {by_size}"


def _txn_words(txn: object | None, first_offset: int, now_ms: int) -> str:
    producer_id = getattr(txn, "producer_id", None)
    epoch = getattr(txn, "producer_epoch", None)
    started = getattr(txn, "first_timestamp_ms", -1)
    who = "" if producer_id is None else f" of producer id {producer_id}"
    if producer_id is not None and epoch is not None:
        who += f" (epoch {epoch})"
    when = f", {_age(now_ms - started)}," if isinstance(started, int) and started >= 0 else ""
    return f"an open transaction{who} beginning at offset {first_offset}{when}"


def _ratio_detail(inp: RangeInputs, rng: CleanableRange, earliest: int | None) -> str:
    head = (
        f"dirty ratio {rng.dirty_ratio:.4f} ({rng.dirty_bytes} of {rng.total_bytes} bytes) is not "
        f"above min.cleanable.dirty.ratio {inp.min_cleanable_dirty_ratio}"
    )
    if inp.max_compaction_lag_ms >= INT64_MAX:  # Long.MAX_VALUE: unlimited
        return f"{head}, and max.compaction.lag.ms is unlimited"
    if earliest is None:
        return f"{head}, and no dirty segment has a first-batch timestamp for max.compaction.lag.ms"
    due_ms = earliest + max(inp.max_compaction_lag_ms, 0)
    return (
        f"{head}; the oldest dirty data (first batch {_utc(earliest)}) forces a clean under "
        f"max.compaction.lag.ms {_duration(inp.max_compaction_lag_ms)} after {_utc(due_ms)}"
    )


def _duration(ms: int) -> str:
    """A short duration for people: "850 ms", "45s", "3h 5m", "2d 4h"."""
    if ms >= INT64_MAX:
        return "unlimited"
    if abs(ms) < 1000:
        return f"{ms} ms"
    sign, rest = ("-" if ms < 0 else ""), abs(ms) // 1000
    parts: list[str] = []
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= seconds:
            parts.append(f"{rest // seconds}{unit}")
            rest %= seconds
    return sign + " ".join(parts[:2])


def _age(ms: int) -> str:
    return f"{_duration(ms)} old" if ms >= 0 else f"{_duration(-ms)} in the future"


def _utc(ms: int) -> str:
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms after the epoch"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
