"""What the keyless guard reads of a log: each batch's keys and how many records have none.

Every clean asks this before it plans (``logdir.keyless`` samples a partition; a round counts its dirty
section, ``count_dirty_keyless``), so it lives apart from pass 1's offset map (``mapping``): it needs
neither numpy nor the map, and a clean with nothing to do never loads them.

A run of v2 data batches, compressed or not, is counted by pass 1's C window (``accel.scan_window_key_digests``,
which decompresses them as pass 1 does and, asked to, keeps nothing for a pass 2), which reports each batch's
records and keyed records; any batch it does not take (control, transactional, legacy, badly framed, records
that do not scan, a codec that fails) is counted by the per-batch walk, as before.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kcompact.cleaner.round import accel
from kcompact.cleaner.round.plan import CleanPlan
from kcompact.errors import CorruptDataError
from kcompact.records.batch_header import RecordBatch
from kcompact.records.compression import decompress, zstd_one_call
from kcompact.records.record import records_bytes
from kcompact.records.scan import scan_keys
from kcompact.segment.log_file import LogFile, crc_error_or

if TYPE_CHECKING:
    from kcompact.segment.log_file import AnyBatch

SLICE_RECORDS = 1 << 16  # entries per yielded slice: bounds memory on 1 GiB segments
_ALL_OFFSETS = -(1 << 63)  # the window's min_offset: every batch reported, its keyed records all counted
_TRIPLE = 3  # the window's per-batch report: (put end, last offset, records)


def batch_keys(batch: AnyBatch, log: LogFile) -> tuple[array[int], list[bytes | None]]:
    """The offsets and keys (None for a null key) of one data batch or legacy entry of ``log``.

    Raises:
        CorruptDataError: its records do not parse (located in ``log``).
    """
    try:
        if not isinstance(batch, RecordBatch):  # a legacy entry
            # kept off a clean's start-up: only legacy (magic 0/1) entries need it
            from kcompact.records.legacy import legacy_records

            recs = legacy_records(batch)
            return array("q", [r.offset for r in recs]), [r.key for r in recs]
        data = records_bytes(batch)
        return scan_keys(data, base_offset=batch.base_offset, count=batch.records_count)
    except CorruptDataError as err:
        raise crc_error_or(err, log.path, batch) from err


def iter_key_counts(log: LogFile, start: int, end: int | None = None,
                    budget: int | None = None) -> Iterator[tuple[int, int, int]]:
    """``(size_in_bytes, records, keyless)`` of each data batch of ``log`` that holds an offset in
    ``[start, end)`` (a batch straddling ``start`` counts whole; control batches are not counted,
    legacy entries are): what the keyless guard and the log-dir gate's count (``logdir.keyless``) read.
    Without ``end`` one item may sum a run of consecutive counted batches (C, :func:`_run`).

    Args:
        log: the segment.
        start: the first offset counted.
        end: the first offset not counted (None: to the log's end).
        budget: the bytes of counted batches the caller reads at most before it stops (the batch that
            crosses it is read whole): a run never goes past that batch (None: no bound).

    Raises:
        CorruptDataError: a batch's records do not parse (located in ``log``).
    """
    counted = 0
    runs = end is None and accel.kernels is not None
    batches = log.iter_batches()
    while (batch := next(batches, None)) is not None:
        if (runs and batch.magic >= 2 and batch.last_offset >= start
                and not (batch.is_control or batch.is_transactional)):
            left = None if budget is None else budget - counted
            window = _run(log, batch.position, start, left)
            if window is not None:
                reached, records, keyless = window
                counted += reached - batch.position
                yield reached - batch.position, records, keyless
                batches = log.iter_batches(reached)
                continue
            runs = False  # the window took nothing or met a batch below start: walk this log batch by batch
        if batch.magic < 2:  # plain legacy entries from this one: a C run, no object each
            # kept off a clean's start-up: only legacy (magic 0/1) entries need it
            from kcompact.records.scan.legacy_rows import KEY_START, OFFSET, ROW_FIELDS, SIZE, legacy_entries

            run = legacy_entries(log.buffer, batch.position, log.size_in_bytes, SLICE_RECORDS, 0)
            if run is not None and run[0] != batch.position:
                rows = array("q", run[1])
                for offset, size, key_start in zip(rows[OFFSET::ROW_FIELDS], rows[SIZE::ROW_FIELDS],
                                                   rows[KEY_START::ROW_FIELDS], strict=True):
                    if end is not None and offset >= end:
                        return
                    if offset >= start:
                        counted += size
                        yield size, 1, int(key_start < 0)
                batches = log.iter_batches(run[0])
                continue
        if end is not None and batch.base_offset >= end:
            return
        if batch.last_offset < start or batch.is_control:
            continue
        _offsets, keys = batch_keys(batch, log)
        counted += batch.size_in_bytes
        yield batch.size_in_bytes, len(keys), keys.count(None)


def _run(log: LogFile, position: int, start: int, budget: int | None) -> tuple[int, int, int] | None:
    """``(where it stopped, records, keyless)`` of the v2 data batches from ``position`` on, all counted by
    :func:`iter_key_counts`, as one C window reports them (batches starting within ``budget`` bytes of
    ``position`` at most; a compressed one decompressed as pass 1 does, its records not kept); None where it takes
    none, or where one of them ends below ``start`` (the per-batch walk skips that one: not a run's to count).
    """
    limit = log.size_in_bytes if budget is None else min(log.size_in_bytes, position + budget)
    found = accel.scan_window_key_digests(
        log.buffer, position, limit, _ALL_OFFSETS, SLICE_RECORDS, 0, decompress, accel.zstd_codec(zstd_one_call()),
        accel.native_codecs(), keep=False)
    if found is None:
        return None
    reached, _offsets, _digests, rows = found
    if reached == position:
        return None
    report = array("q", rows)
    put_ends, last_offsets = report[0::_TRIPLE], report[1::_TRIPLE]
    if min(last_offsets) < start:
        return None
    records = sum(report[2::_TRIPLE])
    return reached, records, records - put_ends[-1]


def count_dirty_keyless(plan: CleanPlan) -> tuple[int, int]:
    """The data records of the round's dirty section, ``[first dirty offset, end offset)``, and how
    many of them have no key (counted as :func:`iter_key_counts` counts them).

    Returns:
        ``(records, keyless)``.
    """
    records = keyless = 0
    for base in plan.dirty_segments:
        with LogFile(plan.segment(base).log_path) as log:
            for _size, count, missing in iter_key_counts(log, plan.first_dirty_offset, plan.end_offset):
                records += count
                keyless += missing
    return records, keyless
