"""Transaction bookkeeping of one cleaning round: Kafka's ``CleanedTransactionMetadata``.

Why: the cleaner removes a transaction's data by the marker that ended it, and it must not drop a marker
while data of its transaction is still in the log - a READ_COMMITTED consumer needs the ABORT marker (and
its ``.txnindex`` entry) to filter the aborted records, and every consumer needs the COMMIT marker to know
the data is committed. This module decides, batch by batch in log order, which data is aborted and which
markers have become *discardable*; the policy (``policy.py``) turns that into a retention decision.

What it tracks, exactly as Kafka 4.1's ``CleanedTransactionMetadata`` does:

* aborted transactions read up front from the ``.txnindex`` files, in a min-heap by ``first_offset``.
  Before any batch is handled, every entry with ``first_offset <= batch.last_offset`` becomes the
  *ongoing aborted* transaction of its producer (the first one wins; duplicates are harmless because a
  producer has at most one ongoing transaction);
* a transactional data batch whose producer has an ongoing aborted transaction is aborted data: it is
  discardable, and the transaction remembers that data of it was seen in this pass
  (``last_observed_batch_offset``). Any other transactional data batch marks its producer as having an
  ongoing *committed* transaction; non-transactional data is never discardable;
* an ABORT marker ends the producer's ongoing aborted transaction. If data of it was seen in this pass the
  marker stays (not discardable) and the original ``AbortedTxn`` entry must be written to the output
  segment's ``.txnindex``; otherwise it is discardable and its entry disappears from the index;
* a COMMIT marker is discardable iff no data batch of that producer's transaction was seen in this pass;
* any other control type is never discardable; a control batch without records (an already-emptied
  marker) always is.

One instance serves a whole cleaning round (all segment groups); a separate instance serves the offset map
pass, which only needs :meth:`CleanedTransactionMetadata.on_batch_read` to skip aborted data.

Seeds. A worker that starts a round in the middle of the log (another process filtering one segment, a
Spark executor writing one group) needs the state the serial walk would have there. That state depends
only on batch *headers*: which transactional data batches and COMMIT/ABORT markers came before, and how far
the heap was consumed. :meth:`CleanedTransactionMetadata.seed` captures it as a picklable
:class:`TxnSeed`, :meth:`CleanedTransactionMetadata.from_seed` restores it, and
:meth:`CleanedTransactionMetadata.apply_event` replays one recorded header (``TXN_DATA`` or a marker
type) without the batch itself. Between two such events the only change is consumption of the heap, and
the heap only grows at a feed (:meth:`add_aborted`); so replaying the events of a segment and then
:meth:`advance_to` its last offset before the next feed gives exactly the serial state.

Nothing here touches files: the caller feeds aborted transactions per source segment (Kafka collects, for a
segment, the index entries overlapping ``[segment.base_offset, next segment's base or its next offset)``)
and drains :meth:`CleanedTransactionMetadata.take_retained_aborted` into each output segment's index.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar

from kcompact.value import frozen, mutable

__all__ = [
    "CONTROL_TYPE_ABORT",
    "CONTROL_TYPE_COMMIT",
    "NO_PRODUCER_ID",
    "TXN_DATA",
    "AbortedTxnLike",
    "BatchLike",
    "CleanedTransactionMetadata",
    "TxnSeed",
]

# ControlRecordType values of the two transaction markers (kcompact.records.control.ControlRecordType
# is an IntEnum with the same numbers, so either can be passed where an int control type is expected).
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1

# The kind of a replayed header event that is a transactional data batch (markers use their control type).
TXN_DATA = -1

# RecordBatch.NO_PRODUCER_ID: batches of non-idempotent producers (and all legacy data)
NO_PRODUCER_ID = -1


class BatchLike(Protocol):
    """What the cleaner's decision modules read of a batch (v2 ``RecordBatch`` or a legacy entry)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def next_offset(self) -> int: ...

    @property
    def producer_id(self) -> int: ...

    @property
    def producer_epoch(self) -> int: ...

    @property
    def is_transactional(self) -> bool: ...

    @property
    def is_control(self) -> bool: ...

    @property
    def has_delete_horizon(self) -> bool: ...

    @property
    def delete_horizon_ms(self) -> int | None: ...

    @property
    def magic(self) -> int: ...

    @property
    def max_timestamp(self) -> int: ...


