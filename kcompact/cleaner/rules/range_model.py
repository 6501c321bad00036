"""The values of Kafka's cleaner range rules: what goes in, what comes out, and the rule names.

Split from ``ranges.py`` (which holds the rules themselves and the picture of the log) so that the
rules and their explanation in words (``range_explanation.py``) can share these values without
importing each other. ``SegmentStats`` and ``RangeInputs`` are what the caller reads from disk and
config (``log_state.py``); ``CleanableRange`` is the decision, every number of it, with the rule that
limits it (one of the ``RULE_*`` names) and that rule in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

LONG_MAX = 2**63 - 1  # Java Long.MAX_VALUE: an unlimited max.compaction.lag.ms

RULE_ACTIVE_SEGMENT = "active-segment"
RULE_HIGH_WATERMARK = "high-watermark"
RULE_OPEN_TRANSACTION = "open-transaction"
RULE_MIN_COMPACTION_LAG = "min-compaction-lag"
RULE_BELOW_DIRTY_RATIO = "below-dirty-ratio"
RULE_CHECKPOINT_RESET = "checkpoint-reset"
RULE_CLEANUP_POLICY = "cleanup-policy"
CAP_ORDER = (  # ties between caps go to the earlier one
    RULE_ACTIVE_SEGMENT, RULE_HIGH_WATERMARK, RULE_OPEN_TRANSACTION, RULE_MIN_COMPACTION_LAG,
)

RESET_BELOW_LOG_START = "below-log-start"
RESET_PAST_LOG_END = "past-log-end"
RESET_MISSING = "missing"


@dataclass(frozen=True, slots=True)
class SegmentStats:
    """What the range rules need to know of one segment (the caller reads it from disk)."""

    base_offset: int
    size_in_bytes: int
    largest_timestamp_ms: int  # last time-index timestamp if >= 0, else the .log mtime
    first_batch_timestamp_ms: int  # first batch's max_timestamp, -1 if none/empty
    next_offset: int  # offset after the last batch (the base if empty)


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """An undecided transaction, for the report (any object with these attributes will do)."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    first_timestamp_ms: int = -1  # timestamp of its first batch, -1 if unknown


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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
