"""What the cleaner keeps, batch by batch and record by record: Kafka 4.1's ``Cleaner.cleanInto`` filter.

Why: these few rules decide every byte of the cleaned log, and a broker started on kcompact's output must
find exactly what its own cleaner would have left. They are pure functions of values (the batch header,
the offset map's answer for a key, the clock), so the driver stays free of policy and every rule can be
tested alone. The record bytes themselves are rewritten by ``kcompact.records.filter``, whose
``BatchRetention`` enum is the one used here, so a decision feeds it directly.

Per batch, in log order (``Cleaner.cleanInto``'s ``checkBatchRetention``): :func:`check_batch_retention` first advances
the round's :class:`~kcompact.log.rules.transactions.CleanedTransactionMetadata` (so it must see every batch, once,
in
order), then decides, first match wins:

1. the batch is the last entry of a live producer (its last data batch, or - when the producer's last
   entry is a marker of a newer epoch - a control batch of that epoch) -> ``RETAIN_EMPTY``;
2. ``batch.next_offset == upper_bound_offset`` -> ``RETAIN_EMPTY`` (KAFKA-17076, so the log end survives).
   Kafka 4.1 passes the round's first uncleanable offset; the high-watermark variant (KAFKA-20452) is
   trunk-only, merged in April 2026, and not in any 4.x release this targets;
3. its records are all to be discarded (aborted data; or a discardable marker whose delete horizon has
   passed) -> ``DELETE``;
4. otherwise -> ``DELETE_EMPTY``.

Per record (``Cleaner.shouldRetainRecord``), :func:`should_retain_record`, in Kafka's order: discarded batch -> drop;
control record -> keep (markers are all-or-nothing); beyond the map -> keep; null key -> drop (Kafka counts it as
invalid, see :func:`is_invalid_record`); superseded (``offset < map offset``; an absent key maps to -1) ->
drop; a value -> keep; a tombstone -> keep until its batch's delete horizon (v2) or, for legacy data,
while the segment is newer than the legacy delete horizon.

A batch whose kept records include a tombstone, or that is a discardable marker, gets a delete horizon
``now + delete.retention.ms`` when it has none (:func:`output_delete_horizon`); the next pass at or after
the horizon removes the tombstones / the marker (KIP-534). Kafka 4.1 stamps legacy batches
too, because it rewrites them as v2 (KAFKA-13093).
"""

from __future__ import annotations

from collections.abc import Mapping

from kcompact.log.rules.fence import age_removal_allowed
from kcompact.log.rules.producer_state import LastRecord
from kcompact.log.rules.transactions import (
    NO_PRODUCER_ID,
    BatchLike,
    CleanedTransactionMetadata,
    TxnT,
)
from kcompact.records.filter import BatchRetention
from kcompact.records.varint import INT64_MAX
from kcompact.value import frozen

__all__ = [
    "BatchDecision",
    "check_batch_retention",
    "is_invalid_record",
    "needs_delete_horizon",
    "new_delete_horizon",
    "output_delete_horizon",
    "should_retain_record",
]

MAGIC_VALUE_V2 = 2
_UINT64 = 1 << 64


@frozen
class BatchDecision:
    """The batch-level outcome (Kafka's ``BatchRetentionResult`` plus the filter's own flag).

    Attributes:
        retention: what happens if no record survives.
        discard_batch_records: every record goes (aborted data, or a marker past its horizon).
        contains_marker_for_empty_txn: a marker that is discardable; it needs a delete horizon.
    """

    retention: BatchRetention
    discard_batch_records: bool
    contains_marker_for_empty_txn: bool


def check_batch_retention(
    batch: BatchLike,
    *,
    control_type: int | None,
    txn: CleanedTransactionMetadata[TxnT],
    last_records_of_active_producers: Mapping[int, LastRecord],
    upper_bound_offset: int,
    now_ms: int,
    fence: int | None = None,
) -> BatchDecision:
    """Decide a batch's fate and advance the round's transaction state (call once per batch, in order).

    Args:
        batch: the batch, v2 or legacy.
        control_type: for a control batch, the ControlRecordType of its first record, or None when it
            has no records; ignored for data batches.
        txn: the round's transaction metadata.
        last_records_of_active_producers: from ``ProducerStateReplay.last_records_of_active_producers``.
        upper_bound_offset: the round's first uncleanable offset (Kafka 4.1).
        now_ms: the time the round started.
        fence: the replica fence (``rules.fence``): a marker at or above it outlives its horizon.

    Returns:
        The decision. A legacy batch can come out ``RETAIN_EMPTY`` only by rule 2 (it has no producer
        id); Kafka then fails if none of its records survive, since empty batches need magic 2.
    """
    if batch.is_control:
        can_discard = txn.on_control_batch_read(batch, control_type)
        horizon = batch.delete_horizon_ms if batch.has_delete_horizon else None
        discard_records = (can_discard and horizon is not None and horizon <= now_ms
                           and age_removal_allowed(batch.base_offset, fence))
    else:
        can_discard = txn.on_batch_read(batch)
        discard_records = can_discard
    is_producers_last = batch.producer_id > NO_PRODUCER_ID and _is_last_record_of_producer(
        batch, last_records_of_active_producers
    )
    if is_producers_last or batch.next_offset == upper_bound_offset:  # rules 1 and 2
        retention = BatchRetention.RETAIN_EMPTY
    elif discard_records:
        retention = BatchRetention.DELETE
    else:
        retention = BatchRetention.DELETE_EMPTY
    return BatchDecision(retention, discard_records, can_discard and batch.is_control)


