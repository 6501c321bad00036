"""The offset index ``<base>.index``: sparse map from offsets to batch positions (Kafka's ``OffsetIndex``).

A read of offset *O* binary-searches this file for the largest entry whose offset is ≤ *O* and scans
the ``.log`` forward from that entry's position, so every entry must name a batch start and that
batch's *last* offset (Kafka indexes ``batch.lastOffset``). A subset of correct entries is still a
valid index; a wrong entry breaks reads. Kafka trusts an existing file without checking it at load
(``LogLoader.load``), reads every 8-byte slot of it as an entry — so a preallocated file that was
never trimmed yields zero-filled "entries" — and only sanity-checks the last offset.
:func:`check_offset_index` reports all of that.

Layout: no header, no checksum; ``entries × 8`` bytes, big-endian::

    0  int32 relative_offset   offset - base_offset, 0..2^31-1
    4  int32 position          byte position of the batch in <base>.log
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterable, Sequence

from kcompact.errors import CorruptIndexError
from kcompact.records.varint import INT32_MAX, INT64_MAX, INT64_MIN
from kcompact.segment.fixed_index import (
    MAX_RELATIVE_OFFSET,
    Finding,
    check_last_offset,
    iter_slots,
    read_index_file,
    report_zero_slots,
    require_fits_segment,
    trailing_zero_slots,
    zero_tail_slots,
)
from kcompact.value import frozen

__all__ = [
    "MAX_POSITION",
    "OFFSET_INDEX_ENTRY",
    "OFFSET_INDEX_ENTRY_SIZE",
    "OffsetIndexEntry",
    "check_offset_index",
    "check_offset_lookups",
    "decode_offset_index",
    "encode_offset_index",
    "encode_offset_index_columns",
    "lookup",
    "read_offset_index",
    "split_offset_index",
]

OFFSET_INDEX_ENTRY = struct.Struct(
    ">"
    "i"  # relative_offset: offset - base_offset
    "i"  # position: byte position of the batch in the .log
)
OFFSET_INDEX_ENTRY_SIZE = OFFSET_INDEX_ENTRY.size  # 8
_OFFSET_INDEX_DTYPE = [("relative_offset", ">i4"), ("position", ">i4")]  # OFFSET_INDEX_ENTRY for numpy
MAX_POSITION = INT32_MAX  # a position is a Java int


@frozen
class OffsetIndexEntry:
    """One offset index entry: the batch at ``position`` in the ``.log`` ends at ``offset``."""

    offset: int
    position: int


def decode_offset_index(data: bytes | memoryview, base_offset: int) -> list[OffsetIndexEntry]:
    """Decode the bytes of an offset index, every slot as Kafka would read it.

    Args:
        data: the whole file.
        base_offset: the segment's base offset (the number in the file name).

    Returns:
        The entries with absolute offsets, in file order, including any zero-filled slots.

    Raises:
        CorruptIndexError: the length is not a multiple of 8 (``position`` = the partial slot).
    """
    return [
        OffsetIndexEntry(offset=base_offset + relative, position=position)
        for relative, position in iter_slots(data, OFFSET_INDEX_ENTRY, "offset index")
    ]


def split_offset_index(data: bytes | memoryview, base_offset: int) -> tuple[list[OffsetIndexEntry], int]:
    """Decode an offset index up to its trailing zero-filled slots, and count those.

    A preallocated file that was never trimmed is mostly zero slots; decoding only what comes before them
    keeps its check proportional to its real entries. ``check_offset_index(entries, base, zero_slots=n)``
    says of the pair what it says of the whole file.

    Args:
        data: the whole file.
        base_offset: the segment's base offset.

    Returns:
        ``(entries, zero_slots)``: the entries before the trailing all-zero slots, and how many of
        those there are.

    Raises:
        CorruptIndexError: the length is not a multiple of 8 (``position`` = the partial slot).
    """
    zeros = zero_tail_slots(data, OFFSET_INDEX_ENTRY_SIZE)
    return decode_offset_index(data[: len(data) - zeros * OFFSET_INDEX_ENTRY_SIZE], base_offset), zeros


def encode_offset_index(entries: Iterable[OffsetIndexEntry], base_offset: int) -> bytes:
    """Encode entries as a trimmed offset index file (no preallocated slots).

    Args:
        entries: entries with absolute offsets, in file order.
        base_offset: the segment's base offset.

    Returns:
        ``8 × len(entries)`` bytes.

    Raises:
        CorruptIndexError: an offset outside ``base_offset .. base_offset + 2^31 - 1`` or a position
            outside ``0 .. 2^31 - 1`` (``offset``/``position`` name the entry).
    """
    out = bytearray()
    for number, entry in enumerate(entries):
        _require_encodable(number, entry.offset, entry.position, base_offset)
        out += OFFSET_INDEX_ENTRY.pack(entry.offset - base_offset, entry.position)
    return bytes(out)


def encode_offset_index_columns(offsets: Sequence[int], positions: Sequence[int], base_offset: int) -> bytes:
    """:func:`encode_offset_index` of the entries ``(offsets[i], positions[i])``, by numpy: the cleaner's
    index builder keeps its entries as int64 columns (``array('q')``), and a cleaned segment has thousands.

    Args:
        offsets: the entries' absolute offsets, in file order (int64).
        positions: their positions (int64), as many.
        base_offset: the segment's base offset.

    Returns:
        ``8 × len(offsets)`` bytes, the same as :func:`encode_offset_index`'s.

    Raises:
        CorruptIndexError: as :func:`encode_offset_index`, for the first entry that fails.
    """
    import numpy as np  # the callers have it loaded

    offset = np.asarray(offsets, dtype=np.int64)
    position = np.asarray(positions, dtype=np.int64)
    low, high = max(base_offset, INT64_MIN), min(base_offset + MAX_RELATIVE_OFFSET, INT64_MAX)
    bad = (offset < low) | (offset > high) | (position < 0) | (position > MAX_POSITION)
    if bad.any():
        number = int(bad.argmax())
        _require_encodable(number, offsets[number], positions[number], base_offset)
    out = np.empty(len(offset), dtype=_OFFSET_INDEX_DTYPE)
    out["relative_offset"] = offset - base_offset
    out["position"] = position
    return out.tobytes()


def _require_encodable(number: int, offset: int, position: int, base_offset: int) -> None:
    require_fits_segment("offset index", number, offset, base_offset)
    if not 0 <= position <= MAX_POSITION:
        raise CorruptIndexError(
            f"offset index entry {number} has an impossible position; expected "
            f"0..{MAX_POSITION}, found {position}",
            offset=offset,
        )


def read_offset_index(path: str | os.PathLike[str], base_offset: int) -> list[OffsetIndexEntry]:
    """Read an offset index file (see :func:`decode_offset_index`).

    Args:
        path: the ``.index`` file (``.index.cleaned`` / ``.swap`` work too).
        base_offset: the segment's base offset.

    Returns:
        Every slot of the file as an entry.

    Raises:
        FileNotFoundError: the file does not exist (callers decide what a missing index means).
        CorruptIndexError: the file's length is not a multiple of 8; the error names the file.
    """
    return read_index_file(path, lambda data: decode_offset_index(data, base_offset))



def lookup(entries: Sequence[OffsetIndexEntry], target_offset: int) -> int:
    """Where to start scanning the ``.log`` for ``target_offset`` (Kafka's ``OffsetIndex.lookup``).

    Args:
        entries: a segment's offset index entries, ascending.
        target_offset: the absolute offset sought.

    Returns:
        The position of the largest entry whose offset is ≤ ``target_offset``, or 0 when there
        is none.
    """
    found = lookup_entry(entries, target_offset)
    return 0 if found is None else found[1].position


def lookup_entry(entries: Sequence[OffsetIndexEntry],
                 target_offset: int) -> tuple[int, OffsetIndexEntry] | None:
    """The largest entry whose offset is ≤ ``target_offset``, with its number; None when there is none.

    Args:
        entries: a segment's offset index entries, ascending.
        target_offset: the absolute offset sought.
    """
    slot = bisect.bisect_right(entries, target_offset, key=lambda entry: entry.offset)
    return (slot - 1, entries[slot - 1]) if slot else None


def check_offset_index(
    entries: Sequence[OffsetIndexEntry],
    base_offset: int,
    *,
    log_batches: Sequence[tuple[int, int]] | None = None,
    zero_slots: int = 0,
) -> list[str]:
    """Everything wrong with an offset index, in words (empty list: nothing found).

    Checks Kafka's own sanity rule (a non-empty index must end at an offset ≥ the base offset),
    trailing zero-filled slots of a preallocated file that was never trimmed, offsets below the
    base, negative positions, strictly increasing offsets and positions, and — given the ``.log``'s
    batches — that every entry names a batch start whose last offset is the entry's offset.

    Args:
        entries: every slot of the file (as :func:`decode_offset_index` returns them), or with
            ``zero_slots`` those before them (as :func:`split_offset_index` returns them).
        base_offset: the segment's base offset.
        log_batches: ``(position, last_offset)`` of each batch of the segment's ``.log``, if known.
        zero_slots: how many all-zero slots follow ``entries`` in the file.

    Returns:
        One sentence per failed rule, naming how many entries fail it and the first one.
    """
    problems: list[str] = []
    last = base_offset if zero_slots else entries[-1].offset if entries else None
    check_last_offset(last, base_offset, problems)
    real = trailing_zero_slots(entries, OffsetIndexEntry(base_offset, 0))
    report_zero_slots(len(entries) + zero_slots, real, problems)
    _check_order(entries[:real], base_offset, problems)
    if log_batches is not None:
        _check_against_log(entries[:real], log_batches, problems)
    return problems


def _check_order(
    entries: Sequence[OffsetIndexEntry], base_offset: int, problems: list[str]
) -> None:
    below = Finding("offset below the segment's base offset")
    negative = Finding("negative position")
    offsets = Finding("offsets not strictly increasing")
    positions = Finding("positions not strictly increasing")
    previous: OffsetIndexEntry | None = None
    for number, entry in enumerate(entries):
        if entry.offset < base_offset:
            below.add(f"entry {number} has offset {entry.offset} < {base_offset}")
        if entry.position < 0:
            negative.add(f"entry {number} has position {entry.position}")
        if previous is not None and entry.offset <= previous.offset:
            offsets.add(f"entry {number} has offset {entry.offset} after {previous.offset}")
        if previous is not None and entry.position <= previous.position:
            positions.add(f"entry {number} has position {entry.position} after {previous.position}")
        previous = entry
    for finding in (below, negative, offsets, positions):
        finding.report(problems)


def _check_against_log(
    entries: Sequence[OffsetIndexEntry],
    log_batches: Sequence[tuple[int, int]],
    problems: list[str],
) -> None:
    last_offset_at = dict(log_batches)
    no_batch = Finding("entry does not point at a batch start")
    wrong_offset = Finding("entry's offset is not the last offset of its batch")
    for number, entry in enumerate(entries):
        found = last_offset_at.get(entry.position)
        if found is None:
            no_batch.add(f"entry {number} points at position {entry.position}")
        elif found != entry.offset:
            wrong_offset.add(
                f"entry {number} at position {entry.position}: expected offset {found}, "
                f"found {entry.offset}"
            )
    no_batch.report(problems)
    wrong_offset.report(problems)


def check_offset_lookups(
    entries: Sequence[OffsetIndexEntry], log_batches: Sequence[tuple[int, int]]
) -> list[str]:
    """What breaks a broker's reads through this index, in words (empty: every lookup is right).

    Looser than :func:`check_offset_index` with ``log_batches``, which asks for exactly what Kafka 4.1
    writes: brokers of other versions indexed the *first* offset of an append (0.10) or the last offset
    of a multi-batch append at its first batch's position, and Kafka reads those correctly.
    ``OffsetIndex.lookup`` finds the greatest entry at or below a target and
    ``LogSegment.translateOffset`` scans forward from its position for the first batch ending at or
    after the target, so an entry is right when its position is a batch start, every batch before that
    position ends below the entry's offset, and the offset is within the segment (a later append of a
    smaller offset would fail with ``InvalidOffsetException``). The entries' order is
    :func:`check_offset_index`'s.

    Args:
        entries: the index's entries (without trailing zero-filled slots).
        log_batches: ``(position, last_offset)`` of each batch of the segment's ``.log``, in order.

    Returns:
        One sentence per failed rule, naming how many entries fail it and the first one.
    """
    index_at = {position: i for i, (position, _last) in enumerate(log_batches)}
    segment_last = log_batches[-1][1] if log_batches else None
    no_batch = Finding("entry does not point at a batch start")
    skips = Finding("entry's offset is not above the last offset of the batch before its position")
    past_end = Finding("entry's offset lies past the segment's last offset")
    for number, entry in enumerate(entries):
        i = index_at.get(entry.position)
        if i is None:
            no_batch.add(f"entry {number} points at position {entry.position}")
            continue
        if i > 0 and log_batches[i - 1][1] >= entry.offset:
            skips.add(f"entry {number} has offset {entry.offset}; the batch before position "
                      f"{entry.position} ends at {log_batches[i - 1][1]}")
        if segment_last is not None and entry.offset > segment_last:
            past_end.add(f"entry {number} has offset {entry.offset} > {segment_last}")
    problems: list[str] = []
    for finding in (no_batch, skips, past_end):
        finding.report(problems)
    return problems
