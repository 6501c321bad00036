"""The round's optional compiled windows (``_windows.c``, built by setup.py as
``kcompact.cleaner.round._windows``) and their wrappers.

Why a module of its own: a window (a run of data batches read, decided and written in a few calls)
is the round's unit of work, so its C source sits beside the passes that drive it
(:mod:`~kcompact.cleaner.round.mapping`, :mod:`~kcompact.cleaner.round.filter_windows`); it walks
each batch's records with the scan's own C walks (``records/scan/walk.h``). The contract is
:mod:`kcompact.records.scan.accel`'s: each wrapper returns exactly what the per-batch walk would
give, or ``None``: "walk batch by batch". The switch is that module's
:data:`~kcompact.records.scan.accel.enabled` (``KCOMPACT_NO_ACCEL``), read on every call. The kernels
release the GIL over their C work (``workers.parallel`` runs a round's chunks on threads at once);
:data:`kernels` is the extension module (``None`` when it is not built; :data:`import_error` then
says why).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from kcompact.records.compression import GZIP, LZ4, SNAPPY, codec_loaded, zstd_library_version
from kcompact.records.scan import accel as scan_accel
from kcompact.records.varint import Buffer

if TYPE_CHECKING:  # numpy only names the windows' arrays here: the keyless count takes this module without it
    import numpy as np
    import numpy.typing as npt

kernels: ModuleType | None
import_error: str | None
kernels, import_error = scan_accel.load_kernels("kcompact.cleaner.round._windows")
_COMPILED_ZSTD = kernels.zstd_version() if kernels is not None else None
# the windows compress gzip with the zlib they link only where it is the zlib module's (one libz.so.1 a process)
_SAME_ZLIB = kernels is not None and kernels.zlib_version() == zlib.ZLIB_RUNTIME_VERSION

Codec = Callable[[int, bytes | memoryview], bytes]
"""``records.compression.decompress`` or ``compress``, as the kernels call it: ``(codec, data)``."""
ZstdOneCall = Callable[..., bytes]
"""A zstd decompressor's ``decompress`` (``records.compression.zstd_one_call``), called once, bounded."""
Zstd = Literal[True] | ZstdOneCall | None
"""The windows' ``zstd`` argument (:func:`zstd_codec`)."""
Blocks = tuple[Callable[[bytes], object] | None, Callable[[bytes], bytes] | None]
"""``records.compression.block_compressors()``: snappy's and lz4's block functions, as ``compress`` calls them."""


def zstd_codec(one_call: ZstdOneCall | None) -> Zstd:
    """The windows' ``zstd`` argument: True where the library compiled into the windows
    (``kcompact/_vendor/zstd``) is the loaded zstandard's own version — then the windows decompress a zstd
    batch's usual stream and compress its rebuilt records themselves, with one reused context each and
    no Python call — else ``one_call`` (``records.compression.zstd_one_call()``: None before zstandard
    is imported, so a log's first zstd batch still goes through ``decompress``, which imports it)."""
    if one_call is not None and _COMPILED_ZSTD is not None and _COMPILED_ZSTD == zstd_library_version():
        return True
    return one_call


def native_codecs() -> int:
    """The windows' ``native`` argument: bit ``1 << codec`` set for each of gzip, snappy and lz4 whose usual
    stream the windows decompress themselves (``_windows_codecs.c``: gzip through zlib, snappy's xerial
    frame, Kafka's lz4 frame; anything else goes through ``decompress``) — snappy and lz4 once their library
    is imported (``records.compression.codec_loaded``), gzip where the zlib the windows link is the zlib
    module's (then they also compress a rebuilt gzip batch themselves, as ``compress`` would)."""
    mask = 1 << GZIP if _SAME_ZLIB else 0
    for codec in (SNAPPY, LZ4):
        if codec_loaded(codec):
            mask |= 1 << codec
    return mask


INFLATED_BUDGET = 16 << 20
"""The most bytes :func:`forget_inflated` lets pass 1 keep by default (compressed and inflated together)."""


def forget_inflated(budget: int = INFLATED_BUDGET) -> None:
    """Drop the compressed batches' records pass 1 kept for pass 2 (``scan_window_key_digests`` keeps each
    one it decompressed, up to ``budget`` bytes in all, and ``scan_window_records`` takes it instead of
    decompressing the same bytes again): a round's pass 1 starts with this, so what an earlier round left is
    not held; 0 keeps nothing."""
    if kernels is not None:
        kernels.forget_inflated(budget)


