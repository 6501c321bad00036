"""v2 records: full decode with Kafka's validation, and the canonical encoder (Kafka's ``DefaultRecord``).

Why a full decode next to ``records.scan``'s columnar walk: the cleaner's rebuild path, repair and the
inspectors need real values (keys, values, headers), and they must refuse exactly what Kafka's
``DefaultRecord.readFrom`` and ``DefaultRecordBatch``'s iterator refuse.

Record layout (every integer a zig-zag varint unless noted)::

    length           varint   bytes of the record after this field
    attributes       int8     unused; Kafka writes 0 and ignores it on read
    timestamp_delta  varlong  record timestamp - batch base_timestamp
    offset_delta     varint   record offset - batch base_offset
    key_length       varint   negative = null key
    key              bytes
    value_length     varint   negative = null value (a tombstone)
    value            bytes
    headers_count    varint   >= 0 and <= the bytes left
    headers          headers_count x [key_length varint (>= 0), key (UTF-8),
                                      value_length varint (negative = null), value]

Checks, as in Kafka: each record consumes exactly its declared length, the batch holds exactly
``records_count`` records and nothing after them ("Incorrect declared batch size"), header counts
and header key lengths are not negative. A LogAppendTime batch gives every record its
``max_timestamp``. Error positions are relative to the batch start; inside compressed data, where
no file position exists, they point at the compressed payload (byte 61) and the message names the
byte of the decompressed stream.
"""

from __future__ import annotations

from collections.abc import Sequence

from kcompact.errors import CorruptRecordError
from kcompact.records.batch_header import (
    RECORD_BATCH_OVERHEAD,
    Compression,
    RecordBatch,
    TimestampType,
)
from kcompact.records.compression import decompress
from kcompact.records.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    wrap_int64,
)
from kcompact.value import frozen

_RECORD_ATTRIBUTES = b"\x00"  # what Kafka writes in every record's attribute byte


@frozen
class Header:
    """One record header; ``key`` as stored (UTF-8 bytes), ``value`` None for a null value."""

    key: bytes
    value: bytes | None


