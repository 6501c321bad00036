"""The optional compiled kernels behind :mod:`kcompact.records.scan` and ``records/filter.py``, and the switch that
picks them.

Why: the cleaner's three per-record loops (:func:`~kcompact.records.scan.scan_keys`,
:func:`~kcompact.records.scan.scan_records` and the record-section rebuild of
:func:`~kcompact.records.filter.filter_v2_batch`) cost ~4.5 s of a 2M-record clean in pure Python,
and batch headers (:func:`~kcompact.records.batch.decode_batch`, also inside ``iter_batches``)
another ~0.15 s. ``_accel.c`` (built by setup.py as ``kcompact.records.scan._accel``,
``optional=True``) does the same work in C. Pass 1 of a clean also hashes its keys there
(:func:`scan_key_digests`, XXH3-128 from the vendored xxHash in ``kcompact/_vendor/xxhash``), the
self-check walks plain output headers in one call (:func:`batch_headers`) and the log state its
producers' (:func:`batch_producers`). Legacy (magic 0/1) entries have their own kernels in
``_legacy.c`` (runs of entries as rows, kept messages written as v2 batches), wrapped by
:mod:`kcompact.records.scan.legacy_rows`. The pure-Python functions stay the reference and the only
code where no C compiler was found; tests compare the two on every input. The kernels that know the
cleaner's structures live with their owners, each with its own extension and ``accel`` module
following this switch: the offset map's runs (:mod:`kcompact.log.offset_map.accel`) and the
round's windows over runs of batches (:mod:`kcompact.cleaner.round.accel`).

Contract. Each wrapper here returns exactly what the reference returns, or ``None``: "run the
reference". The C code says ``None`` (by raising ``ScanError``) where the reference raises, and
for arguments it does not take (non-``int`` integers, numbers past int64, buffers that are not
flat bytes, indices the reference would count from the end); the reference then raises its
exact error (class, message, position) or computes the answer itself. Errors are rare, so
running the batch twice then costs nothing that matters.

Switch: :data:`enabled` is read by the scan, the filter and the cleaner's kernels on every call. It
starts true when this extension imported and the environment variable ``KCOMPACT_NO_ACCEL`` is
unset, empty or ``0`` (read once, at import); tests flip it. (The three extensions are built
together: where this one is missing, the cleaner's kernels are off too.) :data:`kernels` is the
extension module (``None`` when it is not built; :data:`import_error` then says why).
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


def load_kernels(name: str) -> tuple[ModuleType | None, str | None]:
    """The extension module ``name`` and None, or None and why it did not import (not built: no
    compiler at install time, or a source checkout). By name: the extensions have no stubs, their
    results are typed by each owner's wrappers."""
    try:
        return importlib.import_module(name), None
    except ImportError as err:
        return None, str(err)


kernels: ModuleType | None
import_error: str | None
kernels, import_error = load_kernels("kcompact.records.scan._accel")

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


def batch_headers(buf: Buffer, start: int = 0, end: int | None = None) -> tuple[int, bytes] | None:
    """C walk of a log's batch headers (``cleaner/round/verify_output``'s self-check of plain output).

    Its reference is ``iter_batches`` with ``crc_valid``: from position ``start`` (a batch boundary), while a
    batch starts before ``end`` (default: the buffer's end; a batch may end past it) and is one
    :func:`decode_batch` takes and not a control batch, per batch ``(position, base offset, last offset, max
    timestamp, CRC matches)`` as native int64 (five a batch), positions in ``buf``.

    Returns:
        ``(position, rows)``: where it stopped and the rows; or None: walk with ``iter_batches``.
    """
    if kernels is None or not enabled:
        return None
    try:
        result: tuple[int, bytes] = kernels.batch_headers(buf, start, len(buf) if end is None else end)
    except kernels.ScanError:
        return None
    return result


def crc32c(buf: Buffer, portable: bool = False) -> int | None:
    """The kernels' own CRC-32C of ``buf`` (``kcompact/_native/common.h``: the CPU's instruction where
    it has one, else tables; ``portable``: the tables), whose reference is :func:`records.crc.crc32c_package`;
    None where the kernels are not built or are switched off."""
    if kernels is None or not enabled:
        return None
    try:
        result: int = kernels.crc32c(buf, portable)
    except kernels.ScanError:
        return None
    return result


def batch_producers(buf: Buffer, start: int = 0, end: int | None = None) -> tuple[int, bytes] | None:
    """C walk of a log's batch headers for the producer state (``cleaner/state/log_state``).

    Its reference is ``iter_batches``: from position ``start`` (a batch boundary), while a batch starts
    before ``end`` (default: the buffer's end) and is one :func:`decode_batch` takes and neither a control
    nor a transactional batch, per batch ``(position, base offset, last offset, max timestamp, producer
    id)`` as native int64 (five a batch). No CRC is computed.

    Returns:
        ``(position, rows)``: where it stopped and the rows; or None: walk with ``iter_batches``.
    """
    if kernels is None or not enabled:
        return None
    try:
        result: tuple[int, bytes] = kernels.batch_producers(buf, start, len(buf) if end is None else end)
    except kernels.ScanError:
        return None
    return result


def metadata_rows(
    buf: Buffer, start: int, end: int, min_offset: int, next_offset: int, stop_at_control: bool,
    kinds: bytes,
) -> tuple[int, int, int, bytes, bytes] | None:
    """C walk of a KRaft metadata log's batches and the frames of their records' values
    (``config/kraft/metadata_state``), so that only the records the replay reads cost a Python call.

    Its reference is ``iter_batches``, ``decode_records`` and the frame of ``decode_metadata_record``, batch by
    batch: from position ``start`` (a batch boundary) while a batch starts before ``end``, it takes each
    uncompressed v2 batch whose records all decode, each value starting with frame version 1, its api key and
    version. It passes over a batch whose last offset is below ``min_offset`` unread, and stops before a batch
    it does not take, before one whose base offset is past ``next_offset`` (a gap), and with
    ``stop_at_control`` before a control batch (else a control batch only moves ``next_offset``). Per record
    at or above ``min_offset`` of a data batch, by ``kinds[api key]`` (256 bytes; a larger api key counts as
    unknown): 255, a row of seven native int64 (offset, api key, version, value start, value end, unknown
    entries before it, batch position); ``v`` < 255, nothing below version ``v``, else an unknown entry (the
    api key, one native int64).

    Returns:
        ``(where it stopped, next_offset after the batches taken, how many it took, rows, unknown)``; or
        None: read with the reference.
    """
    if kernels is None or not enabled:
        return None
    try:
        result: tuple[int, int, int, bytes, bytes] = kernels.metadata_rows(
            buf, start, end, min_offset, next_offset, stop_at_control, kinds)
    except kernels.ScanError:
        return None
    return result
