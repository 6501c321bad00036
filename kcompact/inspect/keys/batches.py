"""Reading a partition's records for ``inspect keys``: every batch with its transactional kind, and
a data batch's records as columns.

Why: both passes of ``inspect keys`` (the key map and the census) read the same records the same
way as the cleaner does: v2 batches with the columnar scan of ``records.scan`` (no Python object per
record), legacy entries with their deep iterator, and aborted transactions told apart with the
cleaner's :class:`CleanedTransactionMetadata` fed from the ``.txnindex`` files.

A record's size (``BatchRecords.sizes``) is its uncompressed size in its batch: for v2 the bytes of
``length varint`` through its headers; for a legacy record ``LOG_OVERHEAD`` (offset int64, size
int32) + the v0/v1 record overhead + key and value.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import Any

from kcompact.errors import CorruptDataError
from kcompact.log.rules.transactions import CleanedTransactionMetadata
from kcompact.log.state.log_state import LogState, read_control
from kcompact.records.batch_header import TimestampType
from kcompact.records.legacy import (
    LOG_OVERHEAD,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    legacy_records,
)
from kcompact.records.record import records_bytes
from kcompact.records.scan import scan_keys, scan_records
from kcompact.segment.log_file import crc_error_or
from kcompact.segment.progress import ReadProgress
from kcompact.segment.txn_index import AbortedTxn
from kcompact.value import mutable

CHUNK_RECORDS = 1 << 16  # records handled per numpy step of either pass
DATA, ABORTED, CONTROL = "data", "aborted", "control"  # a batch's kind


@mutable
class BatchRecords:
    """One batch's records as columns (``sizes``, ``tombstones``, ``timestamps`` when asked)."""

    offsets: array[int]
    keys: list[bytes | None]
    tombstones: bytearray = field(default_factory=bytearray)
    sizes: array[int] = field(default_factory=lambda: array("q"))
    timestamps: array[int] = field(default_factory=lambda: array("q"))


def iter_batches(
    state: LogState, progress: ReadProgress | None = None
) -> Iterator[tuple[Any, Path, str, int | None]]:
    """Every batch in log order with its kind (data, aborted data, control) and control type.

    Args:
        state: the loaded partition (its segments and the aborted transactions of its indexes).
        progress: told the bytes of each batch as it is read, and when the read is done.

    Yields:
        ``(batch, log path, kind, control type)``: kind is :data:`DATA`, :data:`ABORTED` or
        :data:`CONTROL`; the control type is None for data, and for a marker a clean emptied.

    Raises:
        KcompactError: a batch or control record that does not parse.
    """
    txn: CleanedTransactionMetadata[AbortedTxn] = CleanedTransactionMetadata(
        collect_index_entries=False
    )
    txn.add_aborted(t for _base, entries in state.aborted_by_segment for t in entries)
    for seg in state.segments:
        with seg.files.open() as log:
            for batch in log.iter_batches():
                if batch.is_control:
                    control_type, _ts = read_control(batch, log.path)
                    txn.on_control_batch_read(batch, control_type)
                    yield batch, log.path, CONTROL, control_type
                else:
                    yield batch, log.path, ABORTED if txn.on_batch_read(batch) else DATA, None
                if progress is not None:
                    progress.advance(batch.size_in_bytes)
    if progress is not None:
        progress.finish()


def batch_records(batch: Any, path: Path, *, full: bool) -> BatchRecords:
    """The records of a data batch (v2 by ``records.scan``, legacy by its deep iterator).

    Args:
        batch: a data batch (v2) or legacy entry of ``path``.
        path: the log file, to locate errors.
        full: also read tombstones, sizes and timestamps (else offsets and keys only, for v2).

    Returns:
        The records as columns.

    Raises:
        CorruptDataError: records that do not parse, located in ``path`` (a
            :class:`~kcompact.errors.BatchCrcError` when the batch also fails its CRC).
    """
    try:
        if batch.magic < 2:
            return _legacy_records(batch)
        data = records_bytes(batch)
        if not full:
            offsets, keys = scan_keys(data, base_offset=batch.base_offset,
                                      count=batch.records_count)
            return BatchRecords(offsets, keys)
        log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
        append_time = batch.max_timestamp if log_append else None
        cols = scan_records(data, base_offset=batch.base_offset, count=batch.records_count,
                            base_timestamp=batch.base_timestamp, log_append_time=append_time)
    except CorruptDataError as err:
        raise crc_error_or(err, path, batch) from err
    sizes = array("q", (end - start for start, end in zip(cols.record_starts, cols.record_ends, strict=True)))
    keys = [cols.key(i) for i in range(cols.count)]
    return BatchRecords(cols.offsets, keys, cols.value_null, sizes, cols.timestamps)


def _legacy_records(entry: Any) -> BatchRecords:
    overhead = LOG_OVERHEAD + (RECORD_OVERHEAD_V0 if entry.magic == 0 else RECORD_OVERHEAD_V1)
    out = BatchRecords(array("q"), [])
    for r in legacy_records(entry):
        out.offsets.append(r.offset)
        out.keys.append(None if r.key is None else bytes(r.key))
        out.tombstones.append(r.value is None)
        out.sizes.append(overhead + len(r.key or b"") + len(r.value or b""))
        out.timestamps.append(r.timestamp)
    return out
