"""The optional compiled kernels behind :mod:`kcompact.records.scan` and ``records/filter.py``, and the switch that picks them.

Why: the cleaner's three per-record loops (:func:`~kcompact.records.scan.scan_keys`,
:func:`~kcompact.records.scan.scan_records` and the record-section rebuild of
:func:`~kcompact.records.filter.filter_v2_batch`) cost ~4.5 s of a 2M-record clean in pure
Python, and batch headers (:func:`~kcompact.records.batch.decode_batch`, also inside
``iter_batches``) another ~0.15 s. ``_accel.c`` (built by setup.py as
``kcompact.records.scan._accel``, ``optional=True``) does the same work in C. Pass 1 of a clean also
hashes its keys there (:func:`scan_key_digests`, XXH3-128 from the vendored ``xxhash.h``), walks
runs of data batches in one call (:func:`scan_window_key_digests`, compressed ones decompressed
through the caller's function), and the offset map sorts its puts there (:func:`flush_puts`). Pass 2
reads and writes windows of data batches in two calls
(:func:`scan_window_records`, :func:`emit_window`), and the self-check walks plain output headers
in one (:func:`batch_headers`). Legacy (magic 0/1) entries have their own kernels in ``_legacy.c``
(runs of entries as rows, kept messages written as v2 batches), wrapped by
:mod:`kcompact.records.scan.legacy_rows`. The pure-Python functions stay the reference and the only code where no C
compiler was found; tests compare the two on every input.

Contract. Each wrapper here returns exactly what the reference returns, or ``None``: "run the
reference". The C code says ``None`` (by raising ``ScanError``) where the reference raises, and
for arguments it does not take (non-``int`` integers, numbers past int64, buffers that are not
flat bytes, indices the reference would count from the end); the reference then raises its
exact error (class, message, position) or computes the answer itself. Errors are rare, so
running the batch twice then costs nothing that matters.

Switch: :data:`enabled` is read by the scan and the filter on every call. It starts true when the
extension imported and the environment variable ``KCOMPACT_NO_ACCEL`` is unset, empty or ``0``
(read once, at import); tests flip it. :data:`kernels` is the extension module (``None`` when it
is not built; :data:`import_error` then says why).
"""

from __future__ import annotations

import importlib
import os
from array import array
from collections.abc import Sequence
from dataclasses import fields
from types import ModuleType
from typing import Any, TypeVar

from kcompact.records.varint import Buffer

NO_ACCEL_ENV = "KCOMPACT_NO_ACCEL"

kernels: ModuleType | None
import_error: str | None
try:  # by name: the extension has no stub, its results are typed by the wrappers below
    kernels = importlib.import_module("kcompact.records.scan._accel")
    import_error = None
except ImportError as err:  # not built: no compiler at install time, or a source checkout
    kernels = None
    import_error = str(err)

enabled: bool = kernels is not None and os.environ.get(NO_ACCEL_ENV, "") in ("", "0")

T = TypeVar("T")
KeyColumns = tuple["array[int]", list[bytes | None]]
ScannedColumns = tuple[  # RecordColumns' fields after count, in order
    "array[int]", "array[int]", "array[int]", "array[int]", bytearray, "array[int]", "array[int]",
    "array[int]", bytes,
]


def scan_keys(data: Buffer, base_offset: int, count: int) -> KeyColumns | None:
    """C :func:`~kcompact.records.scan.scan_keys`.

    Args:
        data, base_offset, count: as for the reference.

    Returns:
        ``(offsets, keys)`` exactly as the reference, or None: run the reference.
    """
    if kernels is None:
        return None
    try:
        result: KeyColumns = kernels.scan_keys(data, base_offset, count)
    except kernels.ScanError:
        return None
    return result


def scan_key_digests(
    data: Buffer, base_offset: int, count: int, min_offset: int
) -> tuple[bytes, bytes] | None:
    """C :func:`~kcompact.records.scan.scan_key_digests` (XXH3-128 from the vendored ``xxhash.h``).

    Args:
        data, base_offset, count, min_offset: as for the reference.

    Returns:
        ``(offsets, digests)`` exactly as the reference, or None: run the reference.
    """
    if kernels is None:
        return None
    try:
        result: tuple[bytes, bytes] = kernels.scan_key_digests(data, base_offset, count, min_offset)
    except kernels.ScanError:
        return None
    return result


