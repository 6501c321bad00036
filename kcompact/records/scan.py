"""The cleaner's hot path: walk one batch's record bytes into columns, no Python object per record.

Why: the cleaner reads every record of a log twice (once to build the key -> last-offset map, once
to decide each record's fate). A :class:`~kcompact.records.record.Record` per record costs several
microseconds; this module reads only the fields the cleaner needs into preallocated ``array('q')``
columns (plus one ``bytes`` per key in :func:`scan_keys`), several times faster.

Input is the *decompressed* record bytes of one v2 batch (spec §1.6), records back to back::

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

* ``_accel.c`` (see :mod:`kcompact.records.accel`), used when the extension is built and
  ``KCOMPACT_NO_ACCEL`` is unset: ~13 ns a record with the batch in cache; over a whole
  2,000,000-record segment (``python scripts/bench.py scan``, best of 3, machine shared)
  scan_keys 27 M records/s and scan_records 20 M, about the speed of reading the bytes.
* The pure-Python loops below: the reference the C code is tested against, and the code that
  runs where no compiler was found or the C code declines an input (errors among them: the
  reference raises the exact error). scan_keys 2.3-2.6 M records/s, scan_records 1.6-1.7 M
  (the full ``decode_records``: 0.3 M). They are long on purpose: a helper call per field was 4x
  slower; 1- and 2-byte varints are read inline and zig-zagged by one table lookup. A
  memoryview input is copied to ``bytes`` once per batch (bytes indexing is ~10% faster).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from kcompact.errors import CorruptRecordError
from kcompact.records import accel
from kcompact.records.varint import INT64_MAX, Buffer, decode_varint, decode_varlong

MIN_RECORD_BODY_SIZE_IN_BYTES = 6
"""attributes + timestampDelta + offsetDelta + keyLength + valueLength + headersCount, 1 byte each."""
MIN_RECORD_SIZE_IN_BYTES = 1 + MIN_RECORD_BODY_SIZE_IN_BYTES
"""The length varint plus the smallest body; bounds how many records ``data`` can hold."""


def _wrap_int64(value: int) -> int:
    """Java's long addition: keep the low 64 bits, as Kafka does for base + delta timestamps."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


