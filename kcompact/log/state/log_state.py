"""What the broker would know about a partition after loading it, from one pass over batch headers.

Kafka's cleaner reads most of its inputs from the broker's memory: each segment's next offset and largest
timestamp, the producer state (who is still an active producer, where open transactions start), the high
watermark, the aborted transactions of the ``.txnindex`` files. Offline, :func:`load_log_state` rebuilds the
same facts from the files: sizes, checkpoints, index tails and every batch *header* (control batches' single
marker record is read too, it says COMMIT or ABORT). No data record payload is decompressed here, so
``inspect dirty-ratio`` stays fast on large log dirs and ``clean`` pays for it once.

The same walk records, per segment, the headers the cleaner's transaction bookkeeping reacts to
(``SegmentState.txn_events``: transactional data batches and COMMIT/ABORT markers, none for a topic
without transactions), so that a cleaning round can be started at any segment without reading the
segments before it again (``kcompact.cleaner.round.plan``).

Where the files disagree with what a broker would have (a segment without ``.index`` is recovered by Kafka on
load, which also rebuilds its time and transaction indexes), the facts follow what Kafka would see *after*
loading.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CorruptDataError
from kcompact.log.rules.aborted import (
    TxnRow,
    aborted_transactions,
    derive_transactions,
    merge_aborted,
)
from kcompact.log.rules.high_watermark import SoleReplica, high_watermark_note
from kcompact.log.rules.producer_state import OpenTxn, ProducerStateReplay
from kcompact.log.rules.ranges import RangeInputs, SegmentStats
from kcompact.log.rules.transactions import TXN_DATA
from kcompact.records.batch_header import NO_PRODUCER_ID, RecordBatch
from kcompact.records.control import ControlRecordKey, ControlRecordType, EndTransactionMarker
from kcompact.records.record import decode_records
from kcompact.records.scan import accel
from kcompact.segment.files import file_access
from kcompact.segment.fixed_index import read_last_slot, slot_ends_in_zeros
from kcompact.segment.index_builder import IndexBuilder
from kcompact.segment.log_file import LogFile
from kcompact.segment.log_reads import LogReads, open_log
from kcompact.segment.names import parse_segment_file_name
from kcompact.segment.offset_index import OFFSET_INDEX_ENTRY_SIZE
from kcompact.segment.partition import Partition, SegmentFiles
from kcompact.segment.snapshot import ProducerSnapshotEntry, read_producer_snapshot
from kcompact.segment.time_index import TIME_INDEX_ENTRY, TIME_INDEX_ENTRY_SIZE, read_time_index_tail
from kcompact.segment.txn_index import AbortedTxn, read_txn_index
from kcompact.value import frozen, mutable

if TYPE_CHECKING:
    from kcompact.segment.log_file import AnyBatch

NO_HIGH_WATERMARK_WARNING = "no high watermark in replication-offset-checkpoint"
"""How the warning of a partition without a high-watermark entry starts (a run over a log dir counts them)."""
NO_HIGH_WATERMARK_CLEANING = " (a broker would start from the log start and clean nothing until replicated)"
"""How that warning ends: what it means for cleaning (a report that is not about cleaning leaves it out)."""

_MARKER_TYPES = (ControlRecordType.ABORT, ControlRecordType.COMMIT)
_LEGACY_RUN_ENTRIES = 1 << 16  # legacy entries read by one C call (bounds the rows' memory)
_NUMPY_ROWS = 4096  # from this many batches on, numpy picks each producer's ends: its import (~70 ms of CPU) pays
HW_FROM_CHECKPOINT = "replication-offset-checkpoint"
HW_FROM_LOG_END = "log-end (no replication-offset-checkpoint entry)"
HW_FROM_SOLE_REPLICA = "log-end (this broker is the partition's only replica)"


@frozen
class SegmentState:
    """One segment as the broker's cleaner sees it."""

    files: SegmentFiles
    next_offset: int  # offset after its last batch; its base when empty
    batch_count: int
    first_batch_timestamp_ms: int  # first batch's max_timestamp, -1 when empty
    largest_timestamp_ms: int  # time-index last entry (or recovered max), else the .log mtime
    offset_index_bytes: int  # the .index size Kafka would have (entries × 8)
    time_index_bytes: int
    needs_recovery: bool  # no .index, or preallocated indexes: their contents are derived from the log
    # (last_offset, producer_id, kind) of its transactional data batches (kind TXN_DATA) and
    # COMMIT/ABORT markers (kind = the control type), in log order
    txn_events: tuple[tuple[int, int, int], ...] = ()

    @property
    def base_offset(self) -> int:
        return self.files.base_offset

    @property
    def size_in_bytes(self) -> int:
        return self.files.size_in_bytes


