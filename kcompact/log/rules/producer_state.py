"""Producer state as a broker would hold it after loading the log: Kafka's ``ProducerStateManager`` rules.

Why: the cleaner must keep, for every producer the broker still considers active, the batch carrying
its last sequence number (or, when its last entry is a transaction marker, that marker, which carries
the latest epoch) - even when every record in it is otherwise removable - or the producer's next
idempotent send fails with an out-of-order sequence after a restart. And the cleaner must not touch
anything from the first still-undecided transaction on (the last stable offset). Both come from
replaying the partition's batches in offset order, optionally on top of a producer snapshot
(``<offset>.snapshot``, ``ProducerStateManager.readSnapshot``), with the rules of Kafka 4.1's ``ProducerAppendInfo`` /
``ProducerStateEntry`` / ``ProducerStateManager``:

* only batches with a producer id (``producer_id > -1``) count; legacy data never has one;
* data batch: switch to its epoch (an epoch change forgets the producer's last data offset), then
  ``last_data_offset = batch.last_offset``, ``last_timestamp = batch.max_timestamp``; a transactional
  batch opens a transaction at its ``base_offset`` unless one is open;
* COMMIT/ABORT marker: switch to its epoch (same rule), close the open transaction,
  ``last_timestamp`` = the marker record's timestamp;
* a control batch without records (a marker the cleaner emptied) changes nothing - but, as in Kafka, it
  creates an empty entry (epoch -1, timestamp -1) for a producer not seen before;
* a producer is expired when it has no open transaction and ``now - last_timestamp >= expiration``.

Choices where the broker's state cannot be known exactly (each errs on the side of keeping a producer,
since an extra 61-byte shell is harmless and a dropped one breaks idempotence):

* expiry is judged only when asked (:meth:`ProducerStateReplay.last_records_of_active_producers`) and,
  when a clock is given, when seeding; the broker also purges every 10 minutes while replaying, so a
  producer idle for longer than the expiration in the *middle* of the log and then back with the same
  epoch is treated here as one continuous producer;
* a control record type other than COMMIT/ABORT on a producer's control batch (Kafka refuses to load
  it) is ignored;
* a non-transactional data batch while a transaction is open (Kafka refuses it) updates the data offset
  and leaves the transaction open.

Replaying a log that was already cleaned loses what emptied markers said (Kafka's replay ignores them
too); seed from the newest snapshot and replay only the batches after it to match the broker exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kcompact.log.rules.transactions import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    NO_PRODUCER_ID,
    BatchLike,
)
from kcompact.value import frozen, mutable

__all__ = [
    "NO_COORDINATOR_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "LastRecord",
    "OpenTxn",
    "ProducerSnapshotEntryLike",
    "ProducerState",
    "ProducerStateReplay",
    "last_stable_offset",
]

# RecordBatch.NO_PRODUCER_EPOCH: the epoch of an entry that has seen no batch yet
NO_PRODUCER_EPOCH = -1
NO_TIMESTAMP = -1  # RecordBatch.NO_TIMESTAMP
NO_SEQUENCE = -1  # RecordBatch.NO_SEQUENCE
NO_COORDINATOR_EPOCH = -1  # ProducerStateEntry.empty's coordinator epoch


class ProducerSnapshotEntryLike(Protocol):
    """One entry of a producer snapshot (``kcompact`` snapshot reader), as read here."""

    @property
    def producer_id(self) -> int: ...

    @property
    def producer_epoch(self) -> int: ...

    @property
    def last_offset(self) -> int: ...  # last data offset, -1 when none

    @property
    def timestamp(self) -> int: ...

    @property
    def current_txn_first_offset(self) -> int: ...  # -1 when no transaction is open

    @property
    def last_sequence(self) -> int: ...  # -1 when none

    @property
    def coordinator_epoch(self) -> int: ...  # -1 when no marker was seen


@frozen
class LastRecord:
    """A live producer's last entry: Kafka's ``LastRecord`` (``lastRecordsOfActiveProducers``).

    ``last_data_offset`` is the last offset of its last data batch, or None when its last entry is a
    marker of a newer epoch (or it never wrote data).
    """

    last_data_offset: int | None
    producer_epoch: int


@frozen
class OpenTxn:
    """A transaction that has data but no COMMIT/ABORT marker yet."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    last_timestamp: int


