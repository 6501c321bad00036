"""Encoding v2 record batches: frame record bytes under a fresh 61-byte header and CRC.

Why apart from decoding: the cleaner, repair and the fixtures write batches; what they write is
Kafka's rebuild (``MemoryRecordsBuilder``): records re-encoded from their logical content
(``DefaultRecord.writeTo`` under ``MemoryRecords.filterTo``), or the 61-byte empty shell the cleaner keeps
when every record of a batch is gone (``DefaultRecordBatch.writeEmptyHeader``). The header layout is
:mod:`kcompact.records.batch_header`'s; these functions are importable from :mod:`kcompact.records.batch` as well.

The CRC (CRC-32C of bytes 21 to the end) is computed last and patched in at position 17.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from kcompact.records.batch_header import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_VALUE_V2,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    Compression,
    RecordBatch,
    TimestampType,
)
from kcompact.records.compression import compress
from kcompact.records.crc import crc32c
from kcompact.records.record import Record, encode_record
from kcompact.records.varint import wrap_int64

CRC_STRUCT = struct.Struct(">I")  # crc, patched in after the covered bytes are in place


def _attributes(compression: int, timestamp_type: int, is_transactional: bool,
                is_control: bool, has_delete_horizon: bool) -> int:
    if not 0 <= compression <= Compression.ZSTD:
        raise ValueError(f"unknown compression codec; expected 0..4, found {compression}")
    if timestamp_type not in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME):
        raise ValueError(f"bad v2 timestamp type; expected 0 or 1, found {timestamp_type}")
    return (compression | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
            | (TRANSACTIONAL_FLAG_MASK if is_transactional else 0)
            | (CONTROL_FLAG_MASK if is_control else 0)
            | (DELETE_HORIZON_FLAG_MASK if has_delete_horizon else 0))


def encode_records_batch(
    raw_records: bytes | memoryview, *, count: int, base_offset: int, last_offset_delta: int,
    base_timestamp: int, max_timestamp: int, compression: int = 0, timestamp_type: int = 0,
    producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
    partition_leader_epoch: int = -1, is_transactional: bool = False, is_control: bool = False,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Frame already-encoded records as a v2 batch: compress, fill the header, compute the CRC.

    Args:
        raw_records: ``count`` records back to back, uncompressed, deltas already relative to
            ``base_offset`` and ``base_timestamp``.
        count: number of records in ``raw_records`` (0 for an empty shell).
        base_offset, last_offset_delta, base_timestamp, max_timestamp, producer_id,
        producer_epoch, base_sequence, partition_leader_epoch: header fields, stored as given.
        compression: codec id 0..4; the records are compressed with the codec's default level.
        timestamp_type: 0 CreateTime, 1 LogAppendTime.
        is_transactional, is_control: attribute bits 4 and 5.
        delete_horizon_ms: sets attribute bit 6; must then equal ``base_timestamp``.

    Returns:
        The whole batch, ``61 + len(stored records)`` bytes.

    Raises:
        ValueError: a field out of its range, an unknown codec or timestamp type, or a delete
            horizon different from ``base_timestamp``.
    """
    if delete_horizon_ms is not None and delete_horizon_ms != base_timestamp:
        raise ValueError(f"a delete horizon is stored as base_timestamp; expected "
                         f"{delete_horizon_ms}, found base_timestamp {base_timestamp}")
    attributes = _attributes(compression, timestamp_type, is_transactional, is_control,
                             delete_horizon_ms is not None)
    payload: bytes | memoryview = raw_records
    if compression != Compression.NONE:
        payload = compress(compression, bytes(raw_records), magic=MAGIC_VALUE_V2)
    out = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    try:
        HEADER_STRUCT.pack_into(
            out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC_VALUE_V2,
            0, attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
            producer_epoch, base_sequence, count)
    except struct.error as err:
        raise ValueError(f"batch header field out of range: {err}") from err
    if count < 0:
        raise ValueError(f"negative record count; expected >= 0, found {count}")
    out[RECORD_BATCH_OVERHEAD:] = payload
    CRC_STRUCT.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def encode_batch(
    records: Sequence[Record], *, base_offset: int, compression: int = 0,
    timestamp_type: int = 0, producer_id: int = -1, producer_epoch: int = -1,
    base_sequence: int = -1, partition_leader_epoch: int = -1, is_transactional: bool = False,
    is_control: bool = False, delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None, max_timestamp: int | None = None,
) -> bytes:
    """Encode records as one v2 batch the way Kafka's rebuild does (``MemoryRecords.filterTo``).

    Records are re-encoded from their logical content: attributes 0, minimal varints, offset
    deltas against ``base_offset`` and timestamp deltas against the base timestamp, which is
    ``delete_horizon_ms`` when given, else the first record's timestamp.

    Args:
        records: at least one record, in offset order.
        base_offset: the batch's base offset (may precede the first record's).
        compression, timestamp_type, producer_id, producer_epoch, base_sequence,
        partition_leader_epoch, is_transactional, is_control, delete_horizon_ms: as in
            :func:`encode_records_batch`.
        last_offset_delta: default: the last record's offset minus ``base_offset``.
        max_timestamp: default: the largest record timestamp (at least -1); required for
            LogAppendTime, where it is the append time readers give every record.

    Returns:
        The whole batch.

    Raises:
        ValueError: no records, LogAppendTime without ``max_timestamp``, or a value out of range.
    """
    if not records:
        raise ValueError("a batch needs at least one record; use encode_empty_batch for a shell")
    if max_timestamp is None:
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            raise ValueError("a LogAppendTime batch needs max_timestamp (the append time)")
        max_timestamp = max(NO_TIMESTAMP, *(record.timestamp for record in records))
    base_timestamp = records[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
    raw = b"".join(
        encode_record(r.offset - base_offset, wrap_int64(r.timestamp - base_timestamp), r.key, r.value,
                      r.headers) for r in records)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset
    return encode_records_batch(
        raw, count=len(records), base_offset=base_offset, last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp, max_timestamp=max_timestamp, compression=compression,
        timestamp_type=timestamp_type, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional, is_control=is_control,
        delete_horizon_ms=delete_horizon_ms)


def encode_empty_batch(batch: RecordBatch) -> bytes:
    """The 61-byte shell Kafka's cleaner keeps when every record of a batch is gone
    (``DefaultRecordBatch.writeEmptyHeader``).

    Keeps base offset, last offset delta, leader epoch, max timestamp, producer fields and the
    timestamp-type/transactional/control bits; drops compression and the delete horizon, sets
    base_timestamp to -1 and the count to 0, and computes a new CRC.

    Args:
        batch: the original batch.

    Returns:
        The 61 bytes.
    """
    return encode_under_header_of(batch, b"", count=0, base_timestamp=NO_TIMESTAMP,
                                  max_timestamp=batch.max_timestamp)


def encode_under_header_of(
    batch: RecordBatch, raw_records: bytes | memoryview, *, count: int, base_timestamp: int,
    max_timestamp: int, compression: int = 0, delete_horizon_ms: int | None = None,
) -> bytes:
    """Frame records under the header fields of ``batch``, as Kafka's cleaner rebuilds a batch
    (``MemoryRecords.filterTo``) or writes its empty shell (``DefaultRecordBatch.writeEmptyHeader``).

    ``batch`` gives the base offset, last offset delta, timestamp type, producer id, epoch and base
    sequence, partition leader epoch and the transactional and control bits; the rest is given.

    Args:
        batch: the original batch.
        raw_records: as :func:`encode_records_batch` takes them.
        count, base_timestamp, max_timestamp, compression, delete_horizon_ms: as
            :func:`encode_records_batch` takes them.

    Returns:
        The whole batch.
    """
    return encode_records_batch(
        raw_records, count=count, base_offset=batch.base_offset, last_offset_delta=batch.last_offset_delta,
        base_timestamp=base_timestamp, max_timestamp=max_timestamp, compression=compression,
        timestamp_type=int(batch.timestamp_type), producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
        partition_leader_epoch=batch.partition_leader_epoch,
        is_transactional=batch.is_transactional, is_control=batch.is_control,
        delete_horizon_ms=delete_horizon_ms)
