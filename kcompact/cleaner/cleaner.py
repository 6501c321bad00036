"""One cleaning round of one partition: the driver of the algorithm in ``kcompact/cleaner/__init__.py``.

:func:`clean_partition` is the public entry point (the CLI and Spark call it). It takes the locks, finishes or
rolls back an interrupted swap, loads the partition's facts, computes the cleanable range, builds the offset
map, filters every segment group into a ``.cleaned`` segment, swaps each in, and finally advances the
cleaner checkpoint. With ``dry_run`` it does everything but write.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from kcompact.cleaner.grouping import group_segments_by_size
from kcompact.cleaner.log_state import LogState, SegmentState, load_log_state, read_control
from kcompact.cleaner.offset_map import OffsetMap, key_digests
from kcompact.cleaner.policy import check_batch_retention, output_delete_horizon
from kcompact.cleaner.producer_state import LastRecord
from kcompact.cleaner.ranges import CleanableRange, compute_cleanable_range
from kcompact.cleaner.retention import RetentionResult, apply_retention, plan_retention
from kcompact.cleaner.stats import CleanStats
from kcompact.cleaner.swap import (
    CleanedSegment,
    CleanedSegmentWriter,
    CrashHook,
    leftover_files,
    recover_interrupted_swaps,
    remove_cleaned,
    replace_segments,
)
from kcompact.cleaner.transactions import CleanedTransactionMetadata
from kcompact.cleaner.verify_output import check_cleaned_segment
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CorruptDataError, KcompactError, RefusedError
from kcompact.records.filter import (
    BatchRetention,
    FilteredBatch,
    Outcome,
    filter_legacy_entry,
    filter_v2_batch,
)
from kcompact.records.record import records_bytes
from kcompact.records.scan import RecordColumns, scan_keys, scan_records
from kcompact.segment.checkpoint import update_offset_checkpoint
from kcompact.segment.lock import log_dir_write_guard, partition_lock
from kcompact.segment.partition import (
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    REPLICATION_CHECKPOINT,
    Partition,
    open_partition,
)
from kcompact.segment.txn_index import AbortedTxn

Progress = Callable[[int], None]  # called with bytes processed since the last call


@dataclass(frozen=True, slots=True)
class CleanOptions:
    """How to clean (the ``kcompact clean`` options)."""

    now_ms: int | None = None  # the clock of the time rules; None = now
    from_start: bool = False  # first dirty offset = log start
    dedupe_buffer_size: int | None = None  # emulate a broker's bounded map; None = unbounded
    dry_run: bool = False
    roll: bool = False
    apply_retention: bool = False  # retention.ms/retention.bytes (only from an explicit delete policy)
    crash_hook: CrashHook | None = None  # tests: called at each step of the swap protocol


@dataclass(slots=True)
class CleanResult:
    """What a clean did (or, with ``dry_run``, would do)."""

    partition_dir: str
    topic: str
    partition: int
    now_ms: int
    dry_run: bool
    range: CleanableRange | None = None
    end_offset: int | None = None  # the new cleaner checkpoint
    checkpoint_before: int | None = None
    checkpoint_written: bool = False
    stats: CleanStats = field(default_factory=CleanStats)
    recovery_actions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped_reason: str | None = None
    retention: RetentionResult | None = None


def clean_partition(
    path: str | Path,
    config: TopicConfig,
    options: CleanOptions = CleanOptions(),
    progress: Progress | None = None,
) -> CleanResult:
    """Clean one partition directory exactly as one round of Kafka 4.1's log cleaner.

    Args:
        path: the partition directory.
        config: the topic's effective configuration.
        options: clock, dry run, bounded map, …
        progress: called with byte counts as segments are read (for a progress bar).

    Returns:
        The :class:`CleanResult`.

    Raises:
        RefusedError: a broker holds the log dir, another kcompact works on the partition, or the
            topic may not be cleaned offline (``__cluster_metadata``, tiered storage).
        CorruptDataError: the partition's data does not parse (nothing is changed).
    """
    partition = open_partition(path)
    _refuse_unsupported(partition, config)
    now_ms = options.now_ms if options.now_ms is not None else int(time.time() * 1000)
    result = CleanResult(str(partition.path), partition.topic, partition.partition, now_ms, options.dry_run)
    if options.dry_run:
        return _clean_locked(partition, config, options, now_ms, result, progress)
    log_dir = partition.path.parent
    with log_dir_write_guard(log_dir), partition_lock(log_dir, partition.path.name):
        if leftover_files(partition.path):
            _rehearse(partition, config, options, now_ms)
        recovery = recover_interrupted_swaps(partition.path)
        result.recovery_actions = recovery.actions
        if recovery.changed:
            partition = open_partition(partition.path)
        return _clean_locked(partition, config, options, now_ms, result, progress)


def _rehearse(partition: Partition, config: TopicConfig, options: CleanOptions, now_ms: int) -> None:
    """Settle an interrupted swap and dry-run the clean on a hard-linked copy first.

    Settling leftovers changes the directory; if the clean would then fail (corrupt data), the partition
    must still be exactly as it was. The rehearsal links every file into a staging directory beside the
    log dir (never inside it: a broker refuses unknown directories there), settles and dry-runs there, and
    raises the clean's error before anything real is touched. Renames and unlinks in the staging copy do
    not affect the originals; nothing writes file contents.
    """
    log_dir = partition.path.parent
    staging = Path(tempfile.mkdtemp(prefix=".kcompact-rehearsal-", dir=log_dir.parent))
    try:
        stage_part = staging / log_dir.name / partition.path.name
        stage_part.mkdir(parents=True)
        for source in partition.path.iterdir():
            if source.is_file():
                _link_or_copy(source, stage_part / source.name)
        for name in (CLEANER_CHECKPOINT, REPLICATION_CHECKPOINT, LOG_START_CHECKPOINT):
            if (log_dir / name).exists():
                shutil.copy2(log_dir / name, stage_part.parent / name)
        recover_interrupted_swaps(stage_part)
        rehearsal = CleanResult(str(stage_part), partition.topic, partition.partition, now_ms, True)
        _clean_locked(open_partition(stage_part), config, replace(options, dry_run=True, roll=False),
                      now_ms, rehearsal, None)
    except CorruptDataError as err:
        raise type(err)(
            f"{err.message} (found while rehearsing the clean on a staged copy; the interrupted "
            "clean's leftovers were not settled, nothing was changed)",
            path=partition.path / Path(err.path).name if err.path else None,
            position=err.position, offset=err.offset,
        ) from err
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed: a real copy
        shutil.copy2(source, target)


def _refuse_unsupported(partition: Partition, config: TopicConfig) -> None:
    if partition.is_metadata_log:
        raise RefusedError(
            f"{partition.path}: __cluster_metadata is KRaft's own log; no cleaner touches it"
        )
    if getattr(config, "remote_storage_enable", False):
        raise RefusedError(
            f"{partition.path}: remote.storage.enable=true (tiered storage); kcompact does not clean it"
        )


def _clean_locked(
    partition: Partition,
    config: TopicConfig,
    options: CleanOptions,
    now_ms: int,
    result: CleanResult,
    progress: Progress | None,
) -> CleanResult:
    started = time.monotonic()
    if options.roll and not options.dry_run:
        from kcompact.cleaner.roll import roll_active_segment

        if roll_active_segment(partition, config):
            partition = open_partition(partition.path)
    state = load_log_state(partition, config)
    result.warnings.extend(state.warnings)
    # Segments wholly below the log start go first: a broker deletes them long before its cleaner runs.
    if _retention(state, config, options, now_ms, result, log_start_only=True):
        partition = open_partition(partition.path)
        state = load_log_state(partition, config)
    if config.is_compacted:
        _compact(partition, state, config, options, now_ms, result, progress)
    else:
        result.skipped_reason = f"cleanup.policy={','.join(config.cleanup_policy)} has no 'compact': retention only"
    if result.end_offset is not None and not options.dry_run:
        partition = open_partition(partition.path)  # the segments the round left
        state = load_log_state(partition, config)
    _retention(state, config, options, now_ms, result)
    result.stats.elapsed_s = time.monotonic() - started
    return result


def _compact(
    partition: Partition,
    state: LogState,
    config: TopicConfig,
    options: CleanOptions,
    now_ms: int,
    result: CleanResult,
    progress: Progress | None,
) -> None:
    rng = compute_cleanable_range(state.range_inputs(config, now_ms), from_start=options.from_start)
    result.range = rng
    result.checkpoint_before = state.checkpoint_offset
    if rng.dirty_bytes == 0 or rng.first_uncleanable_offset <= rng.first_dirty_offset:
        result.skipped_reason = rng.blocking_detail or "nothing to clean"
        if rng.force_update_checkpoint and not options.dry_run:
            _write_checkpoint(partition, rng.first_dirty_offset)
            result.checkpoint_written = True
        return
    offset_map = _build_offset_map(state, rng, config, options, result.stats, progress)
    end_offset = offset_map.latest_offset + 1
    result.end_offset = end_offset
    _clean_segments(state, rng, offset_map, end_offset, config, options, now_ms, result, progress)
    if not options.dry_run:
        _write_checkpoint(partition, end_offset)
        result.checkpoint_written = True


def _retention(
    state: LogState,
    config: TopicConfig,
    options: CleanOptions,
    now_ms: int,
    result: CleanResult,
    *,
    log_start_only: bool = False,
) -> bool:
    """Kafka's deleteOldSegments, as the broker's cleaner thread runs it after a round: segments below the
    log start always go; with an explicit ``delete`` policy, ``retention.bytes`` and ``retention.ms`` too.
    Returns whether segments were deleted."""
    effective = config if options.apply_retention else config.with_overrides({"cleanup.policy": "compact"})
    plan = plan_retention(state, effective, now_ms, log_start_only=log_start_only)
    if result.retention is None:
        result.retention = plan
    else:
        _merge(result.retention, plan)
    if plan.deleted_segments and not options.dry_run:
        apply_retention(state, config, plan)
        return True
    return False


def _merge(into: RetentionResult, later: RetentionResult) -> None:
    into.deleted_segments += later.deleted_segments
    into.reasons.update(later.reasons)
    into.bytes_deleted += later.bytes_deleted
    into.rolled = into.rolled or later.rolled
    if later.deleted_segments:
        into.log_start_after = later.log_start_after


def _write_checkpoint(partition: Partition, offset: int) -> None:
    path = partition.log_dir.cleaner_checkpoint
    try:
        update_offset_checkpoint(path, {partition.topic_partition: offset})
    except OSError as err:
        raise KcompactError(
            f"{path}: cannot advance the cleaner checkpoint to {offset} ({err.strerror or err}); the "
            "cleaned segments are in place and consistent, the checkpoint stays behind them, so the "
            "next clean repeats this round"
        ) from err


# --- pass 1: the offset map -------------------------------------------------------------------


def _build_offset_map(
    state: LogState,
    rng: CleanableRange,
    config: TopicConfig,
    options: CleanOptions,
    stats: CleanStats,
    progress: Progress | None,
) -> OffsetMap:
    start, end = rng.first_dirty_offset, rng.first_uncleanable_offset
    if options.dedupe_buffer_size is not None:
        offset_map = OffsetMap.for_dedupe_buffer(options.dedupe_buffer_size, config.dedupe_load_factor)
    else:
        offset_map = OffsetMap()
    txn: CleanedTransactionMetadata[AbortedTxn] = CleanedTransactionMetadata(collect_index_entries=False)
    txn.add_aborted(state.aborted_in(start, end))
    dirty = [s for i, s in enumerate(state.segments) if _overlaps(state.segments, i, start, end)]
    for i, seg in enumerate(dirty):
        next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        if not _map_segment(seg, offset_map, txn, start, stats):
            break
        offset_map.latest_offset = next_start - 1
        if progress is not None:
            progress(seg.size_in_bytes)
    offset_map.freeze()
    stats.map_entries = offset_map.size
    stats.map_memory_bytes = offset_map.memory_bytes()
    return offset_map


def _overlaps(segments: tuple[SegmentState, ...], i: int, start: int, end: int) -> bool:
    seg = segments[i]
    upper = segments[i + 1].base_offset if i + 1 < len(segments) else seg.next_offset
    return seg.base_offset < end and upper > start


def _map_segment(
    seg: SegmentState,
    offset_map: OffsetMap,
    txn: CleanedTransactionMetadata[AbortedTxn],
    start: int,
    stats: CleanStats,
) -> bool:
    """Insert one segment's keys; False when the map filled up (the round ends there)."""
    with seg.files.open() as log:
        for batch in log.iter_batches():
            if batch.is_control:
                control_type, _ts = read_control(batch, log.path)
                txn.on_control_batch_read(batch, control_type)
            elif not txn.on_batch_read(batch) and batch.last_offset >= start:
                offsets, keys = _batch_keys(batch, log.path)
                stats.records_scanned += len(offsets)
                wanted = [i for i, k in enumerate(keys) if k is not None and offsets[i] >= start]
                if wanted:
                    hi, lo = key_digests([keys[i] for i in wanted])  # type: ignore[misc]
                    offs = np.fromiter((offsets[i] for i in wanted), dtype=np.int64, count=len(wanted))
                    accepted = offset_map.put_batch(hi, lo, offs)
                    if accepted < len(wanted):
                        if accepted:
                            offset_map.latest_offset = int(offs[accepted - 1])
                        return False
            if batch.last_offset >= start:
                offset_map.latest_offset = batch.last_offset
    return True


