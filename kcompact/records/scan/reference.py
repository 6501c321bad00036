"""The pure-Python reference of :mod:`kcompact.records.scan`: the loops the C kernels are held to.

Why apart: the package's ``__init__`` is the cleaner's entry point and says what a scan returns and checks; this
module is how Python does it, where ``_accel.c`` is not built or declines an input (errors among
them: only this code raises the exact error). Each function has the contract of its twin in
:mod:`kcompact.records.scan.accel` (same arguments, same tuple), except that it raises
:class:`~kcompact.errors.CorruptRecordError` where the C code returns None. The record layout, the
checks and the measured speeds are in :mod:`kcompact.records.scan`'s docstring.

The loops are long on purpose: a helper call per field was 4x slower; 1- and 2-byte varints are read
inline and zig-zagged by one table lookup. A memoryview input is copied to ``bytes`` once per batch
(bytes indexing is ~10% faster).
"""

from __future__ import annotations

from array import array

from xxhash import xxh3_128_digest

from kcompact.errors import CorruptRecordError
from kcompact.records.scan.accel import KeyColumns, ScannedColumns
from kcompact.records.varint import INT64_MAX, Buffer, decode_varint, decode_varlong, wrap_int64

MIN_RECORD_BODY_SIZE_IN_BYTES = 6
"""attributes + timestampDelta + offsetDelta + keyLength + valueLength + headersCount, 1 byte each."""
MIN_RECORD_SIZE_IN_BYTES = 1 + MIN_RECORD_BODY_SIZE_IN_BYTES
"""The length varint plus the smallest body; bounds how many records ``data`` can hold."""


def _zigzag_table(size: int) -> list[int]:
    """Zig-zag decoded values of 0..size-1 (size even): 0, -1, 1, -2, 2, ... (built by slices: a table
    built value by value cost ~2 ms of every start)."""
    table = [0] * size
    table[0::2] = range(size // 2)
    table[1::2] = range(-1, -size // 2 - 1, -1)
    return table


# Zig-zag decoded values of 1- and 2-byte varints, by one index: a 1-byte varint b (< 0x80) is at
# b; a 2-byte one (b >= 0x80, c < 0x80) is at b + (c << 7) = 0x80 + ((b & 0x7F) | c << 7).
_ZIGZAG: tuple[int, ...] = tuple(_zigzag_table(0x80) + _zigzag_table(0x4000))

# Largest magnitude a 1- or 2-byte varint delta can have, plus one: base_timestamp values this far
# inside the int64 range cannot overflow on the fast paths.
_FAST_DELTA_LIMIT = 0x2000


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


def scan_records_reference(
    data: Buffer, base_offset: int, base_timestamp: int, count: int, log_append_time: int | None
) -> ScannedColumns:
    """The reference :func:`~kcompact.records.scan.scan_records`, as a tuple of its columns.

    Args:
        data, base_offset, base_timestamp, count, log_append_time: as for ``scan.scan_records``.

    Returns:
        ``(offsets, timestamps, key_starts, key_ends, value_null, record_starts, body_starts,
        record_ends, data)``: ``RecordColumns``' fields after ``count``, ``data`` as ``bytes``.

    Raises:
        CorruptRecordError: the records do not frame as :mod:`kcompact.records.scan` describes.
    """
    buf = _prepare(data, count)
    zeros = bytes(8 * count)
    offsets, timestamps = array("q", zeros), array("q", zeros)
    key_starts, key_ends = array("q", [-1]) * count, array("q", [-1]) * count
    value_null = bytearray(count)
    record_starts, body_starts, record_ends = array("q", zeros), array("q", zeros), array("q", zeros)
    columns = (
        offsets, timestamps, key_starts, key_ends, value_null, record_starts, body_starts, record_ends
    )
    if log_append_time is not None:
        _scan_columns(buf, count, columns, base_offset, 0)
        timestamps = array("q", [log_append_time]) * count
    elif _FAST_DELTA_LIMIT - INT64_MAX <= base_timestamp <= INT64_MAX - _FAST_DELTA_LIMIT:
        _scan_columns(buf, count, columns, base_offset, base_timestamp)
    else:  # a sum could pass the int64 range; Java wraps it, so collect deltas and wrap here
        _scan_columns(buf, count, columns, base_offset, 0)
        timestamps = array("q", [wrap_int64(base_timestamp + delta) for delta in timestamps])
    return (
        offsets, timestamps, key_starts, key_ends, value_null, record_starts, body_starts,
        record_ends, buf,
    )


_Columns = tuple[  # ScannedColumns without data, filled in place by _scan_columns
    "array[int]", "array[int]", "array[int]", "array[int]", bytearray, "array[int]", "array[int]",
    "array[int]",
]


def _scan_columns(
    d: bytes, count: int, columns: _Columns, base_offset: int, base_timestamp: int
) -> None:
    """The loop of :func:`scan_records_reference`; see the module docstring for why it is one piece."""
    n = len(d)
    zz = _ZIGZAG
    min_body = MIN_RECORD_BODY_SIZE_IN_BYTES
    offs, tss, kss, kes, vns, rss, bss, res = columns
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
                tss[i] = wrap_int64(base_timestamp + delta)
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


def scan_keys_reference(data: Buffer, base_offset: int, count: int) -> KeyColumns:
    """The reference :func:`~kcompact.records.scan.scan_keys`.

    Args:
        data, base_offset, count: as for ``scan.scan_keys``.

    Returns:
        ``(offsets, keys)`` as ``scan.scan_keys`` returns them.

    Raises:
        CorruptRecordError: the records do not frame as :mod:`kcompact.records.scan` describes.
    """
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


def scan_key_digests_reference(
    data: Buffer, base_offset: int, count: int, min_offset: int
) -> tuple[bytes, bytes]:
    """Pure-Python :func:`~kcompact.records.scan.scan_key_digests`: :func:`scan_keys_reference`,
    then each wanted key through ``xxhash.xxh3_128_digest``."""
    offsets, keys = scan_keys_reference(data, base_offset, count)
    wanted = [(offset, key) for offset, key in zip(offsets, keys, strict=True)
              if key is not None and offset >= min_offset]
    kept = array("q", [offset for offset, _key in wanted])
    digests = b"".join([xxh3_128_digest(key) for _offset, key in wanted])
    return kept.tobytes(), digests
