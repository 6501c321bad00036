"""ProducerStateReplay: live producers' last entries, open transactions and the last stable offset."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from hypothesis import given
from hypothesis import strategies as st

from kcompact.log.rules.producer_state import (
    LastRecord,
    OpenTxn,
    ProducerStateReplay,
    last_stable_offset,
)
from tests.log.rules.test_transactions import ABORT, COMMIT, FakeBatch, data, marker

EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms default


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """Stand-in for a decoded ``<offset>.snapshot`` entry."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def stamped(batch: FakeBatch, ts: int, epoch: int | None = None) -> FakeBatch:
    epoch = batch.producer_epoch if epoch is None else epoch
    return replace(batch, max_timestamp=ts, producer_epoch=epoch)


def apply_all(replay: ProducerStateReplay, *batches: FakeBatch) -> None:
    for b in batches:
        replay.apply(b, control_type=b.first_record_type)


def test_data_batch_records_last_offset_epoch_and_timestamp() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, stamped(data(0, 2, pid=1), 100), stamped(data(3, 4, pid=1), 250))
    assert replay.last_records_of_active_producers(300, EXPIRATION_MS) == {1: LastRecord(4, 0)}
    assert replay.producers()[1].last_timestamp == 250


def test_marker_of_the_same_epoch_keeps_the_last_data_offset() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, data(0, 1, pid=1, txn=True), marker(2, 1, COMMIT))
    assert replay.last_records_of_active_producers(0, EXPIRATION_MS) == {1: LastRecord(1, 0)}


def test_marker_of_a_new_epoch_clears_the_last_data_offset() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, data(0, 1, pid=1, txn=True), marker(2, 1, ABORT, epoch=1))
    assert replay.last_records_of_active_producers(0, EXPIRATION_MS) == {1: LastRecord(None, 1)}
    apply_all(replay, stamped(data(3, pid=1), 0, epoch=1))
    assert replay.last_records_of_active_producers(0, EXPIRATION_MS) == {1: LastRecord(3, 1)}


def test_data_of_a_new_epoch_moves_the_last_data_offset() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, data(0, pid=1), stamped(data(1, pid=1), 0, epoch=3))
    assert replay.last_records_of_active_producers(0, EXPIRATION_MS) == {1: LastRecord(1, 3)}


def test_batches_without_a_producer_id_are_ignored() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, data(0, 5), replace(data(6), magic=1))
    assert replay.producers() == {}


def test_transaction_opens_at_its_first_batch_and_closes_at_its_marker() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, stamped(data(3, 4, pid=1, txn=True), 10), data(5, pid=2))
    apply_all(replay, stamped(data(6, pid=1, txn=True), 20), data(7, pid=3, txn=True))
    assert replay.open_transactions() == [OpenTxn(1, 0, 3, 20), OpenTxn(3, 0, 7, 0)]
    assert replay.first_unstable_offset() == 3
    apply_all(replay, marker(8, 1, ABORT))
    assert replay.first_unstable_offset() == 7
    apply_all(replay, marker(9, 3, COMMIT))
    assert replay.open_transactions() == []
    assert replay.first_unstable_offset() is None


def test_marker_timestamp_sets_last_timestamp_and_defaults_to_max_timestamp() -> None:
    replay = ProducerStateReplay()
    replay.apply(stamped(data(0, pid=1, txn=True), 10))
    replay.apply(stamped(marker(1, 1, COMMIT), 99), control_type=COMMIT, marker_timestamp=50)
    assert replay.producers()[1].last_timestamp == 50
    replay.apply(stamped(marker(2, 1, COMMIT), 70), control_type=COMMIT)
    assert replay.producers()[1].last_timestamp == 70


def test_expiry_needs_no_open_transaction_and_the_full_expiration() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, stamped(data(0, pid=1), 1_000), stamped(data(1, pid=2, txn=True), 1_000))
    at_boundary = replay.last_records_of_active_producers(1_000 + EXPIRATION_MS, EXPIRATION_MS)
    assert at_boundary == {2: LastRecord(1, 0)}  # now - last == expiration: expired
    just_before = replay.last_records_of_active_producers(999 + EXPIRATION_MS, EXPIRATION_MS)
    assert set(just_before) == {1, 2}


def test_emptied_marker_changes_nothing_but_creates_an_unknown_producer_like_kafka() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, stamped(data(0, pid=1, txn=True), 5))
    replay.apply(stamped(marker(1, 1, COMMIT, epoch=4), 9), control_type=None)
    replay.apply(marker(2, 2, COMMIT, epoch=4), control_type=None)
    assert replay.last_records_of_active_producers(10, EXPIRATION_MS) == {
        1: LastRecord(0, 0),
        2: LastRecord(None, -1),
    }
    assert replay.first_unstable_offset() == 0


def test_unknown_control_type_is_ignored() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, data(0, pid=1, txn=True))
    replay.apply(marker(1, 1, 2, epoch=7), control_type=2)
    assert replay.producers()[1].producer_epoch == 0
    assert replay.first_unstable_offset() == 0


def test_non_transactional_data_inside_a_transaction_keeps_it_open() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, data(0, pid=1, txn=True), data(1, pid=1))
    assert replay.open_transactions()[0].first_offset == 0
    assert replay.last_records_of_active_producers(0, EXPIRATION_MS) == {1: LastRecord(1, 0)}


def test_seed_from_a_snapshot_then_replay_the_tail() -> None:
    replay = ProducerStateReplay()
    replay.seed(
        [
            SnapshotEntry(1, 2, 9, 41, 1, 500, 0, -1),
            SnapshotEntry(2, 0, -1, -1, 0, 600, 3, -1),
            SnapshotEntry(3, 1, 4, 45, 0, 700, 0, 44),
        ]
    )
    assert replay.last_records_of_active_producers(1_000, EXPIRATION_MS) == {
        1: LastRecord(41, 2),
        2: LastRecord(None, 0),
        3: LastRecord(45, 1),
    }
    assert replay.first_unstable_offset() == 44
    apply_all(replay, replace(marker(50, 3, COMMIT), producer_epoch=1))
    assert replay.first_unstable_offset() is None


