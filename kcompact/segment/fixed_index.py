"""What the three index files of a segment share: arrays of fixed-size entries (Kafka's ``AbstractIndex``).

``<base>.index``, ``<base>.timeindex`` and ``<base>.txnindex`` have no header and no checksum: each is
``entries × entry_size`` big-endian bytes, one ``struct`` per slot, and Kafka reads every slot as an
entry. So decoding splits the file into slots after checking its length is a whole number of them;
reading opens the file and makes an error name it; and the offset and time indexes, which store
offsets relative to the segment's base offset, share the int32 bound on those, Kafka's sanity check
on the last entry and the trailing zero-filled slots a preallocated file leaves when never trimmed.
Each index module keeps its own entry layout, its Kafka-specific rules and its public functions.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from kcompact.errors import CorruptIndexError
from kcompact.records.varint import INT32_MAX
from kcompact.segment.files import read_file
from kcompact.value import mutable

MAX_RELATIVE_OFFSET = INT32_MAX
"""Largest ``offset - base_offset`` a segment's indexes can hold (Kafka's ``Integer.MAX_VALUE``)."""
KAFKA_SANITY_FAILS = "(Kafka's sanity check fails: CorruptIndexException)"
"""How a check sentence says the broker itself would refuse the index at load."""

EntryT = TypeVar("EntryT")


@mutable
class Finding:
    """How often one rule of an index check failed, and the first failure in words."""

    rule: str
    count: int = 0
    first: str = ""

    def add(self, example: str) -> None:
        """Record one more failure; only the first example is kept."""
        if self.count == 0:
            self.first = example
        self.count += 1

    def report(self, problems: list[str]) -> None:
        """Append one sentence for this rule to ``problems`` if it failed at all."""
        if self.count == 1:
            problems.append(f"{self.rule}: {self.first}")
        elif self.count > 1:
            problems.append(f"{self.rule} ({self.count} entries), first: {self.first}")


def fits_relative_offset(offset: int, base_offset: int) -> bool:
    """Whether ``offset`` can be stored in the indexes of a segment based at ``base_offset``.

    Kafka's ``canAppendOffset``: a batch whose last offset fails this makes the segment overflow
    (``LogSegmentOffsetOverflowException``) and must go to a new segment.

    Args:
        offset: an absolute offset.
        base_offset: the segment's base offset.

    Returns:
        ``0 <= offset - base_offset <= 2^31 - 1``.
    """
    return 0 <= offset - base_offset <= MAX_RELATIVE_OFFSET


def iter_slots(
    data: bytes | memoryview, entry: struct.Struct, index_name: str
) -> Iterator[tuple[Any, ...]]:
    """Split an index file into its slots, each unpacked with ``entry``.

    The length is checked before this returns, not when the iterator is first advanced.

    Args:
        data: the whole file.
        entry: the layout of one entry.
        index_name: the index's name in messages (``"offset index"``, ``"time index"`` …).

    Returns:
        The unpacked fields of every slot, in file order.

    Raises:
        CorruptIndexError: the length is not a multiple of ``entry.size`` (``position`` = the
            partial slot).
    """
    size_in_bytes = len(data)
    if size_in_bytes % entry.size:
        raise CorruptIndexError(
            f"{index_name} size is not a whole number of entries; expected a multiple of "
            f"{entry.size} bytes, found {size_in_bytes} bytes",
            position=size_in_bytes - size_in_bytes % entry.size,
        )
    return entry.iter_unpack(data)


def read_index_file(
    path: str | os.PathLike[str], decode: Callable[[bytes], list[EntryT]]
) -> list[EntryT]:
    """Read an index file and decode it; a decoding error then names the file.

    Args:
        path: the index file.
        decode: the index's ``decode_*`` function, its other arguments bound.

    Returns:
        What ``decode`` returns for the file's bytes.

    Raises:
        FileNotFoundError: the file does not exist (callers decide what a missing index means).
        FileAccessError: the file cannot be read (permissions, an I/O error).
        CorruptIndexError: what ``decode`` raises, located in ``path``.
    """
    data = read_file(path)
    try:
        return decode(data)
    except CorruptIndexError as err:
        raise err.located(path) from err


def require_fits_segment(index_name: str, number: int, offset: int, base_offset: int) -> None:
    """Refuse to encode an entry whose offset a segment based at ``base_offset`` cannot hold.

    Args:
        index_name: the index's name in messages.
        number: the entry's number in the file.
        offset: the entry's absolute offset.
        base_offset: the segment's base offset.

    Raises:
        CorruptIndexError: ``offset`` fails :func:`fits_relative_offset` (``offset`` = it).
    """
    if not fits_relative_offset(offset, base_offset):
        raise CorruptIndexError(
            f"{index_name} entry {number} does not fit the segment; expected offset "
            f"{base_offset}..{base_offset + MAX_RELATIVE_OFFSET}, found {offset}",
            offset=offset,
        )


def check_last_offset(last_offset: int | None, base_offset: int, problems: list[str]) -> None:
    """Kafka's load-time sanity rule: a non-empty index ends at an offset ≥ the base offset.

    Args:
        last_offset: the absolute offset of the file's last slot; None for an empty file.
        base_offset: the segment's base offset.
        problems: where to append the sentence when the rule fails.
    """
    if last_offset is not None and last_offset < base_offset:
        problems.append(
            f"last offset {last_offset} is below the base offset {base_offset} {KAFKA_SANITY_FAILS}"
        )


def trailing_zero_slots(entries: Sequence[EntryT], zero: EntryT) -> int:
    """Length of ``entries`` without its trailing run of ``zero`` (all-zero slots, decoded).

    Args:
        entries: every slot of the file.
        zero: what an all-zero slot decodes to in this segment.

    Returns:
        How many entries come before that run.
    """
    real = len(entries)
    while real and entries[real - 1] == zero:
        real -= 1
    return real


def zero_tail_slots(data: bytes | memoryview, slot_size: int) -> int:
    """How many whole slots at the end of ``data`` are all zero bytes, found from the end.

    A preallocated index that was never trimmed is mostly such slots (a broker's 10 MiB default holds
    1.3 million offset slots); they are counted at C speed (``bytes.rstrip``), so that callers decode
    only the slots before them.

    Args:
        data: the whole file.
        slot_size: the size of one entry.

    Returns:
        The number of trailing all-zero slots; 0 when the length is not a whole number of slots
        (decoding refuses such a file and says where).
    """
    if len(data) % slot_size:
        return 0
    nonzero = len(bytes(data).rstrip(b"\0"))
    return len(data) // slot_size - -(-nonzero // slot_size)


def ends_in_zero_slots(path: str | os.PathLike[str], slot_size: int) -> bool:
    """Whether an index file of more than one slot ends in an all-zero slot: preallocated and never trimmed
    (a broker that did not shut down cleanly), read from its last slot alone.

    Args:
        path: the index file.
        slot_size: the size of one entry.

    Returns:
        True for such a file; False for a trimmed one, one of a single slot (its entry may be real) or a
        file that cannot be read (its reader says why).
    """
    tail = read_last_slot(path, slot_size)
    return tail is not None and slot_ends_in_zeros(tail, slot_size)


def slot_ends_in_zeros(tail: tuple[int, bytes], slot_size: int) -> bool:
    """:func:`ends_in_zero_slots` of a file whose :func:`read_last_slot` is ``tail``."""
    size, last = tail
    return size > slot_size and last == bytes(slot_size)


def read_last_slot(path: str | os.PathLike[str], slot_size: int) -> tuple[int, bytes] | None:
    """An index file's size and last slot, from one open: the slot is ``b""`` for a file that is not whole
    slots (or shrank meanwhile), and the answer None for a file that cannot be read (its reader says why).

    Args:
        path: the index file.
        slot_size: the size of one entry.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < slot_size or size % slot_size:
            return size, b""
        last = os.pread(fd, slot_size, size - slot_size)
        return size, last if len(last) == slot_size else b""
    except OSError:
        return None
    finally:
        os.close(fd)


def report_zero_slots(total: int, real: int, problems: list[str]) -> None:
    """Say that the last ``total - real`` slots are zero-filled, if any are.

    Args:
        total: how many slots the file has.
        real: how many come before the zero-filled run.
        problems: where to append the sentence.
    """
    if real < total:
        problems.append(
            f"{total - real} trailing zero-filled slots (a preallocated index that was "
            f"never trimmed; Kafka would read them as entries), from entry {real}"
        )
