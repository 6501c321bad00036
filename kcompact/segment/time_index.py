"""The time index ``<base>.timeindex``: running maximum timestamps of a segment (Kafka's ``TimeIndex``).

An entry ``(T, O)`` says: the largest batch ``maxTimestamp`` seen up to the batch whose last offset
is *O* is *T*, and *O* is the last offset of the first batch (in file order) that reached *T*. Kafka
appends an entry only when *T* is strictly larger than the last one, so timestamps −1 (v0 data)
never make an entry. The **last** entry is what the broker takes as the segment's largest timestamp
for ``retention.ms``, ``min.compaction.lag.ms`` and ``ListOffsets(MAX_TIMESTAMP)``; an empty time
index makes it fall back to the ``.log`` file's mtime. Like the offset index, an existing file is
trusted at load and read slot by slot.

Layout: no header, no checksum; ``entries × 12`` bytes, big-endian::

    0  int64 timestamp         the running maximum batch maxTimestamp, in ms
    8  int32 relative_offset   O - base_offset, 0..2^31-1
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence

from kcompact.errors import CorruptIndexError
from kcompact.records.varint import INT64_MAX, INT64_MIN
from kcompact.segment.files import file_access
from kcompact.segment.fixed_index import (
    KAFKA_SANITY_FAILS,
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

TIME_INDEX_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp: running maximum batch maxTimestamp (ms)
    "i"  # relative_offset: offset - base_offset
)
TIME_INDEX_ENTRY_SIZE = TIME_INDEX_ENTRY.size  # 12
_TIME_INDEX_DTYPE = [("timestamp", ">i8"), ("relative_offset", ">i4")]  # TIME_INDEX_ENTRY for numpy


@frozen
class TimeIndexEntry:
    """One time index entry: ``timestamp`` was first reached by the batch ending at ``offset``."""

    timestamp: int
    offset: int


def decode_time_index(data: bytes | memoryview, base_offset: int) -> list[TimeIndexEntry]:
    """Decode the bytes of a time index, every slot as Kafka would read it.

    Args:
        data: the whole file.
        base_offset: the segment's base offset.

    Returns:
        The entries with absolute offsets, in file order, including any zero-filled slots.

    Raises:
        CorruptIndexError: the length is not a multiple of 12 (``position`` = the partial slot).
    """
    return [
        TimeIndexEntry(timestamp=timestamp, offset=base_offset + relative)
        for timestamp, relative in iter_slots(data, TIME_INDEX_ENTRY, "time index")
    ]


def split_time_index(data: bytes | memoryview, base_offset: int) -> tuple[list[TimeIndexEntry], int]:
    """Decode a time index up to its trailing zero-filled slots, and count those (as
    :func:`~kcompact.segment.offset_index.split_offset_index`); a file of one slot keeps it, since a
    lone ``(0, base_offset)`` entry can be real.

    Args:
        data: the whole file.
        base_offset: the segment's base offset.

    Returns:
        ``(entries, zero_slots)``, for ``check_time_index(entries, base, zero_slots=n)``.

    Raises:
        CorruptIndexError: the length is not a multiple of 12 (``position`` = the partial slot).
    """
    zeros = zero_tail_slots(data, TIME_INDEX_ENTRY_SIZE)
    if zeros * TIME_INDEX_ENTRY_SIZE == len(data) == TIME_INDEX_ENTRY_SIZE:
        zeros = 0
    return decode_time_index(data[: len(data) - zeros * TIME_INDEX_ENTRY_SIZE], base_offset), zeros


def encode_time_index(entries: Iterable[TimeIndexEntry], base_offset: int) -> bytes:
    """Encode entries as a trimmed time index file.

    Args:
        entries: entries with absolute offsets, in file order.
        base_offset: the segment's base offset.

    Returns:
        ``12 × len(entries)`` bytes.

    Raises:
        CorruptIndexError: an offset outside ``base_offset .. base_offset + 2^31 - 1`` or a
            timestamp outside int64.
    """
    out = bytearray()
    for number, entry in enumerate(entries):
        _require_encodable(number, entry.timestamp, entry.offset, base_offset)
        out += TIME_INDEX_ENTRY.pack(entry.timestamp, entry.offset - base_offset)
    return bytes(out)


def encode_time_index_columns(timestamps: Sequence[int], offsets: Sequence[int], base_offset: int) -> bytes:
    """:func:`encode_time_index` of the entries ``(timestamps[i], offsets[i])``, by numpy (as
    ``offset_index.encode_offset_index_columns``).

    Args:
        timestamps: the entries' timestamps, in file order.
        offsets: their absolute offsets (int64), as many.
        base_offset: the segment's base offset.

    Returns:
        ``12 × len(timestamps)`` bytes, the same as :func:`encode_time_index`'s.

    Raises:
        CorruptIndexError: as :func:`encode_time_index`, for the first entry that fails.
    """
    import numpy as np  # the callers have it loaded

    try:
        timestamp = np.asarray(timestamps, dtype=np.int64)
    except OverflowError:  # a timestamp outside int64: the entry by entry encoder names it
        return encode_time_index(map(TimeIndexEntry, timestamps, offsets), base_offset)
    offset = np.asarray(offsets, dtype=np.int64)
    low, high = max(base_offset, INT64_MIN), min(base_offset + MAX_RELATIVE_OFFSET, INT64_MAX)
    bad = (offset < low) | (offset > high)
    if bad.any():
        number = int(bad.argmax())
        _require_encodable(number, timestamps[number], offsets[number], base_offset)
    out = np.empty(len(offset), dtype=_TIME_INDEX_DTYPE)
    out["timestamp"] = timestamp
    out["relative_offset"] = offset - base_offset
    return out.tobytes()


def _require_encodable(number: int, timestamp: int, offset: int, base_offset: int) -> None:
    require_fits_segment("time index", number, offset, base_offset)
    if not INT64_MIN <= timestamp <= INT64_MAX:
        raise CorruptIndexError(
            f"time index entry {number} has a timestamp outside int64; expected "
            f"{INT64_MIN}..{INT64_MAX}, found {timestamp}",
            offset=offset,
        )


def read_time_index(path: str | os.PathLike[str], base_offset: int) -> list[TimeIndexEntry]:
    """Read a time index file (see :func:`decode_time_index`).

    Args:
        path: the ``.timeindex`` file.
        base_offset: the segment's base offset.

    Returns:
        Every slot of the file as an entry.

    Raises:
        FileNotFoundError: the file does not exist.
        CorruptIndexError: the file's length is not a multiple of 12; the error names the file.
    """
    return read_index_file(path, lambda data: decode_time_index(data, base_offset))


def read_time_index_tail(path: str | os.PathLike[str]) -> tuple[int, int]:
    """The last slot's timestamp and the file's size, reading that slot only.

    The largest timestamp of a segment is the last entry (module docstring); reading the whole file
    for it costs a large partition's time indexes in full. Same answer as the last entry of
    :func:`read_time_index`.

    Args:
        path: the ``.timeindex`` file.

    Returns:
        ``(timestamp, size in bytes)``; the timestamp is -1 for an empty file or one whose length is
        not a multiple of 12 (which :func:`read_time_index` refuses).

    Raises:
        FileAccessError: the file cannot be opened or read (a missing one included), naming it.
    """
    with file_access(path, "read"):
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            whole = size >= TIME_INDEX_ENTRY_SIZE and size % TIME_INDEX_ENTRY_SIZE == 0
            last = os.pread(fd, TIME_INDEX_ENTRY_SIZE, size - TIME_INDEX_ENTRY_SIZE) if whole else b""
        finally:
            os.close(fd)
    if len(last) != TIME_INDEX_ENTRY_SIZE:  # empty, not whole slots (or shrunk meanwhile)
        return -1, size
    timestamp: int = TIME_INDEX_ENTRY.unpack(last)[0]
    return timestamp, size



def check_time_index(
    entries: Sequence[TimeIndexEntry],
    base_offset: int,
    *,
    log_batches: Sequence[tuple[int, int]] | None = None,
    zero_slots: int = 0,
) -> list[str]:
    """Everything wrong with a time index, in words (empty list: nothing found).

    Checks Kafka's sanity rules (a non-empty index must end at an offset ≥ the base offset and at a
    timestamp ≥ its first one), trailing zero-filled slots, offsets below the base, non-decreasing
    timestamps and offsets, and — given the ``.log``'s batches — that every entry is the running
    maximum timestamp at a batch's last offset, at the batch that first reached it.

    Args:
        entries: every slot of the file (as :func:`decode_time_index` returns them), or with
            ``zero_slots`` those before them (as :func:`split_time_index` returns them).
        base_offset: the segment's base offset.
        log_batches: ``(last_offset, max_timestamp)`` of each batch of the ``.log``, in file order.
        zero_slots: how many all-zero slots follow ``entries`` in the file.

    Returns:
        One sentence per failed rule, naming how many entries fail it and the first one.
    """
    problems: list[str] = []
    zero = TimeIndexEntry(0, base_offset)
    last = zero if zero_slots else entries[-1] if entries else None
    first = entries[0] if entries else last
    check_last_offset(None if last is None else last.offset, base_offset, problems)
    if last is not None and first is not None and last.timestamp < first.timestamp:
        problems.append(
            f"last timestamp {last.timestamp} is below the first {first.timestamp} "
            f"{KAFKA_SANITY_FAILS}"
        )
    total = len(entries) + zero_slots
    real = _without_zero_slots(entries, base_offset, total)
    report_zero_slots(total, real, problems)
    _check_order(entries[:real], base_offset, problems)
    if log_batches is not None:
        _check_against_log(entries[:real], log_batches, problems)
    return problems


def _without_zero_slots(entries: Sequence[TimeIndexEntry], base_offset: int, total: int) -> int:
    """How many of the file's ``total`` slots come before its trailing run of all-zero slots (``entries``
    being the first of them, the rest zero).

    A lone ``(0, base_offset)`` entry can be real (a first batch stamped at the epoch), so it only
    counts as a zero slot when another entry precedes it or the run is longer than one.
    """
    real = trailing_zero_slots(entries, TimeIndexEntry(0, base_offset))
    return real if real or total > 1 else total


def _check_order(entries: Sequence[TimeIndexEntry], base_offset: int, problems: list[str]) -> None:
    below = Finding("offset below the segment's base offset")
    timestamps = Finding("timestamps decrease")
    offsets = Finding("offsets decrease")
    previous: TimeIndexEntry | None = None
    for number, entry in enumerate(entries):
        if entry.offset < base_offset:
            below.add(f"entry {number} has offset {entry.offset} < {base_offset}")
        if previous is not None and entry.timestamp < previous.timestamp:
            timestamps.add(
                f"entry {number} has timestamp {entry.timestamp} after {previous.timestamp}"
            )
        if previous is not None and entry.offset < previous.offset:
            offsets.add(f"entry {number} has offset {entry.offset} after {previous.offset}")
        previous = entry
    for finding in (below, timestamps, offsets):
        finding.report(problems)


def _check_against_log(
    entries: Sequence[TimeIndexEntry], log_batches: Sequence[tuple[int, int]], problems: list[str]
) -> None:
    # (running max, offset of the batch that first reached it) after each batch, as Kafka tracks it.
    state: dict[int, tuple[int, int]] = {}
    max_timestamp, offset_of_max = -1, -1
    for last_offset, batch_max_timestamp in log_batches:
        if batch_max_timestamp > max_timestamp:
            max_timestamp, offset_of_max = batch_max_timestamp, last_offset
        state[last_offset] = (max_timestamp, offset_of_max)
    no_batch = Finding("entry's offset is not the last offset of a batch")
    wrong_timestamp = Finding("entry's timestamp is not the running maximum at its batch")
    wrong_offset = Finding("entry's offset is not where its timestamp was first reached")
    for number, entry in enumerate(entries):
        found = state.get(entry.offset)
        if found is None:
            no_batch.add(f"entry {number} has offset {entry.offset}")
        elif found[0] != entry.timestamp:
            wrong_timestamp.add(
                f"entry {number} at offset {entry.offset}: expected timestamp {found[0]}, "
                f"found {entry.timestamp}"
            )
        elif found[1] != entry.offset:
            wrong_offset.add(
                f"entry {number}: timestamp {entry.timestamp} was first reached at offset "
                f"{found[1]}; found offset {entry.offset}"
            )
    for finding in (no_batch, wrong_timestamp, wrong_offset):
        finding.report(problems)


def check_time_lookups(
    entries: Sequence[TimeIndexEntry], log_batches: Sequence[tuple[int, int]]
) -> list[str]:
    """What breaks a broker's reads by timestamp, or its idea of the segment's age, in words.

    Looser than :func:`check_time_index` with ``log_batches``, which asks for exactly what Kafka 4.1
    writes (the offset of the batch that first reached each maximum); some broker versions stored a
    record's offset instead, which Kafka reads correctly. ``TimeIndex.lookup`` finds the greatest entry
    at or below a target timestamp and ``LogSegment.findOffsetByTimestamp`` scans forward from its
    offset, so an entry is right when no batch ending before its offset holds its timestamp or a later
    one, and its offset is within the segment. The last entry is the segment's largest timestamp for
    the broker (``LogSegment.largestTimestamp``: retention.ms, the cleaner's min.compaction.lag.ms), so
    it must be the log's. The entries' order is :func:`check_time_index`'s.

    Args:
        entries: the index's entries (without trailing zero-filled slots).
        log_batches: ``(last_offset, max_timestamp)`` of each batch of the ``.log``, in file order.

    Returns:
        One sentence per failed rule, naming how many entries fail it and the first one.
    """
    problems: list[str] = []
    if not entries or not log_batches:
        return problems
    segment_last = log_batches[-1][0]
    largest = max(timestamp for _offset, timestamp in log_batches)
    skips = Finding("a batch before the entry's offset already holds its timestamp")
    past_end = Finding("entry's offset lies past the segment's last offset")
    i, max_before = 0, -1  # running maximum of the batches ending before the entry's offset
    for number, entry in enumerate(entries):
        while i < len(log_batches) and log_batches[i][0] < entry.offset:
            max_before = max(max_before, log_batches[i][1])
            i += 1
        if max_before >= entry.timestamp:
            skips.add(f"entry {number} ({entry.timestamp} at offset {entry.offset}): a batch "
                      f"before it has timestamp {max_before}")
        if entry.offset > segment_last:
            past_end.add(f"entry {number} has offset {entry.offset} > {segment_last}")
    for finding in (skips, past_end):
        finding.report(problems)
    if entries[-1].timestamp != largest:
        problems.append(f"last entry's timestamp is not the segment's largest; expected {largest}, "
                        f"found {entries[-1].timestamp} (the broker dates the segment by it)")
    return problems
