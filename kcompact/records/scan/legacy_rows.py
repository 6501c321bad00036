"""Runs of legacy (magic 0/1) entries as rows of int64 columns: the cleaner's walks over legacy data.

Why: a legacy log holds one message per entry, and every walk of the cleaner over it (the log state,
the roll's indexes, pass 1's keys, pass 2's decisions) cost one :class:`~kcompact.records.legacy.LegacyEntry`
per message (~5 us in Python: 12.9 s for 1.3 MiB). :func:`legacy_entries` reads a run of consecutive
entries in one C call (``_legacy.c``), each into :data:`ROW_FIELDS` int64 and, with
:data:`LEGACY_DIGESTS`, the XXH3-128 digest of its key (canonical, big-endian: what the offset map
puts, as :func:`~kcompact.records.scan.scan_key_digests` does for v2 keys).

A run stops before the first entry it does not take: one starting at or past ``limit``; once
``max_entries`` are taken; fewer than 17 bytes left (a zero-padded tail or a torn write); a magic
other than 0 or 1 (a v2 batch); an entry ``decode_legacy_entry`` or ``iter_batches`` refuses (size,
lengths); with :data:`LEGACY_CRC`, one whose CRC-32 fails; without :data:`LEGACY_COMPRESSED`, a
compressed wrapper. The caller's batch-by-batch walk takes that entry and says what is wrong with it,
so a run never raises on data.

Row fields, in order (positions are in ``buf``; ``-1`` start and end for a null key or value)::

    position  offset  size_in_bytes  magic  attributes  timestamp  key_start  key_end  value_start  value_end

:func:`legacy_entries_reference` is the same walk in Python over ``decode_legacy_entry``: the reference
the C code is tested against. :func:`legacy_emit` writes kept plain messages as the v2 batches of one
record the cleaner turns them into (reference: :func:`legacy_emit_reference`, ``encode_batch``'s).
:func:`wrapper_columns` reads a compressed wrapper's inner messages the
same way, as columns (its reference is ``legacy.legacy_records``).
"""

from __future__ import annotations

from array import array

from xxhash import xxh3_128_digest

from kcompact.errors import CorruptDataError, KcompactError
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.compression import decompress
from kcompact.records.legacy import (
    ENTRY_HEADER_SIZE,
    MAGIC_POSITION,
    TIMESTAMP_STRUCT,
    TIMESTAMP_TYPE_MASK,
    LegacyEntry,
    decode_legacy_entry,
)
from kcompact.records.record import Record
from kcompact.records.scan import accel
from kcompact.records.varint import Buffer
from kcompact.value import frozen

LEGACY_DIGESTS = 1  # flag: the key digests too
LEGACY_CRC = 2  # flag: stop before an entry whose CRC fails
LEGACY_COMPRESSED = 4  # flag: take compressed wrappers (else stop before them)

ROW_FIELDS = 10
POSITION, OFFSET, SIZE, MAGIC, ATTRIBUTES, TIMESTAMP, KEY_START, KEY_END, VALUE_START, VALUE_END = (
    range(ROW_FIELDS))
_PREFIX = MAGIC_POSITION + 1  # offset, size, crc, magic: the framing walk's minimum
_NO_DIGEST = bytes(16)
_KEY_LENGTH_AT = (ENTRY_HEADER_SIZE, ENTRY_HEADER_SIZE + TIMESTAMP_STRUCT.size)  # by magic

LegacyRun = tuple[int, bytes, bytes]
"""``(reached, rows, digests)``: where the run stopped, its rows as native int64 (:data:`ROW_FIELDS`
an entry) and, with :data:`LEGACY_DIGESTS`, 16 bytes an entry (zeros for a null key)."""


def legacy_entries(
    buf: Buffer, position: int, limit: int, max_entries: int, flags: int
) -> LegacyRun | None:
    """The run of legacy entries from ``position``, in C (module docstring).

    Args:
        buf: a segment's bytes (or a wrapper's decompressed value).
        position: an entry boundary.
        limit: entries starting here or later are not taken.
        max_entries: at most this many are taken.
        flags: :data:`LEGACY_DIGESTS`, :data:`LEGACY_CRC`, :data:`LEGACY_COMPRESSED`, or'ed.

    Returns:
        The run, exactly as :func:`legacy_entries_reference` gives it; None without the C kernels
        (or for arguments they decline): walk entry by entry.
    """
    if accel.kernels is None or not accel.enabled:
        return None
    try:
        run: LegacyRun = accel.kernels.legacy_entries(buf, position, limit, max_entries, flags)
    except accel.kernels.ScanError:
        return None
    return run


def legacy_entries_reference(
    buf: Buffer, position: int, limit: int, max_entries: int, flags: int
) -> LegacyRun:
    """The pure-Python :func:`legacy_entries` (same arguments, same run)."""
    view = memoryview(buf)
    rows = array("q")
    digests: list[bytes] = []
    while position < limit and len(view) - position >= _PREFIX and len(digests) < max_entries:
        if view[position + MAGIC_POSITION] not in (0, 1):
            break
        try:
            entry = decode_legacy_entry(view, position)
        except CorruptDataError:
            break
        if entry.compression and not flags & LEGACY_COMPRESSED:
            break
        if flags & LEGACY_CRC and not entry.crc_valid():
            break
        key_start = position + _KEY_LENGTH_AT[entry.magic] + 4
        key_at = (-1, -1) if entry.key is None else (key_start, key_start + len(entry.key))
        end = position + entry.size_in_bytes
        value_at = (-1, -1) if entry.value is None else (end - len(entry.value), end)
        rows.extend([position, entry.offset, entry.size_in_bytes, entry.magic, entry.attributes,
                     entry.timestamp, *key_at, *value_at])
        digests.append(_NO_DIGEST if entry.key is None else xxh3_128_digest(bytes(entry.key)))
        position += entry.size_in_bytes
    return position, rows.tobytes(), b"".join(digests) if flags & LEGACY_DIGESTS else b""



