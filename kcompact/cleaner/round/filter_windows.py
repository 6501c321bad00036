"""Pass 2 over windows of data batches in two C calls a window (``filtering.filter_segment``'s fast path).

Why: in a log of non-transactional batches (the common case) pass 2's per-batch Python — header decode,
CRC check, batch decision, decompression, record scan, rebuild, recompression, stats, one sink call each —
cost more than the record work itself. Here a window of up to :data:`RUN_BATCHES` batches (or
:data:`RUN_RECORDS` records, or :data:`RUN_BYTES` bytes read and decompressed) is read by one C call
(``accel.scan_window_records``: headers, CRCs, each compressed batch's records decompressed through
``records.compression.decompress`` — zstd's in C, see ``accel.zstd_codec`` — record columns), its records
decided together by :func:`keep_records` (the very function the per-batch path decides with), and its output
written by a second C call (``accel.emit_window``: dropped, copied byte for byte or rebuilt — a compressed
batch's kept records compressed again through ``records.compression.compress``, zstd's in C — exactly as
``records.filter.filter_v2_batch``).

What the kernel takes is what makes the batch decision trivial (``rules.policy.check_batch_retention``
gives ``DELETE_EMPTY``, and the transaction state only moves its aborted queue on): a v2 batch, neither
transactional nor control, with records, whose last offset is no live producer's last and whose next
offset is not the round's upper bound. It stops before any other batch — a bad CRC, a stream the codec
refuses or records that do not scan included — and the per-batch walk takes that one (and raises its
exact error). The pure-Python path stays the reference; tests compare the two outputs byte for byte.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kcompact.cleaner.round import accel
from kcompact.cleaner.round.stats import CleanStats
from kcompact.log.offset_map.oracle import RetentionOracle
from kcompact.log.rules.policy import new_delete_horizon
from kcompact.log.rules.producer_state import LastRecord
from kcompact.records.compression import compress, decompress, zstd_one_call

if TYPE_CHECKING:  # filtering imports this module; the annotations only name its context
    from kcompact.cleaner.round.filtering import FilterContext

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
KeysAt = Callable[[npt.NDArray[np.intp]], Sequence[bytes]]
Sink = Callable[[bytes | memoryview, int, int], None]
RunSink = Callable[[bytes, list[int], list[int], list[int]], None]
"""Receives consecutive output batches at once: their bytes back to back, then per batch its size,
last offset and max timestamp (``CleanedSegmentWriter.append_run``)."""

RUN_RECORDS = 1 << 14  # records decided together (one oracle call, one set of masks)
RUN_BATCHES = 128
RUN_BYTES = 4 << 20  # a window's batches: its output (copies too) is one buffer of at most about this
_BATCH_FIELDS = 8  # scan_window_records' per-batch row
_LAST_OFFSET, _COUNT, _ATTRIBUTES, _BASE_TIMESTAMP = 3, 4, 5, 6
_DELETE_HORIZON_BIT = 0x40
_OUTCOME_FIELDS = 5  # emit_window's per-batch row: outcome, size, last offset, max timestamp, kept
_COPIED, _REBUILT = 1, 2


def keep_records(
    offsets: I64, keyed: Mask, tombstone: Mask, keeps_tombstones: Mask, keys_at: KeysAt,
    oracle: RetentionOracle, fence: int | None, stats: CleanStats,
) -> Mask:
    """Kafka's ``Cleaner.shouldRetainRecord`` over the records of several data batches at once::

        keep = beyond the map | (is latest & (has a value | tombstone still before its horizon))

    Args:
        offsets, keyed, tombstone: per record.
        keeps_tombstones: per record, its batch has no delete horizon or it is still ahead.
        keys_at: the keys of the records at given positions (asked for clean-section records only).
        oracle: the retention oracle.
        fence: the replica fence (``rules.fence``): at or above it no tombstone goes for its age.
        stats: keyless, superseded and tombstone removals are counted here.

    Returns:
        The kept mask.
    """
    covered = offsets <= oracle.map_latest_offset
    asked = np.flatnonzero(covered & keyed)
    is_latest = np.zeros(len(offsets), dtype=bool)
    if len(asked):
        is_latest[asked] = oracle.is_latest(offsets[asked], lambda at: keys_at(asked[at]))
    if fence is not None:
        keeps_tombstones = keeps_tombstones | (offsets >= fence)
    kept: Mask = ~covered | (is_latest & (~tombstone | keeps_tombstones))
    stats.invalid_records += int(np.count_nonzero(covered & ~keyed))
    stats.tombstones_removed += int(np.count_nonzero(covered & keyed & tombstone & ~kept))
    stats.superseded_removed += int(np.count_nonzero(covered & keyed & ~tombstone & ~kept))
    return kept


def protected_offsets(last_records: Mapping[int, LastRecord]) -> I64:
    """The last offsets a run must not take: each live producer's last data batch (its batch
    decision is ``RETAIN_EMPTY``), ascending."""
    return np.array(sorted(r.last_data_offset for r in last_records.values()
                           if r.last_data_offset is not None), dtype=np.int64)


def take_runs(
    buffer: memoryview, position: int, limit: int, ctx: FilterContext, protected: I64, sink: Sink,
    before: Callable[[], None], sink_run: RunSink | None = None,
    forget_before: Callable[[int], None] | None = None,
) -> int:
    """Filter the plain batches from ``position`` on (before ``limit``) into ``sink``, a window at
    a time, until a batch the kernel does not take.

    Args:
        buffer: the segment's bytes.
        position: a batch boundary.
        limit: batches starting here or later are not taken.
        ctx: the walk's context; its stats and transaction state move on as the per-batch walk's.
        protected: :func:`protected_offsets` of ``ctx.last_records``.
        sink: receives each output batch (unless ``sink_run`` is given).
        sink_run: receives each window's output batches at once.
        before: called once before the first window is decided (the caller's pending output).
        forget_before: called with where each window ended (``LogFile.forget_before``).

    Returns:
        Where the per-batch walk goes on (``position``: nothing was taken).
    """
    while position < limit:
        zstd = accel.zstd_codec(zstd_one_call())
        run = accel.scan_window_records(buffer, position, limit, RUN_BATCHES, RUN_RECORDS, RUN_BYTES,
                                        protected, ctx.upper_bound, decompress, zstd)
        if run is None or run[0] == position:
            break
        before()
        before = _nothing
        emitted = _filter_run(buffer, run, ctx, zstd is True)
        if emitted is None:
            break
        data, rows = emitted
        if sink_run is not None:
            out = [row for row in rows if row[0]]
            sink_run(data, [r[1] for r in out], [r[2] for r in out], [r[3] for r in out])
        else:
            view, at = memoryview(data), 0
            for outcome, size, last_offset, max_timestamp, _kept in rows:
                if outcome:
                    sink(view[at : at + size], last_offset, max_timestamp)
                    at += size
        position = run[0]
        if forget_before is not None:
            forget_before(position)
    return position


def _nothing() -> None:
    pass


def _filter_run(
    buffer: memoryview, run: accel.WindowRecords, ctx: FilterContext, compiled_zstd: bool
) -> tuple[bytes, list[list[int]]] | None:
    """Decide and emit one scanned window; None (nothing counted) where the C rebuild declines."""
    _, batches, offsets_raw, timestamps, key_starts_raw, key_ends_raw, body_starts, record_ends, \
        value_null, inflated = run
    info = np.frombuffer(batches, dtype=np.int64).reshape(-1, _BATCH_FIELDS)
    counts = info[:, _COUNT]
    offsets = np.frombuffer(offsets_raw, dtype=np.int64)
    key_starts = np.frombuffer(key_starts_raw, dtype=np.int64)
    key_ends = np.frombuffer(key_ends_raw, dtype=np.int64)

    def keys_at(at: npt.NDArray[np.intp]) -> list[bytes]:
        return [bytes(buffer[s:e]) if s < len(buffer) else _inflated_bytes(s, e)
                for s, e in zip(key_starts[at].tolist(), key_ends[at].tolist(), strict=True)]

    piece_starts = list(itertools.accumulate(map(len, inflated), initial=len(buffer)))

    def _inflated_bytes(start: int, end: int) -> bytes:
        """Bytes of a compressed batch's records: its item of ``inflated``, placed after ``buffer``."""
        item = bisect.bisect_right(piece_starts, start) - 1
        return inflated[item][start - piece_starts[item] : end - piece_starts[item]]

    has_horizon = (info[:, _ATTRIBUTES] & _DELETE_HORIZON_BIT) != 0
    keeps = np.repeat(~has_horizon | (ctx.now_ms < info[:, _BASE_TIMESTAMP]), counts)
    stats = CleanStats()
    kept = keep_records(offsets, key_starts >= 0, np.frombuffer(value_null, dtype=np.bool_), keeps,
                        keys_at, ctx.oracle, ctx.fence, stats)
    emitted = accel.emit_window(
        buffer, batches, (offsets_raw, timestamps, body_starts, record_ends), value_null,
        kept.view(np.uint8), new_delete_horizon(ctx.now_ms, ctx.delete_retention_ms),
        inflated, compress, compiled_zstd)
    if emitted is None:
        return None
    data, table = emitted
    rows = np.frombuffer(table, dtype=np.int64).reshape(-1, _OUTCOME_FIELDS)
    outcomes = rows[:, 0]
    stats.batches_read = len(info)
    stats.records_read = int(counts.sum())
    stats.records_written = int(rows[:, 4].sum())
    stats.batches_copied = int(np.count_nonzero(outcomes == _COPIED))
    stats.batches_rebuilt = int(np.count_nonzero(outcomes == _REBUILT))
    stats.batches_dropped = len(info) - stats.batches_copied - stats.batches_rebuilt
    ctx.stats.add(stats)
    ctx.txn.advance_to(int(info[-1, _LAST_OFFSET]))  # what each batch's on_batch_read does first
    return data, rows.tolist()
