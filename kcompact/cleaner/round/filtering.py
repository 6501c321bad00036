"""Pass 2 of a cleaning round: filter source batches into output batches (``Cleaner.cleanInto``,
``MemoryRecords.filterTo``).

Per batch, in log order: the transaction bookkeeping and Kafka's batch decision (``policy.py``), then the
record decision over the batch's columns, then the rewrite (``kcompact.records.filter``). The record
decision asks a :class:`~kcompact.log.offset_map.oracle.RetentionOracle` whether each keyed record covered by
the map is the latest for its key, for the whole batch at once, and derives the rest with numpy masks
over the scanned columns (``array('q')`` columns are viewed, not copied):

    keep = beyond the map | (is latest & (has a value | tombstone still before its horizon))

with the reasons counted from the same masks (keyless records are "invalid", superseded values and
tombstones counted apart). Legacy (magic 0/1) entries take the same decision over their decoded records.

:func:`iter_segment_output` walks one source segment, or the batches starting in a byte range of it (runs
of data batches a window at a time in C: ``filter_windows``; of plain legacy entries a run at a time:
``legacy_runs``; the same decisions, asked of ``record_filter``, and the same bytes), and yields its output
as ``record_filter.OutputRun`` values, whichever walk made them: the caller writes them (the group's
writer, ``steps.write_group``; a worker's buffer sent back to the parent, ``workers.parallel``), as
``Cleaner.cleanInto`` appends what ``filterTo`` returns. A range that starts inside a segment walks the
headers before it for the transaction state only; ABORT markers retained there belong to the range before.

Every batch the walk reads — one it drops whole, rebuilds or copies byte for byte — has its CRC checked
first, and one that fails stops the round (:class:`~kcompact.errors.BatchCrcError`, before any output is
swapped in). Kafka's cleaner does not check CRCs (its ``filterTo`` parses and copies or rebuilds): a corrupt
batch it drops leaves no trace and one it rebuilds gets a fresh CRC, so the damage would look valid. An
offline tool can afford to refuse instead and point to ``kcompact repair``: the check costs about 1% of a
clean (CRC-32C is a CPU instruction; ``scripts/bench.py clean``). Pass 2 reads every batch of every segment
the round rewrites, the clean section included, so this is the one place the round needs the check; the
segments it does not rewrite (the active one, those past the first uncleanable offset) are not read.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kcompact.cleaner.round.chunks import batches_from
from kcompact.cleaner.round.filter_windows import take_runs
from kcompact.cleaner.round.legacy_runs import take_legacy_run
from kcompact.cleaner.round.plan import CleanPlan, SegmentPlan
from kcompact.cleaner.round.record_filter import (
    RUN_BATCHES,
    RUN_RECORDS,
    Decided,
    FilterContext,
    OutputRun,
    decide_batch,
    keep_records,
    protected_offsets,
)
from kcompact.errors import CleanerStateError, CorruptDataError
from kcompact.log.rules.policy import BatchDecision, output_delete_horizon
from kcompact.records.batch_header import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK, RecordBatch
from kcompact.records.filter import FilteredBatch, Outcome, filter_legacy_entry, filter_v2_batch
from kcompact.records.legacy import LegacyEntry, legacy_records
from kcompact.records.record import Record, records_bytes
from kcompact.records.scan import RecordColumns, scan_records
from kcompact.records.scan.legacy_rows import wrapper_columns
from kcompact.segment.log_file import LogFile
from kcompact.value import mutable

_WINDOW_RECORDS = RUN_RECORDS  # records decided together (one oracle call, one set of masks)
_WINDOW_BATCHES = RUN_BATCHES
_NOT_DATA = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK


@mutable
class _Pending:
    """A v2 batch whose fate at batch level is decided, waiting for its window's record decisions."""

    batch: RecordBatch
    decision: BatchDecision
    control_type: int | None
    cols: RecordColumns | None  # scanned: its records need the oracle