def _batch_keys(batch: object, path: Path) -> tuple[list[int], list[bytes | None]]:
    try:
        if batch.magic >= 2:  # type: ignore[attr-defined]
            data = records_bytes(batch)  # type: ignore[arg-type]
            offsets, keys = scan_keys(data, base_offset=batch.base_offset, count=batch.records_count)  # type: ignore[attr-defined]
            return list(offsets), keys
        from kcompact.records.legacy import legacy_records

        recs = legacy_records(batch)  # type: ignore[arg-type]
        return [r.offset for r in recs], [r.key for r in recs]
    except CorruptDataError as err:
        raise (err.located(path, batch.position) if err.path is None else err) from err  # type: ignore[attr-defined]


# --- pass 2: filtering each group into a cleaned segment ------------------------------------


@dataclass(slots=True)
class _Round:
    """The state one cleaning round carries across segment groups."""

    offset_map: OffsetMap
    latest_sorted: np.ndarray
    first_dirty: int
    upper_bound: int
    now_ms: int
    delete_retention_ms: int
    legacy_horizon_ms: int
    last_records: dict[int, LastRecord]
    txn: CleanedTransactionMetadata[AbortedTxn]
    stats: CleanStats


def _clean_segments(
    state: LogState,
    rng: CleanableRange,
    offset_map: OffsetMap,
    end_offset: int,
    config: TopicConfig,
    options: CleanOptions,
    now_ms: int,
    result: CleanResult,
    progress: Progress | None,
) -> None:
    to_clean = [s for s in state.segments[:-1] if s.base_offset < end_offset]
    groups = group_segments_by_size(
        to_clean,
        max_size=config.segment_bytes,
        max_index_size=config.segment_index_bytes,
        first_uncleanable_offset=rng.first_uncleanable_offset,
    )
    rnd = _Round(
        offset_map=offset_map,
        latest_sorted=offset_map.latest_offsets_sorted(),
        first_dirty=rng.first_dirty_offset,
        upper_bound=rng.first_uncleanable_offset,
        now_ms=now_ms,
        delete_retention_ms=config.delete_retention_ms,
        legacy_horizon_ms=_legacy_delete_horizon(state, rng, config),
        last_records=state.producers.last_records_of_active_producers(now_ms, config.producer_id_expiration_ms),
        txn=CleanedTransactionMetadata(),
        stats=result.stats,
    )
    result.stats.groups = len(groups)
    written: list[tuple[CleanedSegment, list[SegmentState]]] = []
    try:
        for group in groups:
            written.append((_clean_group(state, group, rnd, config, options, progress), group))
        if not options.dry_run:
            for cleaned, group in written:
                check_cleaned_segment(cleaned, group, rng.first_uncleanable_offset)
    except BaseException:
        for cleaned, _group in written:
            remove_cleaned(cleaned.directory, cleaned.base_offset)
        raise
    if options.dry_run:
        return
    # Every output is complete and verified: only now does the partition change, one group at a time.
    for cleaned, group in written:
        replace_segments(cleaned, [s.files for s in group], hook=options.crash_hook)