def scan_records(
    data: Buffer, base_offset: int, base_timestamp: int, count: int, log_append_time: int | None
) -> ScannedColumns | None:
    """C :func:`~kcompact.records.scan.scan_records`, without the :class:`RecordColumns` wrapper.

    Args:
        data, base_offset, base_timestamp, count, log_append_time: as for the reference.

    Returns:
        ``(offsets, timestamps, key_starts, key_ends, value_null, record_starts, body_starts,
        record_ends, data)``, the reference's columns in field order; or None: run the reference.
    """
    if kernels is None:
        return None
    try:
        result: ScannedColumns = kernels.scan_records(
            data, base_offset, base_timestamp, count, log_append_time
        )
    except kernels.ScanError:
        return None
    return result


def rebuild_records(
    data: Buffer,
    columns: tuple[array[int], array[int], array[int], array[int]],
    keep: Sequence[int],
    base_offset: int,
    horizon: int | None,
) -> tuple[bytes, int, int] | None:
    """C record section of :func:`~kcompact.records.filter.filter_v2_batch`'s rebuild.

    Args:
        data: the scanned record bytes (``RecordColumns.data``).
        columns: ``(body_starts, record_ends, offsets, timestamps)`` of the scan.
        keep: indices of the kept records.
        base_offset: the batch's base offset.
        horizon: the delete horizon the output carries, or None.

    Returns:
        ``(records, base_timestamp, max_timestamp)``: the kept records re-encoded (attributes 0,
        deltas against ``base_offset`` and the base timestamp, minimal varints, key/value/headers
        copied), the base timestamp used (the horizon, else the first kept record's) and the
        largest kept timestamp (at least -1); or None: run the reference.
    """
    if kernels is None:
        return None
    try:
        result: tuple[bytes, int, int] = kernels.rebuild_records(
            data, *columns, keep, base_offset, horizon
        )
    except kernels.ScanError:
        return None
    return result


def scan_window_key_digests(
    buf: Buffer, position: int, limit: int, min_offset: int, max_puts: int, base_puts: int,
    decompress: Any = None, zstd: Any = None,
) -> tuple[int, bytes, bytes, bytes] | None:
    """C pass 1 over a run of v2 data batches (``cleaner/round/mapping.iter_dirty_keys``).

    Its reference is that function's per-batch walk (``iter_batches``, ``records_bytes`` then
    :func:`~kcompact.records.scan.scan_key_digests`): the kernel stops before any batch it does not
    take as is (transactional, control, legacy, badly framed, records that do not scan, compressed
    without ``decompress`` or where it raises), and the walk takes it.

    Args:
        decompress: ``records.compression.decompress``, called as ``(codec, payload)`` for each
            compressed batch (None: the kernel takes uncompressed batches only).
        zstd: ``records.compression.zstd_one_call()``: a zstd batch's usual stream (one frame of one
            block) is decompressed by it in one bounded call, as ``decompress`` would (None: all
            through ``decompress``).

    Returns:
        ``(position, offsets, digests, batches)``: where it stopped, the entries as native int64 and
        16-byte digests, and per batch reaching ``min_offset`` (put end from ``base_puts``, last
        offset, records) as native int64 triples; or None: walk batch by batch.
    """
    if kernels is None or not enabled:
        return None
    try:
        result: tuple[int, bytes, bytes, bytes] = kernels.scan_window_key_digests(
            buf, position, limit, min_offset, max_puts, base_puts, decompress, zstd)
    except kernels.ScanError:
        return None
    return result


def member_slots(cls: Any) -> tuple[object, ...]:
    """The slot descriptors of a ``slots=True`` dataclass, in field order (for decode_batch)."""
    return tuple(vars(cls)[field.name] for field in fields(cls))


def decode_batch(
    buf: Buffer, position: int, cls: type[T], slots: tuple[object, ...]
) -> T | None:
    """C :func:`~kcompact.records.batch.decode_batch` for a well-formed v2 batch header.

    Used by ``iter_batches`` too: it accepts only a batch the framing walk would also accept
    (magic 2, sizes inside the data), so the walk can skip its own checks for it.

    Args:
        buf, position: as for the reference.
        cls: ``RecordBatch`` (given, not imported: batch.py imports this module).
        slots: ``member_slots(cls)``; the instance is filled through them, as the frozen
            dataclass's own ``__init__`` does, without its Python frames.

    Returns:
        The batch, equal to the reference's; or None: run the reference.
    """
    if kernels is None:
        return None
    try:
        batch: T = kernels.decode_batch(buf, position, cls, slots)
    except kernels.ScanError:
        return None
    return batch


