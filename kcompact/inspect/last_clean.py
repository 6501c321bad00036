"""``inspect last-clean``: when did compaction provably last run on a partition, and what since?

Why: ``cleaner-offset-checkpoint`` says where the cleaner stopped, not when, and a copied log dir
often lacks it. The data itself carries evidence that only Kafka's log cleaner leaves behind:

* **offset gaps.** A leader hands out consecutive offsets and retention only ever removes whole
  segments below the log start offset, so offsets missing between two records (or between the log
  start offset and the first record, or after the last record up to the log end) were removed by a
  clean. That clean ran after the record right after the gap was written: a removed record goes only
  once a later record of its key exists, or once its segment was closed, and either way the log
  already held that next record. So its timestamp is a time after which compaction provably ran
  (``cleaned_after_ms``), and every record since the newest gap lies in one contiguous run that no
  clean provably touched (``records_since``);
* **delete horizons.** A batch carries a delete horizon only after a clean rewrote it, stamped
  ``clean time + delete.retention.ms``; so the newest horizon minus the topic's
  ``delete.retention.ms`` (``--config``, default one day) is the moment of a clean, if that setting
  has not changed since;
* **empty batches**: 61-byte shells without records are left only by the cleaner;
* **the checkpoint**: a ``cleaner-offset-checkpoint`` entry above the log start (and within the log)
  is written only at the end of a clean, which may have removed nothing (no date then).

Reads batch headers; records are decoded just for batches that hold fewer records than their
offset span (a clean rebuilt them), for legacy wrappers, and for the batch right after a gap (for
its first record's timestamp). Every batch's CRC is checked too (the whole log is read once, at the
speed of the CPU's CRC-32C instruction): the evidence comes from header fields the CRC covers, so a
batch that fails it is counted (``corrupt_batches``, ``crc_error``) and the command exits 2. Field names of
:class:`LastCleanReport` are the ``--json`` interface (tests/inspect/test_last_clean.py fixes them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, field
from pathlib import Path
from typing import Any

from kcompact.errors import CorruptDataError
from kcompact.inspect.context import CrcTally, InspectContext, load_inspect_context
from kcompact.log.rules.ranges import CleanableRange
from kcompact.log.state.log_state import LogState
from kcompact.records.batch_header import TimestampType
from kcompact.records.legacy import legacy_records
from kcompact.records.record import records_bytes
from kcompact.records.scan import scan_records
from kcompact.segment.log_file import crc_error_or
from kcompact.segment.progress import ProgressCallback, ReadProgress, read_progress
from kcompact.value import frozen, mutable


@frozen
class OffsetGap:
    """Offsets a clean removed: none of ``after_offset + 1 .. next_offset - 1`` holds a record.

    ``after_offset`` is the last record before the gap (None: the gap starts at the log start);
    ``next_offset`` the first record after it, or the log end offset for a gap at the end (then
    ``next_timestamp_ms`` is None).
    """

    after_offset: int | None
    next_offset: int
    missing_offsets: int
    next_timestamp_ms: int | None
    before_first_dirty: bool  # it starts below the first dirty offset, as the checkpoint implies


@mutable
class LastCleanReport:
    """The ``inspect last-clean`` report (the ``--json`` object)."""

    topic: str
    partition: int
    partition_dir: str
    log_start_offset: int
    log_end_offset: int
    checkpoint_offset: int | None  # cleaner-offset-checkpoint entry as found
    first_dirty_offset: int  # ... validated and reset as Kafka does
    compacted: bool  # any evidence at all
    gaps: int
    missing_offsets: int
    newest_gap: OffsetGap | None
    cleaned_after_ms: int | None  # the newest gap's next record timestamp
    contiguous_since_offset: int  # the newest gap's next offset, else the log start offset
    records_since: int  # records from there to the log end, markers included
    dirty_records: int  # records at or after the first dirty offset
    delete_horizon_batches: int
    newest_delete_horizon_ms: int | None
    horizon_stamped_at_ms: int | None  # newest horizon - delete.retention.ms: when a clean ran
    last_clean_after_ms: int | None  # the later of cleaned_after_ms and horizon_stamped_at_ms
    empty_batches: int
    warnings: list[str] = field(default_factory=list)
    corrupt_batches: int = 0  # batches that fail their CRC: their headers' evidence is suspect
    crc_error: str | None = None  # the first one's error: file, position, checksums

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def last_clean_report(
    path: str | Path,
    *,
    cli_overrides: Mapping[str, str],
    now_ms: int | None = None,
    server_properties: str | Path | None = None,
    metadata_dir: str | Path | None = None,
    progress: ProgressCallback | None = None,
) -> LastCleanReport:
    """Look for the evidence of the module docstring in one partition.

    Args:
        path: the partition directory.
        cli_overrides: ``--config`` pairs (``delete.retention.ms`` is the one that matters).
        now_ms: the clock for the range rules that validate the checkpoint (default: now).
        server_properties: the broker's server.properties (default:
            ``$KCOMPACT_SERVER_PROPERTIES``).
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0`` (default: as
            ``kcompact.config.effective.partition_config`` finds it).
        progress: told the bytes of the walk over every batch (``"<partition> (batches)"``, over
            the partition's segment bytes).

    Returns:
        The report.

    Raises:
        KcompactError: not a partition directory, a bad configuration source, or data that does not
            parse.
    """
    ctx = load_inspect_context(path, cli_overrides=cli_overrides, now_ms=now_ms,
                               server_properties=server_properties, metadata_dir=metadata_dir)
    return partition_last_clean(ctx, progress=progress)


def partition_last_clean(ctx: InspectContext, *, progress: ProgressCallback | None = None) -> LastCleanReport:
    """The report of one loaded partition (:func:`last_clean_report` once it is loaded; ``kcompact report``
    shares that load with the other inspect sources).

    Args:
        ctx: the partition as :func:`kcompact.inspect.context.load_inspect_context` loads it.
        progress: as :func:`last_clean_report`'s.

    Returns:
        The report.

    Raises:
        KcompactError: data that does not parse.
    """
    config, state, rng = ctx.config, ctx.state, ctx.rng  # its notes (cleanup.policy) go unreported
    walk, crc = _Walk(state.log_start_offset, rng.first_dirty_offset), CrcTally()
    name = state.partition.path.name
    _walk_segments(state, walk, crc, read_progress(progress, f"{name} (batches)", state.partition.size_in_bytes))
    walk.finish(state.log_end_offset)
    stamped = None
    if walk.newest_horizon is not None:
        stamped = walk.newest_horizon - config.delete_retention_ms
    cleaned_after = walk.newest.next_timestamp_ms if walk.newest else None
    evidence = [t for t in (cleaned_after, stamped) if t is not None]
    report = LastCleanReport(
        state.partition.topic, state.partition.partition, str(state.partition.path),
        state.log_start_offset, state.log_end_offset, state.checkpoint_offset,
        rng.first_dirty_offset,
        bool(walk.gaps or walk.horizon_batches or walk.empty_batches or _checkpoint_shows_a_clean(state, rng)),
        walk.gaps, walk.missing, walk.newest, cleaned_after,
        walk.newest.next_offset if walk.newest else state.log_start_offset,
        walk.since, walk.dirty_records, walk.horizon_batches, walk.newest_horizon, stamped,
        max(evidence) if evidence else None, walk.empty_batches, list(state.warnings),
        crc.corrupt_batches, crc.first_error,
    )
    gap = walk.newest
    if gap is not None and not gap.before_first_dirty:
        report.warnings.append(
            f"offsets from {gap.next_offset - gap.missing_offsets} on were removed by a clean, "
            f"inside the dirty section the checkpoint implies (first dirty offset "
            f"{rng.first_dirty_offset}): cleaner-offset-checkpoint is missing or behind"
        )
    return report


def _checkpoint_shows_a_clean(state: LogState, rng: CleanableRange) -> bool:
    """Whether cleaner-offset-checkpoint says a clean ran: an entry inside the log, above its start (a
    cleaner writes it at the end of a round, and nothing else moves it up)."""
    checkpoint = state.checkpoint_offset
    return checkpoint is not None and rng.checkpoint_reset is None and checkpoint > state.log_start_offset


class _Walk:
    """The record offsets of the log in order, reduced to gaps and counts."""

    def __init__(self, log_start_offset: int, first_dirty_offset: int) -> None:
        self.log_start, self.first_dirty = log_start_offset, first_dirty_offset
        self.prev = log_start_offset - 1  # the last record offset seen
        self.gaps = self.missing = self.since = self.dirty_records = 0
        self.newest: OffsetGap | None = None
        self.horizon_batches = self.empty_batches = 0
        self.newest_horizon: int | None = None

    def run(self, first: int, last: int, first_timestamp: Callable[[], int]) -> None:
        """Records at every offset ``first..last``; ``first_timestamp()`` gives the first one's time
        (called only when a gap ends there, since it may decode the batch)."""
        first = max(first, self.log_start)
        if last < first:
            return
        if first > self.prev + 1:
            self._gap(first, first_timestamp())
        self.since += last - first + 1
        self.dirty_records += max(0, last - max(first, self.first_dirty) + 1)
        self.prev = last

    def finish(self, log_end_offset: int) -> None:
        if log_end_offset > max(self.prev + 1, self.log_start):
            self._gap(log_end_offset, None)

    def _gap(self, next_offset: int, timestamp: int | None) -> None:
        start = self.prev + 1  # the first missing offset (prev starts at log start - 1)
        after = self.prev if self.prev >= self.log_start else None
        self.gaps += 1
        self.missing += next_offset - start
        self.since = 0
        self.newest = OffsetGap(after, next_offset, next_offset - start, timestamp,
                                start < self.first_dirty)


def _walk_segments(state: LogState, walk: _Walk, crc: CrcTally, progress: ReadProgress | None) -> None:
    for seg in state.segments:
        with seg.files.open() as log:
            for batch in log.iter_batches():
                crc.check(log.path, batch)
                try:
                    _walk_batch(batch, walk)
                except CorruptDataError as err:
                    raise crc_error_or(err, log.path, batch) from err
                if progress is not None:
                    progress.advance(batch.size_in_bytes)
    if progress is not None:
        progress.finish()


def _walk_batch(batch: Any, walk: _Walk) -> None:
    if batch.magic < 2:
        if batch.compression == 0:
            walk.run(batch.offset, batch.offset, _constant(batch.timestamp))
        else:
            for record in legacy_records(batch):
                walk.run(record.offset, record.offset, _constant(record.timestamp))
        return
    if batch.has_delete_horizon:
        walk.horizon_batches += 1
        walk.newest_horizon = max(walk.newest_horizon or batch.delete_horizon_ms,
                                  batch.delete_horizon_ms)
    count = batch.records_count
    if count == 0:
        walk.empty_batches += 1
    elif count == batch.last_offset - batch.base_offset + 1:  # nothing removed inside
        walk.run(batch.base_offset, batch.last_offset, lambda: _timestamps(batch)[1][0])
    else:
        offsets, stamps = _timestamps(batch)
        for offset, stamp in zip(offsets, stamps, strict=True):
            walk.run(offset, offset, _constant(stamp))


def _constant(value: int) -> Callable[[], int]:
    return lambda: value


def _timestamps(batch: Any) -> tuple[list[int], list[int]]:
    """Offsets and timestamps of a v2 batch's records."""
    log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    append_time = batch.max_timestamp if log_append else None
    cols = scan_records(records_bytes(batch), base_offset=batch.base_offset,
                        base_timestamp=batch.base_timestamp, count=batch.records_count,
                        log_append_time=append_time)
    return list(cols.offsets), list(cols.timestamps)
