"""Kafka's cleaner range decision in words: the rule that limits a range, and why, for people.

Split from ``ranges.py``, which computes the range: this module only words a decision already made
(``CleanableRange.blocking_rule`` / ``blocking_detail``), so ``inspect why-not-cleaning`` and the
``clean`` report can say which cap or threshold holds the log back, with the offsets, ages and
times that decide it. Pure: values in, text out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from kcompact.cleaner.rules.range_model import (
    CAP_ORDER,
    LONG_MAX,
    RESET_BELOW_LOG_START,
    RULE_ACTIVE_SEGMENT,
    RULE_BELOW_DIRTY_RATIO,
    RULE_CHECKPOINT_RESET,
    RULE_CLEANUP_POLICY,
    RULE_HIGH_WATERMARK,
    RULE_OPEN_TRANSACTION,
    CleanableRange,
    RangeInputs,
    SegmentStats,
)


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
        f"the active segment (base offset {active.base_offset}, {active.size_in_bytes} bytes) "
        f"is never cleaned"
    )
    if active.size_in_bytes == 0:
        return f"{head}; it is empty and rolls only once data is appended"
    by_size = (
        f"an append that would take it past segment.bytes {inp.segment_bytes} "
        f"({max(inp.segment_bytes - active.size_in_bytes, 0)} bytes left) rolls it"
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
    if inp.max_compaction_lag_ms >= LONG_MAX:
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
    if ms >= LONG_MAX:
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
