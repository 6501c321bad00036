"""``inspect dirty-ratio``: per partition, the numbers the broker's cleaner computes, and what blocks it.

Reads sizes, checkpoints, index tails and batch headers only (through ``cleaner.log_state``), then applies the
one implementation of Kafka's range rules (``cleaner.ranges``), so ``clean`` and this report can never
disagree. Field names of :class:`DirtyRatioRow` are part of the ``--json`` interface.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kcompact.cleaner.log_state import load_log_state
from kcompact.cleaner.ranges import CleanableRange, cleaner_order, compute_cleanable_range
from kcompact.cleaner.run import resolve_config
from kcompact.errors import KcompactError
from kcompact.segment.lock import broker_holds_lock
from kcompact.segment.partition import (
    METADATA_TOPIC,
    is_partition_dir,
    iter_partition_dirs,
    open_partition,
)

ADVICE = {
    "active-segment": (
        "the data waits in the active segment: lower segment.ms (or max.compaction.lag.ms, which also "
        "rolls compacted topics) so the broker rolls it; offline, `kcompact clean --roll`"
    ),
    "high-watermark": "records above the high watermark are not replicated yet; nothing to change offline",
    "open-transaction": (
        "an open transaction holds the last stable offset; the producer must commit or abort "
        "(or the transaction coordinator times it out)"
    ),
    "min-compaction-lag": "recent segments are inside min.compaction.lag.ms; they become cleanable as they age",
    "below-dirty-ratio": (
        "the dirty ratio is at or below min.cleanable.dirty.ratio; prefer max.compaction.lag.ms to force a "
        "clean by age over lowering the ratio (a low ratio makes busy topics clean far too often)"
    ),
    "checkpoint-reset": "cleaner-offset-checkpoint points outside the log; the broker resets it to the log start",
    "cleanup-policy": "the topic is not compacted (cleanup.policy has no 'compact'); the cleaner skips it",
}


@dataclass(slots=True)
class DirtyRatioRow:
    """One partition's row (the ``--json`` object)."""

    topic: str
    partition: int
    partition_dir: str
    cleanup_policy: str
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    high_watermark: int | None = None
    high_watermark_source: str | None = None
    last_stable_offset: int | None = None
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    clean_bytes: int = 0
    dirty_bytes: int = 0
    dirty_ratio: float = 0.0
    min_cleanable_dirty_ratio: float = 0.5
    eligible: bool = False
    must_clean: bool = False
    max_compaction_delay_ms: int = 0
    blocking_rule: str | None = None
    blocking_detail: str | None = None
    cleaner_rank: int | None = None
    warnings: list[str] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def dirty_ratio_report(
    paths: Iterable[str | Path], *, cli_overrides: Mapping[str, str], now_ms: int | None = None
) -> list[DirtyRatioRow]:
    """Rows for every partition under ``paths`` (log dirs or partition dirs), in the cleaner's pick order.

    Args:
        paths: log dirs and/or partition directories.
        cli_overrides: ``--config`` pairs.
        now_ms: the clock (default: now).

    Returns:
        One row per partition: ranked eligible ones first (rank 1 = the broker's next pick), then the
        others by name. A partition whose files do not parse gets a row with ``error`` set.

    Raises:
        KcompactError: a path is neither a log dir nor a partition directory.
    """
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    config, notes = resolve_config(cli_overrides)
    rows: list[DirtyRatioRow] = []
    ranges: list[tuple[str, CleanableRange]] = []
    for part_dir in _partition_dirs(paths):
        row, rng = _row(part_dir, config, now, notes)
        rows.append(row)
        if rng is not None:
            ranges.append((row.partition_dir, rng))
    ranks = dict(cleaner_order(ranges))
    for row in rows:
        row.cleaner_rank = ranks.get(row.partition_dir)
    rows.sort(key=lambda r: (r.cleaner_rank is None, r.cleaner_rank or 0, r.topic, r.partition))
    return rows


def _partition_dirs(paths: Iterable[str | Path]) -> list[Path]:
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if is_partition_dir(path):
            found.append(path)
        elif path.is_dir():
            found.extend(iter_partition_dirs(path))
        else:
            raise KcompactError(f"{path}: not a log dir or partition directory")
    return found


def _row(part_dir: Path, config: Any, now: int, notes: list[str]) -> tuple[DirtyRatioRow, CleanableRange | None]:
    partition = open_partition(part_dir)
    row = DirtyRatioRow(
        topic=partition.topic,
        partition=partition.partition,
        partition_dir=str(part_dir),
        cleanup_policy=",".join(config.cleanup_policy),
        min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
    )
    row.warnings.extend(notes)
    if broker_holds_lock(part_dir.parent):
        row.warnings.append("a running broker holds this log dir: the active segment may be moving")
    if partition.topic == METADATA_TOPIC:
        row.blocking_rule = "cleanup-policy"
        row.blocking_detail = "__cluster_metadata is KRaft's own log; no cleaner touches it"
        return row, None
    try:
        state = load_log_state(partition, config)
    except KcompactError as err:
        row.error = str(err)
        return row, None
    row.warnings.extend(state.warnings)
    rng = compute_cleanable_range(state.range_inputs(config, now))
    _fill(row, rng)
    return row, rng


def _fill(row: DirtyRatioRow, rng: CleanableRange) -> None:
    row.log_start_offset = rng.log_start_offset
    row.log_end_offset = rng.log_end_offset
    row.high_watermark = rng.high_watermark
    row.high_watermark_source = rng.high_watermark_source
    row.last_stable_offset = rng.last_stable_offset
    row.first_dirty_offset = rng.first_dirty_offset
    row.first_uncleanable_offset = rng.first_uncleanable_offset
    row.clean_bytes = rng.clean_bytes
    row.dirty_bytes = rng.dirty_bytes
    row.dirty_ratio = rng.dirty_ratio
    row.eligible = rng.eligible
    row.must_clean = rng.must_clean
    row.max_compaction_delay_ms = rng.max_compaction_delay_ms
    row.blocking_rule = rng.blocking_rule
    row.blocking_detail = rng.blocking_detail
