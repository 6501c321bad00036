"""Aborted transactions derived from the data, as a broker's recovery writes them to a txn index.

Why: a segment Kafka recovers (no ``.index``, an index that fails its sanity check) gets its
transaction index rebuilt from the batches (``LogSegment.recover``, ``updateProducerState``), and
a ``.txnindex`` that lacks an entry the data shows makes the cleaner keep aborted data as committed.
The loaded log state (``log.state.log_state``) and ``repair`` both need exactly the entries
Kafka would write: this module is the one place that rule lives.

The rule, as Kafka 4.1's ``ProducerAppendInfo`` and ``ProducerStateManager`` apply it in log order:

* a producer's transactional data batch opens a transaction at its base offset when none is open
  (``ProducerAppendInfo.appendDataBatch``); a later batch of the same producer, whatever its
  epoch, continues it (an epoch bump does not end an open transaction, only a marker does: a
  coordinator fencing a producer writes an ABORT marker with the bumped epoch);
* a COMMIT or ABORT marker completes the producer's open transaction at the marker's offset
  (``appendEndTxnMarker``); a marker with no open transaction, and an emptied marker (no records,
  no type), complete nothing and make no index entry;
* a completed ABORT is indexed with the last stable offset ``ProducerStateManager.lastStableOffset``
  gives: the smallest first offset of another producer's transaction still open, else the
  marker's offset + 1 (``LogSegment.updateTxnIndex``).

Non-transactional batches, batches of no producer (legacy entries) and other control types play no
part. :func:`merge_aborted` joins a ``.txnindex``'s entries with derived ones: the file's entries
stay, a derived entry the file lacks (same producer, same last offset) is added, by last offset.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol, TypeVar

from kcompact.log.rules.transactions import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
from kcompact.value import frozen

__all__ = [
    "AbortedEntry",
    "AbortedTxnKey",
    "Transaction",
    "TxnRow",
    "aborted_transactions",
    "derive_transactions",
    "merge_aborted",
]

_MARKER_TYPES = (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT)


class TxnRow(NamedTuple):
    """What the rule reads of one batch, in log order."""

    producer_id: int
    producer_epoch: int
    base_offset: int
    max_timestamp: int
    is_transactional: bool
    is_control: bool
    control_type: int | None  # a control batch's first record's type; None: emptied, or not control


@frozen
class Transaction:
    """One transaction of the data: where it starts, how it ended (``marker_offset`` None: open)."""

    producer_id: int
    producer_epoch: int  # of its first data batch
    first_offset: int
    first_timestamp_ms: int  # its first data batch's max timestamp
    marker_offset: int | None = None
    aborted: bool = False
    last_stable_offset: int | None = None  # an aborted one's: its txn index entry's


def derive_transactions(rows: Iterable[TxnRow]) -> list[Transaction]:
    """Every transaction the rows show (module docstring), in the order they start.

    Args:
        rows: the batches of a partition (or of its kept batches), in log order.

    Returns:
        One :class:`Transaction` per transaction, completed or still open, by first offset.
    """
    started: list[Transaction] = []
    open_at: dict[int, int] = {}  # producer id -> index in ``started`` of its open transaction
    for row in rows:
        if row.producer_id < 0 or not row.is_transactional:
            continue
        if not row.is_control:
            if row.producer_id not in open_at:
                open_at[row.producer_id] = len(started)
                started.append(Transaction(row.producer_id, row.producer_epoch, row.base_offset,
                                           row.max_timestamp))
            continue
        if row.control_type not in _MARKER_TYPES:
            continue
        at = open_at.pop(row.producer_id, None)
        if at is None:
            continue
        aborted = row.control_type == CONTROL_TYPE_ABORT
        lso = None
        if aborted:  # ProducerStateManager.lastStableOffset: the earliest other open transaction
            lso = min((started[i].first_offset for i in open_at.values()),
                      default=row.base_offset + 1)
        txn = started[at]
        started[at] = Transaction(txn.producer_id, txn.producer_epoch, txn.first_offset,
                                  txn.first_timestamp_ms, row.base_offset, aborted, lso)
    return started


class AbortedEntry(NamedTuple):
    """An aborted transaction as its ``.txnindex`` entry holds it (``AbortedTxn``'s fields)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int


def aborted_transactions(transactions: Iterable[Transaction]) -> list[AbortedEntry]:
    """The aborted ones of ``transactions`` as index entries, in marker order (a txn index's)."""
    entries = [AbortedEntry(t.producer_id, t.first_offset, t.marker_offset, t.last_stable_offset)
               for t in transactions if t.aborted
               and t.marker_offset is not None and t.last_stable_offset is not None]
    return sorted(entries, key=lambda e: e.last_offset)


class AbortedTxnKey(Protocol):
    """What :func:`merge_aborted` reads of an entry (``kcompact.segment.txn_index.AbortedTxn``)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def last_offset(self) -> int: ...


EntryT = TypeVar("EntryT", bound=AbortedTxnKey)


def merge_aborted(
    indexed: Sequence[EntryT], derived: Sequence[EntryT]
) -> tuple[list[EntryT], list[EntryT]]:
    """A ``.txnindex``'s entries joined with the ones derived from its segment's data.

    Args:
        indexed: the entries the file holds (those a caller keeps).
        derived: the entries the data shows, in marker order.

    Returns:
        ``(merged, lacking)``: ``indexed`` plus the derived entries it lacks (same producer and last
        offset), ordered by last offset (stable: a file's entry before a derived one); and those
        lacking entries.
    """
    known = {(e.producer_id, e.last_offset) for e in indexed}
    lacking = [d for d in derived if (d.producer_id, d.last_offset) not in known]
    return sorted([*indexed, *lacking], key=lambda e: e.last_offset), lacking