def scan_window_key_digests(
    buf: Buffer, position: int, limit: int, min_offset: int, max_puts: int, base_puts: int,
    decompress: Codec | None = None, zstd: Zstd = None, native: int = 0, *, keep: bool = True,
) -> tuple[int, bytes, bytes, bytes] | None:
    """C pass 1 over a run of v2 data batches (``cleaner/round/mapping.iter_dirty_keys``), and the keyless
    count's run (``key_counts.iter_key_counts``).

    Its reference is that function's per-batch walk (``iter_batches``, ``records_bytes`` then
    :func:`~kcompact.records.scan.scan_key_digests`): the kernel stops before any batch it does not
    take as is (transactional, control, legacy, badly framed, records that do not scan, compressed
    without ``decompress`` or where it raises), and the walk takes it.

    Args:
        decompress: ``records.compression.decompress``, called as ``(codec, payload)`` for each
            compressed batch (None: the kernel takes uncompressed batches only).
        zstd: :func:`zstd_codec`'s answer: True, a zstd batch's usual stream (one frame of one block,
            or of one block and Kafka's empty last one) is decompressed in C; a callable
            (``records.compression.zstd_one_call()``), by it in one bounded call, as ``decompress``
            would; None: all through ``decompress``.
        native: :func:`native_codecs`' answer (0: gzip, snappy and lz4 all through ``decompress``).
        keep: keep each compressed batch's records for pass 2 (:func:`forget_inflated`); False where no pass 2
            follows, so that a count leaves nothing held.

    Returns:
        ``(position, offsets, digests, batches)``: where it stopped, the entries as native int64 and
        16-byte digests, and per batch reaching ``min_offset`` (put end from ``base_puts``, last
        offset, records) as native int64 triples; or None: walk batch by batch.
    """
    if kernels is None or not scan_accel.enabled:
        return None
    try:
        result: tuple[int, bytes, bytes, bytes] = kernels.scan_window_key_digests(
            buf, position, limit, min_offset, max_puts, base_puts, decompress, zstd, native, int(keep))
    except kernels.ScanError:
        return None
    return result


WindowRecords = tuple[int, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, list[bytes]]


def scan_window_records(
    buf: Buffer, position: int, limit: int, max_batches: int, max_records: int, max_bytes: int,
    protected: npt.NDArray[np.int64], upper_bound: int, decompress: Codec | None = None, zstd: Zstd = None,
    native: int = 0,
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
        zstd, native: as :func:`scan_window_key_digests`'s (a batch whose records pass 1 kept is taken
            from there whatever they say).

    Returns:
        ``(position, batches, offsets, timestamps, key_starts, key_ends, body_starts, record_ends,
        value_null, inflated)`` as the C docstring says (``inflated``: every compressed batch's
        records, decompressed, back to back in one bytes item, their positions counted as if it
        followed ``buf``; empty without a compressed batch); or None: walk batch by batch.
    """
    if kernels is None or not scan_accel.enabled:
        return None
    try:
        result: WindowRecords = kernels.scan_window_records(
            buf, position, limit, max_batches, max_records, max_bytes, protected, upper_bound,
            decompress, zstd, native)
    except kernels.ScanError:
        return None
    return result


def emit_window(
    buf: Buffer, batches: Buffer, columns: tuple[Buffer, Buffer, Buffer, Buffer], value_null: Buffer,
    kept: npt.NDArray[np.uint8], new_horizon: int, inflated: list[bytes] | None = None, compress: Codec | None = None,
    zstd: bool = False, native: int = 0, blocks: Blocks | None = None,
) -> tuple[bytes, bytes] | None:
    """C :func:`~kcompact.records.filter.filter_v2_batch` over a run of
    :func:`scan_window_records` (every batch ``DELETE_EMPTY``, its horizon as
    ``log.rules.policy.output_delete_horizon`` gives it).

    Args:
        buf, batches: the buffer and the run's ``batches``.
        columns: the run's ``(offsets, timestamps, body_starts, record_ends)``.
        value_null: the run's ``value_null``.
        kept: one byte a record, nonzero where it is kept.
        new_horizon: the horizon this round stamps (negative: none).
        inflated: the run's ``inflated`` (its compressed batches' records, one bytes item).
        compress: ``records.compression.compress``, called as ``(codec, records)`` for each
            compressed batch rebuilt (None: the run must have none).
        zstd: a zstd batch's rebuilt records compressed in C instead, as ``compress`` would
            (:func:`zstd_codec` answered True).
        native: :func:`native_codecs`' answer: with gzip's bit, a gzip batch's rebuilt records are
            compressed with zlib instead, as ``compress`` would.
        blocks: ``records.compression.block_compressors()``: a snappy or lz4 batch's rebuilt records are
            compressed through its library's block function (where not None), the framing done in C, as
            ``compress`` would.

    Returns:
        ``(output, table)``: the output batches back to back and per input batch ``(outcome, size,
        last offset, max timestamp, records kept)`` as native int64 (outcome 0 dropped, 1 copied,
        2 rebuilt); or None: filter batch by batch.
    """
    if kernels is None or not scan_accel.enabled:
        return None
    try:
        result: tuple[bytes, bytes] = kernels.emit_window(
            buf, batches, *columns, value_null, kept, new_horizon,
            [] if inflated is None else inflated, compress, zstd, native, blocks)
    except kernels.ScanError:
        return None
    return result
