"""The cleaner's hot path: walk one batch's record bytes into columns, no Python object per record.

Why: the cleaner reads every record of a log twice (once to build the key -> last-offset map, once
to decide each record's fate). A :class:`~kcompact.records.record.Record` per record costs several
microseconds; this module reads only the fields the cleaner needs into preallocated ``array('q')``
columns (plus one ``bytes`` per key in :func:`scan_keys`), several times faster.

Input is the *decompressed* record bytes of one v2 batch (Kafka's ``DefaultRecord``), records back to back::

    length          varint   bytes after this field          -> record_starts[i] is here
    attributes      int8     (ignored; Kafka writes 0)
    timestampDelta  varlong  timestamp - base_timestamp
    offsetDelta     varint   offset - base_offset
    keyLength       varint   < 0: null key                   -> body_starts[i] is here
    key             bytes                                    -> key_starts[i] : key_ends[i]
    valueLength     varint   < 0: null value (tombstone)     -> value_null[i]
    value           bytes
    headersCount    varint   \\
    headers         ...      /  skipped through `length`     -> record_ends[i] is past here

What is validated here (positions in errors are relative to ``data``): ``count`` is not negative and
the data could hold that many records; every record's length is at least the 6-byte minimum body
and fits the data; the key (and, in :func:`scan_records`, the value) lies inside its record; every
varint read terminates (5 bytes, varlong 10, as Kafka's ``ByteUtils``); offsets fit in an int64
(timestamp sums wrap like Java longs, as in ``decode_records``); exactly ``count`` records and no
bytes left over. Header bytes (and, in :func:`scan_keys`, the value) are jumped over by the record
length and not parsed: the full validator is :func:`kcompact.records.record.decode_records`. On
any input that validator accepts, both functions give exactly what it gives (offsets past the
int64 range aside: it returns them, these refuse them).

Speed (2-core development machine, CPython 3.11.7, 200-record uncompressed batches, keys
``key-%012d``, 100-byte values). Two implementations, identical on every input:

* ``_accel.c`` (see :mod:`kcompact.records.scan.accel`), used when the extension is built and
  ``KCOMPACT_NO_ACCEL`` is unset: ~13 ns a record with the batch in cache; over a whole
  2,000,000-record segment (``python scripts/bench.py scan``, best of 3, machine shared)
  scan_keys 27 M records/s and scan_records 20 M, about the speed of reading the bytes.
* The pure-Python loops of :mod:`kcompact.records.scan.reference`: the reference the C code is
  tested against, and the code that runs where no compiler was found or the C code declines an
  input (errors among them: the reference raises the exact error). scan_keys 2.3-2.6 M
  records/s, scan_records 1.6-1.7 M (the full ``decode_records``: 0.3 M).
"""

from __future__ import annotations

from array import array

from kcompact.records.scan import accel
from kcompact.records.varint import Buffer
from kcompact.value import mutable

__all__ = [
    "RecordColumns",
    "scan_key_digests",
    "scan_keys",
    "scan_records",
]


@mutable
class RecordColumns:
    """The records of one batch as columns; every position indexes into :attr:`data`.

    Attributes:
        count: number of records.
        offsets: absolute offsets (``base_offset + offsetDelta``), typecode ``'q'``.
        timestamps: absolute timestamps (``base_timestamp + timestampDelta``, or the batch's
            LogAppendTime for every record).
        key_starts: position of each key's bytes, ``-1`` for a null key.
        key_ends: position just past each key, ``-1`` for a null key.
        value_null: ``1`` where the value is null (a tombstone), else ``0``.
        record_starts: position of each record's length varint.
        body_starts: position of each record's keyLength varint.
        record_ends: position just past each record.
        data: the scanned bytes.
    """

    count: int
    offsets: array[int]
    timestamps: array[int]
    key_starts: array[int]
    key_ends: array[int]
    value_null: bytearray
    record_starts: array[int]
    body_starts: array[int]
    record_ends: array[int]
    data: bytes | memoryview

    def key(self, i: int) -> bytes | None:
        """The key of record ``i``, or None for a null key.

        Args:
            i: record index, ``0 <= i < count``.

        Returns:
            The key bytes (a copy), or None.
        """
        start = self.key_starts[i]
        if start < 0:
            return None
        return bytes(self.data[start : self.key_ends[i]])