def _is_last_record_of_producer(batch: BatchLike, last_records: Mapping[int, LastRecord]) -> bool:
    last_record = last_records.get(batch.producer_id)
    if last_record is None:
        return False
    if last_record.last_data_offset is not None:
        return batch.last_offset == last_record.last_data_offset
    # the producer's last entry is a marker: keep the marker carrying its current epoch (fencing)
    return batch.is_control and batch.producer_epoch == last_record.producer_epoch


def should_retain_record(
    *,
    batch: BatchLike,
    decision: BatchDecision,
    record_offset: int,
    key_is_null: bool,
    value_is_null: bool,
    map_offset_for_key: int,
    map_latest_offset: int,
    now_ms: int,
    retain_legacy_deletes: bool,
    fence: int | None = None,
) -> bool:
    """Kafka's record filter: keep this record? (The scalar reference for vectorised callers.)

    Args:
        batch: the record's batch.
        decision: the batch's :func:`check_batch_retention` result.
        record_offset: the record's absolute offset.
        key_is_null: the record has no key.
        value_is_null: the record is a tombstone.
        map_offset_for_key: the offset map's latest offset for the key, -1 when absent.
        map_latest_offset: the last offset the offset map covers.
        now_ms: the time the round started.
        retain_legacy_deletes: the source segment's mtime is after the legacy delete horizon.
        fence: the replica fence (``rules.fence``): a tombstone at or above it outlives its horizon.

    Returns:
        True to keep the record.
    """
    if decision.discard_batch_records:
        return False
    if batch.is_control:
        return True
    if record_offset > map_latest_offset:
        return True
    if key_is_null:
        return False
    if record_offset < map_offset_for_key:
        return False
    if not value_is_null or not age_removal_allowed(record_offset, fence):
        return True
    if batch.magic >= MAGIC_VALUE_V2:
        horizon = batch.delete_horizon_ms if batch.has_delete_horizon else None
        return horizon is None or now_ms < horizon
    return retain_legacy_deletes


def is_invalid_record(
    *,
    batch: BatchLike,
    decision: BatchDecision,
    record_offset: int,
    key_is_null: bool,
    map_latest_offset: int,
) -> bool:
    """Whether Kafka counts this record as invalid (a keyless record the map covers, removed).

    Args:
        batch: the record's batch.
        decision: the batch's decision.
        record_offset: the record's offset.
        key_is_null: the record has no key.
        map_latest_offset: the last offset the offset map covers.

    Returns:
        True for the records behind the cleaner's "Found N invalid messages" warning.
    """
    return (
        key_is_null
        and not decision.discard_batch_records
        and not batch.is_control
        and record_offset <= map_latest_offset
    )


def needs_delete_horizon(
    batch: BatchLike, *, any_retained_tombstone: bool, decision: BatchDecision
) -> bool:
    """Whether the rewritten batch must get a new delete horizon (only asked when records survive).

    Args:
        batch: the batch.
        any_retained_tombstone: a kept record has a null value.
        decision: the batch's decision.

    Returns:
        True when it has no horizon yet and holds a kept tombstone or is a discardable marker. Kafka 4.1
        does not check the magic: legacy batches are rewritten as v2 and get a horizon too.
    """
    return (
        any_retained_tombstone or decision.contains_marker_for_empty_txn
    ) and not batch.has_delete_horizon


def new_delete_horizon(now_ms: int, delete_retention_ms: int) -> int:
    """The horizon stamped this round: ``now + delete.retention.ms`` in Java ``long`` arithmetic.

    Args:
        now_ms: the time the round started.
        delete_retention_ms: the topic's ``delete.retention.ms``.

    Returns:
        The sum, wrapped to a signed 64-bit value as Java does. A negative result (only with absurd
        clocks or retentions) means Kafka writes the batch *without* a horizon.
    """
    total = (now_ms + delete_retention_ms) % _UINT64
    return total - _UINT64 if total > INT64_MAX else total


def output_delete_horizon(
    batch: BatchLike,
    *,
    decision: BatchDecision,
    any_retained_tombstone: bool,
    now_ms: int,
    delete_retention_ms: int,
) -> int | None:
    """The horizon the output batch carries when records survive (``kcompact.records.filter`` input).

    Args:
        batch: the batch.
        decision: the batch's decision.
        any_retained_tombstone: a kept record has a null value.
        now_ms: the time the round started.
        delete_retention_ms: the topic's ``delete.retention.ms``.

    Returns:
        A new horizon when :func:`needs_delete_horizon`, else the batch's own (carried over even if no
        tombstone remains); None when there is none or it is negative (Kafka's builder then clears the
        flag).
    """
    if needs_delete_horizon(
        batch, any_retained_tombstone=any_retained_tombstone, decision=decision
    ):
        horizon: int | None = new_delete_horizon(now_ms, delete_retention_ms)
    else:
        horizon = batch.delete_horizon_ms if batch.has_delete_horizon else None
    return horizon if horizon is not None and horizon >= 0 else None