def _legacy_delete_horizon(state: LogState, rng: CleanableRange, config: TopicConfig) -> int:
    clean = [s for s in state.segments if s.base_offset < rng.first_dirty_offset]
    return clean[-1].files.mtime_ms - config.delete_retention_ms if clean else 0


def _clean_group(
    state: LogState,
    group: list[SegmentState],
    rnd: _Round,
    config: TopicConfig,
    options: CleanOptions,
    progress: Progress | None,
) -> CleanedSegment:
    directory = state.partition.path
    writer = CleanedSegmentWriter(directory, group[0].base_offset, config.index_interval_bytes, dry_run=options.dry_run)
    try:
        for seg in group:
            upper = _segment_upper(state, seg)
            rnd.txn.add_aborted(state.aborted_in(seg.base_offset, upper))
            retain_legacy = seg.files.mtime_ms > rnd.legacy_horizon_ms
            with seg.files.open() as log:
                for batch in log.iter_batches():
                    out = _filter_batch(batch, rnd, retain_legacy, log.path)
                    if out.outcome is not Outcome.DROPPED:
                        writer.append(out.data, out.last_offset, out.max_timestamp)
                    del out
            rnd.stats.bytes_read += seg.size_in_bytes
            if progress is not None:
                progress(seg.size_in_bytes)
        writer.aborted = rnd.txn.take_retained_aborted()
        last = group[-1].files
        cleaned = writer.finish(last.mtime_ns, template=last)
    except BaseException:
        writer.abort()
        raise
    rnd.stats.bytes_written += cleaned.size_in_bytes
    return cleaned