@frozen
class Record:
    """One record with absolute offset and timestamp, as a reader of the batch sees it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def records_bytes(batch: RecordBatch) -> bytes | memoryview:
    """The batch's record bytes, decompressed when the batch is compressed.

    Args:
        batch: a decoded v2 batch.

    Returns:
        A view of the payload for an uncompressed batch, otherwise new bytes.

    Raises:
        CorruptRecordError: a malformed compressed stream; position 61 (the payload, relative to
            the batch start), offset the batch's base offset.
        UnsupportedFormatError: the codec's library is missing (from ``compression.py``).
    """
    if batch.compression == Compression.NONE:
        return batch.payload
    try:
        return decompress(batch.compression, batch.payload, magic=batch.magic)
    except CorruptRecordError as err:
        raise CorruptRecordError(
            err.message, position=RECORD_BATCH_OVERHEAD, offset=batch.base_offset) from err


def _read_bytes(
    data: memoryview, position: int, end: int, what: str, *, nullable: bool = True
) -> tuple[bytes | None, int]:
    start = position
    size, position = decode_varint(data, position)
    if size < 0:
        if nullable:
            return None, position
        raise CorruptRecordError(
            f"invalid negative {what} size; expected >= 0, found {size}", position=start)
    if size > end - position:
        raise CorruptRecordError(
            f"{what} runs past the end of the record; expected {size} bytes, "
            f"found {end - position}", position=start)
    return bytes(data[position : position + size]), position + size


def _read_headers(data: memoryview, position: int, end: int) -> tuple[tuple[Header, ...], int]:
    start = position
    count, position = decode_varint(data, position)
    if count < 0 or count > end - position:
        raise CorruptRecordError(
            f"invalid number of record headers; expected 0..{end - position}, found {count}",
            position=start)
    headers = []
    for _ in range(count):
        key, position = _read_bytes(data, position, end, "header key", nullable=False)
        value, position = _read_bytes(data, position, end, "header value")
        headers.append(Header(key or b"", value))
    return tuple(headers), position


def decode_record(
    data: memoryview, position: int, *, base_offset: int, base_timestamp: int,
    log_append_time: int | None = None,
) -> tuple[Record, int]:
    """Decode the record starting at ``position`` of uncompressed record bytes.

    Args:
        data: the batch's uncompressed record bytes.
        position: where the record's length varint starts.
        base_offset: the batch's base offset.
        base_timestamp: the batch's base timestamp (or delete horizon).
        log_append_time: the batch's max_timestamp for a LogAppendTime batch, else None.

    Returns:
        ``(record, next_position)``.

    Raises:
        CorruptRecordError: a malformed record; ``position`` relative to ``data``.
    """
    start = position
    length, position = decode_varint(data, position)
    end = position + length
    if length < 0 or end > len(data):
        raise CorruptRecordError(
            f"invalid record size; expected 0..{len(data) - position} bytes of record payload, "
            f"found length {length}", position=start)
    body = data[:end]  # a view: every read below is bounded by this record's end
    if position >= end:
        raise CorruptRecordError(
            "invalid record size; expected at least an attribute byte, found 0 bytes",
            position=start)
    timestamp_delta, position = decode_varlong(body, position + 1)
    offset_delta, position = decode_varint(body, position)
    key, position = _read_bytes(body, position, end, "key")
    value, position = _read_bytes(body, position, end, "value")
    headers, position = _read_headers(body, position, end)
    if position != end:
        raise CorruptRecordError(
            f"invalid record size; expected to read {length} bytes in record payload, "
            f"found {length - (end - position)}", position=start)
    timestamp = log_append_time
    if timestamp is None:
        timestamp = wrap_int64(base_timestamp + timestamp_delta)
    record = Record(base_offset + offset_delta, timestamp, key, value, headers)
    return record, end


def decode_records(batch: RecordBatch) -> list[Record]:
    """Decode every record of a v2 batch, with Kafka's checks.

    Args:
        batch: a decoded v2 batch.

    Returns:
        The ``records_count`` records, in stored order.

    Raises:
        CorruptRecordError: a malformed record, or a count that does not match the bytes
            ("Incorrect declared batch size"); positions relative to the batch start, the error's
            ``offset`` is the batch's base offset.
        UnsupportedFormatError: the codec's library is missing (from ``compression.py``).
    """
    data = memoryview(records_bytes(batch))
    compressed = batch.compression != Compression.NONE
    log_append_time = None
    if batch.timestamp_type == TimestampType.LOG_APPEND_TIME:
        log_append_time = batch.max_timestamp
    records: list[Record] = []
    position = 0
    try:
        for _ in range(batch.records_count):
            if position >= len(data):
                raise CorruptRecordError(
                    f"Incorrect declared batch size, premature EOF reached; expected "
                    f"{batch.records_count} records, found {len(records)}", position=position)
            record, position = decode_record(
                data, position, base_offset=batch.base_offset,
                base_timestamp=batch.base_timestamp, log_append_time=log_append_time)
            records.append(record)
        if position != len(data):
            raise CorruptRecordError(
                f"Incorrect declared batch size, records still remaining; expected "
                f"{batch.records_count} records to end the batch, found {len(data) - position} "
                f"bytes after them", position=position)
    except CorruptRecordError as err:
        raise _relocated(err, batch, compressed) from err
    return records


def _relocated(err: CorruptRecordError, batch: RecordBatch, compressed: bool) -> CorruptRecordError:
    inner = err.position or 0
    if compressed:
        return CorruptRecordError(
            f"{err.message} (at byte {inner} of the decompressed records)",
            position=RECORD_BATCH_OVERHEAD, offset=batch.base_offset)
    return CorruptRecordError(
        err.message, position=RECORD_BATCH_OVERHEAD + inner, offset=batch.base_offset)


def _nullable(value: bytes | None) -> bytes:
    if value is None:
        return encode_varint(-1)
    return encode_varint(len(value)) + value


def encode_record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
    headers: Sequence[Header] = (),
) -> bytes:
    """Encode one record the way Kafka writes it: attributes 0, minimal varints.

    Args:
        offset_delta: record offset minus the batch's base offset (int32).
        timestamp_delta: record timestamp minus the batch's base timestamp (int64).
        key: the key, None for a null key.
        value: the value, None for a tombstone.
        headers: headers in order; header keys are stored bytes (UTF-8).

    Returns:
        The record, its length varint included.

    Raises:
        ValueError: a delta or a size out of its varint's range.
    """
    parts = [
        _RECORD_ATTRIBUTES,
        encode_varlong(timestamp_delta),
        encode_varint(offset_delta),
        _nullable(key),
        _nullable(value),
        encode_varint(len(headers)),
    ]
    for header in headers:
        parts.append(encode_varint(len(header.key)))
        parts.append(header.key)
        parts.append(_nullable(header.value))
    body = b"".join(parts)
    return encode_varint(len(body)) + body