@mutable
class TxnSpan:
    """One transaction seen in the log: where it starts and the offset of its marker (None: still open)."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    first_timestamp_ms: int
    marker_offset: int | None = None
    aborted: bool = False


@mutable
class LogState:
    """The loaded facts of one partition (see the module docstring)."""

    partition: Partition
    segments: tuple[SegmentState, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    high_watermark_source: str
    checkpoint_offset: int | None
    producers: ProducerStateReplay
    transactions: list[TxnSpan]
    aborted_by_segment: list[tuple[int, list[AbortedTxn]]]
    warnings: list[str] = field(default_factory=list)
    snapshot_offset: int | None = None  # the producer snapshot the state was seeded from, if any
    # why the high watermark is the log end and not the checkpoint's (``rules.high_watermark``), if it is
    high_watermark_note: str | None = None

    def open_transaction(self) -> OpenTxn | None:
        """The earliest transaction still unstable at the high watermark (it caps cleaning), if any."""
        first = self.producers.first_unstable_offset()
        if first is None:
            return None
        for txn in self.producers.open_transactions():
            if txn.first_offset == first:
                return txn
        span = next((t for t in self.transactions if t.first_offset == first), None)
        if span is None:
            return OpenTxn(-1, -1, first, -1)
        return OpenTxn(span.producer_id, span.producer_epoch, first, span.first_timestamp_ms)

    def range_inputs(self, config: TopicConfig, now_ms: int) -> RangeInputs:
        """The inputs of :func:`kcompact.log.rules.ranges.compute_cleanable_range`."""
        unstable = self.open_transaction()
        return RangeInputs(
            segments=tuple(
                SegmentStats(
                    base_offset=s.base_offset,
                    size_in_bytes=s.size_in_bytes,
                    largest_timestamp_ms=s.largest_timestamp_ms,
                    first_batch_timestamp_ms=s.first_batch_timestamp_ms,
                    next_offset=s.next_offset,
                )
                for s in self.segments
            ),
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            checkpoint_offset=self.checkpoint_offset,
            high_watermark=self.high_watermark,
            high_watermark_source=self.high_watermark_source,
            first_unstable_offset=None if unstable is None else unstable.first_offset,
            open_txn=unstable,
            now_ms=now_ms,
            min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
            min_compaction_lag_ms=config.min_compaction_lag_ms,
            max_compaction_lag_ms=config.max_compaction_lag_ms,
            segment_ms=config.segment_ms,
            segment_bytes=config.segment_bytes,
            policy=config.cleanup_policy,
        )


def load_log_state(partition: Partition, config: TopicConfig, reads: LogReads | None = None, *,
                   sole_replica: SoleReplica | None = None) -> LogState:
    """Walk every segment's batch headers once and gather the facts of the module docstring.

    Args:
        partition: the partition.
        config: its configuration (``index.interval.bytes`` for a segment Kafka would recover).
        reads: the report's shared reads of its ``.log`` files (None: each is opened for this walk).
        sole_replica: this broker is the partition's only replica: its high watermark is its log end, as
            Kafka's leader sets it on start (``rules.high_watermark``), not the checkpoint's entry.

    Raises:
        CorruptDataError: a segment's framing or a marker record does not parse (names file and position).
    """
    hw_entry = partition.checkpointed(partition.log_dir.replication_checkpoint)
    # with the high watermark at the log end every marker is replicated (ProducerStateManager.onHighWatermarkUpdated)
    replay = ProducerStateReplay(high_watermark=None if sole_replica is not None else hw_entry)
    warnings: list[str] = []
    log_start = partition.log_start_offset()
    snapshot_offset = _seed_from_snapshot(partition, replay, warnings, reads, log_start)
    # UnifiedLog.rebuildProducerState replays from the snapshot, or from the log start without one
    # (ProducerStateManager.loadFromSnapshot): a producer heard of only below the log start is unknown
    replay_from = snapshot_offset if snapshot_offset is not None else log_start
    txn_rows: list[TxnRow] = []
    segments = tuple(
        _load_segment(seg, replay, txn_rows, config.index_interval_bytes, replay_from, reads)
        for seg in partition.segments
    )
    transactions = derive_transactions(txn_rows)
    log_end = segments[-1].next_offset if segments else log_start
    note = None
    if sole_replica is not None:
        hw, hw_source = log_end, HW_FROM_SOLE_REPLICA
        note = high_watermark_note(sole_replica, log_end, hw_entry)
    elif hw_entry is None:
        hw, hw_source = log_end, HW_FROM_LOG_END
        if not partition.is_metadata_log:  # KRaft never keeps its metadata log's high watermark there
            warnings.append(f"{NO_HIGH_WATERMARK_WARNING}: using the log end offset {log_end}"
                            f"{NO_HIGH_WATERMARK_CLEANING}")
    else:
        hw, hw_source = min(hw_entry, log_end), HW_FROM_CHECKPOINT
    return LogState(
        partition=partition,
        segments=segments,
        log_start_offset=log_start,
        log_end_offset=log_end,
        high_watermark=hw,
        high_watermark_source=hw_source,
        checkpoint_offset=partition.checkpointed(partition.log_dir.cleaner_checkpoint),
        producers=replay,
        transactions=[TxnSpan(t.producer_id, t.producer_epoch, t.first_offset, t.first_timestamp_ms,
                              t.marker_offset, t.aborted) for t in transactions],
        aborted_by_segment=_aborted_by_segment(
            segments, [AbortedTxn(*e) for e in aborted_transactions(transactions)]),
        warnings=warnings,
        snapshot_offset=snapshot_offset,
        high_watermark_note=note,
    )


def _register_emptied_marker(replay: ProducerStateReplay, batch: AnyBatch) -> None:
    """Keep the producer of an emptied marker known, with the marker's epoch.

    A cleaner empties a marker but keeps its shell while it carries a live producer's latest epoch. The
    broker still holds that producer in memory (and in its snapshots); replaying the log alone would forget
    it and let the next clean drop the shell. When in doubt a producer stays active
    (``ProducerStateManager.removeExpiredProducers``): an extra 61-byte shell is harmless, a dropped one breaks fencing.
    """
    if batch.producer_id < 0 or batch.producer_id in replay.producers():
        return
    replay.seed([ProducerSnapshotEntry(
        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch, last_sequence=-1,
        last_offset=-1, offset_delta=0, timestamp=batch.max_timestamp, coordinator_epoch=-1,
        current_txn_first_offset=-1,
    )])


def _seed_from_snapshot(
    partition: Partition, replay: ProducerStateReplay, warnings: list[str], reads: LogReads | None,
    log_start: int,
) -> int | None:
    """Seed producer state from the newest usable ``.snapshot``, as a broker's loader does.

    Returns the snapshot's offset, from which batches must still be replayed (None when no snapshot is
    used: the log is replayed from its start). A snapshot past the log end, or at or below the log start,
    is out of range (``ProducerStateManager.truncateAndReload`` deletes it); one that does not parse is
    ignored with a warning and the log is replayed from its start instead.
    """
    candidates = []
    for path in partition.snapshots:
        parsed = parse_segment_file_name(path.name)
        if parsed is not None:
            candidates.append((parsed.base_offset, path))
    if not candidates:
        return None
    log_end = partition.log_end_offset(reads)
    usable = [(offset, path) for offset, path in candidates if log_start < offset <= log_end]
    if not usable:
        return None
    offset, path = max(usable)
    try:
        entries = read_producer_snapshot(path)
    except CorruptDataError as err:
        warnings.append(f"producer snapshot ignored, the whole log is replayed instead: {err}")
        return None
    replay.seed(entries)
    return offset


def _load_segment(
    seg: SegmentFiles,
    replay: ProducerStateReplay,
    txn_rows: list[TxnRow],
    interval: int,
    replay_from: int = 0,
    reads: LogReads | None = None,
) -> SegmentState:
    time_tail, offset_tail = _index_tails(seg)
    needs_recovery = seg.index_path is None or _preallocated(time_tail, offset_tail)
    # Only a segment Kafka would recover needs its indexes derived (what recovery would rebuild).
    builder = IndexBuilder(seg.base_offset, interval) if needs_recovery else None
    first_ts, count, next_offset = -1, 0, seg.base_offset
    events: list[tuple[int, int, int]] = []
    # a shared read that replays walks (``LogReads.replays_walks``) keeps this Python walk for the checks after it
    kept_walk = reads is not None and reads.replays_walks
    with open_log(seg, reads) as log:
        quick = None if needs_recovery or kept_walk else _data_only(log, replay, replay_from, seg.base_offset)
        if quick is not None:
            first_ts, count, next_offset = quick
        batches = log.iter_batches() if quick is None else iter(())
        while (batch := next(batches, None)) is not None:
            if batch.magic < 2 and not kept_walk and (
                    run := _legacy_run(log, batch.position, builder)) is not None:
                reached, run_first_ts, run_count, next_offset = run
                first_ts = run_first_ts if count == 0 else first_ts
                count += run_count
                batches = log.iter_batches(reached)
                continue
            control_type, marker_ts, coordinator_epoch = None, None, None
            if batch.is_control:
                control_type, marker_ts, coordinator_epoch = read_marker(batch, log.path)
                if control_type is not None and control_type in _MARKER_TYPES:
                    events.append((batch.last_offset, batch.producer_id, control_type))
            elif batch.is_transactional:
                events.append((batch.last_offset, batch.producer_id, TXN_DATA))
            if batch.last_offset >= replay_from:  # LogSegment.read: from the batch holding it
                if batch.is_control and control_type is None:
                    _register_emptied_marker(replay, batch)
                replay.apply(batch, control_type=control_type, marker_timestamp=marker_ts,
                             coordinator_epoch=coordinator_epoch)
            if batch.is_transactional:  # the rows of rules.aborted (legacy entries never are)
                txn_rows.append(TxnRow(batch.producer_id, batch.producer_epoch, batch.base_offset,
                                       batch.max_timestamp, True, batch.is_control, control_type))
            if builder is not None:
                builder.append(batch.position, batch.size_in_bytes, batch.last_offset,
                               batch.max_timestamp)
            if count == 0:
                first_ts = batch.max_timestamp
            count += 1
            next_offset = batch.last_offset + 1
    if builder is not None:
        offsets, times = builder.finish()
        largest = times[-1].timestamp if times else -1
        index_bytes, time_bytes = len(offsets) * 8, len(times) * TIME_INDEX_ENTRY_SIZE
    else:
        largest, time_bytes = _time_index_tail(seg, time_tail)
        index_bytes = (0 if seg.index_path is None else offset_tail[0] if offset_tail is not None
                       else _size_in_bytes(seg.index_path))
    return SegmentState(
        files=seg,
        next_offset=next_offset,
        batch_count=count,
        first_batch_timestamp_ms=first_ts,
        largest_timestamp_ms=largest if largest >= 0 else seg.mtime_ms,
        offset_index_bytes=index_bytes,
        time_index_bytes=time_bytes,
        needs_recovery=needs_recovery,
        txn_events=tuple(events),
    )


def _legacy_run(
    log: LogFile, position: int, builder: IndexBuilder | None
) -> tuple[int, int, int, int] | None:
    """``(reached, first max timestamp, entries, next offset)`` of the plain legacy entries from
    ``position`` on, from one C walk (``legacy_rows.legacy_entries``), each appended to ``builder``;
    None where the walk takes none: the batch-by-batch walk goes on.

    Why nothing else: a legacy entry has no producer and is neither control nor transactional, so
    the producer state and the transaction tracker ignore it. A compressed wrapper is taken as its
    header says (its offset is its last inner offset), not decompressed: as a v2 batch's records, its
    messages are read by the passes that clean them.
    """
    # kept off a clean's start-up: only legacy (magic 0/1) entries need it
    from kcompact.records.scan.legacy_rows import LEGACY_COMPRESSED, OFFSET, ROW_FIELDS, SIZE, TIMESTAMP, legacy_entries

    run = legacy_entries(log.buffer, position, log.size_in_bytes, _LEGACY_RUN_ENTRIES,
                         LEGACY_COMPRESSED)
    if run is None or run[0] == position:
        return None
    rows = array("q", run[1])
    offsets = rows[OFFSET::ROW_FIELDS]
    if builder is not None:
        builder.append_run(position, rows[SIZE::ROW_FIELDS].tolist(), offsets.tolist(),
                           rows[TIMESTAMP::ROW_FIELDS].tolist())
    return run[0], rows[TIMESTAMP], len(offsets), offsets[-1] + 1


def _data_only(
    log: LogFile, replay: ProducerStateReplay, replay_from: int, base_offset: int
) -> tuple[int, int, int] | None:
    """``(first batch's max timestamp, batches, next offset)`` of a log of data batches that are not
    transactional, from one C walk of its headers (``accel.batch_producers``), with each producer's
    first and last batch (those ending at or past ``replay_from``) applied to ``replay`` in log order; None where the
    walk stops early (a control, transactional or legacy batch, bad framing): walk batch by batch.

    Why only those two: a non-transactional data batch overwrites everything ``replay`` keeps of its
    producer (epoch, last offset, timestamp and sequence), so the last one decides the state; the first
    one keeps the order in which producers first appear.
    """
    found = log.walk_headers(accel.batch_producers)
    if found is None or found[0] != log.size_in_bytes:
        return None
    rows = memoryview(found[1]).cast("q")  # per batch: position, base offset, last offset, max timestamp, producer
    count = len(rows) // 5
    if not count:
        return -1, 0, base_offset
    ends = _producer_ends_numpy if count >= _NUMPY_ROWS else _producer_ends
    for position in ends(rows, replay_from):
        replay.apply(next(log.iter_batches(position)))
    return rows[3], count, rows[-3] + 1


def _producer_ends(rows: memoryview, replay_from: int) -> list[int]:
    """The positions, in log order, of each producer's first and last batch among ``rows`` (``_data_only``'s)
    that end at or past ``replay_from``."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for at, (last_offset, producer) in enumerate(zip(rows[2::5], rows[4::5], strict=True)):
        if producer > NO_PRODUCER_ID and last_offset >= replay_from:
            first.setdefault(producer, at)
            last[producer] = at
    return [rows[5 * at] for at in sorted({*first.values(), *last.values()})]