def iter_segment_output(
    plan: CleanPlan,
    seg: SegmentPlan,
    ctx: FilterContext,
    start_position: int = 0,
    end_position: int | None = None,
    *,
    at_batch: bool = False,
) -> Iterator[OutputRun]:
    """The output batches of the batches of ``seg`` that start in ``[start_position, end_position)``, in
    order: ``Cleaner.cleanInto``'s ``filterTo`` over one segment (or a byte range of it).

    ``ctx`` must be positioned at the start of ``seg`` (``FilterContext.at``, or the previous
    segment's walk); it is left at the end of the range. Batch decisions are taken one batch at a
    time, in order; record decisions for up to ``_WINDOW_RECORDS`` records at once. The caller writes
    each run before it asks for the next (a copied batch is a view of the segment's bytes).
    ``at_batch``: ``start_position`` is a batch's own (``chunks.batch_cuts``).

    Raises:
        CorruptDataError: a batch or record does not parse (names the file and position).
    """
    ctx.txn.add_aborted(plan.aborted_in(seg.base_offset, seg.upper_offset))
    retain_legacy = seg.mtime_ms > plan.legacy_delete_horizon_ms
    with LogFile(seg.log_path) as log:
        limit = log.size_in_bytes if end_position is None else min(end_position, log.size_in_bytes)
        protected = protected_offsets(ctx.last_records)
        batches = batches_from(log, seg, start_position, ctx.txn, at_batch=at_batch)
        if start_position > 0:
            ctx.txn.take_retained_aborted()  # markers before the range are the previous range's
        window: list[_Pending] = []
        records = 0
        pending = partial(_flushed, window, ctx, log.path, clear=True)  # what the C runs yield first
        while (batch := next(batches, None)) is not None:
            if end_position is not None and batch.position >= end_position:
                break
            if batch.magic < 2:  # legacy_runs: plain entries a run at a time in C, from this one
                reached = yield from take_legacy_run(log.buffer, batch.position, limit, ctx, retain_legacy,
                                                     pending)
                if reached != batch.position:
                    records = 0
                    batches = log.iter_batches(reached)
                    continue
            log.check_crc(batch)  # dropped, rebuilt or copied: each batch read is checked (module doc)
            decided = decide_batch(batch, ctx, log.path)
            if decided is None:
                pass  # deleted whole at batch level
            elif isinstance(batch, LegacyEntry):  # decided alone, after the rest
                yield from _flushed(window, ctx, log.path, clear=True)
                records = 0
                yield from _output(_legacy(batch, decided, ctx, retain_legacy, log.path))
            else:
                entry = _pending(batch, decided, log.path)
                window.append(entry)
                records += entry.cols.count if entry.cols is not None else 0
                if records >= _WINDOW_RECORDS or len(window) >= _WINDOW_BATCHES:
                    yield from _flushed(window, ctx, log.path, clear=True)
                    records = 0
                    log.forget_before(batch.position + batch.size_in_bytes)  # written: its pages can go
            if batch.magic >= 2 and not batch.attributes & _NOT_DATA:  # filter_windows: C from here
                after = batch.position + batch.size_in_bytes
                reached = yield from take_runs(log.buffer, after, limit, ctx, protected, pending,
                                               log.forget_before)
                records = records if window else 0
                if reached != after:
                    batches = log.iter_batches(reached)
        yield from _flushed(window, ctx, log.path, clear=True)
        del batches, window, pending  # copied batches are views into the map: let them go before it closes
    stop = seg.size_in_bytes if end_position is None else min(end_position, seg.size_in_bytes)
    ctx.stats.bytes_read += max(0, stop - min(start_position, seg.size_in_bytes))


def _output(out: FilteredBatch) -> Iterator[OutputRun]:
    """A batch's output as a run of one (nothing for a batch dropped)."""
    if out.outcome is not Outcome.DROPPED:
        yield OutputRun(out.data, [len(out.data)], [out.last_offset], [out.max_timestamp])


def _pending(batch: RecordBatch, decided: Decided, path: Path) -> _Pending:
    """A decided v2 batch for its window; one whose records must be judged one by one is scanned here,
    in log order."""
    decision, control_type = decided
    cols = None
    if not (batch.is_control or decision.discard_batch_records or batch.records_count == 0):
        try:
            cols = _scan(batch)
        except CorruptDataError as err:
            raise (err.located(path, batch.position) if err.path is None else err) from err
    return _Pending(batch, decision, control_type, cols)


def _flushed(
    window: list[_Pending], ctx: FilterContext, path: Path, *, clear: bool = False
) -> Iterator[OutputRun]:
    """Decide the window's records together, then rewrite its batches and yield their output in order
    (and empty it with ``clear``)."""
    scanned = [p for p in window if p.cols is not None]
    keeps = iter(_keep_window(scanned, ctx) if scanned else [])
    for entry in window:
        keep = next(keeps) if entry.cols is not None else None
        try:
            out = _filter_v2(entry, keep, ctx)
        except CorruptDataError as err:
            raise (err.located(path, entry.batch.position) if err.path is None else err) from err
        yield from _output(out)
    if clear:
        window.clear()


def _filter_v2(
    pending: _Pending, keep_and_tombstone: tuple[list[int], bool] | None, ctx: FilterContext
) -> FilteredBatch:
    batch, decision, cols = pending.batch, pending.decision, pending.cols
    stats = ctx.stats
    count = batch.records_count
    stats.records_read += count
    any_tombstone = False
    if keep_and_tombstone is not None:
        keep, any_tombstone = keep_and_tombstone
    elif batch.is_control and not decision.discard_batch_records:
        keep = list(range(count))
    else:
        keep = []
        stats.note_discarded(batch, count, pending.control_type)
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


def _scan(batch: RecordBatch) -> RecordColumns:
    log_append = batch.max_timestamp if batch.timestamp_type == 1 else None
    return scan_records(
        records_bytes(batch),
        base_offset=batch.base_offset,
        base_timestamp=batch.base_timestamp,
        count=batch.records_count,
        log_append_time=log_append,
    )