def scan_records(
    data: Buffer,
    *,
    base_offset: int,
    base_timestamp: int,
    count: int,
    log_append_time: int | None = None,
) -> RecordColumns:
    """Walk a batch's record bytes into columns.

    Args:
        data: the decompressed record bytes of one v2 batch (everything after its 61-byte header).
        base_offset: the batch's baseOffset.
        base_timestamp: the batch's baseTimestamp (the delete horizon when that bit is set).
        count: the batch's recordsCount.
        log_append_time: the batch's maxTimestamp when it is a LogAppendTime batch: every record
            then has this timestamp, whatever its delta. None for CreateTime.

    Returns:
        The columns; :attr:`RecordColumns.data` is ``data`` as ``bytes``.

    Raises:
        CorruptRecordError: the records do not frame as described in the module docstring.
    """
    if accel.enabled:
        scanned = accel.scan_records(data, base_offset, base_timestamp, count, log_append_time)
        if scanned is not None:
            return RecordColumns(count, *scanned)
    # kept off a clean's start-up: only a declined input or a missing extension walks in Python
    from kcompact.records.scan.reference import scan_records_reference

    scanned = scan_records_reference(data, base_offset, base_timestamp, count, log_append_time)
    return RecordColumns(count, *scanned)


def scan_keys(
    data: Buffer, *, base_offset: int, count: int
) -> tuple[array[int], list[bytes | None]]:
    """Read only offsets and keys: the lean walk that builds the cleaner's offset map.

    Values and headers are jumped over through the record length, so tombstones are included and
    not told apart (use :func:`scan_records` for that).

    Args:
        data: the decompressed record bytes of one v2 batch.
        base_offset: the batch's baseOffset.
        count: the batch's recordsCount.

    Returns:
        ``(offsets, keys)``: absolute offsets as ``array('q')`` and each key as ``bytes`` (None for
        a null key), in record order.

    Raises:
        CorruptRecordError: the records do not frame as described in the module docstring.
    """
    if accel.enabled:
        scanned = accel.scan_keys(data, base_offset, count)
        if scanned is not None:
            return scanned
    # kept off a clean's start-up: only a declined input or a missing extension walks in Python
    from kcompact.records.scan.reference import scan_keys_reference

    return scan_keys_reference(data, base_offset, count)


def scan_key_digests(
    data: Buffer, *, base_offset: int, count: int, min_offset: int
) -> tuple[bytes, bytes]:
    """The offset map's entries of one batch: :func:`scan_keys` and the keys' digests in one walk.

    Kafka's ``Cleaner.buildOffsetMapForSegment`` puts a record when it has a key and its offset is
    at least the first dirty offset; this returns exactly those, hashed with XXH3-128 (seed 0, the
    canonical big-endian digest: what ``kcompact.log.offset_map.key_digests`` computes), with
    no Python object per key. Validation and errors are :func:`scan_keys`' (all records are walked).

    Args:
        data: the decompressed record bytes of one v2 batch.
        base_offset: the batch's baseOffset.
        count: the batch's recordsCount.
        min_offset: the first offset wanted (the round's first dirty offset).

    Returns:
        ``(offsets, digests)``: the wanted records' offsets as native int64 bytes (8 a record) and
        their keys' digests (16 bytes a record), in record order.

    Raises:
        CorruptRecordError: the records do not frame as described in the module docstring.
    """
    if accel.enabled:
        scanned = accel.scan_key_digests(data, base_offset, count, min_offset)
        if scanned is not None:
            return scanned
    # kept off a clean's start-up: only a declined input or a missing extension walks in Python
    from kcompact.records.scan.reference import scan_key_digests_reference

    return scan_key_digests_reference(data, base_offset, count, min_offset)