def _segment_upper(state: LogState, seg: SegmentState) -> int:
    for i, s in enumerate(state.segments):
        if s is seg:
            return state.segments[i + 1].base_offset if i + 1 < len(state.segments) else seg.next_offset
    return seg.next_offset


def _filter_batch(batch: object, rnd: _Round, retain_legacy: bool, path: Path) -> FilteredBatch:
    stats = rnd.stats
    control_type = None
    if batch.is_control:  # type: ignore[attr-defined]
        control_type, _ts = read_control(batch, path)
    decision = check_batch_retention(
        batch,  # type: ignore[arg-type]
        control_type=control_type,
        txn=rnd.txn,
        last_records_of_active_producers=rnd.last_records,
        upper_bound_offset=rnd.upper_bound,
        now_ms=rnd.now_ms,
    )
    count = batch.records_count if batch.magic >= 2 else None  # type: ignore[attr-defined]
    stats.batches_read += 1
    if decision.retention is BatchRetention.DELETE:
        stats.note_batch_deleted(batch, decision, control_type)
        return _DROPPED
    try:
        if batch.magic < 2:  # type: ignore[attr-defined]
            return _filter_legacy(batch, decision, rnd, retain_legacy)
        return _filter_v2(batch, decision, rnd, control_type, count or 0)
    except CorruptDataError as err:
        raise (err.located(path, batch.position) if err.path is None else err) from err  # type: ignore[attr-defined]


