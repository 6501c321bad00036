"""The offset map's optional compiled kernels (``_runs.c``, built by setup.py as
``kcompact.log.offset_map._runs``) and their wrappers.

Why a module of its own: these kernels know the offset map's runs (key columns, bucket starts, the
implied top bits), a structure of this package, so their C source sits here rather than in the
records layer. The contract is :mod:`kcompact.records.scan.accel`'s: each wrapper returns exactly
what its numpy reference returns, or ``None``: "run the reference". The switch is that module's
:data:`~kcompact.records.scan.accel.enabled` (``KCOMPACT_NO_ACCEL``), read on every call;
:data:`kernels` is the extension module (``None`` when it is not built; :data:`import_error` then
says why).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kcompact.records.scan import accel as scan_accel

kernels: ModuleType | None
import_error: str | None
kernels, import_error = scan_accel.load_kernels("kcompact.log.offset_map._runs")


def flush_puts(
    chunks: list[tuple[Any, Any, Any]], implied_bits: int, part: int = 0, parts: int = 1
) -> tuple[bytes, bytes, bytes, bytes, bytes] | None:
    """C flush of the cleaner's offset map (``cleaner/offset_map``: ``OffsetMap._flush``).

    Args:
        chunks: the pending puts in order, as ``(hi, lo, offsets)`` tuples of equal-length 1-D
            uint64, uint64 and int64 numpy arrays (read, never written).
        implied_bits: the runs' ``IMPLIED_BITS``: a key is ``hi`` and the top ``implied_bits + 24``
            bits of ``lo``.
        part, parts: only the keys whose ``hi``'s top ``log2(parts)`` bits are ``part`` (``parts``: 1, 2, 4
            or 8); the parts' columns, one after the other in part order, are the whole flush's. The kernel
            sorts without the GIL, so the parts may run on threads at once.

    Returns:
        For each distinct key, in ascending order, its last put as native ``(hi, key, mid, low,
        offsets)`` columns (uint64, uint64, uint16, uint8, int64: ``runs.Query``'s fields and the
        offset); or None: use the numpy reference (``offset_map._flush_columns_reference``).
    """
    if kernels is None or not scan_accel.enabled:
        return None
    try:
        result: tuple[bytes, bytes, bytes, bytes, bytes] = (
            kernels.flush_puts(chunks, implied_bits) if parts == 1
            else kernels.flush_puts(chunks, implied_bits, part, parts))
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
    if kernels is None or not scan_accel.enabled:
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
    if kernels is None or not scan_accel.enabled:
        return None
    try:
        result: tuple[int, int] = kernels.merge_runs_step(a, b, out, implied_bits, ia, ib, stop)
    except kernels.ScanError:
        return None
    return result