def _producer_ends_numpy(rows: memoryview, replay_from: int) -> list[int]:
    """:func:`_producer_ends` over many batches, by numpy."""
    import numpy as np  # only here: a log of few batches loads without it (start-up CPU)

    positions, _, last_offsets, _, producers = np.asarray(rows).reshape(-1, 5).T
    applied = np.flatnonzero((producers > NO_PRODUCER_ID) & (last_offsets >= replay_from))
    if not len(applied):
        return []
    ids = producers[applied]
    first = np.unique(ids, return_index=True)[1]
    last = len(ids) - 1 - np.unique(ids[::-1], return_index=True)[1]
    ends: list[int] = positions[np.union1d(applied[first], applied[last])].tolist()
    return ends


def _size_in_bytes(path: Path) -> int:
    with file_access(path, "read"):
        return path.stat().st_size


def _index_tails(seg: SegmentFiles) -> tuple[tuple[int, bytes] | None, tuple[int, bytes] | None]:
    """The time index's and the offset index's :func:`read_last_slot` (None: missing or unreadable), each
    file opened once for both what :func:`_preallocated` and the segment's sizes and largest timestamp read."""
    time_path, offset_path = seg.time_index_path, seg.index_path
    return (None if time_path is None else read_last_slot(time_path, TIME_INDEX_ENTRY_SIZE),
            None if offset_path is None else read_last_slot(offset_path, OFFSET_INDEX_ENTRY_SIZE))


