"""Pass 2 of a cleaning round: filter source batches into output batches (spec §6.9-§6.12).

Per batch, in log order: the transaction bookkeeping and Kafka's batch decision (``policy.py``), then the
record decision over the batch's columns, then the rewrite (``kcompact.records.filter``). The record
decision asks a :class:`~kcompact.cleaner.oracle.RetentionOracle` whether each keyed record covered by
the map is the latest for its key, for the whole batch at once, and derives the rest with numpy masks
over the scanned columns (``array('q')`` columns are viewed, not copied):

    keep = beyond the map | (is latest & (has a value | tombstone still before its horizon))

with the reasons counted from the same masks (keyless records are "invalid", superseded values and
tombstones counted apart). Legacy (magic 0/1) entries take the same decision over their decoded records.

:func:`filter_segment` walks one source segment, or the batches starting in a byte range of it, and hands
each output batch to a sink: the output segment's writer in the serial case, a buffer sent back to the
parent from a worker (``parallel.py``). A range that starts inside a segment walks the headers before it
for the transaction state only; ABORT markers retained there belong to the range before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kcompact.cleaner.log_state import read_control
from kcompact.cleaner.oracle import RetentionOracle
from kcompact.cleaner.plan import CleanPlan, SegmentPlan
from kcompact.cleaner.policy import BatchDecision, check_batch_retention, output_delete_horizon
from kcompact.cleaner.producer_state import LastRecord
from kcompact.cleaner.stats import CleanStats
from kcompact.cleaner.transactions import CleanedTransactionMetadata
from kcompact.errors import CleanerStateError, CorruptDataError
from kcompact.records.filter import (
    DROPPED,
    BatchRetention,
    FilteredBatch,
    Outcome,
    filter_legacy_entry,
    filter_v2_batch,
)
from kcompact.records.legacy import legacy_records
from kcompact.records.record import records_bytes
from kcompact.records.scan import RecordColumns, scan_records
from kcompact.segment.log_file import LogFile
from kcompact.segment.txn_index import AbortedTxn

Sink = Callable[[bytes | memoryview, int, int], None]
"""Receives each output batch: its bytes, last offset and max timestamp (what the indexes need)."""


@dataclass(slots=True)
class FilterContext:
    """What filtering needs in one process: the round's clock and bounds, the oracle, the transaction
    state (carried from segment to segment), the live producers and the counters."""

    oracle: RetentionOracle
    txn: CleanedTransactionMetadata[AbortedTxn]
    last_records: dict[int, LastRecord]
    upper_bound: int
    now_ms: int
    delete_retention_ms: int
    stats: CleanStats

    @classmethod
    def at(
        cls, plan: CleanPlan, seg: SegmentPlan, oracle: RetentionOracle, stats: CleanStats
    ) -> FilterContext:
        """A context positioned at the start of ``seg`` (its transaction state from the plan's seed).

        Raises:
            CleanerStateError: the oracle covers a different range than the plan.
        """
        if oracle.map_latest_offset != plan.map_latest_offset:
            raise CleanerStateError(
                f"{plan.partition_dir}: the retention oracle's map_latest_offset; expected "
                f"{plan.map_latest_offset} (the plan's), found {oracle.map_latest_offset}"
            )
        return cls(
            oracle=oracle,
            txn=CleanedTransactionMetadata.from_seed(seg.clean_seed),
            last_records=dict(plan.last_records),
            upper_bound=plan.first_uncleanable_offset,
            now_ms=plan.now_ms,
            delete_retention_ms=plan.config.delete_retention_ms,
            stats=stats,
        )


def filter_segment(
    plan: CleanPlan,
    seg: SegmentPlan,
    ctx: FilterContext,
    sink: Sink,
    start_position: int = 0,
    end_position: int | None = None,
) -> None:
    """Filter the batches of ``seg`` that start in ``[start_position, end_position)`` into ``sink``.

    ``ctx`` must be positioned at the start of ``seg`` (``FilterContext.at``, or the previous
    segment's walk); it is left at the end of the range.

    Raises:
        CorruptDataError: a batch or record does not parse (names the file and position).
    """
    ctx.txn.add_aborted(plan.aborted_in(seg.base_offset, seg.upper_offset))
    retain_legacy = seg.mtime_ms > plan.legacy_delete_horizon_ms
    with LogFile(seg.log_path) as log:
        batches = _skip_to(log, start_position, ctx.txn)
        for batch in batches:
            if end_position is not None and batch.position >= end_position:
                break
            out = _filter_batch(batch, ctx, retain_legacy, log.path)
            if out.outcome is not Outcome.DROPPED:
                sink(out.data, out.last_offset, out.max_timestamp)
            del out  # a copied batch is a view into the map: let it go before the file closes
        del batches
    stop = seg.size_in_bytes if end_position is None else min(end_position, seg.size_in_bytes)
    ctx.stats.bytes_read += max(0, stop - min(start_position, seg.size_in_bytes))


def _skip_to(
    log: LogFile, start_position: int, txn: CleanedTransactionMetadata[AbortedTxn]
) -> Iterator[Any]:
    """The batches from the first one starting at ``start_position`` or later; those before only
    advance the transaction state (what ``check_batch_retention`` does to it)."""
    batches = log.iter_batches()
    if start_position <= 0:
        return batches
    for batch in batches:
        if batch.position >= start_position:
            txn.take_retained_aborted()  # markers before the range are the previous range's
            return itertools.chain([batch], batches)
        if batch.is_control:
            txn.on_control_batch_read(batch, read_control(batch, log.path)[0])
        else:
            txn.on_batch_read(batch)
    txn.take_retained_aborted()
    return iter(())


def _filter_batch(batch: Any, ctx: FilterContext, retain_legacy: bool, path: Path) -> FilteredBatch:
    stats = ctx.stats
    control_type = None
    if batch.is_control:
        control_type, _ts = read_control(batch, path)
    decision = check_batch_retention(
        batch,
        control_type=control_type,
        txn=ctx.txn,
        last_records_of_active_producers=ctx.last_records,
        upper_bound_offset=ctx.upper_bound,
        now_ms=ctx.now_ms,
    )
    stats.batches_read += 1
    if decision.retention is BatchRetention.DELETE:
        stats.note_batch_deleted(batch, decision, control_type)
        return DROPPED
    try:
        if batch.magic < 2:
            return _filter_legacy(batch, decision, ctx, retain_legacy)
        return _filter_v2(batch, decision, ctx, control_type)
    except CorruptDataError as err:
        raise (err.located(path, batch.position) if err.path is None else err) from err


def _filter_v2(
    batch: Any, decision: BatchDecision, ctx: FilterContext, control_type: int | None
) -> FilteredBatch:
    stats = ctx.stats
    count = batch.records_count
    stats.records_read += count
    cols: RecordColumns | None = None
    any_tombstone = False
    if decision.discard_batch_records or count == 0:
        keep: list[int] = []
        stats.note_discarded(batch, count, control_type)
    elif batch.is_control:
        keep = list(range(count))
    else:
        cols = _scan(batch)
        keep, any_tombstone = _keep_indices(batch, cols, ctx)
    horizon = output_delete_horizon(
        batch,
        decision=decision,
        any_retained_tombstone=any_tombstone,
        now_ms=ctx.now_ms,
        delete_retention_ms=ctx.delete_retention_ms,
    )
    if cols is None and keep and horizon != batch.delete_horizon_ms:
        cols = _scan(batch)
    out = filter_v2_batch(batch, cols, keep, retention=decision.retention, delete_horizon_ms=horizon)
    stats.note_output(out, count)
    return out


def _scan(batch: Any) -> RecordColumns:
    log_append = batch.max_timestamp if batch.timestamp_type == 1 else None
    return scan_records(
        records_bytes(batch),
        base_offset=batch.base_offset,
        base_timestamp=batch.base_timestamp,
        count=batch.records_count,
        log_append_time=log_append,
    )


def _keep_indices(batch: Any, cols: RecordColumns, ctx: FilterContext) -> tuple[list[int], bool]:
    """Kafka's shouldRetainRecord over a batch's columns (spec §6.11); also whether a kept record is
    a tombstone (the batch then needs a delete horizon)."""
    n = cols.count
    offsets = np.frombuffer(cols.offsets, dtype=np.int64, count=n)
    latest = ctx.oracle.map_latest_offset
    if n == 0 or int(offsets.min()) > latest:
        return list(range(n)), any(cols.value_null)
    keyed = np.frombuffer(cols.key_starts, dtype=np.int64, count=n) >= 0
    tombstone = np.frombuffer(cols.value_null, dtype=np.uint8, count=n).astype(bool)
    covered = offsets <= latest
    asked = np.flatnonzero(covered & keyed)
    is_latest = np.zeros(n, dtype=bool)
    if len(asked):
        is_latest[asked] = ctx.oracle.is_latest(
            offsets[asked], lambda at: [cols.key(i) for i in asked[at].tolist()]  # type: ignore[misc]
        )
    keep_delete = not batch.has_delete_horizon or ctx.now_ms < batch.delete_horizon_ms
    kept = ~covered | (is_latest & (~tombstone | keep_delete))
    stats = ctx.stats
    stats.invalid_records += int(np.count_nonzero(covered & ~keyed))
    stats.tombstones_removed += int(np.count_nonzero(covered & keyed & tombstone & ~kept))
    stats.superseded_removed += int(np.count_nonzero(covered & keyed & ~tombstone & ~kept))
    return np.flatnonzero(kept).tolist(), bool(np.any(kept & tombstone))


def _filter_legacy(
    entry: Any, decision: BatchDecision, ctx: FilterContext, retain_legacy: bool
) -> FilteredBatch:
    recs = legacy_records(entry)
    stats = ctx.stats
    stats.records_read += len(recs)
    latest = ctx.oracle.map_latest_offset
    keep: list[int] = []
    if not decision.discard_batch_records:
        keyed = [i for i, r in enumerate(recs) if r.key is not None and r.offset <= latest]
        is_latest: dict[int, bool] = {}
        if keyed:
            offsets = np.array([recs[i].offset for i in keyed], dtype=np.int64)
            answers = ctx.oracle.is_latest(
                offsets, lambda at: [recs[keyed[i]].key for i in at.tolist()]
            )
            is_latest = dict(zip(keyed, answers.tolist()))
        for i, r in enumerate(recs):
            if r.offset > latest:
                keep.append(i)
            elif r.key is None:
                stats.invalid_records += 1
            elif is_latest[i] and (r.value is not None or retain_legacy):
                keep.append(i)
            elif r.value is None:
                stats.tombstones_removed += 1
            else:
                stats.superseded_removed += 1
    horizon = output_delete_horizon(
        entry,
        decision=decision,
        any_retained_tombstone=any(recs[i].value is None for i in keep),
        now_ms=ctx.now_ms,
        delete_retention_ms=ctx.delete_retention_ms,
    )
    try:
        out = filter_legacy_entry(entry, recs, keep, retention=decision.retention,
                                  delete_horizon_ms=horizon)
    except ValueError as err:
        raise CleanerStateError(str(err)) from err
    stats.note_output(out, len(recs))
    return out