WindowRecords = tuple[int, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, list[bytes]]


def scan_window_records(
    buf: Buffer, position: int, limit: int, max_batches: int, max_records: int, max_bytes: int,
    protected: Any, upper_bound: int, crc: Any, decompress: Any = None, zstd: Any = None,
) -> WindowRecords | None:
    """C pass 2 walk over a run of v2 data batches (``cleaner/round/filter_windows``).

    Its reference is pass 2's per-batch walk (``iter_batches``, the CRC check, the batch decision,
    ``records_bytes``, :func:`~kcompact.records.scan.scan_records`): the kernel stops before any
    batch it does not take as is (transactional, control, empty, legacy, badly framed, a bad CRC,
    records that do not scan, a last offset in ``protected``, a next offset equal to
    ``upper_bound``, compressed without ``decompress`` or where it raises), and the walk takes it.

    Args:
        decompress: ``records.compression.decompress``, called as ``(codec, payload)`` for each
            compressed batch (None: the kernel takes uncompressed batches only).
        zstd: ``records.compression.zstd_one_call()``: a zstd batch's usual stream (one frame of one
            block) is decompressed by it in one bounded call, as ``decompress`` would (None: all
            through ``decompress``).

    Returns:
        ``(position, batches, offsets, timestamps, key_starts, key_ends, body_starts, record_ends,
        value_null, inflated)`` as the C docstring says (``inflated``: each compressed batch's
        records, decompressed, their positions counted as if the items followed ``buf``); or None:
        walk batch by batch.
    """
    if kernels is None or not enabled:
        return None
    try:
        result: WindowRecords = kernels.scan_window_records(
            buf, position, limit, max_batches, max_records, max_bytes, protected, upper_bound, crc,
            decompress, zstd)
    except kernels.ScanError:
        return None
    return result


def emit_window(
    buf: Buffer, batches: Buffer, columns: tuple[Buffer, Buffer, Buffer, Buffer], value_null: Buffer,
    kept: Any, new_horizon: int, crc: Any, inflated: list[bytes] | None = None, compress: Any = None,
) -> tuple[bytes, bytes] | None:
    """C :func:`~kcompact.records.filter.filter_v2_batch` over a run of
    :func:`scan_window_records` (every batch ``DELETE_EMPTY``, its horizon as
    ``cleaner.rules.policy.output_delete_horizon`` gives it).

    Args:
        buf, batches: the buffer and the run's ``batches``.
        columns: the run's ``(offsets, timestamps, body_starts, record_ends)``.
        value_null: the run's ``value_null``.
        kept: one byte a record, nonzero where it is kept (any flat byte buffer: numpy's too).
        new_horizon: the horizon this round stamps (negative: none).
        crc: ``records.crc.crc32c``.
        inflated: the run's ``inflated`` (its compressed batches' records).
        compress: ``records.compression.compress``, called as ``(codec, records)`` for each
            compressed batch rebuilt (None: the run must have none).

    Returns:
        ``(output, table)``: the output batches back to back and per input batch ``(outcome, size,
        last offset, max timestamp, records kept)`` as native int64 (outcome 0 dropped, 1 copied,
        2 rebuilt); or None: filter batch by batch.
    """
    if kernels is None or not enabled:
        return None
    try:
        result: tuple[bytes, bytes] = kernels.emit_window(
            buf, batches, *columns, value_null, kept, new_horizon, crc,
            [] if inflated is None else inflated, compress)
    except kernels.ScanError:
        return None
    return result


def batch_headers(buf: Buffer, crc: Any) -> tuple[int, bytes] | None:
    """C walk of a log's batch headers (``cleaner/round/verify_output``'s self-check of plain output).

    Its reference is ``iter_batches`` with ``crc_valid``: from position 0, while each batch is one
    :func:`decode_batch` takes and not a control batch, per batch ``(position, base offset, last
    offset, max timestamp, CRC matches)`` as native int64 (five a batch).

    Returns:
        ``(position, rows)``: where it stopped and the rows; or None: walk with ``iter_batches``.
    """
    if kernels is None or not enabled:
        return None
    try:
        result: tuple[int, bytes] = kernels.batch_headers(buf, crc)
    except kernels.ScanError:
        return None
    return result


