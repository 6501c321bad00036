"""Encoders only tests and scripts use: bytes the package reads but never writes itself.

Transaction markers (``encode_control_batch``), legacy messages and compressed legacy wrappers
(``encode_legacy_message``, ``encode_legacy_wrapper``), producer snapshots (``encode_producer_snapshot``) and
unsigned varints (``encode_unsigned_varint``) are written by brokers and producers, not by kcompact; the
builders (``tests/partition_builder.py``, ``tests/segment_writer.py``) and ``scripts/`` (fixtures, benchmarks)
use these to make such input.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import astuple

from kcompact.records.batch_encoding import encode_records_batch
from kcompact.records.compression import compress
from kcompact.records.control import (
    CURRENT_CONTROL_RECORD_KEY_VERSION,
    CURRENT_END_TXN_MARKER_VERSION,
    ControlRecordKey,
    ControlRecordType,
    EndTransactionMarker,
)
from kcompact.records.crc import crc32c
from kcompact.records.legacy import (
    ENTRY_PREFIX_STRUCT,
    LENGTH_STRUCT,
    MESSAGE_START_STRUCT,
    NO_TIMESTAMP,
    TIMESTAMP_STRUCT,
    TIMESTAMP_TYPE_MASK,
)
from kcompact.records.record import Record, encode_record
from kcompact.records.varint import encode_varint
from kcompact.segment.snapshot import PRODUCER_ENTRY, SNAPSHOT_VERSION, ProducerSnapshotEntry


def encode_control_batch(
    *, offset: int, timestamp: int, producer_id: int, producer_epoch: int, control_type: int,
    coordinator_epoch: int = 0, partition_leader_epoch: int = -1,
) -> bytes:
    """Encode a transaction marker batch exactly as a broker writes one (78 bytes).

    Args:
        offset: the marker's offset (the batch's base and last offset).
        timestamp: the marker's timestamp (base and max timestamp).
        producer_id: the transactional producer's id.
        producer_epoch: its epoch.
        control_type: ControlRecordType.COMMIT or ControlRecordType.ABORT.
        coordinator_epoch: the coordinator epoch stored in the marker value.
        partition_leader_epoch: the leader epoch stamped on the batch.

    Returns:
        The whole batch.

    Raises:
        ValueError: a control type other than COMMIT/ABORT, or a field out of range.
    """
    kind = ControlRecordType(control_type)
    if not kind.is_transaction_marker:
        raise ValueError(f"not a transaction marker type; expected 0 or 1, found {control_type}")
    key = ControlRecordKey(CURRENT_CONTROL_RECORD_KEY_VERSION, kind).encode()
    value = EndTransactionMarker(CURRENT_END_TXN_MARKER_VERSION, coordinator_epoch).encode()
    return encode_records_batch(
        encode_record(0, 0, key, value), count=1, base_offset=offset, last_offset_delta=0,
        base_timestamp=timestamp, max_timestamp=timestamp, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=-1,
        partition_leader_epoch=partition_leader_epoch, is_transactional=True, is_control=True)


def encode_legacy_message(
    *, offset: int, magic: int, key: bytes | None, value: bytes | None, timestamp: int = -1,
    compression: int = 0, timestamp_type: int = 0,
) -> bytes:
    """Encode one v0/v1 entry (offset, size, CRC and message), as Kafka's ``LegacyRecord.write``.

    Args:
        offset: the entry's offset field (absolute, or relative inside a v1 wrapper).
        magic: 0 or 1.
        key: the key, or None.
        value: the value (for a wrapper: the compressed inner entries), or None.
        timestamp: v1 only; v0 stores none.
        compression: the codec id written into the attributes (the value is taken as is).
        timestamp_type: 1 sets the LogAppendTime bit (v1 only).

    Returns:
        The entry's bytes.

    Raises:
        ValueError: a magic other than 0/1 or a codec outside 0..3.
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy magic; expected 0 or 1, found {magic}")
    if not 0 <= compression <= 3:
        raise ValueError(f"legacy compression codec; expected 0..3, found {compression}")
    attributes = compression | (TIMESTAMP_TYPE_MASK if magic == 1 and timestamp_type == 1 else 0)
    parts = [MESSAGE_START_STRUCT.pack(magic, attributes)]
    if magic == 1:
        parts.append(TIMESTAMP_STRUCT.pack(timestamp))
    for data in (key, value):
        parts.append(LENGTH_STRUCT.pack(-1 if data is None else len(data)))
        parts.append(b"" if data is None else bytes(data))
    message = b"".join(parts)
    crc = zlib.crc32(message) & 0xFFFFFFFF
    return ENTRY_PREFIX_STRUCT.pack(offset, len(message) + 4, crc) + message


