"""Legacy messages, magic 0 and 1 (Kafka's ``LegacyRecord``): decode, walk compressed wrappers.

Why: logs written before Kafka 0.11 (or by brokers pinned to an old ``log.message.format.version``)
hold these entries, and a 4.1 broker still reads them. The cleaner converts them to v2 (``MemoryRecords.filterTo``,
KAFKA-13093), so it must read every record out of them exactly as Kafka's ``AbstractLegacyRecordBatch`` does.
:class:`LegacyEntry` offers the same names as a v2 ``RecordBatch`` so callers treat both alike.

Entry layout (big-endian; ``size`` counts the bytes after itself)::

    0   int64   offset           the message's offset; a wrapper's = its last inner offset
    8   int32   size             message bytes that follow (>= 14 for v0, >= 22 for v1)
    12  uint32  crc              CRC-32 (zlib) of magic .. end of the message
    16  int8    magic            0 or 1
    17  int8    attributes       bits 0-2 codec (0-3), bit 3 LogAppendTime (v1 only)
    18  int64   timestamp        v1 only
    18/26 int32 key_length       negative = null key
          ...   key
          int32 value_length     negative = null value
          ...   value            for a wrapper: the compressed inner entries

A compressed wrapper's value decompresses to inner entries laid out as above, never compressed
again. v0 inner offsets are absolute. v1 inner offsets are relative: absolute = wrapper offset -
last inner offset + inner offset, except that a wrapper offset of 0 (some librdkafka versions)
means base 0. A LogAppendTime wrapper lends its timestamp to every v1 inner message. A v1 wrapper
may hold v0 messages (KAFKA-4298). Unlike Kafka, which silently drops a partial last inner entry,
this module refuses it: an offline tool must not lose a record without saying so.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import field

from kcompact.errors import (
    CorruptBatchError,
    CorruptDataError,
    CorruptRecordError,
    TruncatedDataError,
)
from kcompact.records.compression import decompress
from kcompact.records.record import Record
from kcompact.records.varint import Buffer
from kcompact.value import frozen

LOG_OVERHEAD = 12
CRC_POSITION = 12  # the CRC covers everything after it
MAGIC_POSITION = 16
RECORD_OVERHEAD_V0 = 14  # crc, magic, attributes, key length, value length
RECORD_OVERHEAD_V1 = 22  # ... plus the timestamp
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
NO_TIMESTAMP = -1

ENTRY_PREFIX_STRUCT = struct.Struct(
    ">q"  # offset
    "i"  # size
    "I"  # crc
)
MESSAGE_START_STRUCT = struct.Struct(
    ">b"  # magic
    "B"  # attributes
)
ENTRY_HEADER_SIZE = ENTRY_PREFIX_STRUCT.size + MESSAGE_START_STRUCT.size  # 18: v0 key length next
TIMESTAMP_STRUCT = struct.Struct(">q")  # v1 timestamp, right after the attributes
LENGTH_STRUCT = struct.Struct(">i")  # key_length / value_length


@frozen
class LegacyEntry:
    """One v0/v1 log entry: a plain message or a compressed wrapper, with v2-style accessors.

    ``position`` is where the entry starts in the buffer it was decoded from; ``key``, ``value`` and
    ``buffer`` are views into that buffer. ``timestamp`` is -1 for v0.
    """

    position: int
    offset: int
    size_in_bytes: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | memoryview | None
    value: bytes | memoryview | None
    buffer: bytes | memoryview
    # Inner records of a wrapper, filled on first use: base_offset, records_count and
    # legacy_records would otherwise each decompress the value again.
    _records: list[Record] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def compression(self) -> int:
        """The codec id of the attributes (0 none, 1 gzip, 2 snappy, 3 lz4)."""
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """-1 for v0 (no timestamps), else 0 CreateTime or 1 LogAppendTime."""
        if self.magic == 0:
            return -1
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    is_control = False
    is_transactional = False
    has_delete_horizon = False
    delete_horizon_ms = None
    producer_id = -1
    producer_epoch = -1
    base_sequence = -1
    partition_leader_epoch = -1

    @property
    def last_offset(self) -> int:
        """The entry's offset (a wrapper stores its last inner offset)."""
        return self.offset

    @property
    def next_offset(self) -> int:
        """The offset after this entry."""
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        """Offset of the first record; decompresses a wrapper (may raise CorruptRecordError)."""
        return self.offset if self.compression == 0 else legacy_records(self)[0].offset

    @property
    def max_timestamp(self) -> int:
        """The message timestamp, which a v1 wrapper sets to the max (or append) time; v0: -1."""
        return self.timestamp

    @property
    def records_count(self) -> int:
        """1 for a plain message, the inner message count of a wrapper (decompresses it)."""
        return 1 if self.compression == 0 else len(legacy_records(self))

    def compute_crc(self) -> int:
        """CRC-32 of the bytes from magic to the end of the message."""
        return zlib.crc32(self.buffer[MAGIC_POSITION:]) & 0xFFFFFFFF

    def crc_valid(self) -> bool:
        """Whether the stored CRC matches the bytes."""
        return self.compute_crc() == self.crc


