"""The v2 record batch header (magic 2): its wire layout, attribute bits, sentinels and value type.

Why here: decoding (``batch.py``) and encoding (``batch_encoding.py``) read and write the same 61
bytes; this module is the one place that says what they are, and :class:`RecordBatch` is what a
decoded header is.

v2 batch header, 61 bytes (Kafka's ``DefaultRecordBatch``), then the (possibly compressed) records::

    0   int64  base_offset            27  int64  base_timestamp   (or the delete horizon)
    8   int32  batch_length           35  int64  max_timestamp
    12  int32  partition_leader_epoch 43  int64  producer_id
    16  int8   magic (= 2)            51  int16  producer_epoch
    17  uint32 crc (CRC-32C of 21..)  53  int32  base_sequence
    21  int16  attributes             57  int32  records_count
    23  int32  last_offset_delta      61  ...    records

Attributes (low byte only; bits 7-15 are 0): bits 0-2 codec, bit 3 LogAppendTime, bit 4
transactional, bit 5 control, bit 6 delete horizon set. Anything else is refused, not guessed at.
"""

from __future__ import annotations

import struct
from dataclasses import field
from enum import IntEnum

from kcompact.records.crc import crc32c
from kcompact.records.varint import INT32_MAX
from kcompact.value import frozen

LOG_OVERHEAD = 12
RECORD_BATCH_OVERHEAD = 61
MAGIC_VALUE_V2 = 2
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # 49: an empty v2 batch

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40
KNOWN_ATTRIBUTES_MASK = 0x7F

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

HEADER_STRUCT = struct.Struct(
    ">q"  # base_offset
    "i"  # batch_length: bytes after this field
    "i"  # partition_leader_epoch: outside the CRC, the broker restamps it
    "b"  # magic
    "I"  # crc: CRC-32C from attributes to the end of the batch
    "h"  # attributes
    "i"  # last_offset_delta: also the last sequence delta
    "q"  # base_timestamp
    "q"  # max_timestamp
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # base_sequence
    "i"  # records_count
)
MAGIC_OFFSET = struct.calcsize(">qii")  # 16
CRC_OFFSET = struct.calcsize(">qiib")  # 17
ATTRIBUTES_OFFSET = struct.calcsize(">qiibI")  # 21


class Compression(IntEnum):
    """Codec id of attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        """Kafka's ``compression.type`` spelling: "none", "gzip", "snappy", "lz4" or "zstd"."""
        return self.name.lower()


_CODECS = tuple(Compression)  # by codec id: a lookup, not an enum call, on every batch's hot path


class TimestampType(IntEnum):
    """Meaning of record timestamps; v2 batches are CREATE_TIME or LOG_APPEND_TIME (bit 3)."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's producer sequence arithmetic: wraps from 2**31-1 back to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


@frozen
class RecordBatch:
    """One decoded v2 batch header plus a view of exactly this batch's bytes."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    buffer: bytes | memoryview = field(repr=False)

    @property
    def size_in_bytes(self) -> int:
        """Whole batch, prefix included: ``batch_length + 12``."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        """Offset of the last record of the original batch (kept by compaction)."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """``last_offset + 1``."""
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        """Codec of the record bytes."""
        codec = self.attributes & COMPRESSION_CODEC_MASK
        return _CODECS[codec] if codec < len(_CODECS) else Compression(codec)  # 5-7: ValueError

    @property
    def timestamp_type(self) -> TimestampType:
        """CREATE_TIME, or LOG_APPEND_TIME when every record's timestamp is ``max_timestamp``."""
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        """Attribute bit 4."""
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        """Attribute bit 5: the batch holds control records (transaction markers, KRaft)."""
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """Attribute bit 6: ``base_timestamp`` is the delete horizon (KIP-534)."""
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The delete horizon when bit 6 is set, else None."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        """``producer_id > -1``: written by an idempotent or transactional producer."""
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """``base_sequence + last_offset_delta`` with Kafka's wrap-around; -1 without sequences."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def payload(self) -> memoryview:
        """The record bytes after the 61-byte header (compressed when the codec is not NONE)."""
        return memoryview(self.buffer)[RECORD_BATCH_OVERHEAD:]

    def compute_crc(self) -> int:
        """CRC-32C of bytes 21..end, what ``crc`` should hold."""
        return crc32c(memoryview(self.buffer)[ATTRIBUTES_OFFSET:])

    def crc_valid(self) -> bool:
        """Kafka's ``isValid``: at least 61 bytes and the stored CRC matches."""
        return self.size_in_bytes >= RECORD_BATCH_OVERHEAD and self.crc == self.compute_crc()