def _keep_window(scanned: list[_Pending], ctx: FilterContext) -> list[tuple[list[int], bool]]:
    """Kafka's ``Cleaner.shouldRetainRecord`` over the records of several batches at once; per batch,
    the kept indices and whether a kept record is a tombstone (the batch then needs a horizon)."""
    cols = [p.cols for p in scanned if p.cols is not None]
    counts = np.array([c.count for c in cols], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    offsets = np.concatenate([np.frombuffer(c.offsets, dtype=np.int64, count=c.count) for c in cols])
    keyed = np.concatenate(
        [np.frombuffer(c.key_starts, dtype=np.int64, count=c.count) for c in cols]) >= 0
    tombstone = np.concatenate(
        [np.frombuffer(c.value_null, dtype=np.uint8, count=c.count) for c in cols]).astype(bool)

    def keys_at(where: npt.NDArray[np.intp]) -> list[bytes]:
        """The keys of keyed records (the only ones ``keep_records`` asks for)."""
        owner = np.searchsorted(starts, where, side="right") - 1
        local = (where - starts[owner]).tolist()
        return [_keyed(cols[b], i) for b, i in zip(owner.tolist(), local, strict=True)]

    keep_delete = np.repeat([_keeps_tombstones(p.batch, ctx.now_ms) for p in scanned], counts)
    kept = keep_records(offsets, keyed, tombstone, keep_delete, keys_at, ctx.oracle, ctx.fence, ctx.stats)
    per_batch = np.add.reduceat(kept, starts, dtype=np.intp).tolist()
    local = (np.flatnonzero(kept) - np.repeat(starts, per_batch)).tolist()
    tombs = np.logical_or.reduceat(kept & tombstone, starts).tolist()
    ends = list(itertools.accumulate(per_batch))
    return [(local[end - n : end], t) for n, end, t in zip(per_batch, ends, tombs, strict=True)]


def _keyed(cols: RecordColumns, i: int) -> bytes:
    """The key of record ``i``, which has one (``RecordColumns.key`` without the null case)."""
    return bytes(cols.data[cols.key_starts[i] : cols.key_ends[i]])


def _keeps_tombstones(batch: RecordBatch, now_ms: int) -> bool:
    horizon = batch.delete_horizon_ms  # None exactly when the batch has no delete horizon
    return horizon is None or now_ms < horizon


def _legacy(
    entry: LegacyEntry, decided: Decided, ctx: FilterContext, retain_legacy: bool, path: Path
) -> FilteredBatch:
    try:
        return _filter_legacy(entry, decided[0], ctx, retain_legacy)
    except CorruptDataError as err:
        raise (err.located(path, entry.position) if err.path is None else err) from err
    except CleanerStateError as err:  # the legacy entry Kafka's cleaner throws on (cleaner.cleaner_throws)
        raise CleanerStateError(
            f"{path} at position {entry.position}: {err}; `kcompact repair` rewrites the "
            "segment's legacy entries as magic 2 batches, keeping every record") from err


def _filter_legacy(
    entry: LegacyEntry, decision: BatchDecision, ctx: FilterContext, retain_legacy: bool
) -> FilteredBatch:
    """An entry the runs of ``legacy_runs`` do not take (a compressed wrapper, the entry at the round's
    upper bound): its records decided by ``record_filter.keep_records``, as a run's are."""
    offsets, keyed, tombstone, record = _legacy_columns(entry)
    stats = ctx.stats
    stats.records_read += len(offsets)
    kept: list[Record] = []

    def keys_at(at: npt.NDArray[np.intp]) -> list[bytes]:
        """The keys of keyed records (the only ones ``keep_records`` asks for)."""
        return [key for i in at.tolist() if (key := record(i).key) is not None]

    if not decision.discard_batch_records:
        keep = keep_records(offsets, keyed, tombstone, np.full(len(offsets), retain_legacy), keys_at,
                            ctx.oracle, ctx.fence, stats)
        kept = [record(i) for i in np.flatnonzero(keep).tolist()]
    horizon = output_delete_horizon(
        entry,
        decision=decision,
        any_retained_tombstone=any(r.value is None for r in kept),
        now_ms=ctx.now_ms,
        delete_retention_ms=ctx.delete_retention_ms,
    )
    try:
        out = filter_legacy_entry(entry, kept, range(len(kept)), retention=decision.retention,
                                  delete_horizon_ms=horizon)
    except ValueError as err:
        raise CleanerStateError(str(err)) from err
    stats.note_output(out, len(offsets))
    return out


def _legacy_columns(entry: LegacyEntry) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_],
                                         npt.NDArray[np.bool_], Callable[[int], Record]]:
    """``(offsets, keyed, tombstone, record)`` of a legacy entry's records: a compressed wrapper's
    from one C walk of its messages (``legacy_rows.wrapper_columns``), else from ``legacy_records``."""
    inner = wrapper_columns(entry)
    if inner is not None:
        return (np.frombuffer(inner.offsets, dtype=np.int64),
                np.frombuffer(inner.key_starts, dtype=np.int64) >= 0,
                np.frombuffer(inner.value_starts, dtype=np.int64) < 0, inner.record)
    recs = legacy_records(entry)
    return (np.array([r.offset for r in recs], dtype=np.int64),
            np.array([r.key is not None for r in recs], dtype=bool),
            np.array([r.value is None for r in recs], dtype=bool), recs.__getitem__)