class AbortedTxnLike(Protocol):
    """What this module reads of a ``.txnindex`` entry (``kcompact.segment.txn_index.AbortedTxn``)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...


TxnT = TypeVar("TxnT", bound=AbortedTxnLike)


@frozen
class TxnSeed(Generic[TxnT]):
    """The transaction state at one point of a round, as plain values (see the module docstring).

    Attributes:
        consumed_through: every queued entry with ``first_offset`` at or below it has been taken
            from the heap (-1: none yet).
        pending: entries still queued, in heap order (first offset, then feed order).
        ongoing_aborted: ``(producer_id, entry, last_observed_batch_offset)`` per producer.
        ongoing_committed: producers with an ongoing committed transaction, ascending.
    """

    consumed_through: int = -1
    pending: tuple[TxnT, ...] = ()
    ongoing_aborted: tuple[tuple[int, TxnT, int | None], ...] = ()
    ongoing_committed: tuple[int, ...] = ()


@mutable
class _OngoingAborted(Generic[TxnT]):
    """An aborted transaction whose first offset has been reached and whose ABORT marker has not."""

    txn: TxnT
    last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata(Generic[TxnT]):
    """Which data is aborted and which markers may go, carried across all groups of one round.

    Parametrise it with the index entry type, ``CleanedTransactionMetadata[AbortedTxn]``: the entries
    handed back by :meth:`take_retained_aborted` are the very objects given to :meth:`add_aborted`.

    Args:
        collect_index_entries: keep the ``AbortedTxn`` entries of retained ABORT markers for
            :meth:`take_retained_aborted` (pass False for the offset-map pass, which writes no index).
    """

    def __init__(self, *, collect_index_entries: bool = True) -> None:
        self._collect = collect_index_entries
        self._heap: list[tuple[int, int, TxnT]] = []
        self._tiebreak = itertools.count()  # heap entries never compare the AbortedTxn objects
        self._ongoing_aborted: dict[int, _OngoingAborted[TxnT]] = {}
        self._ongoing_committed: set[int] = set()
        self._retained: list[TxnT] = []
        self._consumed_through = -1

    @classmethod
    def from_seed(
        cls,
        seed: TxnSeed[TxnT],
        *,
        feed: Iterable[TxnT] = (),
        collect_index_entries: bool = True,
    ) -> CleanedTransactionMetadata[TxnT]:
        """The state a :class:`TxnSeed` describes, ready to go on walking the log.

        Args:
            seed: from :meth:`seed`.
            feed: entries added *before* the point the seed was taken but left out of its ``pending``
                (the offset-map pass feeds every aborted transaction of the range up front, which
                would make each seed as long as the range); those the seed already consumed are skipped.
            collect_index_entries: as for the constructor.

        Returns:
            A new instance; nothing is retained yet.
        """
        txn: CleanedTransactionMetadata[TxnT] = cls(collect_index_entries=collect_index_entries)
        txn.add_aborted(seed.pending)
        txn.add_aborted(t for t in feed if t.first_offset > seed.consumed_through)
        txn._consumed_through = seed.consumed_through
        for producer_id, entry, observed in seed.ongoing_aborted:
            txn._ongoing_aborted[producer_id] = _OngoingAborted(entry, observed)
        txn._ongoing_committed.update(seed.ongoing_committed)
        return txn

    def seed(self, *, with_pending: bool = True) -> TxnSeed[TxnT]:
        """The current state as a :class:`TxnSeed` (retained index entries are not part of it).

        Args:
            with_pending: include the queued entries; pass False when the restoring side re-feeds
                them (``from_seed(feed=...)``).
        """
        pending = tuple(entry[2] for entry in sorted(self._heap)) if with_pending else ()
        return TxnSeed(
            consumed_through=self._consumed_through,
            pending=pending,
            ongoing_aborted=tuple(
                (pid, ongoing.txn, ongoing.last_observed_batch_offset)
                for pid, ongoing in sorted(self._ongoing_aborted.items())
            ),
            ongoing_committed=tuple(sorted(self._ongoing_committed)),
        )

    def apply_event(self, last_offset: int, producer_id: int, kind: int) -> None:
        """Replay one recorded header: a transactional data batch (``TXN_DATA``) or a COMMIT/ABORT marker.

        Args:
            last_offset: the batch's last offset.
            producer_id: its producer.
            kind: ``TXN_DATA``, ``CONTROL_TYPE_ABORT`` or ``CONTROL_TYPE_COMMIT``.
        """
        self._consume_aborted_up_to(last_offset)
        if kind == TXN_DATA:
            self._on_transactional_data(producer_id, last_offset)
        else:
            self._on_marker(producer_id, kind)

    def advance_to(self, offset: int) -> None:
        """Take from the heap every entry starting at or below ``offset`` (what reading a batch that
        ends there does first); replays a segment's untracked batches in one step."""
        self._consume_aborted_up_to(offset)

    def add_aborted(self, aborted: Iterable[TxnT]) -> None:
        """Add aborted transactions read from the transaction indexes (duplicates are harmless).

        Args:
            aborted: ``AbortedTxn`` entries, in any order.
        """
        for txn in aborted:
            heapq.heappush(self._heap, (txn.first_offset, next(self._tiebreak), txn))

    def on_control_batch_read(self, batch: BatchLike, control_type: int | None) -> bool:
        """Account for a control batch met in log order.

        Args:
            batch: the control batch.
            control_type: the ControlRecordType of its first record, or None when it has no records
                (a marker the cleaner already emptied).

        Returns:
            True when the batch can be discarded as far as transactions are concerned.
        """
        self._consume_aborted_up_to(batch.last_offset)
        if control_type is None:
            return True  # an emptied marker: its transaction is gone already
        return self._on_marker(batch.producer_id, control_type)

    def _on_marker(self, producer_id: int, control_type: int) -> bool:
        if control_type == CONTROL_TYPE_ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing.last_observed_batch_offset is not None:
                # data of this transaction is still in the log: keep the marker and its index entry
                if self._collect:
                    self._retained.append(ongoing.txn)
                return False
            return True
        if control_type == CONTROL_TYPE_COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False  # LEADER_CHANGE, KRaft records, unknown types: never discarded here

    def on_batch_read(self, batch: BatchLike) -> bool:
        """Account for a data batch met in log order.

        Args:
            batch: the data batch.

        Returns:
            True when the batch belongs to an aborted transaction (its records can all go).
        """
        self._consume_aborted_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        return self._on_transactional_data(batch.producer_id, batch.last_offset)

    def _on_transactional_data(self, producer_id: int, last_offset: int) -> bool:
        ongoing = self._ongoing_aborted.get(producer_id)
        if ongoing is not None:
            ongoing.last_observed_batch_offset = last_offset
            return True
        self._ongoing_committed.add(producer_id)
        return False

    def take_retained_aborted(self) -> list[TxnT]:
        """Return and forget the index entries of ABORT markers kept since the last call.

        Returns:
            The original ``AbortedTxn`` entries, in marker order (strictly increasing ``last_offset``),
            to append to the current output segment's ``.txnindex``.
        """
        retained, self._retained = self._retained, []
        return retained

    def _consume_aborted_up_to(self, offset: int) -> None:
        self._consumed_through = max(self._consumed_through, offset)
        heap = self._heap
        while heap and heap[0][0] <= offset:
            txn = heapq.heappop(heap)[2]
            if txn.producer_id not in self._ongoing_aborted:
                self._ongoing_aborted[txn.producer_id] = _OngoingAborted(txn)