@frozen
class ProducerState:
    """One producer's state after the replay (for reports)."""

    producer_id: int
    producer_epoch: int
    last_data_offset: int | None
    last_timestamp: int
    current_txn_first_offset: int | None
    last_sequence: int = NO_SEQUENCE  # ProducerStateEntry.lastSeq
    coordinator_epoch: int = NO_COORDINATOR_EPOCH  # the last marker's, -1 before any


@mutable
class _Entry:
    """One producer's state as Kafka's ``ProducerStateEntry`` keeps it, updated batch by batch."""

    producer_epoch: int = NO_PRODUCER_EPOCH
    last_data_offset: int | None = None
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    last_sequence: int = NO_SEQUENCE
    coordinator_epoch: int = NO_COORDINATOR_EPOCH

    def switch_epoch(self, producer_epoch: int) -> None:
        # ProducerStateEntry.maybeUpdateProducerEpoch: a new epoch drops the batch metadata (and
        # with it the last sequence)
        if producer_epoch != self.producer_epoch:
            self.producer_epoch = producer_epoch
            self.last_data_offset = None
            self.last_sequence = NO_SEQUENCE

    def is_expired(self, now_ms: int, expiration_ms: int) -> bool:
        return (
            self.current_txn_first_offset is None and now_ms - self.last_timestamp >= expiration_ms
        )


