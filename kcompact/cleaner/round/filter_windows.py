"""Pass 2 over windows of data batches in two C calls a window (``filtering.iter_segment_output``'s fast path).

Why: in a log of non-transactional batches (the common case) pass 2's per-batch Python — header decode,
CRC check, batch decision, decompression, record scan, rebuild, recompression, stats, one sink call each —
cost more than the record work itself. Here a window of up to :data:`RUN_BATCHES` batches (or
:data:`RUN_RECORDS` records, or :data:`RUN_BYTES` bytes read and decompressed, or the context's
``window_bytes``) is read by one C call
(``accel.scan_window_records``: headers, CRCs, each compressed batch's records decompressed through
``records.compression.decompress`` — zstd's in C, see ``accel.zstd_codec`` — record columns), its records
decided together by ``record_filter.keep_records`` (the very function the per-batch path decides with), and its output
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
from collections.abc import Callable, Generator, Iterable

import numpy as np
import numpy.typing as npt

from kcompact.cleaner.round import accel
from kcompact.cleaner.round.record_filter import (
    I64,
    RUN_BATCHES,
    RUN_BYTES,
    RUN_RECORDS,
    FilterContext,
    OutputRun,
    keep_records,
)
from kcompact.cleaner.round.stats import CleanStats
from kcompact.log.rules.policy import new_delete_horizon
from kcompact.records.compression import block_compressors, compress, decompress, zstd_one_call

_BATCH_FIELDS = 8  # scan_window_records' per-batch row
_LAST_OFFSET, _COUNT, _ATTRIBUTES, _BASE_TIMESTAMP = 3, 4, 5, 6
_DELETE_HORIZON_BIT = 0x40
_OUTCOME_FIELDS = 5  # emit_window's per-batch row: outcome, size, last offset, max timestamp, kept
_COPIED, _REBUILT = 1, 2


def take_runs(
    buffer: memoryview, position: int, limit: int, ctx: FilterContext, protected: I64,
    before: Callable[[], Iterable[OutputRun]], forget_before: Callable[[int], None] | None = None,
) -> Generator[OutputRun, None, int]:
    """The output of the plain batches from ``position`` on (before ``limit``), a window at a time, until a
    batch the kernel does not take.

    Args:
        buffer: the segment's bytes.
        position: a batch boundary.
        limit: batches starting here or later are not taken.
        ctx: the walk's context; its stats and transaction state move on as the per-batch walk's.
        protected: ``record_filter.protected_offsets`` of ``ctx.last_records``.
        before: the caller's pending output, yielded once before the first window is decided.
        forget_before: called with where each window ended once its output was taken
            (``LogFile.forget_before``).

    Yields:
        Each window's output batches (none for a window that drops everything).

    Returns:
        Where the per-batch walk goes on (``position``: nothing was taken).
    """
    window_bytes = RUN_BYTES if ctx.window_bytes is None else ctx.window_bytes
    while position < limit:
        zstd, native = accel.zstd_codec(zstd_one_call()), accel.native_codecs()
        run = accel.scan_window_records(buffer, position, limit, RUN_BATCHES, RUN_RECORDS, window_bytes,
                                        protected, ctx.upper_bound, decompress, zstd, native)
        if run is None or run[0] == position:
            break
        yield from before()
        before = _nothing
        emitted = _filter_run(buffer, run, ctx, zstd is True, native)
        if emitted is None:
            break
        data, rows = emitted
        out = [row for row in rows if row[0]]
        if out:
            yield OutputRun(data, [r[1] for r in out], [r[2] for r in out], [r[3] for r in out])
        position = run[0]
        if forget_before is not None:
            forget_before(position)
    return position


def _nothing() -> Iterable[OutputRun]:
    return ()


def _filter_run(
    buffer: memoryview, run: accel.WindowRecords, ctx: FilterContext, compiled_zstd: bool, native: int
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
        inflated, compress, compiled_zstd, native, block_compressors())
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