def _zigzag(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


# Zig-zag decoded values of 1- and 2-byte varints, by one index: a 1-byte varint b (< 0x80) is at
# b; a 2-byte one (b >= 0x80, c < 0x80) is at b + (c << 7) = 0x80 + ((b & 0x7F) | c << 7).
_ZIGZAG: tuple[int, ...] = tuple(_zigzag(i) for i in range(0x80)) + tuple(
    _zigzag(i) for i in range(0x4000)
)
# Largest magnitude a 1- or 2-byte varint delta can have, plus one: base_timestamp values this far
# inside the int64 range cannot overflow on the fast paths.
_FAST_DELTA_LIMIT = 0x2000


@dataclass(slots=True)
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


def _prepare(data: Buffer, count: int) -> bytes:
    """Check ``count`` against the data size before anything is allocated from it."""
    if count < 0:
        raise CorruptRecordError(
            f"negative record count; expected >= 0, found {count}", position=0
        )
    if count * MIN_RECORD_SIZE_IN_BYTES > len(data):
        raise CorruptRecordError(
            f"record count larger than the data can hold; expected at most "
            f"{len(data) // MIN_RECORD_SIZE_IN_BYTES} records in {len(data)} bytes, found {count}",
            position=0,
        )
    return data if type(data) is bytes else bytes(data)


def _bad_length(i: int, length: int, available: int, position: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"record {i} length out of range; expected {MIN_RECORD_BODY_SIZE_IN_BYTES}.."
        f"{available} bytes, found {length}",
        position=position,
    )


def _overrun(i: int, field: str, end: int, found: int, position: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"record {i} {field} runs past the end of the record; expected to end by position "
        f"{end}, found position {found}",
        position=position,
    )


def _boundary(err: Exception, i: int, count: int, size: int, position: int) -> CorruptRecordError:
    """Turn an IndexError / OverflowError from a scan loop into the error a user should see."""
    if isinstance(err, OverflowError):
        message = (
            f"record {i} offset out of range; expected base_offset + offsetDelta to fit in "
            f"a signed 64-bit integer, found an overflow"
        )
    elif position >= size:
        message = f"records end early; expected {count} records, found {i}"
    else:
        message = (
            f"record {i} runs past the end of the data; expected its fields within "
            f"{size} bytes, found the data ends inside one"
        )
    return CorruptRecordError(message, position=position)


def _leftover(count: int, size: int, position: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"bytes left over after the last record; expected {count} records to fill {size} bytes, "
        f"found {size - position} more",
        position=position,
    )


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
    return _scan_records_python(data, base_offset, base_timestamp, count, log_append_time)


def _scan_records_python(
    data: Buffer, base_offset: int, base_timestamp: int, count: int, log_append_time: int | None
) -> RecordColumns:
    """The reference :func:`scan_records`: what runs without the C kernels, and when they decline."""
    buf = _prepare(data, count)
    zeros = bytes(8 * count)
    columns = RecordColumns(
        count=count,
        offsets=array("q", zeros),
        timestamps=array("q", zeros),
        key_starts=array("q", [-1]) * count,
        key_ends=array("q", [-1]) * count,
        value_null=bytearray(count),
        record_starts=array("q", zeros),
        body_starts=array("q", zeros),
        record_ends=array("q", zeros),
        data=buf,
    )
    if log_append_time is not None:
        _scan_columns(columns, base_offset, 0)
        columns.timestamps = array("q", [log_append_time]) * count
    elif _FAST_DELTA_LIMIT - INT64_MAX <= base_timestamp <= INT64_MAX - _FAST_DELTA_LIMIT:
        _scan_columns(columns, base_offset, base_timestamp)
    else:  # a sum could pass the int64 range; Java wraps it, so collect deltas and wrap here
        _scan_columns(columns, base_offset, 0)
        stamps = [_wrap_int64(base_timestamp + delta) for delta in columns.timestamps]
        columns.timestamps = array("q", stamps)
    return columns


def _scan_columns(columns: RecordColumns, base_offset: int, base_timestamp: int) -> None:
    """The loop of :func:`scan_records`; see the module docstring for why it is one piece."""
    d = columns.data
    n = len(d)
    count = columns.count
    zz = _ZIGZAG
    min_body = MIN_RECORD_BODY_SIZE_IN_BYTES
    offs, tss, vns = columns.offsets, columns.timestamps, columns.value_null
    kss, kes = columns.key_starts, columns.key_ends
    rss, bss, res = columns.record_starts, columns.body_starts, columns.record_ends
    p = i = 0
    try:
        for i in range(count):
            b = d[p]
            if b < 0x80:
                q = p + 1
                end = q + zz[b]
            elif (c := d[p + 1]) < 0x80:
                q = p + 2
                end = q + zz[b + (c << 7)]
            else:
                length, q = decode_varint(d, p)
                end = q + length
            if end > n or end < q + min_body:
                raise _bad_length(i, end - q, n - q, p)
            rss[i] = p
            res[i] = end
            b = d[q + 1]  # timestampDelta, after the attributes byte
            if b < 0x80:
                tss[i] = base_timestamp + zz[b]
                q += 2
            elif (c := d[q + 2]) < 0x80:
                tss[i] = base_timestamp + zz[b + (c << 7)]
                q += 3
            else:
                delta, q = decode_varlong(d, q + 1)
                tss[i] = _wrap_int64(base_timestamp + delta)
            b = d[q]
            if b < 0x80:
                offs[i] = base_offset + zz[b]
                q += 1
            elif (c := d[q + 1]) < 0x80:
                offs[i] = base_offset + zz[b + (c << 7)]
                q += 2
            else:
                delta, q = decode_varint(d, q)
                offs[i] = base_offset + delta
            bss[i] = q
            b = d[q]
            if b < 0x80:
                q += 1
                size = zz[b]
            elif (c := d[q + 1]) < 0x80:
                q += 2
                size = zz[b + (c << 7)]
            else:
                size, q = decode_varint(d, q)
            if size >= 0:
                kss[i] = q
                q += size
                kes[i] = q
                if q > end:
                    raise _overrun(i, "key", end, q, p)
            b = d[q]
            if b < 0x80:
                q += 1
                size = zz[b]
            elif (c := d[q + 1]) < 0x80:
                q += 2
                size = zz[b + (c << 7)]
            else:
                size, q = decode_varint(d, q)
            if size < 0:
                vns[i] = 1
            else:
                q += size
            if q > end:
                raise _overrun(i, "value", end, q, p)
            p = end
    except (IndexError, OverflowError) as err:
        raise _boundary(err, i, count, n, p) from err
    if p != n:
        raise _leftover(count, n, p)


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
    return _scan_keys_python(data, base_offset, count)


def _scan_keys_python(
    data: Buffer, base_offset: int, count: int
) -> tuple[array[int], list[bytes | None]]:
    """The reference :func:`scan_keys`: what runs without the C kernels, and when they decline."""
    d = _prepare(data, count)
    n = len(d)
    zz = _ZIGZAG
    min_body = MIN_RECORD_BODY_SIZE_IN_BYTES
    offs = array("q", bytes(8 * count))
    keys: list[bytes | None] = [None] * count
    p = i = 0
    try:
        for i in range(count):
            b = d[p]
            if b < 0x80:
                q = p + 1
                end = q + zz[b]
            elif (c := d[p + 1]) < 0x80:
                q = p + 2
                end = q + zz[b + (c << 7)]
            else:
                length, q = decode_varint(d, p)
                end = q + length
            if end > n or end < q + min_body:
                raise _bad_length(i, end - q, n - q, p)
            if d[q + 1] < 0x80:  # timestampDelta, after the attributes byte: skipped
                q += 2
            elif d[q + 2] < 0x80:
                q += 3
            else:
                q = decode_varlong(d, q + 1)[1]
            b = d[q]
            if b < 0x80:
                offs[i] = base_offset + zz[b]
                q += 1
            elif (c := d[q + 1]) < 0x80:
                offs[i] = base_offset + zz[b + (c << 7)]
                q += 2
            else:
                delta, q = decode_varint(d, q)
                offs[i] = base_offset + delta
            b = d[q]
            if b < 0x80:
                q += 1
                size = zz[b]
            elif (c := d[q + 1]) < 0x80:
                q += 2
                size = zz[b + (c << 7)]
            else:
                size, q = decode_varint(d, q)
            if size >= 0:
                key_end = q + size
                if key_end > end:
                    raise _overrun(i, "key", end, key_end, p)
                keys[i] = d[q:key_end]
            elif q > end:
                raise _overrun(i, "keyLength", end, q, p)
            p = end
    except (IndexError, OverflowError) as err:
        raise _boundary(err, i, count, n, p) from err
    if p != n:
        raise _leftover(count, n, p)
    return offs, keys
