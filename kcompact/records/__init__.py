"""Bytes to values and back for Kafka partition logs: batches, records, codecs, checksums.

This layer knows Kafka's on-disk formats and nothing about files: every function takes ``bytes``,
``memoryview`` or ``mmap`` and a position, and errors carry positions relative to that buffer (the
``segment`` layer that opened the file adds the path with ``err.located``). It imports only the
standard library, ``kcompact.errors`` and codec libraries.

Modules: ``varint`` and ``crc`` (primitives), ``batch_header`` (the v2 header layout and
``RecordBatch``), ``batch`` (decoding and the framing walk), ``batch_encoding`` (encoders), ``record``
(v2 records), ``control`` (transaction markers), ``compression`` (codecs), ``lz4_framing`` (Kafka's LZ4
frame subset and XXH32), ``legacy`` (magic 0/1), ``filter`` (the cleaner's batch rebuild), ``scan/`` (the columnar hot
path: its ``reference`` in pure Python, the C kernels ``_accel.c`` behind ``accel``) and ``messages/``
(Kafka's generated message encoding: ``__consumer_offsets`` records). The names below are the stable v2 core.
"""

from __future__ import annotations

from kcompact.records.batch import HEADER_SIZE_UP_TO_MAGIC, decode_batch, iter_batches, tail_kind
from kcompact.records.batch_encoding import encode_batch, encode_empty_batch, encode_records_batch
from kcompact.records.batch_header import (
    LOG_OVERHEAD,
    MAGIC_VALUE_V2,
    RECORD_BATCH_OVERHEAD,
    Compression,
    RecordBatch,
    TimestampType,
)
from kcompact.records.control import (
    ControlRecordKey,
    ControlRecordType,
    EndTransactionMarker,
    encode_control_batch,
)
from kcompact.records.record import (
    Header,
    Record,
    decode_record,
    decode_records,
    encode_record,
    records_bytes,
)

__all__ = [
    "HEADER_SIZE_UP_TO_MAGIC",
    "LOG_OVERHEAD",
    "MAGIC_VALUE_V2",
    "RECORD_BATCH_OVERHEAD",
    "Compression",
    "ControlRecordKey",
    "ControlRecordType",
    "EndTransactionMarker",
    "Header",
    "Record",
    "RecordBatch",
    "TimestampType",
    "decode_batch",
    "decode_record",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "encode_empty_batch",
    "encode_record",
    "encode_records_batch",
    "iter_batches",
    "records_bytes",
    "tail_kind",
]
