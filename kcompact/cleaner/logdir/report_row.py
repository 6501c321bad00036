"""One partition's row in the report of a clean: the one shape every clean report emits.

``kcompact clean --json`` (its ``results`` and ``failures``), ``kcompact repair --clean --json`` and
``kcompact spark clean`` (``--json`` and the ``--output`` Parquet rows, which add how and where a Spark
task ran) all build a partition's row with :func:`partition_row`, so a script reads the same keys
whichever command cleaned. The row is flat (scalars and lists of scalars) but for the replica fence's two
objects, so it is also a DataFrame row: :data:`ROW_COLUMNS` names each key with its Python type, from which
``kcompact.spark.rows`` derives the Spark schema (the two objects as structs)::

    partition_dir, topic, partition, status, error     which partition, what happened (STATUS_*)
    now_ms, dry_run, first_dirty_offset, ...           the CleanResult's clock, range and checkpoint
    bytes_read, ..., elapsed_s, size_reduction         CleanStats, flattened
    retention_deleted_segments, retention_reasons, ... segment retention (one reason a deleted segment)
    space_peak_bytes, space_gives_back_bytes           the space a dry run measured (``disk.space``)
    fence, clean_limit                                 the replica fence and clean limit (``rules.fence``;
                                                       None without --replica-dirs / --safe-offset)

A failed partition's row has ``status`` "failed" (or "bug" for an exception that is not kcompact's
deliberate error), its ``error``, and None (empty lists) where a clean would have said more. A log
dir's partition that was not cleaned because it is not known to be compacted has ``status``
"skipped" and the reason in ``skipped_reason``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kcompact.cleaner.round.options import CleanResult
from kcompact.cleaner.round.stats import CleanStats
from kcompact.segment.names import parse_partition_dir_name

__all__ = [
    "ROW_COLUMNS",
    "STATUS_BUG",
    "STATUS_CLEANED",
    "STATUS_FAILED",
    "STATUS_NOTHING",
    "STATUS_SKIPPED",
    "STATUS_WOULD_CLEAN",
    "partition_row",
]

STATUS_CLEANED = "cleaned"
STATUS_WOULD_CLEAN = "would clean"  # a dry run
STATUS_NOTHING = "nothing to clean"
STATUS_FAILED = "failed"  # a KcompactError: bad data or a refusal; the partition is untouched
STATUS_SKIPPED = "skipped"  # a log dir's partition not known to be compacted (skipped_reason says why)
STATUS_BUG = "bug"  # any other exception: a bug in kcompact (its traceback is the error)

_HEAD: tuple[tuple[str, str], ...] = (
    ("partition_dir", "str"),
    ("topic", "str | None"),
    ("partition", "int | None"),
    ("status", "str"),
    ("error", "str | None"),
    ("now_ms", "int | None"),
    ("dry_run", "bool | None"),
    ("first_dirty_offset", "int | None"),
    ("first_uncleanable_offset", "int | None"),
    ("end_offset", "int | None"),
    ("checkpoint_before", "int | None"),
    ("checkpoint_written", "bool | None"),
    ("rolled", "bool | None"),  # --roll kept a new empty active segment (a dry run: would)
    ("dirty_ratio", "float | None"),
    ("blocking_rule", "str | None"),
    ("skipped_reason", "str | None"),
    ("recovery_actions", "list[str]"),
    ("scratch_actions", "list[str]"),  # --scratch-dir: settled, and each group brought in (``disk.scratch``)
    ("warnings", "list[str]"),
    ("fence", "ReplicaFence | None"),  # rules.fence.ReplicaFence.as_dict
    ("clean_limit", "CleanLimit | None"),  # rules.fence.CleanLimit.as_dict
    ("high_watermark", "int | None"),  # the high watermark the range was capped by
    ("high_watermark_note", "str | None"),  # why it is the log end, not the checkpoint's (rules.high_watermark)
)
_TAIL: tuple[tuple[str, str], ...] = (
    ("size_reduction", "float | None"),
    ("retention_deleted_segments", "list[int]"),  # base offsets of the segments retention deleted
    ("retention_reasons", "list[str]"),  # the rule that deleted each of them, in the same order
    ("retention_bytes_deleted", "int | None"),
    ("retention_log_start_before", "int | None"),
    ("retention_log_start_after", "int | None"),
    ("retention_rolled", "bool | None"),
    ("space_peak_bytes", "int | None"),  # free space the clean needs at its peak (``disk.space``)
    ("space_gives_back_bytes", "int | None"),  # what it frees once done (the free space: the run's, not a row's)
    ("scratch_peak_bytes", "int | None"),  # a dry run with --scratch-dir: its output there at peak
    ("scratch_free_bytes", "int | None"),  # and the scratch dir's volume's free space
)

ROW_COLUMNS: tuple[tuple[str, str], ...] = (
    _HEAD + tuple((f.name, f"{f.type} | None") for f in dataclasses.fields(CleanStats)) + _TAIL
)
"""(key, Python type) of a row, in order; the CleanStats counters are None in a failed partition's row."""