_DROPPED = FilteredBatch(Outcome.DROPPED, b"", -1, -1, 0)


def _filter_v2(batch, decision, rnd: _Round, control_type, count: int) -> FilteredBatch:  # type: ignore[no-untyped-def]
    stats = rnd.stats
    stats.records_read += count
    if decision.discard_batch_records or count == 0:
        keep: list[int] = []
        cols = None
        stats.note_discarded(batch, count, control_type)
    elif batch.is_control:
        keep = list(range(count))
        cols = None
    else:
        cols = _scan(batch)
        keep = _keep_indices(batch, cols, rnd)
    horizon = output_delete_horizon(
        batch,
        decision=decision,
        any_retained_tombstone=cols is not None and any(cols.value_null[i] for i in keep),
        now_ms=rnd.now_ms,
        delete_retention_ms=rnd.delete_retention_ms,
    )
    if cols is None and keep and horizon != batch.delete_horizon_ms:
        cols = _scan(batch)
    out = filter_v2_batch(batch, cols, keep, retention=decision.retention, delete_horizon_ms=horizon)
    stats.note_output(out, count)
    return out


def _scan(batch) -> RecordColumns:  # type: ignore[no-untyped-def]
    log_append = batch.max_timestamp if batch.timestamp_type == 1 else None
    return scan_records(
        records_bytes(batch),
        base_offset=batch.base_offset,
        base_timestamp=batch.base_timestamp,
        count=batch.records_count,
        log_append_time=log_append,
    )


