"""Pass 2 over runs of plain legacy (magic 0/1) entries, one C walk a run (``filtering.filter_segment``'s
legacy fast path).

Why: a legacy log holds one message per entry, and the per-entry walk (``iter_batches``, the CRC
check, the batch decision, ``legacy_records``, the oracle, ``filter_legacy_entry``) cost ~40 us an
entry: 0.2 MiB/s. Here a run of up to :data:`~kcompact.cleaner.round.filter_windows.RUN_RECORDS`
uncompressed entries with sound CRCs is read by one C call
(``records.scan.legacy_rows.legacy_entries``), its records decided together by
:func:`~kcompact.cleaner.round.filter_windows.keep_records` (the rule v2 windows use; for legacy data a
tombstone outlives the map while the segment is newer than the legacy delete horizon), and each kept
message written as the one-record v2 batch ``records.filter.filter_legacy_entry`` writes for it, all
of them by one more C call (``legacy_rows.legacy_emit``).

What a run takes is what makes the batch decision trivial: a legacy entry has no producer and is never
transactional or control, so ``rules.policy.check_batch_retention`` gives ``DELETE_EMPTY`` and only moves
the aborted queue on, except for the entry whose next offset is the round's upper bound (``RETAIN_EMPTY``:
Kafka fails when nothing of it survives). A run stops before that entry, before a compressed wrapper,
a bad CRC or anything that does not parse, and the per-entry walk takes it (and raises its exact error).
The per-entry walk stays the reference; tests compare the two outputs byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kcompact.cleaner.round.filter_windows import RUN_RECORDS, RunSink, keep_records
from kcompact.log.rules.policy import new_delete_horizon
from kcompact.records.batch_header import NO_TIMESTAMP
from kcompact.records.legacy import TIMESTAMP_TYPE_MASK
from kcompact.records.scan.legacy_rows import (
    ATTRIBUTES,
    KEY_END,
    KEY_START,
    LEGACY_CRC,
    MAGIC,
    OFFSET,
    POSITION,
    ROW_FIELDS,
    TIMESTAMP,
    VALUE_START,
    legacy_emit,
    legacy_emit_reference,
    legacy_entries,
)

if TYPE_CHECKING:  # filtering imports this module; the annotations only name its context
    from kcompact.cleaner.round.filtering import FilterContext

Sink = Callable[[bytes | memoryview, int, int], None]


def take_legacy_run(
    buffer: memoryview, position: int, limit: int, ctx: FilterContext, retain_legacy: bool,
    sink: Sink, before: Callable[[], None], sink_run: RunSink | None = None,
) -> int:
    """Filter the plain legacy entries from ``position`` on (before ``limit``) into ``sink``, one run.

    Args:
        buffer: the segment's bytes.
        position: an entry boundary.
        limit: entries starting here or later are not taken.
        ctx: the walk's context; its stats and transaction state move on as the per-entry walk's.
        retain_legacy: the segment is newer than the legacy delete horizon (tombstones stay).
        sink: receives each output batch (unless ``sink_run`` is given).
        sink_run: receives the run's output batches at once.
        before: called once before the run is decided (the caller's pending output).

    Returns:
        Where the per-entry walk goes on (``position``: nothing was taken).
    """
    run = legacy_entries(buffer, position, limit, RUN_RECORDS, LEGACY_CRC)
    if run is None or run[0] == position:
        return position
    rows = np.frombuffer(run[1], dtype=np.int64).reshape(-1, ROW_FIELDS)
    reached = run[0]
    at_bound = np.flatnonzero(rows[:, OFFSET] == ctx.upper_bound - 1)  # RETAIN_EMPTY: per entry
    if len(at_bound):
        reached = int(rows[at_bound[0], POSITION])
        rows = rows[: at_bound[0]]
        if not len(rows):
            return position
    offsets = rows[:, OFFSET]
    before()
    key_starts, key_ends = rows[:, KEY_START], rows[:, KEY_END]

    def keys_at(at: npt.NDArray[np.intp]) -> list[bytes]:
        return [bytes(buffer[s:e]) for s, e in zip(key_starts[at].tolist(), key_ends[at].tolist(), strict=True)]

    stats = ctx.stats
    tombstone = rows[:, VALUE_START] < 0
    kept = keep_records(offsets, key_starts >= 0, tombstone, np.full(len(rows), retain_legacy),
                        keys_at, ctx.oracle, ctx.fence, stats)
    _emit(buffer, rows[kept], new_delete_horizon(ctx.now_ms, ctx.delete_retention_ms), sink, sink_run)
    written = int(np.count_nonzero(kept))
    stats.batches_read += len(rows)
    stats.records_read += len(rows)
    stats.batches_rebuilt += written
    stats.records_written += written
    stats.batches_dropped += len(rows) - written
    ctx.txn.advance_to(int(offsets[-1]))  # what each entry's on_batch_read does first
    return reached


def _emit(buffer: memoryview, kept: npt.NDArray[np.int64], horizon: int, sink: Sink,
          sink_run: RunSink | None) -> None:
    """Write the kept messages as ``records.filter.filter_legacy_entry`` does, one v2 batch each
    (``legacy_rows.legacy_emit``), into ``sink_run`` at once or ``sink`` one by one."""
    rows = np.ascontiguousarray(kept)
    emitted = legacy_emit(buffer, rows.data, horizon)
    data, raw_sizes = (emitted if emitted is not None
                       else legacy_emit_reference(buffer, rows.data, horizon))
    sizes = np.frombuffer(raw_sizes, dtype=np.int64).tolist()
    timestamps = rows[:, TIMESTAMP]
    log_append = (rows[:, MAGIC] == 1) & ((rows[:, ATTRIBUTES] & TIMESTAMP_TYPE_MASK) != 0)
    max_timestamps = np.where(log_append, timestamps, np.maximum(timestamps, NO_TIMESTAMP)).tolist()
    last_offsets = rows[:, OFFSET].tolist()
    if sink_run is not None:
        sink_run(data, sizes, last_offsets, max_timestamps)
        return
    view, at = memoryview(data), 0
    for size, last_offset, max_timestamp in zip(sizes, last_offsets, max_timestamps, strict=True):
        sink(view[at : at + size], last_offset, max_timestamp)
        at += size