@frozen
class WrapperColumns:
    """The inner messages of a compressed wrapper as columns, read by one C walk of its decompressed value.

    Offsets and timestamps are what :func:`~kcompact.records.legacy.legacy_records` gives each inner
    message (absolute; a LogAppendTime wrapper's time for its v1 messages); key and value positions are
    in :attr:`data` (-1 for null); ``digests`` holds each key's XXH3-128 digest (zeros for a null key).
    """

    offsets: array[int]
    timestamps: array[int]
    key_starts: array[int]
    key_ends: array[int]
    value_starts: array[int]
    value_ends: array[int]
    digests: bytes
    data: bytes

    def record(self, i: int) -> Record:
        """Inner message ``i`` as the :class:`Record` ``legacy_records`` gives."""
        key = None if self.key_starts[i] < 0 else self.data[self.key_starts[i] : self.key_ends[i]]
        value = (None if self.value_starts[i] < 0
                 else self.data[self.value_starts[i] : self.value_ends[i]])
        return Record(self.offsets[i], self.timestamps[i], key, value)


def wrapper_columns(entry: LegacyEntry) -> WrapperColumns | None:
    """A compressed wrapper's inner messages as :class:`WrapperColumns`, without a Python object each.

    Args:
        entry: a decoded v0/v1 entry.

    Returns:
        The columns; None for an uncompressed entry, without the C kernels, and wherever
        :func:`~kcompact.records.legacy.legacy_records` would raise or decide otherwise (a null or
        undecompressable value, no or a malformed or a compressed inner message, a wrapper offset below
        the last inner offset, offsets past the int64 range): call it instead.
    """
    if entry.compression == 0 or entry.value is None or accel.kernels is None or not accel.enabled:
        return None
    try:
        data = decompress(entry.compression, entry.value, magic=entry.magic)
    except KcompactError:
        return None
    run = legacy_entries(data, 0, len(data), len(data), LEGACY_DIGESTS)
    if run is None or run[0] != len(data) or not run[1]:
        return None
    rows = array("q", run[1])
    inner = rows[OFFSET::ROW_FIELDS]
    base = 0
    if entry.magic == 1 and entry.offset != 0:
        if entry.offset < inner[-1]:
            return None
        base = entry.offset - inner[-1]
    timestamps = rows[TIMESTAMP::ROW_FIELDS]
    if entry.magic == 1 and entry.timestamp_type == 1:  # LogAppendTime: lent to the v1 messages
        timestamps = array("q", [entry.timestamp if magic == 1 else ts
                                 for magic, ts in zip(rows[MAGIC::ROW_FIELDS], timestamps, strict=True)])
    try:
        offsets = array("q", [base + offset for offset in inner]) if base else inner
    except OverflowError:
        return None
    return WrapperColumns(offsets, timestamps, rows[KEY_START::ROW_FIELDS], rows[KEY_END::ROW_FIELDS],
                          rows[VALUE_START::ROW_FIELDS], rows[VALUE_END::ROW_FIELDS], run[2], data)


def legacy_emit(buf: Buffer, rows: Buffer, horizon: int) -> tuple[bytes, bytes] | None:
    """Kept plain messages as the v2 batches ``records.filter.filter_legacy_entry`` writes, in C.

    Args:
        buf: the bytes the rows were read from.
        rows: the kept messages' rows (:func:`legacy_entries`' layout; uncompressed entries only).
        horizon: the delete horizon a batch holding a kept tombstone carries (negative: none).

    Returns:
        ``(batches, sizes)``: the batches back to back and their sizes (native int64), exactly as
        :func:`legacy_emit_reference`; None without the C kernels: call it.
    """
    if accel.kernels is None or not accel.enabled:
        return None
    try:
        emitted: tuple[bytes, bytes] = accel.kernels.legacy_emit(buf, rows, horizon)
    except accel.kernels.ScanError:
        return None
    return emitted


def legacy_emit_reference(buf: Buffer, rows: Buffer, horizon: int) -> tuple[bytes, bytes]:
    """The pure-Python :func:`legacy_emit`: ``filter_legacy_entry``'s v2 batch of one record for each."""
    view, columns = memoryview(buf), array("q", bytes(rows))
    batches: list[bytes] = []
    for at in range(0, len(columns), ROW_FIELDS):
        row = columns[at : at + ROW_FIELDS]
        key = None if row[KEY_START] < 0 else bytes(view[row[KEY_START] : row[KEY_END]])
        value = None if row[VALUE_START] < 0 else bytes(view[row[VALUE_START] : row[VALUE_END]])
        log_append = row[MAGIC] == 1 and bool(row[ATTRIBUTES] & TIMESTAMP_TYPE_MASK)
        batches.append(encode_batch(
            [Record(row[OFFSET], row[TIMESTAMP], key, value)], base_offset=row[OFFSET],
            timestamp_type=int(log_append),  # TimestampType: 1 LogAppendTime, 0 CreateTime
            delete_horizon_ms=horizon if value is None and horizon >= 0 else None,
            max_timestamp=row[TIMESTAMP] if log_append else None))
    return b"".join(batches), array("q", map(len, batches)).tobytes()