def _keep_indices(batch, cols: RecordColumns, rnd: _Round) -> list[int]:  # type: ignore[no-untyped-def]
    """Kafka's shouldRetainRecord over a batch's columns (spec §6.11), without hashing dirty records.

    In the dirty range ``[first_dirty, latest]`` a record is the latest for its key exactly when its offset
    is one of the map's values, so only records of the clean section are looked up by key.
    """
    offsets, value_null = cols.offsets, cols.value_null
    latest = rnd.offset_map.latest_offset
    first_dirty = rnd.first_dirty
    n = cols.count
    is_latest = [False] * n
    dirty_idx = [i for i in range(n) if first_dirty <= offsets[i] <= latest]
    if dirty_idx:
        offs = np.fromiter((offsets[i] for i in dirty_idx), dtype=np.int64, count=len(dirty_idx))
        pos = np.searchsorted(rnd.latest_sorted, offs)
        pos[pos >= len(rnd.latest_sorted)] = 0
        hits = rnd.latest_sorted[pos] == offs if len(rnd.latest_sorted) else np.zeros(len(offs), bool)
        for i, hit in zip(dirty_idx, hits.tolist()):
            is_latest[i] = hit
    clean_idx = [i for i in range(n) if offsets[i] < first_dirty and cols.key_starts[i] >= 0]
    if clean_idx:
        hi, lo = key_digests([cols.key(i) for i in clean_idx])  # type: ignore[misc]
        mapped = rnd.offset_map.get_batch(hi, lo).tolist()
        for i, m in zip(clean_idx, mapped):
            is_latest[i] = offsets[i] >= m
    keep_delete = not batch.has_delete_horizon or rnd.now_ms < batch.delete_horizon_ms
    keep: list[int] = []
    stats = rnd.stats
    for i in range(n):
        if offsets[i] > latest:
            keep.append(i)
        elif cols.key_starts[i] < 0:
            stats.invalid_records += 1
        elif value_null[i]:
            if is_latest[i] and keep_delete:
                keep.append(i)
            else:
                stats.tombstones_removed += 1
        elif is_latest[i]:
            keep.append(i)
        else:
            stats.superseded_removed += 1
    return keep


def _filter_legacy(entry, decision, rnd: _Round, retain_legacy: bool) -> FilteredBatch:  # type: ignore[no-untyped-def]
    from kcompact.records.legacy import legacy_records

    recs = legacy_records(entry)
    stats = rnd.stats
    stats.records_read += len(recs)
    latest = rnd.offset_map.latest_offset
    keep: list[int] = []
    if not decision.discard_batch_records:
        keyed = [i for i, r in enumerate(recs) if r.key is not None and r.offset <= latest]
        mapped: dict[int, int] = {}
        if keyed:
            hi, lo = key_digests([recs[i].key for i in keyed])  # type: ignore[misc]
            mapped = dict(zip(keyed, rnd.offset_map.get_batch(hi, lo).tolist()))
        for i, r in enumerate(recs):
            if r.offset > latest:
                keep.append(i)
            elif r.key is None:
                stats.invalid_records += 1
            elif r.offset >= mapped[i] and (r.value is not None or retain_legacy):
                keep.append(i)
            elif r.value is None:
                stats.tombstones_removed += 1
            else:
                stats.superseded_removed += 1
    horizon = output_delete_horizon(
        entry,
        decision=decision,
        any_retained_tombstone=any(recs[i].value is None for i in keep),
        now_ms=rnd.now_ms,
        delete_retention_ms=rnd.delete_retention_ms,
    )
    try:
        out = filter_legacy_entry(entry, recs, keep, retention=decision.retention, delete_horizon_ms=horizon)
    except ValueError as err:
        from kcompact.errors import CleanerStateError

        raise CleanerStateError(str(err)) from err
    stats.note_output(out, len(recs))
    return out
