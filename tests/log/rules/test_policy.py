"""The cleaner's batch and record rules, alone and driven through Kafka's LogCleanerTest scenarios.

The scenario tests run a small in-memory log (:class:`FakeLog`) through transactions + producer state +
policy the way Kafka's ``Cleaner.doClean`` does, and assert what the Kafka test of the same name asserts.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kcompact.log.rules.policy import (
    BatchDecision,
    check_batch_retention,
    is_invalid_record,
    needs_delete_horizon,
    new_delete_horizon,
    output_delete_horizon,
    should_retain_record,
)
from kcompact.log.rules.producer_state import LastRecord, ProducerStateReplay
from kcompact.log.rules.transactions import CleanedTransactionMetadata
from kcompact.records.filter import BatchRetention
from kcompact.records.varint import INT64_MAX
from tests.log.rules.test_transactions import (
    ABORT,
    COMMIT,
    Aborted,
    FakeBatch,
    Rec,
    data,
    marker,
)

DELETE, DELETE_EMPTY, RETAIN_EMPTY = (
    BatchRetention.DELETE,
    BatchRetention.DELETE_EMPTY,
    BatchRetention.RETAIN_EMPTY,
)
DAY_MS = 86_400_000  # delete.retention.ms and producer.id.expiration.ms defaults
LARGE_TS = INT64_MAX - DAY_MS - 1  # LogCleanerTest.largeTimestamp


def decide(
    batch: FakeBatch,
    *,
    live: dict[int, LastRecord] | None = None,
    upper: int = 1_000,
    now: int = 0,
    meta: CleanedTransactionMetadata[Aborted] | None = None,
) -> BatchDecision:
    return check_batch_retention(
        batch,
        control_type=batch.first_record_type,
        txn=meta if meta is not None else CleanedTransactionMetadata(),
        last_records_of_active_producers=live or {},
        upper_bound_offset=upper,
        now_ms=now,
    )


# ---------------------------------------------------------------- batch rules, one at a time


def test_live_producers_last_batch_is_kept_as_a_shell_even_when_aborted() -> None:
    meta: CleanedTransactionMetadata[Aborted] = CleanedTransactionMetadata()
    meta.add_aborted([Aborted(1, 0, 5, 6)])
    d = decide(data(0, 1, pid=1, txn=True), live={1: LastRecord(1, 0)}, meta=meta)
    assert d == BatchDecision(RETAIN_EMPTY, True, False)


def test_last_batch_of_the_round_is_kept_as_a_shell() -> None:
    meta: CleanedTransactionMetadata[Aborted] = CleanedTransactionMetadata()
    meta.add_aborted([Aborted(1, 0, 5, 6)])
    assert decide(data(0, 1, pid=1, txn=True), upper=2, meta=meta).retention is RETAIN_EMPTY
    assert decide(data(0, 1), upper=3).retention is DELETE_EMPTY


def test_aborted_data_is_deleted_and_other_data_filtered() -> None:
    meta: CleanedTransactionMetadata[Aborted] = CleanedTransactionMetadata()
    meta.add_aborted([Aborted(1, 0, 5, 6)])
    assert decide(data(0, 1, pid=1, txn=True), meta=meta) == BatchDecision(DELETE, True, False)
    assert decide(data(2, pid=2, txn=True), meta=meta) == BatchDecision(DELETE_EMPTY, False, False)


def test_rule_one_needs_a_producer_id() -> None:
    assert decide(data(5), live={-1: LastRecord(5, -1)}).retention is DELETE_EMPTY


def test_producer_without_data_offset_keeps_its_marker_of_the_current_epoch() -> None:
    live = {1: LastRecord(None, 3)}
    assert decide(marker(9, 1, COMMIT, epoch=3), live=live).retention is RETAIN_EMPTY
    assert decide(marker(9, 1, COMMIT, epoch=2), live=live).retention is DELETE_EMPTY
    same_epoch_data = replace(data(9, pid=1), producer_epoch=3)
    assert decide(same_epoch_data, live=live).retention is DELETE_EMPTY


def test_producer_with_data_offset_keeps_exactly_that_batch() -> None:
    live = {1: LastRecord(4, 0)}
    assert decide(data(3, 4, pid=1), live=live).retention is RETAIN_EMPTY
    assert decide(data(3, 5, pid=1), live=live).retention is DELETE_EMPTY
    assert decide(data(3, 4, pid=2), live=live).retention is DELETE_EMPTY


@pytest.mark.parametrize(
    ("horizon", "now", "expected"),
    [
        (None, 100, BatchDecision(DELETE_EMPTY, False, True)),  # no horizon yet: stamp it
        (101, 100, BatchDecision(DELETE_EMPTY, False, True)),  # horizon ahead
        (100, 100, BatchDecision(DELETE, True, True)),  # horizon reached: gone
    ],
)
def test_discardable_marker_goes_once_its_horizon_is_reached(
    horizon: int | None, now: int, expected: BatchDecision
) -> None:
    commit = replace(
        marker(0, 1, COMMIT), has_delete_horizon=horizon is not None, delete_horizon_ms=horizon
    )
    assert decide(commit, now=now) == expected


def test_marker_still_needed_is_kept_whatever_its_horizon() -> None:
    meta: CleanedTransactionMetadata[Aborted] = CleanedTransactionMetadata()
    decide(data(0, pid=1, txn=True), meta=meta)
    commit = replace(marker(1, 1, COMMIT), has_delete_horizon=True, delete_horizon_ms=0)
    assert decide(commit, meta=meta, now=50) == BatchDecision(DELETE_EMPTY, False, False)


# ---------------------------------------------------------------- record rules

KEEP_ALL = BatchDecision(DELETE_EMPTY, False, False)


def keep(
    batch: FakeBatch | None = None,
    *,
    decision: BatchDecision = KEEP_ALL,
    offset: int = 5,
    key_is_null: bool = False,
    value_is_null: bool = False,
    map_offset: int = 5,
    map_latest: int = 10,
    now: int = 0,
    legacy_deletes: bool = True,
) -> bool:
    return should_retain_record(
        batch=batch if batch is not None else data(5),
        decision=decision,
        record_offset=offset,
        key_is_null=key_is_null,
        value_is_null=value_is_null,
        map_offset_for_key=map_offset,
        map_latest_offset=map_latest,
        now_ms=now,
        retain_legacy_deletes=legacy_deletes,
    )


def test_record_rules_in_kafkas_order() -> None:
    discard = BatchDecision(RETAIN_EMPTY, True, False)
    assert keep(decision=discard, offset=50) is False  # discarded batch beats "beyond the map"
    assert keep(marker(5, 1, COMMIT), map_offset=9) is True  # control records: all or nothing
    assert keep(offset=11, key_is_null=True) is True  # beyond the map: kept, even keyless
    assert keep(key_is_null=True, map_offset=-1) is False  # keyless inside the map: removed
    assert keep(map_offset=6) is False  # superseded
    assert keep(map_offset=5) is True  # the latest
    assert keep(map_offset=4) is True  # newer than the map's entry (>=, not ==)
    assert keep(map_offset=-1) is True  # key only in the clean section


def test_tombstones_of_v2_batches_live_until_the_horizon() -> None:
    stamped = replace(data(5), has_delete_horizon=True, delete_horizon_ms=100)
    assert keep(data(5), value_is_null=True, now=10**15) is True  # no horizon yet
    assert keep(stamped, value_is_null=True, now=99) is True
    assert keep(stamped, value_is_null=True, now=100) is False
    assert keep(stamped, now=100) is True  # values do not expire
    assert keep(stamped, value_is_null=True, map_offset=6, now=0) is False  # superseded


def test_legacy_tombstones_follow_the_legacy_delete_horizon() -> None:
    legacy = replace(data(5), magic=1)
    assert keep(legacy, value_is_null=True, legacy_deletes=True) is True
    assert keep(legacy, value_is_null=True, legacy_deletes=False) is False
    assert keep(data(5), value_is_null=True, legacy_deletes=False) is True  # v2 ignores it


def test_invalid_records_are_the_removed_keyless_ones() -> None:
    def invalid(offset: int, batch: FakeBatch, decision: BatchDecision = KEEP_ALL) -> bool:
        return is_invalid_record(
            batch=batch, decision=decision, record_offset=offset, key_is_null=True,
            map_latest_offset=10,
        )

    assert invalid(5, data(5)) is True
    assert invalid(11, data(11)) is False
    assert invalid(5, data(5), BatchDecision(DELETE, True, False)) is False


def test_delete_horizon_is_needed_for_kept_tombstones_and_discardable_markers() -> None:
    marker_decision = BatchDecision(DELETE_EMPTY, False, True)
    stamped = replace(data(0), has_delete_horizon=True, delete_horizon_ms=7)
    assert needs_delete_horizon(data(0), any_retained_tombstone=True, decision=KEEP_ALL)
    assert needs_delete_horizon(data(0), any_retained_tombstone=False, decision=marker_decision)
    assert not needs_delete_horizon(data(0), any_retained_tombstone=False, decision=KEEP_ALL)
    assert not needs_delete_horizon(stamped, any_retained_tombstone=True, decision=KEEP_ALL)
    legacy = replace(data(0), magic=0)  # rewritten as v2 by Kafka 4.x, so stamped too
    assert needs_delete_horizon(legacy, any_retained_tombstone=True, decision=KEEP_ALL)


def test_output_horizon_is_new_carried_over_or_none() -> None:
    def horizon(batch: FakeBatch, tombstone: bool, now: int = 1_000) -> int | None:
        return output_delete_horizon(
            batch, decision=KEEP_ALL, any_retained_tombstone=tombstone, now_ms=now,
            delete_retention_ms=DAY_MS,
        )

    assert horizon(data(0), True) == 1_000 + DAY_MS
    assert horizon(data(0), False) is None
    stamped = replace(data(0), has_delete_horizon=True, delete_horizon_ms=7)
    assert horizon(stamped, False) == 7  # carried over although no tombstone is left
    assert horizon(data(0), True, now=INT64_MAX) is None  # Java overflow: Kafka writes none


def test_new_delete_horizon_wraps_like_a_java_long() -> None:
    assert new_delete_horizon(1_000, DAY_MS) == 1_000 + DAY_MS
    assert new_delete_horizon(LARGE_TS, DAY_MS) == INT64_MAX - 1
    assert new_delete_horizon(INT64_MAX, DAY_MS) == -(2**63) + DAY_MS - 1


def test_real_record_batches_satisfy_the_protocol() -> None:
    from kcompact.records.batch import decode_batch
    from kcompact.records.batch_encoding import encode_batch
    from kcompact.records.record import Record
    from tests.encoders import encode_control_batch

    raw = encode_batch(
        [Record(40, 5, b"k", None)], base_offset=40, producer_id=3, producer_epoch=1,
        base_sequence=0, is_transactional=True, delete_horizon_ms=500,
    )
    batch = decode_batch(raw)
    live = {3: LastRecord(40, 1)}
    meta: CleanedTransactionMetadata[Aborted] = CleanedTransactionMetadata()
    decision = check_batch_retention(
        batch, control_type=None, txn=meta, last_records_of_active_producers=live,
        upper_bound_offset=99, now_ms=0,
    )
    assert decision == BatchDecision(RETAIN_EMPTY, False, False)
    assert should_retain_record(
        batch=batch, decision=decision, record_offset=40, key_is_null=False, value_is_null=True,
        map_offset_for_key=40, map_latest_offset=40, now_ms=500, retain_legacy_deletes=True,
    ) is False  # its horizon (500) has been reached
    commit = decode_batch(
        encode_control_batch(offset=41, timestamp=7, producer_id=3, producer_epoch=1,
                             control_type=COMMIT)
    )
    replay = ProducerStateReplay()
    replay.apply(batch)
    replay.apply(commit, control_type=COMMIT)
    assert replay.last_records_of_active_producers(7, DAY_MS) == {3: LastRecord(40, 1)}
    assert check_batch_retention(
        commit, control_type=COMMIT, txn=meta, last_records_of_active_producers=live,
        upper_bound_offset=42, now_ms=0,
    ) == BatchDecision(RETAIN_EMPTY, False, False)


# ---------------------------------------------------------------- an in-memory log and Kafka's doClean

UNBOUNDED = 1 << 62


class FakeLog:
    """Segments of :class:`FakeBatch`, per-segment aborted-transaction indexes, and the broker's
    producer state kept up to date on append - a miniature of Kafka's ``UnifiedLog`` for these tests.

    ``clean`` follows ``Cleaner.doClean``: build the offset map over ``[first_dirty, active base)``
    (skipping control batches, aborted data and keyless records; stopping when ``max_keys`` are mapped),
    then filter every segment below the map's end through one ``CleanedTransactionMetadata``, one
    segment per group. Like LogCleanerTest's reused ``FakeOffsetMap``, the map's latest offset survives
    a clean whose dirty range is empty.
    """

    def __init__(self, *, delete_retention_ms: int = DAY_MS) -> None:
        self.segments: list[list[FakeBatch]] = [[]]
        self.bases = [0]
        self.indexes: list[list[Aborted]] = [[]]
        self.leo = 0
        self.clock = 1_700_000_000_000  # MockTime; record and marker timestamps
        self.delete_retention_ms = delete_retention_ms
        self.producers = ProducerStateReplay()  # the broker's in-memory producer state
        self.sequences: dict[int, int] = {}
        self.map_latest = -1
        self.invalid = 0

    # -- appending
    def _append(self, batch: FakeBatch) -> FakeBatch:
        self.segments[-1].append(batch)
        self.leo = batch.next_offset
        self.producers.apply(batch, control_type=batch.first_record_type)
        return batch

    def append(
        self, *keys: int, values: list[bytes | None] | None = None, pid: int = -1, epoch: int = 0,
        txn: bool = False, seq: int | None = None,
    ) -> FakeBatch:
        vals = values if values is not None else [str(k).encode() for k in keys]
        recs = tuple(
            Rec(self.leo + i, str(k).encode(), v) for i, (k, v) in enumerate(zip(keys, vals, strict=True))
        )
        first_seq = -1
        if pid >= 0:
            first_seq = self.sequences.get(pid, 0) if seq is None else seq
            self.sequences[pid] = first_seq + len(recs)
        return self._append(FakeBatch(
            self.leo, self.leo + len(recs) - 1, pid, epoch if pid >= 0 else -1, txn,
            records=recs, max_timestamp=self.clock, base_sequence=first_seq,
        ))

    def append_marker(self, pid: int, kind: int, epoch: int = 0) -> FakeBatch:
        offset = self.leo
        open_txns = self.producers.open_transactions()
        mine = [t for t in open_txns if t.producer_id == pid]
        if kind == ABORT and mine:  # ProducerStateManager.lastStableOffset(completedTxn)
            others = [t.first_offset for t in open_txns if t.producer_id != pid]
            lso = others[0] if others else offset + 1
            self.indexes[-1].append(Aborted(pid, mine[0].first_offset, offset, lso))
        return self._append(replace(marker(offset, pid, kind, epoch=epoch), max_timestamp=self.clock))

    def roll(self) -> None:
        self.segments.append([])
        self.bases.append(self.leo)
        self.indexes.append([])

    # -- reading, as LogCleanerTest's helpers do
    def batches(self) -> list[FakeBatch]:
        return [b for seg in self.segments for b in seg]

    def last_offsets(self) -> list[int]:
        return [b.last_offset for b in self.batches()]

    def batch_bases(self) -> list[int]:
        return [b.base_offset for b in self.batches()]

    def offsets(self) -> list[int]:  # records with a key and a value, markers included
        return [r.offset for b in self.batches() for r in b.records if r.key and r.value]

    def keys(self) -> list[int]:
        return [
            int(r.key) for b in self.batches() if not b.is_control
            for r in b.records if r.key is not None and r.value is not None
        ]

    def last_sequences(self) -> dict[int, int]:
        return {
            b.producer_id: b.base_sequence + b.last_offset - b.base_offset
            for b in self.batches() if not b.is_control and b.producer_id >= 0
        }

    def collect_aborted(self, start: int, end: int) -> list[Aborted]:
        """``UnifiedLog.collectAbortedTransactions``: from the segment holding ``start`` on."""
        first = max(i for i, base in enumerate(self.bases) if base <= start)
        found = []
        for index in self.indexes[first:]:
            for txn in index:
                if txn.last_offset >= start and txn.first_offset < end:
                    found.append(txn)
                if txn.last_stable_offset >= end:
                    return found
        return found

    # -- cleaning
    def clean(self, first_dirty: int, now: int | None = None, *, max_keys: int = UNBOUNDED,
              upper_bound: int | None = None, fresh_map: bool = False) -> int:
        """One ``doClean``; returns the next dirty offset."""
        uncleanable = self.bases[-1]
        if fresh_map:
            self.map_latest = -1
        key_map = self.build_map(first_dirty, uncleanable, max_keys)
        end = self.map_latest + 1
        count = sum(1 for base in self.bases[:-1] if base < end)
        self.clean_segments(count, key_map, self.map_latest,
                            uncleanable if upper_bound is None else upper_bound,
                            self.clock if now is None else now)
        return end

    def two_pass_clean(self, first_dirty: int, now: int) -> int:
        """LogCleanerTest.runTwoPassClean."""
        self.clean(first_dirty, now)
        return self.clean(first_dirty, now + DAY_MS + 1)

    def build_map(self, start: int, end: int, max_keys: int) -> dict[bytes, int]:
        meta: CleanedTransactionMetadata[Aborted] = CleanedTransactionMetadata(
            collect_index_entries=False
        )
        meta.add_aborted(self.collect_aborted(start, end))
        key_map: dict[bytes, int] = {}
        dirty = [i for i in range(len(self.bases) - 1)
                 if self.bases[i] < end and self.bases[i + 1] > start]
        for n, i in enumerate(dirty):
            for batch in self.segments[i]:
                if batch.is_control:
                    meta.on_control_batch_read(batch, batch.first_record_type)
                elif not meta.on_batch_read(batch):
                    for rec in batch.records:
                        if rec.key is None or rec.offset < start:
                            continue
                        if len(key_map) >= max_keys:
                            return key_map  # full: the round ends here
                        key_map[rec.key] = self.map_latest = rec.offset
                if batch.last_offset >= start:
                    self.map_latest = batch.last_offset
            self.map_latest = (self.bases[dirty[n + 1]] if n + 1 < len(dirty) else end) - 1
        return key_map

    def clean_segments(self, count: int, key_map: dict[bytes, int], map_latest: int,
                       upper_bound: int, now: int) -> None:
        """``cleanSegments`` for each of the first ``count`` segments (one segment per group)."""
        meta: CleanedTransactionMetadata[Aborted] = CleanedTransactionMetadata()
        live = self.producers.last_records_of_active_producers(self.clock, DAY_MS)
        for i in range(count):
            seg_end = self.bases[i + 1] if i + 1 < len(self.bases) else self.leo
            meta.add_aborted(self.collect_aborted(self.bases[i], seg_end))
            out = []
            for batch in self.segments[i]:
                decision = check_batch_retention(
                    batch, control_type=batch.first_record_type, txn=meta,
                    last_records_of_active_producers=live, upper_bound_offset=upper_bound,
                    now_ms=now,
                )
                if decision.retention is not DELETE:
                    kept = self._filter(batch, decision, key_map, map_latest, now)
                    if kept is not None:
                        out.append(kept)
            self.segments[i] = out
            self.indexes[i] = meta.take_retained_aborted()

    def _filter(self, batch: FakeBatch, decision: BatchDecision, key_map: dict[bytes, int],
                map_latest: int, now: int) -> FakeBatch | None:
        kept = []
        for rec in batch.records:
            key_is_null = rec.key is None
            self.invalid += is_invalid_record(
                batch=batch, decision=decision, record_offset=rec.offset,
                key_is_null=key_is_null, map_latest_offset=map_latest,
            )
            if should_retain_record(
                batch=batch, decision=decision, record_offset=rec.offset,
                key_is_null=key_is_null, value_is_null=rec.value is None,
                map_offset_for_key=-1 if rec.key is None else key_map.get(rec.key, -1),
                map_latest_offset=map_latest, now_ms=now, retain_legacy_deletes=True,
            ):
                kept.append(rec)
        if not kept:
            if decision.retention is RETAIN_EMPTY:
                return replace(batch, records=(), has_delete_horizon=False, delete_horizon_ms=None)
            return None
        horizon = output_delete_horizon(
            batch, decision=decision, any_retained_tombstone=any(r.value is None for r in kept),
            now_ms=now, delete_retention_ms=self.delete_retention_ms,
        )
        return replace(batch, records=tuple(kept), has_delete_horizon=horizon is not None,
                       delete_horizon_ms=horizon)


# ---------------------------------------------------------------- LogCleanerTest, idempotent producers


def test_log_cleaner_retains_producer_last_sequence() -> None:
    log = FakeLog()
    log.append(0, values=[b"0"])  # offset 0
    log.append(0, values=[b"1"], pid=1)  # 1
    log.append(0, values=[b"2"], pid=2)  # 2
    log.append(0, values=[b"3"], pid=3)  # 3
    log.append(1, values=[b"1"], pid=2)  # 4
    log.roll()
    log.clean(0, max_keys=7)
    assert log.last_offsets() == [1, 3, 4]
    assert log.last_sequences() == {1: 0, 2: 1, 3: 0}
    assert log.keys() == [0, 1]
    assert log.offsets() == [3, 4]


def test_empty_batch_removal_with_sequence_reuse() -> None:
    log = FakeLog()
    log.append(1, pid=1, txn=True, seq=0)  # 0
    log.append_marker(1, COMMIT)  # 1
    log.append(2, pid=1, txn=True, seq=0)  # 2: the coordinator reuses sequence 0
    log.append_marker(1, COMMIT)  # 3
    log.append(1, values=[b"1"])  # 4
    log.append(2, values=[b"1"])  # 5
    log.roll()
    log.clean(0, LARGE_TS)
    assert log.offsets() == [1, 3, 4, 5]
    assert log.last_offsets() == [1, 2, 3, 4, 5]
    log.two_pass_clean(0, LARGE_TS)
    assert log.offsets() == [3, 4, 5]
    assert log.last_offsets() == [2, 3, 4, 5]


def test_clean_segments_retaining_last_empty_batch() -> None:
    # KAFKA-17076 as in Kafka 4.1: the upper bound is the round's end, not the high watermark
    log = FakeLog()
    for _ in range(3):
        for _ in range(4):
            log.append(log.leo)
        log.roll()
    log.append(log.leo)
    every_key = {str(k).encode(): INT64_MAX for k in range(log.leo)}
    log.clean_segments(3, every_key, INT64_MAX, upper_bound=log.bases[3], now=0)
    cleaned = [b for seg in log.segments[:3] for b in seg]
    assert [(b.last_offset, b.records) for b in cleaned] == [(11, ())]  # the round's last batch


def test_replaying_the_cleaned_log_finds_the_same_last_data_batches() -> None:
    # the substance of testDuplicateCheckAfterCleaning: a reload still sees each producer's last batch
    log = FakeLog()
    log.append(1, 2, 3, pid=1)
    log.append(3, 1, 4, pid=2)
    log.append(1, 4, pid=3)
    log.roll()
    log.clean(0)
    assert log.last_offsets() == [2, 5, 7]
    assert log.last_sequences() == {1: 2, 2: 2, 3: 1}
    assert log.keys() == [2, 3, 1, 4]
    assert log.offsets() == [1, 3, 6, 7]
    reloaded = ProducerStateReplay()
    for batch in log.batches():
        reloaded.apply(batch, control_type=batch.first_record_type)
    assert reloaded.last_records_of_active_producers(log.clock, DAY_MS) == (
        log.producers.last_records_of_active_producers(log.clock, DAY_MS)
    )


# ---------------------------------------------------------------- LogCleanerTest, transactions


def test_basic_transaction_aware_cleaning() -> None:
    log = FakeLog()
    log.append(1, 2, pid=1, txn=True)
    log.append(2, 3, pid=2, txn=True)
    log.append(3, 4, pid=1, txn=True)
    log.append_marker(1, ABORT)
    log.append_marker(2, COMMIT)
    log.append(2, pid=1, txn=True)
    log.append_marker(1, COMMIT)
    aborted = log.collect_aborted(0, log.leo)
    assert aborted == [Aborted(1, 0, 6, 2)]
    log.roll()
    log.clean(0)
    assert log.keys() == [3, 2]
    assert log.offsets() == [3, 6, 7, 8, 9]
    assert log.collect_aborted(0, log.leo) == aborted


def test_clean_with_transactions_spanning_segments() -> None:
    log = FakeLog()
    log.append(1, 2, pid=1, txn=True)
    log.append(2, 3, pid=3, txn=True)
    log.append(3, 4, pid=2, txn=True)
    log.roll()
    log.append(5, 6, pid=2, txn=True)
    log.append(6, 7, pid=3, txn=True)
    log.append(7, 8, pid=1, txn=True)
    log.append_marker(2, ABORT)
    log.append(8, 9, pid=3, txn=True)
    log.append_marker(3, COMMIT)
    log.append(9, 10, pid=1, txn=True)
    log.append_marker(1, ABORT)
    dirty = log.clean(0)  # only the first segment is cleanable
    assert log.keys() == [2, 3, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10]
    log.roll()
    log.append(11, pid=2, txn=True)
    log.append(12, pid=1, txn=True)
    log.clean(dirty)
    assert log.keys() == [2, 3, 6, 7, 8, 9, 11, 12]


def test_multi_pass_segment_cleaning_with_aborted_transactions() -> None:
    log = FakeLog(delete_retention_ms=50_000)
    log.append(1, 2, pid=1, txn=True)  # [0, 1]
    log.append(2, 3, pid=2, txn=True)  # [2, 3]
    log.append(3, 4, pid=1, txn=True)  # [4, 5]
    log.append_marker(1, COMMIT)  # 6
    log.append_marker(2, COMMIT)  # 7
    log.append(2, 3, pid=1, txn=True)  # [8, 9]
    log.append_marker(1, ABORT)  # 10
    log.append(4, 5, pid=2, txn=True)  # [11, 12]
    log.append(5, 6, pid=1, txn=True)  # [13, 14]
    log.append_marker(1, COMMIT)  # 15
    log.append_marker(2, ABORT)  # 16
    log.append(6, 7, pid=2, txn=True)  # [17, 18]
    log.append_marker(2, COMMIT)  # 19
    log.roll()
    expected_aborted = [Aborted(1, 8, 10, 11), Aborted(2, 11, 16, 17)]
    assert log.collect_aborted(0, log.leo) == expected_aborted
    assert log.producers.open_transactions() == []

    def clean(dirty: int) -> int:  # a 4-slot map at load factor 0.75 holds 3 keys
        return log.clean(dirty, max_keys=3, upper_bound=INT64_MAX, fresh_map=True)

    # pass 1: aborted data goes; markers and index entries stay
    dirty = clean(0)
    assert dirty == 4
    assert log.batch_bases() == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert log.offsets() == [0, 2, 3, 4, 5, 6, 7, 10, 13, 14, 15, 16, 17, 18, 19]
    assert log.collect_aborted(0, log.leo) == expected_aborted
    # pass 2: no aborted data left, so no index entries; the markers wait for their horizon
    dirty = clean(dirty)
    assert dirty == 14
    assert log.batch_bases() == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert log.offsets() == [0, 2, 4, 5, 6, 7, 10, 13, 14, 15, 16, 17, 18, 19]
    assert log.collect_aborted(0, log.leo) == []
    # pass 3, after delete.retention.ms: the abort markers are gone
    log.clock += 50_000
    dirty = clean(dirty)
    assert dirty == 20
    assert log.batch_bases() == [0, 2, 4, 6, 7, 13, 15, 17, 19]
    assert log.offsets() == [0, 2, 4, 5, 6, 7, 13, 15, 17, 18, 19]
    assert log.collect_aborted(0, log.leo) == []


def test_commit_marker_removal() -> None:
    log = FakeLog()
    log.append(1, pid=1, txn=True)
    log.append(2, 3, pid=1, txn=True)
    log.append_marker(1, COMMIT)
    log.append(2, pid=1, txn=True)
    log.append_marker(1, COMMIT)
    log.roll()
    dirty = log.clean(0, LARGE_TS)  # the markers still have data
    assert log.keys() == [1, 3, 2]
    assert log.offsets() == [0, 2, 3, 4, 5]
    log.append(1, 3, pid=1, txn=True)
    log.append_marker(1, COMMIT)
    log.roll()
    dirty = log.clean(dirty, LARGE_TS)  # the commit at 3 stays: its data was read in this pass
    assert log.keys() == [2, 1, 3]
    assert log.offsets() == [3, 4, 5, 6, 7, 8]
    dirty = log.clean(dirty, LARGE_TS)  # now stamped, but not removed at the same time
    assert log.offsets() == [3, 4, 5, 6, 7, 8]
    assert log.batches()[0].delete_horizon_ms == LARGE_TS + DAY_MS
    log.clean(dirty, INT64_MAX)
    assert log.keys() == [2, 1, 3]
    assert log.offsets() == [4, 5, 6, 7, 8]


def test_abort_marker_removal() -> None:
    log = FakeLog()
    log.append(1, pid=1, txn=True)
    log.append(2, 3, pid=1, txn=True)
    log.append_marker(1, ABORT)
    log.append(3, pid=1, txn=True)
    log.append_marker(1, COMMIT)
    log.roll()
    dirty = log.clean(0, LARGE_TS)  # aborted records go, the abort marker stays
    assert log.keys() == [3]
    assert log.offsets() == [3, 4, 5]
    log.two_pass_clean(dirty, LARGE_TS)
    assert log.keys() == [3]
    assert log.offsets() == [4, 5]


def test_deleted_batches_with_no_messages_read() -> None:
    log = FakeLog()
    log.append(1, pid=1, txn=True)
    log.append_marker(1, ABORT)
    log.append(2, pid=1, txn=True)
    log.append(2, pid=1, txn=True)
    log.append_marker(1, COMMIT)
    log.roll()
    log.clean(0, LARGE_TS)
    assert log.keys() == [2]
    assert log.offsets() == [1, 3, 4]
    log.two_pass_clean(0, LARGE_TS)
    assert log.keys() == [2]
    assert log.offsets() == [3, 4]


def test_commit_marker_retention_with_empty_batch() -> None:
    log = FakeLog()
    log.append(2, 3, pid=1, txn=True)  # 0, 1
    log.roll()
    log.append(2, 3, pid=2, txn=True)  # 2, 3
    log.append_marker(2, COMMIT)  # 4
    log.roll()
    log.append(2)  # 5
    log.append(3)  # 6
    log.append_marker(1, COMMIT)  # 7
    log.roll()
    dirty = log.clean(0, LARGE_TS)  # both producers' data batches stay as empty shells
    assert log.keys() == [2, 3]
    assert log.offsets() == [4, 5, 6, 7]
    assert log.last_offsets() == [1, 3, 4, 5, 6, 7]
    dirty = log.clean(dirty, LARGE_TS)
    assert log.offsets() == [4, 5, 6, 7]
    assert log.last_offsets() == [1, 3, 4, 5, 6, 7]
    log.append(1, pid=2, txn=True)  # 8: producer 2 moves on
    log.append_marker(2, COMMIT)  # 9
    log.roll()
    dirty = log.clean(dirty, LARGE_TS)  # its shell goes; its commit at 4 was still needed
    assert log.keys() == [2, 3, 1]
    assert log.offsets() == [4, 5, 6, 7, 8, 9]
    assert log.last_offsets() == [1, 4, 5, 6, 7, 8, 9]
    log.two_pass_clean(dirty, LARGE_TS)
    assert log.keys() == [2, 3, 1]
    assert log.offsets() == [5, 6, 7, 8, 9]
    assert log.last_offsets() == [1, 5, 6, 7, 8, 9]


def test_clean_empty_control_batch() -> None:
    log = FakeLog()
    log.append_marker(1, COMMIT)  # 0: a marker is producer 1's only entry
    log.append(2)  # 1
    log.append(3)  # 2
    log.roll()
    dirty = log.two_pass_clean(0, LARGE_TS)  # stamped, then emptied but kept for the epoch
    assert log.keys() == [2, 3]
    assert log.offsets() == [1, 2]
    assert log.last_offsets() == [0, 1, 2]
    assert log.batches()[0].records == ()
    log.clean(dirty, INT64_MAX)  # the empty control batch is cleaned without trouble
    assert log.keys() == [2, 3]
    assert log.offsets() == [1, 2]
    assert log.last_offsets() == [0, 1, 2]


def test_committed_transaction_spanning_segments() -> None:
    log = FakeLog()
    log.append(1, pid=1, txn=True)
    log.roll()
    log.append_marker(1, COMMIT)
    log.roll()
    log.two_pass_clean(0, LARGE_TS)
    assert log.offsets() == [0, 1]
    assert log.last_offsets() == [0, 1]


def test_aborted_transaction_spanning_segments() -> None:
    log = FakeLog()
    log.append(1, pid=1, txn=True)
    log.roll()
    log.append_marker(1, ABORT)
    log.roll()
    # the aborted batch is the producer's last entry (a shell); the marker still has its data
    log.clean(0, LARGE_TS)
    assert log.offsets() == [1]
    assert log.last_offsets() == [0, 1]
    log.clean(0, INT64_MAX)
    assert log.offsets() == [1]
    assert log.last_offsets() == [0, 1]
    assert log.collect_aborted(0, 100) == [Aborted(1, 0, 1, 2)]


def test_abort_marker_retention_with_empty_batch() -> None:
    log = FakeLog()
    log.append(2, 3, pid=1, txn=True)  # last offset 1
    log.append_marker(1, ABORT)  # 2
    log.roll()
    indexed = [Aborted(1, 0, 2, 3)]
    assert log.collect_aborted(0, 100) == indexed
    dirty = log.clean(0, LARGE_TS)
    assert log.collect_aborted(0, 100) == indexed
    assert (log.keys(), log.offsets(), log.last_offsets()) == ([], [2], [1, 2])
    dirty = log.two_pass_clean(dirty, LARGE_TS)  # the shell holds the last sequence: all stays
    assert log.collect_aborted(0, 100) == indexed
    assert (log.keys(), log.offsets(), log.last_offsets()) == ([], [2], [1, 2])
    log.append(1, pid=1, txn=True)  # 3
    log.roll()
    dirty = log.clean(dirty, LARGE_TS)  # the shell goes, but was read: marker and entry stay
    assert log.collect_aborted(0, 100) == indexed
    assert (log.keys(), log.offsets(), log.last_offsets()) == ([1], [2, 3], [2, 3])
    log.two_pass_clean(dirty, LARGE_TS)
    assert (log.keys(), log.offsets(), log.last_offsets()) == ([1], [3], [3])
    assert log.collect_aborted(0, 100) == []


def test_log_cleaner_retains_last_sequence_even_if_transaction_aborted() -> None:
    log = FakeLog()
    log.append(1, pid=1, txn=True)
    log.append(2, 3, pid=1, txn=True)
    log.append_marker(1, ABORT)
    log.roll()
    log.clean(0, max_keys=7)
    assert log.last_offsets() == [2, 3]
    assert log.last_sequences() == {1: 2}
    assert (log.keys(), log.offsets()) == ([], [3])
    log.append(1, 5, pid=1, txn=True)
    log.roll()
    log.clean(0, max_keys=7)
    assert log.last_offsets() == [3, 5]
    assert log.last_sequences() == {1: 4}
    assert (log.keys(), log.offsets()) == ([1, 5], [3, 4, 5])


def test_cleaning_with_keys_conflicting_with_txn_marker_keys() -> None:
    log = FakeLog()
    log.append(1, pid=1, txn=True)
    log.append_marker(1, COMMIT)
    commit_key = marker(0, 1, COMMIT).records[0].key
    log._append(FakeBatch(2, 2, 2, 0, True, records=(Rec(2, commit_key, b"foo"),),
                          base_sequence=0))
    log.append_marker(2, COMMIT)
    log.roll()
    assert log.offsets() == [0, 1, 2, 3]
    log.clean(0, max_keys=7)
    assert log.last_offsets() == [0, 1, 2, 3]
    assert log.offsets() == [0, 1, 2, 3]


# ---------------------------------------------------------------- tombstones and null keys (KIP-534)


def test_tombstone_lifecycle() -> None:
    log = FakeLog()
    log.append(1, 2)  # 0, 1
    log.append(1, values=[None])  # 2: the latest for key 1
    log.append(2, values=[None])  # 3: superseded below
    log.append(2)  # 4
    log.append(9)  # 5
    log.roll()
    t0 = 1_000_000
    dirty = log.clean(0, t0)
    assert log.offsets() == [4, 5]  # a tombstone has no value: offsetsInLog skips it
    tombstone = log.batches()[0]
    assert [r.offset for r in tombstone.records] == [2]
    assert tombstone.delete_horizon_ms == t0 + DAY_MS  # the clock starts at the first rewrite
    log.clean(dirty, t0 + DAY_MS - 1)
    assert log.batches()[0] == tombstone  # copied as is
    log.clean(dirty, t0 + DAY_MS)
    assert [b.base_offset for b in log.batches()] == [4, 5]


def test_null_key_records_are_removed_and_counted_invalid() -> None:
    log = FakeLog()
    log._append(FakeBatch(0, 1, records=(Rec(0, None, b"a"), Rec(1, b"1", b"b"))))
    log.append(2)
    log.roll()
    log._append(FakeBatch(3, 3, records=(Rec(3, None, b"c"),)))  # in the active segment
    log.clean(0)
    assert [r.offset for b in log.batches() for r in b.records] == [1, 2, 3]
    assert log.invalid == 1
