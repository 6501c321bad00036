"""Producer state snapshots ``<N>.snapshot`` (``ProducerStateManager.writeSnapshot``).

A snapshot records, for every live producer id, what the broker needs to keep deduplicating and to
track open transactions: its epoch, last sequence and offset, and the first offset of its open
transaction. *N* is the "map end offset" — the next offset after the last batch the state includes.
The broker writes one at every segment roll (at the new segment's base offset) and at clean shutdown
(at the log end offset), and at startup replays the log from the newest snapshot at or below its
recovery target; files that no longer match a segment are deleted then. kcompact reads them to
report producer state and to know which snapshots a clean makes stale.

Layout (Kafka's generated ``ProducerSnapshot`` message, version 1, big-endian)::

    0   int16  version                  1
    2   uint32 crc                      CRC-32C of bytes [6, end)
    6   int32  producer entry count     (-1 would be null; the field is not nullable)
    10  entries, 46 bytes each:
        0   int64 producer_id
        8   int16 producer_epoch
        10  int32 last_sequence
        14  int64 last_offset               last data offset, -1 if none
        22  int32 offset_delta              last_sequence - first sequence of the last batch
        26  int64 timestamp                 the last batch's maxTimestamp, or the marker's timestamp
        34  int32 coordinator_epoch
        38  int64 current_txn_first_offset  -1 when no transaction is open
"""

from __future__ import annotations

import os
import struct

from kcompact.errors import CorruptDataError, TruncatedDataError
from kcompact.records.crc import crc32c
from kcompact.segment.files import read_file
from kcompact.value import frozen

SNAPSHOT_HEADER = struct.Struct(
    ">"
    "h"  # version: 1
    "I"  # crc: CRC-32C of bytes [CRC_START, end)
    "i"  # number of producer entries
)
PRODUCER_ENTRY = struct.Struct(
    ">"
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # last_sequence
    "q"  # last_offset
    "i"  # offset_delta
    "q"  # timestamp
    "i"  # coordinator_epoch
    "q"  # current_txn_first_offset
)
SNAPSHOT_VERSION = 1
CRC_POSITION = struct.calcsize(">h")  # 2
CRC_START = struct.calcsize(">hI")  # 6: the CRC covers the count and every entry


@frozen
class ProducerSnapshotEntry:
    """One producer's state in a snapshot (field names as in Kafka's ``ProducerSnapshot.json``)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def decode_producer_snapshot(data: bytes | memoryview) -> list[ProducerSnapshotEntry]:
    """Decode a producer snapshot, checking its version, CRC and length.

    Args:
        data: the whole file.

    Returns:
        The producer entries in file order.

    Raises:
        TruncatedDataError: the data ends inside the header or an entry.
        CorruptDataError: unknown version, CRC mismatch, negative count or bytes after the last
            entry (``position`` = the field concerned).
    """
    if len(data) < SNAPSHOT_HEADER.size:
        raise TruncatedDataError(
            f"producer snapshot ends inside its header; expected at least {SNAPSHOT_HEADER.size} "
            f"bytes, found {len(data)}",
            position=len(data),
        )
    version, stored_crc, count = SNAPSHOT_HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptDataError(
            f"unknown producer snapshot version; expected {SNAPSHOT_VERSION}, found {version}",
            position=0,
        )
    computed_crc = crc32c(memoryview(data)[CRC_START:])
    if computed_crc != stored_crc:
        raise CorruptDataError(
            f"producer snapshot CRC-32C does not match its contents; expected {computed_crc:#010x} "
            f"(computed over bytes {CRC_START}..{len(data)}), found {stored_crc:#010x}",
            position=CRC_POSITION,
        )
    return _decode_entries(data, count)


def _decode_entries(data: bytes | memoryview, count: int) -> list[ProducerSnapshotEntry]:
    if count < 0:
        raise CorruptDataError(
            f"producer entry count is negative; expected 0 or more, found {count}",
            position=CRC_START,
        )
    expected = SNAPSHOT_HEADER.size + count * PRODUCER_ENTRY.size
    if len(data) != expected:
        error = TruncatedDataError if len(data) < expected else CorruptDataError
        raise error(
            f"producer snapshot size does not match its {count} entries; "
            f"expected {expected} bytes, found {len(data)}",
            position=min(len(data), expected),
        )
    return [
        ProducerSnapshotEntry(*fields)
        for fields in PRODUCER_ENTRY.iter_unpack(memoryview(data)[SNAPSHOT_HEADER.size :])
    ]



def read_producer_snapshot(path: str | os.PathLike[str]) -> list[ProducerSnapshotEntry]:
    """Read a producer snapshot file (see :func:`decode_producer_snapshot`).

    Args:
        path: the ``<N>.snapshot`` file.

    Returns:
        The producer entries.

    Raises:
        FileNotFoundError: the file does not exist.
        FileAccessError: the file cannot be read (permissions, an I/O error).
        CorruptDataError: the file does not decode; the error names it and the position.
    """
    data = read_file(path)
    try:
        return decode_producer_snapshot(data)
    except CorruptDataError as err:
        raise err.located(path) from err