def test_seed_drops_entries_kafka_expires_at_load() -> None:
    replay = ProducerStateReplay()
    old = 1_000
    replay.seed(
        [SnapshotEntry(1, 0, 0, 5, 0, old, 0, -1), SnapshotEntry(2, 0, 0, 6, 0, old, 0, 6)],
        now_ms=old + EXPIRATION_MS,
        expiration_ms=EXPIRATION_MS,
    )
    assert set(replay.producers()) == {2}  # an open transaction never expires
    # the expired producer starts afresh: a marker alone now makes the marker its last entry
    apply_all(replay, replace(marker(10, 1, COMMIT), max_timestamp=old + EXPIRATION_MS))
    assert replay.last_records_of_active_producers(old + EXPIRATION_MS, EXPIRATION_MS)[1] == (
        LastRecord(None, 0)
    )


def _undecided_log() -> list[FakeBatch]:
    # LogCleanerManagerTest.testUndecidedTransactionalDataNotCleanable: producer 15, records 0-1 and 2
    return [data(0, 1, pid=15, txn=True), data(2, pid=15, txn=True)]


def test_undecided_transactional_data_bounds_the_lso() -> None:
    replay = ProducerStateReplay(high_watermark=3)
    apply_all(replay, *_undecided_log())
    assert replay.last_stable_offset(log_end_offset=3) == 0
    after_abort = ProducerStateReplay(high_watermark=4)
    apply_all(after_abort, *_undecided_log(), marker(3, 15, ABORT))
    assert after_abort.last_stable_offset(log_end_offset=4) == 4


def test_marker_at_or_above_the_high_watermark_keeps_the_transaction_unstable() -> None:
    replay = ProducerStateReplay(high_watermark=3)
    apply_all(replay, *_undecided_log(), marker(3, 15, ABORT))
    assert replay.open_transactions() == []  # decided, for the producer's state ...
    assert replay.first_unstable_offset() == 0  # ... but not replicated yet
    assert replay.last_stable_offset(log_end_offset=4) == 0


def test_lso_without_a_high_watermark_uses_the_log_end() -> None:
    replay = ProducerStateReplay()
    apply_all(replay, data(0, 4))
    assert replay.last_stable_offset(log_end_offset=5) == 5
    capped = ProducerStateReplay(high_watermark=9)
    assert capped.last_stable_offset(log_end_offset=5) == 5


def test_last_stable_offset_helper() -> None:
    assert last_stable_offset(10, None) == 10
    assert last_stable_offset(10, 4) == 4
    assert last_stable_offset(10, 10) == 10
    assert last_stable_offset(10, 12) == 10


def test_a_replay_keeps_the_open_transaction_unstable_and_every_producers_last_record() -> None:
    log = [*_undecided_log(), marker(3, 15, COMMIT), data(4, pid=16, txn=True)]
    replay = ProducerStateReplay(high_watermark=5)
    for batch in log:
        replay.apply(batch, control_type=batch.first_record_type, marker_timestamp=None)
    assert replay.first_unstable_offset() == 4
    assert replay.last_records_of_active_producers(0, EXPIRATION_MS) == {
        15: LastRecord(2, 0),
        16: LastRecord(4, 0),
    }


@given(st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.integers(0, 2)), max_size=30))
def test_first_unstable_offset_is_the_earliest_open_transaction(
    steps: list[tuple[int, bool, int]],
) -> None:
    replay = ProducerStateReplay()
    model: dict[int, int] = {}  # producer -> first offset of its open transaction
    for offset, (pid, is_marker, kind) in enumerate(steps):
        if is_marker:
            replay.apply(marker(offset, pid, kind), control_type=kind)
            if kind in (ABORT, COMMIT):
                model.pop(pid, None)
        else:
            replay.apply(data(offset, pid=pid, txn=True))
            model.setdefault(pid, offset)
    assert replay.first_unstable_offset() == (min(model.values()) if model else None)
    assert [t.first_offset for t in replay.open_transactions()] == sorted(model.values())


@dataclass(frozen=True, slots=True)
class SequencedBatch(FakeBatch):
    """A fake batch with a v2 batch's last sequence (base sequence + last offset delta)."""

    last_sequence: int = -1


def test_last_sequence_and_coordinator_epoch_as_producer_state_entry_keeps_them() -> None:
    replay = ProducerStateReplay()
    first = data(0, 1, pid=1, txn=True)
    replay.apply(SequencedBatch(**{f.name: getattr(first, f.name) for f in fields(first)}, last_sequence=7))
    replay.apply(marker(2, 1, COMMIT), control_type=COMMIT, coordinator_epoch=5)
    state = replay.producers()[1]
    assert (state.last_sequence, state.coordinator_epoch) == (7, 5)  # a marker keeps the sequence
    replay.apply(replace(marker(3, 1, ABORT), producer_epoch=1), control_type=ABORT, coordinator_epoch=6)
    state = replay.producers()[1]
    assert (state.producer_epoch, state.last_sequence, state.coordinator_epoch) == (1, -1, 6)
    replay.seed([SnapshotEntry(2, 0, 9, -1, 0, 100, 4, -1), SnapshotEntry(3, 0, 9, 20, 0, 100, 4, -1)])
    assert [(replay.producers()[p].last_sequence, replay.producers()[p].coordinator_epoch)
            for p in (2, 3)] == [(-1, 4), (9, 4)]