def decode_legacy_entry(buf: Buffer, position: int = 0) -> LegacyEntry:
    """Decode the v0/v1 entry that starts at ``position`` (its CRC is not checked here).

    Args:
        buf: bytes holding the entry (a segment, or a wrapper's decompressed value).
        position: where the entry's offset field starts.

    Returns:
        The entry, with key, value and buffer as views into ``buf``.

    Raises:
        TruncatedDataError: the entry runs past the end of ``buf``.
        CorruptBatchError: a magic byte other than 0 or 1, a size below the minimum, or key/value
            lengths that do not fill the size exactly.
    """
    view = memoryview(buf)
    available = len(view) - position
    if available < LOG_OVERHEAD:
        raise TruncatedDataError(
            f"legacy entry header; expected {LOG_OVERHEAD} bytes, found {max(available, 0)}",
            position=position)
    offset, size, crc = ENTRY_PREFIX_STRUCT.unpack_from(view, position)
    if size < RECORD_OVERHEAD_V0:
        raise CorruptBatchError(
            f"legacy message size; expected at least {RECORD_OVERHEAD_V0}, found {size}",
            position=position, offset=offset)
    if size > available - LOG_OVERHEAD:
        raise TruncatedDataError(
            f"legacy entry runs past the end of the data; expected {size + LOG_OVERHEAD} bytes, "
            f"found {available}", position=position, offset=offset)
    entry = view[position : position + LOG_OVERHEAD + size]
    magic, attributes = MESSAGE_START_STRUCT.unpack_from(entry, ENTRY_PREFIX_STRUCT.size)
    if magic not in (0, 1):
        raise CorruptBatchError(f"legacy message magic; expected 0 or 1, found {magic}",
                                position=position, offset=offset)
    if magic == 1 and size < RECORD_OVERHEAD_V1:
        raise CorruptBatchError(
            f"v1 message size; expected at least {RECORD_OVERHEAD_V1}, found {size}",
            position=position, offset=offset)
    timestamp = TIMESTAMP_STRUCT.unpack_from(entry, ENTRY_HEADER_SIZE)[0] if magic else NO_TIMESTAMP
    cursor = ENTRY_HEADER_SIZE + (TIMESTAMP_STRUCT.size if magic else 0)
    key, cursor = _sized(entry, cursor, len(entry) - LENGTH_STRUCT.size, "key", position, offset)
    value, cursor = _sized(entry, cursor, len(entry), "value", position, offset)
    if cursor != len(entry):
        raise CorruptBatchError(
            f"legacy message value ends early; expected it to end at byte {len(entry)} of the "
            f"entry, found {cursor}", position=position, offset=offset)
    return LegacyEntry(position, offset, len(entry), crc, magic, attributes, timestamp, key, value,
                       entry)


def _sized(
    entry: memoryview, cursor: int, limit: int, what: str, position: int, offset: int
) -> tuple[memoryview | None, int]:
    (length,) = LENGTH_STRUCT.unpack_from(entry, cursor)
    cursor += LENGTH_STRUCT.size
    if length < 0:
        return None, cursor
    if length > limit - cursor:
        raise CorruptBatchError(
            f"legacy message {what} length does not fit the message size; expected at most "
            f"{max(limit - cursor, 0)}, found {length}", position=position, offset=offset)
    return entry[cursor : cursor + length], cursor + length


def legacy_records(entry: LegacyEntry) -> list[Record]:
    """The records of an entry with absolute offsets, as Kafka's deep iterator yields them.

    Args:
        entry: a decoded v0/v1 entry.

    Returns:
        The message itself, or a wrapper's inner messages in order.

    Raises:
        CorruptRecordError: the wrapper's value is null, does not decompress, holds no messages,
            a partial or malformed one, a compressed one, or its offset is below the last inner
            offset; position = the entry's position, offset = the entry's offset.
        UnsupportedFormatError: an unknown codec, or a missing codec library.
    """
    if entry.compression == 0:
        return [Record(entry.offset, entry.timestamp, _bytes(entry.key), _bytes(entry.value))]
    records = entry._records
    if records is None:
        records = _inner_records(entry)
        object.__setattr__(entry, "_records", records)  # a cache: the entry's value is unchanged
    return records


def _inner_records(wrapper: LegacyEntry) -> list[Record]:
    def corrupt(message: str) -> CorruptRecordError:
        return CorruptRecordError(message, position=wrapper.position, offset=wrapper.offset)

    if wrapper.value is None:
        raise corrupt("compressed legacy message has a null value; expected the inner messages")
    try:
        data = decompress(wrapper.compression, wrapper.value, magic=wrapper.magic)
    except CorruptRecordError as err:
        raise corrupt(err.message) from err
    inner: list[LegacyEntry] = []
    position = 0
    while position < len(data):
        try:
            inner.append(decode_legacy_entry(data, position))
        except CorruptDataError as err:
            raise corrupt(
                f"inner message at byte {position} of the decompressed value: {err.message}"
            ) from err
        if inner[-1].compression != 0:
            raise corrupt(f"inner messages must not be compressed; expected codec 0, found "
                          f"{inner[-1].compression} at inner offset {inner[-1].offset}")
        position += inner[-1].size_in_bytes
    if not inner:
        raise corrupt("compressed legacy message holds no inner messages; expected at least 1")
    base = 0
    if wrapper.magic == 1 and wrapper.offset != 0:
        if wrapper.offset < inner[-1].offset:
            raise corrupt(f"wrapper offset is less than the last inner message offset and not "
                          f"zero; expected >= {inner[-1].offset}, found {wrapper.offset}")
        base = wrapper.offset - inner[-1].offset
    append_time = wrapper.magic == 1 and wrapper.timestamp_type == 1
    return [
        Record(base + message.offset,
               wrapper.timestamp if append_time and message.magic == 1 else message.timestamp,
               _bytes(message.key), _bytes(message.value))
        for message in inner
    ]


def _bytes(data: bytes | memoryview | None) -> bytes | None:
    return None if data is None else bytes(data)
