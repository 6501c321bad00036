"""The transaction index ``<base>.txnindex``: the aborted transactions of a segment (Kafka's ``TransactionIndex``).

One entry per aborted transaction that had data, stored in the segment holding its ABORT marker, in
strictly increasing ``last_offset``. READ_COMMITTED fetches use it to hide aborted data, and the
cleaner uses it to know which transactional batches were aborted — a missing or incomplete index
makes the cleaner keep aborted data as if committed. The file only exists once it has had an entry.
At load Kafka checks every entry's ``last_offset`` against the base offset
(``TransactionIndex.sanityCheck``) and recovers the segment when one is below.

Layout: no header; ``entries × 34`` bytes, big-endian::

    0   int16 version              0 (Kafka's reader looks only at the first byte; we require 0)
    2   int64 producer_id
    10  int64 first_offset         first offset of the aborted transaction
    18  int64 last_offset          offset of the ABORT marker
    26  int64 last_stable_offset   the LSO right after the abort was applied
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence

from kcompact.errors import CorruptIndexError
from kcompact.segment.fixed_index import Finding, iter_slots, read_index_file
from kcompact.value import frozen

TXN_INDEX_ENTRY = struct.Struct(
    ">"
    "h"  # version: 0
    "q"  # producer_id
    "q"  # first_offset: first offset of the aborted transaction
    "q"  # last_offset: offset of the ABORT marker
    "q"  # last_stable_offset: LSO right after the abort
)
TXN_INDEX_ENTRY_SIZE = TXN_INDEX_ENTRY.size  # 34
TXN_INDEX_VERSION = 0


@frozen
class AbortedTxn:
    """One aborted transaction: ``producer_id``'s data from ``first_offset`` to ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = TXN_INDEX_VERSION

    def overlaps(self, start: int, end: int) -> bool:
        """Whether this transaction has offsets in ``[start, end)``: the one test every reader of the
        transaction indexes uses (Kafka's ``TransactionIndex.collectAbortedTxns``)."""
        return self.last_offset >= start and self.first_offset < end


def decode_txn_index(data: bytes | memoryview) -> list[AbortedTxn]:
    """Decode the bytes of a transaction index.

    Args:
        data: the whole file.

    Returns:
        The entries in file order.

    Raises:
        CorruptIndexError: the length is not a multiple of 34, or an entry's version is not 0
            (``position`` = the entry's position in ``data``).
    """
    entries = []
    for number, fields in enumerate(iter_slots(data, TXN_INDEX_ENTRY, "transaction index")):
        entry = AbortedTxn(fields[1], fields[2], fields[3], fields[4], version=fields[0])
        if entry.version != TXN_INDEX_VERSION:
            raise CorruptIndexError(
                f"unknown aborted transaction version; expected {TXN_INDEX_VERSION}, "
                f"found {entry.version}",
                position=number * TXN_INDEX_ENTRY_SIZE,
                offset=entry.last_offset,
            )
        entries.append(entry)
    return entries


def encode_txn_index(entries: Iterable[AbortedTxn]) -> bytes:
    """Encode entries as a transaction index file.

    Args:
        entries: the aborted transactions, in file order.

    Returns:
        ``34 × len(entries)`` bytes.

    Raises:
        CorruptIndexError: a field does not fit its width (version int16, the rest int64).
    """
    out = bytearray()
    for number, entry in enumerate(entries):
        try:
            out += TXN_INDEX_ENTRY.pack(
                entry.version,
                entry.producer_id,
                entry.first_offset,
                entry.last_offset,
                entry.last_stable_offset,
            )
        except struct.error as err:
            raise CorruptIndexError(
                f"aborted transaction {number} does not fit the index; expected an int16 version "
                f"and int64 offsets, found {entry}",
                offset=entry.last_offset,
            ) from err
    return bytes(out)


def read_txn_index(path: str | os.PathLike[str]) -> list[AbortedTxn]:
    """Read a transaction index file (see :func:`decode_txn_index`).

    Args:
        path: the ``.txnindex`` file.

    Returns:
        The entries in file order.

    Raises:
        FileNotFoundError: the file does not exist (Kafka's meaning: no aborted transactions).
        CorruptIndexError: the file does not decode; the error names the file.
    """
    return read_index_file(path, decode_txn_index)



def check_txn_index(entries: Sequence[AbortedTxn], base_offset: int) -> list[str]:
    """Everything wrong with a transaction index, in words (empty list: nothing found).

    Args:
        entries: the decoded entries.
        base_offset: the segment's base offset.

    Returns:
        One sentence per failed rule: a ``last_offset`` below the base offset (Kafka's
        ``CorruptIndexException`` at load, which makes it recover the segment) and ``last_offset``
        not strictly increasing.
    """
    problems: list[str] = []
    below = Finding("last offset below the segment's base offset (Kafka recovers the segment)")
    order = Finding("last offsets not strictly increasing")
    previous: AbortedTxn | None = None
    for number, entry in enumerate(entries):
        if entry.last_offset < base_offset:
            below.add(f"entry {number} has last offset {entry.last_offset} < {base_offset}")
        if previous is not None and entry.last_offset <= previous.last_offset:
            order.add(
                f"entry {number} has last offset {entry.last_offset} after {previous.last_offset}"
            )
        previous = entry
    below.report(problems)
    order.report(problems)
    return problems