def encode_legacy_wrapper(
    records: Sequence[Record], *, magic: int, compression: int, wrapper_offset: int | None = None,
    timestamp_type: int = 0, log_append_time: int | None = None,
) -> bytes:
    """Encode records as one compressed v0/v1 wrapper, as Kafka's ``MemoryRecordsBuilder`` does.

    Inner offsets: v0 absolute; v1 relative to the first record (0..n-1 for consecutive offsets,
    gaps kept). The wrapper's timestamp is the max inner timestamp (CreateTime) or
    ``log_append_time``, which LogAppendTime also writes into every inner v1 message.

    Args:
        records: the messages, in offset order; headers are ignored (legacy has none).
        magic: 0 or 1.
        compression: 1 gzip, 2 snappy or 3 lz4 (lz4 with the magic-specific header checksum).
        wrapper_offset: the wrapper's offset field; default the last record's offset.
        timestamp_type: 0 CreateTime, 1 LogAppendTime (v1 only).
        log_append_time: the append time; required for LogAppendTime.

    Returns:
        The wrapper entry's bytes.

    Raises:
        ValueError: no records, codec 0, a bad magic, or LogAppendTime without a time.
        UnsupportedFormatError: codec 4 (zstd) or above, or a missing codec library.
    """
    if not records:
        raise ValueError("a compressed wrapper needs at least one record; found 0")
    if compression == 0:
        raise ValueError("a compressed wrapper needs a codec; expected 1..3, found 0")
    log_append = magic == 1 and timestamp_type == 1
    if log_append and log_append_time is None:
        raise ValueError("LogAppendTime wrapper needs log_append_time; found None")
    append_time = log_append_time if log_append else None
    first = records[0].offset
    inner = b"".join(
        encode_legacy_message(
            offset=record.offset - first if magic == 1 else record.offset, magic=magic,
            key=record.key, value=record.value, timestamp_type=timestamp_type,
            timestamp=record.timestamp if append_time is None else append_time)
        for record in records)
    if append_time is None:
        wrapper_time = max([NO_TIMESTAMP, *(record.timestamp for record in records)])
    else:
        wrapper_time = append_time
    return encode_legacy_message(
        offset=records[-1].offset if wrapper_offset is None else wrapper_offset, magic=magic,
        key=None, value=compress(compression, inner, magic=magic), timestamp=wrapper_time,
        compression=compression, timestamp_type=timestamp_type)


def encode_unsigned_varint(value: int) -> bytes:
    """Encode a non-negative 32-bit integer as an unsigned varint (no zig-zag).

    Args:
        value: an integer in 0..2**32-1.

    Returns:
        The minimal encoding, 1 to 5 bytes.

    Raises:
        ValueError: ``value`` is negative or wider than 32 bits.
    """
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range; expected 0..{0xFFFFFFFF}, found {value}")
    return encode_varint((value >> 1) ^ -(value & 1))  # the int32 whose zig-zag form is ``value``


def encode_producer_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """Encode a producer snapshot as Kafka writes it.

    Args:
        entries: the producer entries, in file order.

    Returns:
        The file's bytes, CRC included.

    Raises:
        struct.error: a field does not fit its width (a caller bug).
    """
    items = list(entries)
    body = struct.pack(">i", len(items)) + b"".join(
        PRODUCER_ENTRY.pack(*astuple(entry)) for entry in items
    )
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body