def _preallocated(time_tail: tuple[int, bytes] | None, offset_tail: tuple[int, bytes] | None) -> bool:
    """Whether the segment's indexes (their :func:`_index_tails`) end in zero slots: preallocated by a broker
    that did not shut down cleanly and never trimmed. Its time index's last slot would give it a largest
    timestamp of 0 — every retention.ms and min.compaction.lag.ms passed — where the broker, recovering the
    segment as it starts (``LogLoader.recoverLog``, ``segment.startup_recovery``), rebuilds the indexes from
    the log: so are they derived here."""
    return ((time_tail is not None and slot_ends_in_zeros(time_tail, TIME_INDEX_ENTRY_SIZE))
            or (offset_tail is not None and slot_ends_in_zeros(offset_tail, OFFSET_INDEX_ENTRY_SIZE)))


def _time_index_tail(seg: SegmentFiles, tail: tuple[int, bytes] | None) -> tuple[int, int]:
    """(last time-index timestamp or -1, file size) from its :func:`_index_tails` read (a file that read
    failed is read again, for the error that names it); a missing .timeindex is created empty by Kafka."""
    if seg.time_index_path is None:
        return -1, 0
    if tail is None:
        return read_time_index_tail(seg.time_index_path)
    size, last = tail
    timestamp: int = TIME_INDEX_ENTRY.unpack(last)[0] if last else -1
    return timestamp, size


