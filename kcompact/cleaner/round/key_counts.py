"""What the keyless guard reads of a log: each batch's keys and how many records have none.

Every clean asks this before it plans (``logdir.keyless`` samples a partition; a round counts its dirty
section, ``count_dirty_keyless``), so it lives apart from pass 1's offset map (``mapping``): it needs
neither numpy nor the map, and a clean with nothing to do never loads them.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kcompact.cleaner.round.plan import CleanPlan
from kcompact.errors import CorruptDataError
from kcompact.records.legacy import LegacyEntry, legacy_records
from kcompact.records.record import records_bytes
from kcompact.records.scan import scan_keys
from kcompact.records.scan.legacy_rows import KEY_START, OFFSET, ROW_FIELDS, SIZE, legacy_entries
from kcompact.segment.log_file import LogFile, crc_error_or

if TYPE_CHECKING:
    from kcompact.segment.log_file import AnyBatch

SLICE_RECORDS = 1 << 16  # entries per yielded slice: bounds memory on 1 GiB segments


def batch_keys(batch: AnyBatch, log: LogFile) -> tuple[array[int], list[bytes | None]]:
    """The offsets and keys (None for a null key) of one data batch or legacy entry of ``log``.

    Raises:
        CorruptDataError: its records do not parse (located in ``log``).
    """
    try:
        if isinstance(batch, LegacyEntry):
            recs = legacy_records(batch)
            return array("q", [r.offset for r in recs]), [r.key for r in recs]
        data = records_bytes(batch)
        return scan_keys(data, base_offset=batch.base_offset, count=batch.records_count)
    except CorruptDataError as err:
        raise crc_error_or(err, log.path, batch) from err


def iter_key_counts(log: LogFile, start: int, end: int | None = None) -> Iterator[tuple[int, int, int]]:
    """``(size_in_bytes, records, keyless)`` of each data batch of ``log`` that holds an offset in
    ``[start, end)`` (a batch straddling ``start`` counts whole; control batches are not counted,
    legacy entries are): what the keyless guard and the log-dir gate's count (``logdir.keyless``) read.

    Raises:
        CorruptDataError: a batch's records do not parse (located in ``log``).
    """
    batches = log.iter_batches()
    while (batch := next(batches, None)) is not None:
        if batch.magic < 2:  # plain legacy entries from this one: a C run, no object each
            run = legacy_entries(log.buffer, batch.position, log.size_in_bytes, SLICE_RECORDS, 0)
            if run is not None and run[0] != batch.position:
                rows = array("q", run[1])
                for offset, size, key_start in zip(rows[OFFSET::ROW_FIELDS], rows[SIZE::ROW_FIELDS],
                                                   rows[KEY_START::ROW_FIELDS], strict=True):
                    if end is not None and offset >= end:
                        return
                    if offset >= start:
                        yield size, 1, int(key_start < 0)
                batches = log.iter_batches(run[0])
                continue
        if end is not None and batch.base_offset >= end:
            return
        if batch.last_offset < start or batch.is_control:
            continue
        _offsets, keys = batch_keys(batch, log)
        yield batch.size_in_bytes, len(keys), keys.count(None)


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
