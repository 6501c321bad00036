"""v2 record batches (magic 2): decoding a header and the framing walk of a ``.log``.

Why here: every other layer (segment recovery, the cleaner, inspect, repair) sees a partition log as
a sequence of batches first and records second. This module turns bytes into
:class:`RecordBatch` values without touching the records. The header layout and value type live in
``batch_header.py``, the encoders in ``batch_encoding.py`` (import each name from its module); records
themselves live in ``record.py``.

Framing shared by every entry of a ``.log`` file (Kafka's ``FileLogInputStream``)::

    0   int64  offset          v2: base offset; v0/v1: offset of the (last inner) message
    8   int32  size            bytes after this field; the entry is 12 + size bytes long
    12  int32  ...             v2: partition leader epoch; v0/v1: CRC-32
    16  int8   magic           0, 1 or 2 - decides how everything else is read

A v2 entry is a batch whose 61-byte header is laid out in ``batch_header.py``; magic 0 and 1 are
``legacy.py``'s.

A file's tail shorter than the 17-byte prefix is judged by :func:`tail_kind`: all-zero bytes
(preallocation, a zero-filled page after a crash) end the walk quietly; anything else is a torn write
and raises :class:`~kcompact.errors.TruncatedDataError`, so no caller mistakes it for a clean end.

Speed: a clean decodes ~60 000 headers; :func:`decode_batch` costs 2.5 us in Python, 70% of it the
frozen dataclass's ``__init__``. With the compiled kernels (:mod:`kcompact.records.scan.accel`) a
well-formed v2 header is decoded, checked and built in C (0.3 us); anything else, errors
included, goes through the Python code below, which stays the reference.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kcompact.errors import CorruptBatchError, TruncatedDataError, UnsupportedFormatError
from kcompact.records.batch_header import (
    COMPRESSION_CODEC_MASK,
    HEADER_STRUCT,
    KNOWN_ATTRIBUTES_MASK,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V2,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    Compression,
    RecordBatch,
)
from kcompact.records.scan import accel
from kcompact.records.varint import Buffer

if TYPE_CHECKING:
    from kcompact.records.legacy import LegacyEntry

HEADER_SIZE_UP_TO_MAGIC = 17
RECORD_OVERHEAD_V0 = 14  # smallest legal size field of any entry (a v0 message)

ENTRY_PREFIX_STRUCT = struct.Struct(
    ">q"  # offset: base offset (v2) or message offset (v0/v1)
    "i"  # size: bytes that follow this field
)

_RECORD_BATCH_SLOTS = accel.member_slots(RecordBatch)


def _check_header(
    position: int, offset: int, batch_length: int, magic: int, attributes: int, count: int
) -> None:
    where = f"v2 batch at buffer position {position}"
    if magic != MAGIC_VALUE_V2:
        raise UnsupportedFormatError(f"{where}: wrong magic; expected 2, found {magic}")
    if attributes & ~KNOWN_ATTRIBUTES_MASK:
        raise UnsupportedFormatError(
            f"{where}: unknown attribute bits; expected 0 in bits 7-15, "
            f"found attributes 0x{attributes & 0xFFFF:04x}")
    if attributes & COMPRESSION_CODEC_MASK > Compression.ZSTD:
        raise UnsupportedFormatError(
            f"{where}: unknown compression codec; expected 0..4, "
            f"found {attributes & COMPRESSION_CODEC_MASK}")
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptBatchError(
            f"batch length smaller than an empty v2 batch; expected >= {MIN_BATCH_LENGTH}, "
            f"found {batch_length}", position=position, offset=offset)
    if count < 0:
        raise CorruptBatchError(
            f"negative record count; expected >= 0, found {count}",
            position=position, offset=offset)


def _raise_short_header(buf: Buffer, position: int, remaining: int) -> None:
    if remaining < LOG_OVERHEAD:
        raise TruncatedDataError(
            f"batch header runs past the end of the data; expected {RECORD_BATCH_OVERHEAD} "
            f"bytes, found {max(remaining, 0)}", position=position)
    offset, batch_length = ENTRY_PREFIX_STRUCT.unpack_from(buf, position)
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptBatchError(
            f"batch length smaller than an empty v2 batch; expected >= {MIN_BATCH_LENGTH}, "
            f"found {batch_length}", position=position, offset=offset)
    raise TruncatedDataError(
        f"batch declares {batch_length + LOG_OVERHEAD} bytes but only {remaining} remain; "
        f"expected the whole batch inside the data", position=position, offset=offset)


def decode_batch(buf: Buffer, position: int = 0) -> RecordBatch:
    """Decode the header of the v2 batch at ``position``; the CRC is not checked.

    Args:
        buf: the bytes holding the batch (a whole segment, an mmap, one batch...).
        position: where the batch starts in ``buf``.

    Returns:
        The batch; its ``buffer`` is a memoryview of exactly its bytes inside ``buf``.

    Raises:
        TruncatedDataError: the batch (or its header) runs past the end of ``buf``.
        CorruptBatchError: batch_length below 49, or a negative records_count.
        UnsupportedFormatError: magic other than 2, a codec above 4, or unknown attribute bits.
    """
    if accel.enabled:
        batch = accel.decode_batch(buf, position, RecordBatch, _RECORD_BATCH_SLOTS)
        if batch is not None:
            return batch
    return _decode_batch_python(buf, position)


def _decode_batch_python(buf: Buffer, position: int) -> RecordBatch:
    """The reference :func:`decode_batch`: without the C kernels, and on every error."""
    remaining = len(buf) - position
    if remaining < RECORD_BATCH_OVERHEAD:
        _raise_short_header(buf, position, remaining)
    (base_offset, batch_length, leader_epoch, magic, crc, attributes, last_offset_delta,
     base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
     records_count) = HEADER_STRUCT.unpack_from(buf, position)
    _check_header(position, base_offset, batch_length, magic, attributes, records_count)
    size = batch_length + LOG_OVERHEAD
    if size > remaining:
        raise TruncatedDataError(
            f"batch declares {size} bytes but only {remaining} remain; expected the whole batch "
            f"inside the data", position=position, offset=base_offset)
    return RecordBatch(
        position, base_offset, batch_length, leader_epoch, magic, crc, attributes,
        last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
        base_sequence, records_count, memoryview(buf)[position : position + size])


def tail_kind(buf: Buffer, position: int, end: int) -> str:
    """Classify the bytes ``buf[position:end]`` left after the last whole entry.

    Args:
        buf: the data being walked.
        position: where the tail starts.
        end: where the data ends.

    Returns:
        "none" when nothing is left, "zero-padding" when every byte left is zero, else "truncated".
    """
    if position >= end:
        return "none"
    tail = memoryview(buf)[position:end]
    return "zero-padding" if tail == bytes(len(tail)) else "truncated"


def iter_batches(
    buf: Buffer, start: int = 0, end: int | None = None
) -> Iterator[RecordBatch | LegacyEntry]:
    """Walk the entries of ``buf[start:end]`` and decode each by its magic byte.

    Args:
        buf: a segment's bytes (bytes, memoryview or mmap).
        start: position of the first entry.
        end: where the data ends (default: ``len(buf)``); no entry may run past it.

    Yields:
        A :class:`RecordBatch` for magic 2, a ``legacy.LegacyEntry`` for magic 0 and 1.

    Raises:
        CorruptBatchError: a size field below 14, or a magic byte outside 0..2.
        TruncatedDataError: an entry runs past ``end``, or fewer than 17 non-zero bytes trail.
            A trailing run of fewer than 17 zero bytes ends the walk without error.
        UnsupportedFormatError: see :func:`decode_batch`.
    """
    end = len(buf) if end is None else end
    view = memoryview(buf)[:end]
    position = start
    while position < end:
        if accel.enabled:  # a well-formed v2 batch, framing checked in C; else the walk below
            batch = accel.decode_batch(view, position, RecordBatch, _RECORD_BATCH_SLOTS)
            if batch is not None:
                yield batch
                position += batch.batch_length + LOG_OVERHEAD
                continue
        if end - position < HEADER_SIZE_UP_TO_MAGIC:
            if tail_kind(view, position, end) == "zero-padding":
                return
            raise TruncatedDataError(
                f"partial entry at the end of the data; expected at least "
                f"{HEADER_SIZE_UP_TO_MAGIC} bytes, found {end - position}", position=position)
        offset, size = ENTRY_PREFIX_STRUCT.unpack_from(view, position)
        _check_framing(offset, size, view[position + MAGIC_OFFSET], position, end)
        if view[position + MAGIC_OFFSET] == MAGIC_VALUE_V2:
            yield decode_batch(view, position)
        else:  # imported here: legacy.py builds on this module
            from kcompact.records.legacy import decode_legacy_entry

            yield decode_legacy_entry(view, position)
        position += size + LOG_OVERHEAD


def _check_framing(offset: int, size: int, magic: int, position: int, end: int) -> None:
    if size < RECORD_OVERHEAD_V0:
        raise CorruptBatchError(
            f"record size is smaller than minimum record overhead; expected >= "
            f"{RECORD_OVERHEAD_V0}, found {size}", position=position, offset=offset)
    if magic > MAGIC_VALUE_V2:  # memoryview bytes are unsigned: 0x80..0xff are negative int8
        signed = magic - 256 if magic > 127 else magic
        raise CorruptBatchError(
            f"invalid magic byte; expected 0, 1 or 2, found {signed}",
            position=position, offset=offset)
    if size + LOG_OVERHEAD > end - position:
        raise TruncatedDataError(
            f"entry declares {size + LOG_OVERHEAD} bytes but only {end - position} remain; "
            f"expected the whole entry inside the data", position=position, offset=offset)