class ProducerStateReplay:
    """Per-producer state built by replaying batches in offset order.

    Args:
        high_watermark: the partition's high watermark, when known. A transaction whose marker lies at
            or after it still counts as unstable for :meth:`first_unstable_offset`, as in Kafka (whose
            ``unreplicatedTxns`` wait for the high watermark to pass the marker). None treats every
            applied marker as replicated.
    """

    def __init__(self, *, high_watermark: int | None = None) -> None:
        self.high_watermark = high_watermark
        self._producers: dict[int, _Entry] = {}
        # first offset -> producer id of decided transactions whose marker is at/after the HW
        self._unreplicated: dict[int, int] = {}

    def seed(
        self,
        entries: Iterable[ProducerSnapshotEntryLike],
        *,
        now_ms: int | None = None,
        expiration_ms: int | None = None,
    ) -> None:
        """Start from a producer snapshot's entries (call before :meth:`apply`).

        Args:
            entries: the snapshot's entries; each replaces any state of its producer.
            now_ms: with ``expiration_ms``, drop the entries Kafka's loader drops as expired.
            expiration_ms: ``producer.id.expiration.ms``.
        """
        for item in entries:
            entry = _Entry(
                producer_epoch=item.producer_epoch,
                last_data_offset=item.last_offset if item.last_offset >= 0 else None,
                last_timestamp=item.timestamp,
                current_txn_first_offset=(
                    item.current_txn_first_offset if item.current_txn_first_offset >= 0 else None
                ),
                # ProducerStateManager.readSnapshot: no batch metadata (so no sequence) without an offset
                last_sequence=item.last_sequence if item.last_offset >= 0 else NO_SEQUENCE,
                coordinator_epoch=item.coordinator_epoch,
            )
            expired_at_load = (
                now_ms is not None
                and expiration_ms is not None
                and entry.is_expired(now_ms, expiration_ms)
            )
            if not expired_at_load:
                self._producers[item.producer_id] = entry

    def apply(
        self,
        batch: BatchLike,
        *,
        control_type: int | None = None,
        marker_timestamp: int | None = None,
        coordinator_epoch: int | None = None,
    ) -> None:
        """Apply the next batch of the log.

        Args:
            batch: the batch (data or control); batches without a producer id are ignored.
            control_type: for a control batch, the ControlRecordType of its record, or None when it
                has no records.
            marker_timestamp: for a marker, its record's timestamp. Defaults to ``batch.max_timestamp``,
                which equals it for any one-record marker batch.
            coordinator_epoch: for a marker, the coordinator epoch of its ``EndTransactionMarker``
                (None leaves the producer's as it was).
        """
        producer_id = batch.producer_id
        if producer_id <= NO_PRODUCER_ID:
            return
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = _Entry()
        if not batch.is_control:
            self._apply_data(entry, batch)
        elif control_type in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
            self._apply_marker(entry, producer_id, batch, marker_timestamp)
            if coordinator_epoch is not None:  # ProducerAppendInfo.appendEndTxnMarker
                entry.coordinator_epoch = coordinator_epoch

    def _apply_data(self, entry: _Entry, batch: BatchLike) -> None:
        entry.switch_epoch(batch.producer_epoch)
        entry.last_data_offset = batch.last_offset
        entry.last_timestamp = batch.max_timestamp
        # a v2 batch's base sequence plus its last offset delta; BatchLike fakes may not carry it
        entry.last_sequence = getattr(batch, "last_sequence", NO_SEQUENCE)
        if batch.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = batch.base_offset

    def _apply_marker(
        self, entry: _Entry, producer_id: int, batch: BatchLike, marker_timestamp: int | None
    ) -> None:
        first_offset = entry.current_txn_first_offset
        marker_offset = batch.base_offset
        hw = self.high_watermark
        if first_offset is not None and hw is not None and marker_offset >= hw:
            self._unreplicated[first_offset] = producer_id  # decided, but not yet replicated
        entry.switch_epoch(batch.producer_epoch)
        entry.current_txn_first_offset = None
        entry.last_timestamp = batch.max_timestamp if marker_timestamp is None else marker_timestamp

    def last_records_of_active_producers(
        self, now_ms: int, expiration_ms: int
    ) -> dict[int, LastRecord]:
        """The cleaner's view of live producers: Kafka's ``UnifiedLog.lastRecordsOfActiveProducers``.

        Args:
            now_ms: the clock the expiry is judged by.
            expiration_ms: ``producer.id.expiration.ms`` (default 86 400 000).

        Returns:
            For every producer not expired, its last data offset (or None) and epoch.
        """
        return {
            producer_id: LastRecord(entry.last_data_offset, entry.producer_epoch)
            for producer_id, entry in self._producers.items()
            if not entry.is_expired(now_ms, expiration_ms)
        }

    def open_transactions(self) -> list[OpenTxn]:
        """Transactions with data and no marker yet, by first offset.

        Returns:
            One :class:`OpenTxn` per producer with an open transaction.
        """
        found = [
            OpenTxn(producer_id, e.producer_epoch, e.current_txn_first_offset, e.last_timestamp)
            for producer_id, e in self._producers.items()
            if e.current_txn_first_offset is not None
        ]
        return sorted(found, key=lambda txn: txn.first_offset)

    def first_unstable_offset(self) -> int | None:
        """Kafka's ``firstUnstableOffset``: the earliest first offset of an undecided transaction, or
        of a decided one whose marker is not below the high watermark.

        Returns:
            That offset, or None when every transaction is decided and replicated.
        """
        firsts = [
            e.current_txn_first_offset
            for e in self._producers.values()
            if e.current_txn_first_offset is not None
        ]
        firsts.extend(self._unreplicated)
        return min(firsts) if firsts else None

    def last_stable_offset(self, *, log_end_offset: int) -> int:
        """The LSO: ``min(high watermark, first unstable offset)``.

        Args:
            log_end_offset: the partition's LEO; it stands in for the high watermark when none was
                given, and caps one that lies beyond it.

        Returns:
            The last stable offset.
        """
        return last_stable_offset(
            log_end_offset
            if self.high_watermark is None
            else min(self.high_watermark, log_end_offset),
            self.first_unstable_offset(),
        )

    def producers(self) -> dict[int, ProducerState]:
        """Every tracked producer, expired or not.

        Returns:
            Producer id -> its state.
        """
        return {
            producer_id: ProducerState(
                producer_id,
                e.producer_epoch,
                e.last_data_offset,
                e.last_timestamp,
                e.current_txn_first_offset,
                e.last_sequence,
                e.coordinator_epoch,
            )
            for producer_id, e in self._producers.items()
        }


def last_stable_offset(high_watermark: int, first_unstable_offset: int | None) -> int:
    """Kafka's ``UnifiedLog.lastStableOffset``.

    Args:
        high_watermark: the high watermark.
        first_unstable_offset: from :meth:`ProducerStateReplay.first_unstable_offset`.

    Returns:
        The first unstable offset when it is below the high watermark, else the high watermark.
    """
    if first_unstable_offset is not None and first_unstable_offset < high_watermark:
        return first_unstable_offset
    return high_watermark

