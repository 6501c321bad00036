"""Rewriting one batch given which of its records survive: Kafka's ``MemoryRecords.filterTo``.

This module knows nothing of *why* records go — that is the caller's policy (the cleaner supplies it, as
Kafka's ``Cleaner.cleanInto`` supplies a ``RecordFilter``). Given a batch, the decision for the batch as a
whole (:class:`BatchRetention`) and the indices of the records to keep, it produces the output bytes
exactly as Kafka's ``MemoryRecords.filterTo`` does:

* every record kept, no new delete horizon, a v2 batch → the batch's own bytes, untouched (same CRC);
* some records kept → a rebuilt v2 batch: original base offset and last offset delta, producer fields,
  leader epoch, transactional/control bits, timestamp type and codec (at its default level); base
  timestamp = the delete horizon when one applies (a new one, or the batch's existing one carried over),
  else the first kept record's timestamp; record deltas recomputed, record attributes 0, minimal varints;
  max timestamp = the original for LogAppendTime, else the largest kept record timestamp;
* no record kept and ``RETAIN_EMPTY`` → the 61-byte empty shell (``DefaultRecordBatch.writeEmptyHeader``); otherwise
nothing;
* a legacy (magic 0/1) entry → always rewritten as a v2 batch of its kept records (Kafka ≥ 4.0,
  KAFKA-13093): base offset = first kept record, last offset delta = last kept − first kept, no producer,
  leader epoch −1; v0 becomes CreateTime with timestamps −1.

Rebuilding copies each kept record's key, value and header bytes as they are and re-encodes only the
record prefix (length, attributes, timestamp delta, offset delta), so it costs one small join per record
in Python. Where the compiled kernels are built (:mod:`kcompact.records.scan.accel`) the whole record section
is written by one C call instead; ``_rebuild`` stays the reference it is tested against byte for byte,
and runs whenever the C code declines (indices or deltas the reference would fail on).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING

from kcompact.records.batch_encoding import encode_batch, encode_empty_batch, encode_under_header_of
from kcompact.records.batch_header import NO_TIMESTAMP, RecordBatch, TimestampType
from kcompact.records.scan import accel
from kcompact.records.varint import encode_varint, encode_varlong, wrap_int64
from kcompact.value import frozen

if TYPE_CHECKING:
    from kcompact.records.legacy import LegacyEntry
    from kcompact.records.record import Record
    from kcompact.records.scan import RecordColumns


class BatchRetention(Enum):
    """What happens to a batch none of whose records survive (Kafka's ``BatchRetention``)."""

    DELETE = "delete"  # drop it, without even reading its records
    DELETE_EMPTY = "delete-empty"  # drop it if it ends up empty
    RETAIN_EMPTY = "retain-empty"  # keep an empty shell if it ends up empty


class Outcome(Enum):
    """How a batch reached the output."""

    COPIED = "copied"
    REBUILT = "rebuilt"
    EMPTY = "empty"
    DROPPED = "dropped"


@frozen
class FilteredBatch:
    """The result of filtering one batch."""

    outcome: Outcome
    data: bytes | memoryview  # empty when dropped
    last_offset: int  # what the output batch's index entry uses
    max_timestamp: int
    records_kept: int


DROPPED = FilteredBatch(Outcome.DROPPED, b"", -1, NO_TIMESTAMP, 0)


def filter_v2_batch(
    batch: RecordBatch,
    columns: RecordColumns | None,
    keep: Sequence[int],
    *,
    retention: BatchRetention,
    delete_horizon_ms: int | None,
) -> FilteredBatch:
    """Rewrite a v2 batch keeping the records at positions ``keep`` of ``columns``.

    Args:
        batch: the original batch.
        columns: its scanned records (``None`` only when nothing is kept or everything is).
        keep: indices of the kept records, ascending.
        retention: what to do if nothing is kept.
        delete_horizon_ms: the horizon the output must carry, or None for none. Pass the batch's own
            horizon to carry it over; a batch kept whole keeps its bytes unless this sets a horizon it
            lacks.

    Returns:
        The output batch.
    """
    if not keep:
        if retention is BatchRetention.RETAIN_EMPTY:
            return FilteredBatch(
                Outcome.EMPTY, encode_empty_batch(batch), batch.last_offset, batch.max_timestamp, 0
            )
        return DROPPED
    # Kafka's filterTo copies a batch it keeps whole unless it must set a delete horizon the batch lacks; a
    # batch with one (even a negative one, which a rebuild would clear) is copied as it is.
    if len(keep) == batch.records_count and (batch.has_delete_horizon or delete_horizon_ms is None):
        return FilteredBatch(
            Outcome.COPIED, batch.buffer, batch.last_offset, batch.max_timestamp, len(keep)
        )
    if columns is None:
        raise ValueError("rebuilding a batch needs its scanned records")
    if accel.enabled:
        rebuilt = _rebuild_accel(batch, columns, keep, delete_horizon_ms)
        if rebuilt is not None:
            return rebuilt
    return FilteredBatch(
        Outcome.REBUILT,
        _rebuild(batch, columns, keep, delete_horizon_ms),
        batch.last_offset,
        _max_timestamp(batch, columns, keep),
        len(keep),
    )


def _max_timestamp(batch: RecordBatch, columns: RecordColumns, keep: Sequence[int]) -> int:
    if batch.timestamp_type == TimestampType.LOG_APPEND_TIME:
        return batch.max_timestamp
    timestamps = columns.timestamps
    return max(NO_TIMESTAMP, max(timestamps[i] for i in keep))


_TABLE_LIMIT = 1 << 14


@cache
def _small() -> list[bytes]:
    """Zig-zag encodings of -2^14..2^14-1: identical for varint and varlong, and they cover the deltas
    and record lengths of almost every record, so the rebuild loop is a few list lookups per record.
    Built on first use (~20 ms at import otherwise): with the compiled kernels no clean needs it."""
    return [encode_varlong(v) for v in range(-_TABLE_LIMIT, _TABLE_LIMIT)]


def _zigzag_bytes(value: int, small: list[bytes]) -> bytes:
    index = value + _TABLE_LIMIT
    if 0 <= index < 2 * _TABLE_LIMIT:
        return small[index]
    return encode_varlong(value)


def _rebuild(
    batch: RecordBatch, columns: RecordColumns, keep: Sequence[int], horizon: int | None
) -> bytes:
    timestamps, offsets = columns.timestamps, columns.offsets
    body_starts, record_ends, data = columns.body_starts, columns.record_ends, columns.data
    base_offset = batch.base_offset
    base_timestamp = timestamps[keep[0]] if horizon is None else horizon
    small, limit = _small(), _TABLE_LIMIT
    parts: list[bytes] = []
    append = parts.append
    for i in keep:
        ts_index = timestamps[i] - base_timestamp + limit
        off_index = offsets[i] - base_offset + limit
        prefix = b"\x00" + (
            small[ts_index] if 0 <= ts_index < 2 * limit else encode_varlong(wrap_int64(ts_index - limit))
        ) + (small[off_index] if 0 <= off_index < 2 * limit else encode_varint(off_index - limit))
        body = bytes(data[body_starts[i] : record_ends[i]])
        append(_zigzag_bytes(len(prefix) + len(body), small))
        append(prefix)
        append(body)
    max_timestamp = _max_timestamp(batch, columns, keep)
    return _encode_rebuilt(batch, b"".join(parts), len(keep), base_timestamp, max_timestamp, horizon)


def _rebuild_accel(
    batch: RecordBatch, columns: RecordColumns, keep: Sequence[int], horizon: int | None
) -> FilteredBatch | None:
    """The C rebuild of the record section; None where the reference must run (see ``records.scan.accel``)."""
    arrays = (columns.body_starts, columns.record_ends, columns.offsets, columns.timestamps)
    rebuilt = accel.rebuild_records(columns.data, arrays, keep, batch.base_offset, horizon)
    if rebuilt is None:
        return None
    raw, base_timestamp, max_kept = rebuilt
    max_timestamp = (
        batch.max_timestamp if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else max_kept
    )
    data = _encode_rebuilt(batch, raw, len(keep), base_timestamp, max_timestamp, horizon)
    return FilteredBatch(Outcome.REBUILT, data, batch.last_offset, max_timestamp, len(keep))


def _encode_rebuilt(
    batch: RecordBatch, raw: bytes, count: int, base_timestamp: int, max_timestamp: int,
    horizon: int | None,
) -> bytes:
    """Frame rebuilt records with the original batch's header fields and codec (module docstring)."""
    return encode_under_header_of(batch, raw, count=count, base_timestamp=base_timestamp,
                                  max_timestamp=max_timestamp, compression=int(batch.compression),
                                  delete_horizon_ms=horizon)


def filter_legacy_entry(
    entry: LegacyEntry,
    records: Sequence[Record],
    keep: Sequence[int],
    *,
    retention: BatchRetention,
    delete_horizon_ms: int | None,
) -> FilteredBatch:
    """Rewrite a legacy entry's kept records as one v2 batch (Kafka ≥ 4.0 converts every one it meets).

    Raises:
        ValueError: nothing kept and ``RETAIN_EMPTY`` — Kafka refuses too ("Empty batches are only
            supported for magic v2 and above"); the cleaner reports it.
    """
    if not keep:
        if retention is BatchRetention.RETAIN_EMPTY:
            raise ValueError(
                f"legacy entry at offset {entry.last_offset} would have to stay as an empty batch; "
                "Kafka's cleaner fails here too (empty batches need magic 2)"
            )
        return DROPPED
    kept = [records[i] for i in keep]
    log_append = entry.timestamp_type == TimestampType.LOG_APPEND_TIME
    data = encode_batch(
        kept,
        base_offset=kept[0].offset,
        compression=int(entry.compression),
        timestamp_type=int(TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME),
        delete_horizon_ms=delete_horizon_ms,
        max_timestamp=entry.max_timestamp if log_append else None,
    )
    max_ts = entry.max_timestamp if log_append else max(NO_TIMESTAMP, *(r.timestamp for r in kept))
    return FilteredBatch(Outcome.REBUILT, data, kept[-1].offset, max_ts, len(kept))