def read_control(batch: AnyBatch, path: str | Path) -> tuple[int | None, int | None]:
    """The control type and timestamp of a control batch's first record (None for an emptied marker)."""
    control_type, timestamp, _epoch = read_marker(batch, path)
    return control_type, timestamp


def read_marker(batch: AnyBatch, path: str | Path) -> tuple[int | None, int | None, int | None]:
    """:func:`read_control` plus, for a COMMIT/ABORT marker, its coordinator epoch (else None).

    Only a v2 batch holds control records: a legacy entry (never ``is_control``) reads as an emptied marker.
    """
    if not isinstance(batch, RecordBatch) or batch.records_count == 0:
        return None, None, None
    try:
        record = decode_records(batch)[0]
        key = ControlRecordKey.parse(record.key or b"")
        epoch = None
        if key.type in _MARKER_TYPES:
            epoch = EndTransactionMarker.parse(record.value).coordinator_epoch
    except CorruptDataError as err:
        if err.path is None:
            raise err.located(str(path), batch.position) from err
        raise
    return int(key.type), record.timestamp, epoch


def _aborted_by_segment(
    segments: Sequence[SegmentState], derived_aborted: Sequence[AbortedTxn]
) -> list[tuple[int, list[AbortedTxn]]]:
    """Per segment, the aborted transactions Kafka would find in its txn index after loading.

    The ``.txnindex`` file is used as is; where a segment would be recovered (no ``.index``) or its txn
    index is missing although the data holds aborted transactions, the entries derived from the data
    replace it — without them aborted data would be kept as if committed.
    """
    result: list[tuple[int, list[AbortedTxn]]] = []
    for i, seg in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else None
        derived = [
            t for t in derived_aborted
            if t.last_offset >= seg.base_offset and (end is None or t.last_offset < end)
        ]
        entries: list[AbortedTxn] = []
        if seg.files.txn_index_path is not None and not seg.needs_recovery:
            entries = read_txn_index(seg.files.txn_index_path)
        result.append((seg.base_offset, merge_aborted(entries, derived)[0]))
    return result