def partition_row(
    partition_dir: str,
    result: CleanResult | None,
    *,
    error: str | None = None,
    status: str | None = None,
    skipped: str | None = None,
) -> dict[str, Any]:
    """One partition's row, keys in :data:`ROW_COLUMNS` order.

    Args:
        partition_dir: the partition directory.
        result: what the clean returned; None when it failed.
        error: the failure's one-line message (or a bug's traceback).
        status: the failure's status (default :data:`STATUS_FAILED`); a clean's status is derived
            from its result.
        skipped: why a log dir's partition was left alone (``result`` is then None).

    Returns:
        The row: JSON-ready values.
    """
    row: dict[str, Any] = {name: None for name, _ in ROW_COLUMNS}
    row.update(partition_dir=partition_dir, error=error, recovery_actions=[], scratch_actions=[], warnings=[],
               retention_deleted_segments=[], retention_reasons=[])
    if result is None:  # which partition, from its directory's name
        name = parse_partition_dir_name(Path(partition_dir).name)
        row.update(topic=name and name.topic, partition=name and name.partition)
    if skipped is not None:
        row.update(status=STATUS_SKIPPED, skipped_reason=skipped)
        return row
    if result is None:
        row["status"] = status or STATUS_FAILED
        return row
    rng = result.range
    row.update(
        topic=result.topic, partition=result.partition, status=_status(result), now_ms=result.now_ms,
        dry_run=result.dry_run, end_offset=result.end_offset, checkpoint_before=result.checkpoint_before,
        checkpoint_written=result.checkpoint_written, rolled=result.rolled, skipped_reason=result.skipped_reason,
        recovery_actions=list(result.recovery_actions), scratch_actions=list(result.scratch_actions),
        warnings=list(result.warnings),
        size_reduction=round(result.stats.size_reduction, 6),
        fence=None if result.fence is None else result.fence.as_dict(),
        clean_limit=None if result.clean_limit is None else result.clean_limit.as_dict(),
    )
    if rng is not None:
        row.update(first_dirty_offset=rng.first_dirty_offset,
                   first_uncleanable_offset=rng.first_uncleanable_offset,
                   dirty_ratio=rng.dirty_ratio, blocking_rule=rng.blocking_rule or None,
                   high_watermark=rng.high_watermark, high_watermark_note=result.high_watermark_note)
    row.update(dataclasses.asdict(result.stats))
    if result.space is not None:
        row.update(space_peak_bytes=result.space.peak_bytes, space_gives_back_bytes=result.space.gives_back_bytes)
    row.update(scratch_peak_bytes=result.scratch_peak_bytes, scratch_free_bytes=result.scratch_free_bytes)
    plan = result.retention
    if plan is not None:
        row.update(retention_deleted_segments=list(plan.deleted_segments),
                   retention_reasons=[plan.reasons.get(base, "") for base in plan.deleted_segments],
                   retention_bytes_deleted=plan.bytes_deleted, retention_log_start_before=plan.log_start_before,
                   retention_log_start_after=plan.log_start_after, retention_rolled=plan.rolled)
    return row


def _status(result: CleanResult) -> str:
    if result.skipped_reason is not None:
        return STATUS_NOTHING
    return STATUS_WOULD_CLEAN if result.dry_run else STATUS_CLEANED