def flush_puts(
    chunks: list[tuple[Any, Any, Any]], implied_bits: int
) -> tuple[bytes, bytes, bytes, bytes, bytes] | None:
    """C flush of the cleaner's offset map (``cleaner/offset_map``: ``OffsetMap._flush``).

    Args:
        chunks: the pending puts in order, as ``(hi, lo, offsets)`` tuples of equal-length 1-D
            uint64, uint64 and int64 numpy arrays (read, never written).
        implied_bits: the runs' ``IMPLIED_BITS``: a key is ``hi`` and the top ``implied_bits + 24``
            bits of ``lo``.

    Returns:
        For each distinct key, in ascending order, its last put as native ``(hi, key, mid, low,
        offsets)`` columns (uint64, uint64, uint16, uint8, int64: ``runs.Query``'s fields and the
        offset); or None: use the numpy reference (``offset_map._flush_columns_reference``).
    """
    if kernels is None or not enabled:
        return None
    try:
        result: tuple[bytes, bytes, bytes, bytes, bytes] = kernels.flush_puts(chunks, implied_bits)
    except kernels.ScanError:
        return None
    return result


def fold_into_run(
    run: tuple[Any, Any, Any, int, int], query: tuple[Any, Any, Any, Any], offsets: Any
) -> tuple[int, bytes, bytes, bytes, bytes, bytes] | None:
    """C step of the offset map's flush for one run (``cleaner/offset_map``: ``OffsetMap._flush``).

    Args:
        run: ``(key, rest, starts, bits, base)`` of a ``runs.Run``, ``rest`` viewed as uint8
            (written in place).
        query: the flush's distinct keys sorted, as ``runs.Query``'s ``(top, key, mid, low)``.
        offsets: their offsets (int64).

    Returns:
        ``(found, top, key, mid, low, offsets)``: how many of the keys the run holds (their
        offsets now the run's), and the other keys' columns as native bytes; or None, nothing
        written: use the numpy reference (``offset_map._fold_into_reference``).
    """
    if kernels is None or not enabled:
        return None
    try:
        result: tuple[int, bytes, bytes, bytes, bytes, bytes] = kernels.fold_into_run(
            *run, *query, offsets)
    except kernels.ScanError:
        return None
    return result


RunColumns = tuple[Any, Any, Any, int, int]


def merge_runs_step(
    a: RunColumns, b: RunColumns, out: RunColumns, implied_bits: int, ia: int, ib: int, stop: int
) -> tuple[int, int] | None:
    """C step of the offset map's ``merge_runs`` (``cleaner/offset_map/runs.py``).

    Args:
        a, b: the runs merged, as ``(key, rest, starts, bits, base)`` (``rest`` viewed as uint8).
        out: the output run the same way, ``key`` its padded array, ``starts`` zero (it counts
            each bucket's keys at ``starts[1 + bucket]``).
        implied_bits: the runs' ``IMPLIED_BITS``.
        ia, ib: the keys of ``a`` and ``b`` already written (slots ``0 : ia + ib``).
        stop: write output slots up to this one.

    Returns:
        ``(ia, ib)`` after the step; or None, nothing written: use the numpy reference
        (``runs._merge_runs_reference``).
    """
    if kernels is None or not enabled:
        return None
    try:
        result: tuple[int, int] = kernels.merge_runs_step(a, b, out, implied_bits, ia, ib, stop)
    except kernels.ScanError:
        return None
    return result


def batch_producers(buf: Buffer) -> tuple[int, bytes] | None:
    """C walk of a log's batch headers for the producer state (``cleaner/state/log_state``).

    Its reference is ``iter_batches``: from position 0, while each batch is one :func:`decode_batch`
    takes and neither a control nor a transactional batch, per batch ``(position, base offset, last
    offset, max timestamp, producer id)`` as native int64 (five a batch). No CRC is computed.

    Returns:
        ``(position, rows)``: where it stopped and the rows; or None: walk with ``iter_batches``.
    """
    if kernels is None or not enabled:
        return None
    try:
        result: tuple[int, bytes] = kernels.batch_producers(buf)
    except kernels.ScanError:
        return None
    return result
