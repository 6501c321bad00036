"""CleanedTransactionMetadata: which data is aborted, which markers may go, which index entries stay.

The stand-in values defined here (:class:`FakeBatch`, :class:`Rec`, :class:`Aborted`) are shared with
test_producer_state.py and test_policy.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from kcompact.log.rules.transactions import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    CleanedTransactionMetadata,
)

ABORT = CONTROL_TYPE_ABORT
COMMIT = CONTROL_TYPE_COMMIT
LEADER_CHANGE = 2


@dataclass(frozen=True, slots=True)
class Rec:
    """A record: its offset, key and value (None = null)."""

    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class FakeBatch:
    """Stand-in for a decoded batch, with the attributes the decision modules read."""

    base_offset: int
    last_offset: int
    producer_id: int = -1
    producer_epoch: int = -1
    is_transactional: bool = False
    is_control: bool = False
    control_type: int | None = None  # the marker record's type while it has one
    records: tuple[Rec, ...] = ()
    has_delete_horizon: bool = False
    delete_horizon_ms: int | None = None
    magic: int = 2
    max_timestamp: int = 0
    base_sequence: int = -1

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def first_record_type(self) -> int | None:
        """What the cleaner passes as ``control_type``: None once the marker was emptied."""
        return self.control_type if self.records else None


@dataclass(frozen=True, slots=True)
class Aborted:
    """Stand-in for ``kcompact.segment.txn_index.AbortedTxn``."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def data(base: int, last: int | None = None, *, pid: int = -1, txn: bool = False) -> FakeBatch:
    last = base if last is None else last
    recs = tuple(Rec(o, str(o).encode(), b"v") for o in range(base, last + 1))
    return FakeBatch(base, last, pid, 0 if pid >= 0 else -1, txn, records=recs)


def marker(offset: int, pid: int, control_type: int, *, epoch: int = 0) -> FakeBatch:
    rec = (Rec(offset, b"\x00\x00\x00" + bytes([control_type]), b"\x00\x00\x00\x00\x00\x00"),)
    return FakeBatch(offset, offset, pid, epoch, True, True, control_type, rec)


def new_meta() -> CleanedTransactionMetadata[Aborted]:
    return CleanedTransactionMetadata()


def test_non_transactional_data_is_never_aborted() -> None:
    meta = new_meta()
    meta.add_aborted([Aborted(7, 0, 9, 10)])
    assert meta.on_batch_read(data(0, 1)) is False
    assert meta.on_batch_read(data(2, 3, pid=7)) is False  # idempotent, not transactional


def test_aborted_data_goes_and_its_abort_marker_and_index_entry_stay() -> None:
    meta = new_meta()
    entry = Aborted(1, 0, 2, 3)
    meta.add_aborted([entry])
    assert meta.on_batch_read(data(0, 1, pid=1, txn=True)) is True
    assert meta.on_control_batch_read(marker(2, 1, ABORT), ABORT) is False
    assert meta.take_retained_aborted() == [entry]
    assert meta.take_retained_aborted() == []


def test_abort_marker_whose_data_is_gone_is_discardable_and_leaves_the_index() -> None:
    meta = new_meta()
    meta.add_aborted([Aborted(1, 0, 2, 3)])
    assert meta.on_control_batch_read(marker(2, 1, ABORT), ABORT) is True
    assert meta.take_retained_aborted() == []


def test_abort_marker_of_an_empty_transaction_is_discardable() -> None:
    meta = new_meta()
    assert meta.on_control_batch_read(marker(0, 1, ABORT), ABORT) is True


def test_commit_marker_stays_only_while_data_of_its_transaction_was_seen() -> None:
    meta = new_meta()
    assert meta.on_batch_read(data(0, pid=1, txn=True)) is False
    assert meta.on_control_batch_read(marker(1, 1, COMMIT), COMMIT) is False
    assert meta.on_control_batch_read(marker(2, 1, COMMIT), COMMIT) is True
    assert meta.on_control_batch_read(marker(3, 2, COMMIT), COMMIT) is True


def test_other_control_types_are_never_discardable() -> None:
    meta = new_meta()
    assert meta.on_control_batch_read(marker(0, 1, LEADER_CHANGE), LEADER_CHANGE) is False
    assert meta.on_control_batch_read(marker(1, 1, 99), 99) is False


def test_real_control_record_type_enum_is_accepted() -> None:
    from kcompact.records.control import ControlRecordType

    meta = new_meta()
    meta.on_batch_read(data(0, pid=1, txn=True))
    assert meta.on_control_batch_read(marker(1, 1, COMMIT), ControlRecordType.COMMIT) is False
    assert meta.on_control_batch_read(marker(2, 1, ABORT), ControlRecordType.ABORT) is True


def test_emptied_control_batch_is_discardable_and_still_reaches_aborted_entries() -> None:
    meta = new_meta()
    meta.add_aborted([Aborted(1, 5, 9, 10)])
    emptied = FakeBatch(6, 6, 2, 0, True, True, ABORT)  # no records any more
    assert meta.on_control_batch_read(emptied, None) is True
    assert meta.on_batch_read(data(7, pid=1, txn=True)) is True


def test_aborted_entries_start_at_their_first_offset() -> None:
    meta = new_meta()
    first, second = Aborted(1, 0, 5, 6), Aborted(1, 10, 20, 21)
    meta.add_aborted([second, first])
    assert meta.on_batch_read(data(0, 1, pid=1, txn=True)) is True
    assert meta.on_control_batch_read(marker(5, 1, ABORT), ABORT) is False
    assert meta.on_batch_read(data(7, pid=1, txn=True)) is False  # a committed transaction between
    assert meta.on_control_batch_read(marker(8, 1, COMMIT), COMMIT) is False
    assert meta.on_batch_read(data(10, 19, pid=1, txn=True)) is True
    assert meta.on_control_batch_read(marker(20, 1, ABORT), ABORT) is False
    assert meta.take_retained_aborted() == [first, second]


def test_duplicate_entries_from_overlapping_segments_count_once() -> None:
    meta = new_meta()
    entry = Aborted(1, 3, 12, 13)
    meta.add_aborted([entry, entry])  # segment [0, 10) sees the transaction ...
    assert meta.on_batch_read(data(3, 4, pid=1, txn=True)) is True
    meta.add_aborted([entry])  # ... and so does segment [10, 20), which holds the marker
    assert meta.on_batch_read(data(10, 11, pid=1, txn=True)) is True
    assert meta.on_control_batch_read(marker(12, 1, ABORT), ABORT) is False
    assert meta.take_retained_aborted() == [entry]
    assert meta.on_batch_read(data(13, pid=1, txn=True)) is False


def test_first_entry_of_a_producer_wins_when_several_are_reached_at_once() -> None:
    # Kafka's computeIfAbsent: when one batch reaches two entries of a producer, the later is dropped
    meta = new_meta()
    first, second = Aborted(1, 0, 5, 6), Aborted(1, 10, 20, 21)
    meta.add_aborted([first, second])
    assert meta.on_batch_read(data(15, pid=1, txn=True)) is True
    assert meta.on_control_batch_read(marker(20, 1, ABORT), ABORT) is False
    assert meta.take_retained_aborted() == [first]


def test_offset_map_pass_collects_no_index_entries() -> None:
    meta: CleanedTransactionMetadata[Aborted] = CleanedTransactionMetadata(
        collect_index_entries=False
    )
    meta.add_aborted([Aborted(1, 0, 1, 2)])
    assert meta.on_batch_read(data(0, pid=1, txn=True)) is True
    assert meta.on_control_batch_read(marker(1, 1, ABORT), ABORT) is False
    assert meta.take_retained_aborted() == []


# A random interleaving of transactions: (producer, action) steps.
_steps = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from(["data", "commit", "abort", "plain"])),
    max_size=40,
)


def _build_log(
    steps: list[tuple[int, str]],
) -> tuple[list[FakeBatch], list[Aborted], set[int], set[int]]:
    """Batches in offset order, the aborted entries, the base offsets of aborted data, and the
    offsets of the COMMIT markers whose transaction had data."""
    log: list[FakeBatch] = []
    commits_with_data: set[int] = set()
    open_first: dict[int, int] = {}
    open_data: dict[int, list[int]] = {}
    aborted: list[Aborted] = []
    aborted_data: set[int] = set()
    offset = 0
    closing = [(pid, "commit") for pid in range(3)]
    for pid, action in [*steps, *closing]:
        if action in ("data", "plain"):
            size = 1 + offset % 2
            is_txn = action == "data"
            log.append(data(offset, offset + size - 1, pid=pid if is_txn else -1, txn=is_txn))
            if is_txn:
                open_first.setdefault(pid, offset)
                open_data.setdefault(pid, []).append(offset)
            offset += size
            continue
        kind = ABORT if action == "abort" else COMMIT
        log.append(marker(offset, pid, kind))
        if pid in open_first and kind == ABORT:
            aborted.append(Aborted(pid, open_first[pid], offset, offset + 1))
            aborted_data.update(open_data[pid])
        if pid in open_first and kind == COMMIT:
            commits_with_data.add(offset)
        open_first.pop(pid, None)
        open_data.pop(pid, None)
        offset += 1
    return log, aborted, aborted_data, commits_with_data


def _run(meta: CleanedTransactionMetadata[Aborted], log: list[FakeBatch]) -> list[bool]:
    return [
        meta.on_control_batch_read(b, b.first_record_type) if b.is_control
        else meta.on_batch_read(b)
        for b in log
    ]


@given(_steps)
def test_two_passes_over_random_transactions(steps: list[tuple[int, str]]) -> None:
    log, aborted, aborted_data, commits_with_data = _build_log(steps)
    with_data = {a.last_offset for a in aborted}
    first = new_meta()
    first.add_aborted(reversed(aborted))
    verdicts = _run(first, log)
    for batch, discardable in zip(log, verdicts, strict=True):
        if not batch.is_control:
            assert discardable == (batch.base_offset in aborted_data)
        elif batch.control_type == ABORT:
            assert discardable == (batch.base_offset not in with_data)
        else:
            assert discardable == (batch.base_offset not in commits_with_data)
    assert first.take_retained_aborted() == aborted

    # the cleaner removed the aborted data: now every ABORT marker may go, and no entry stays
    cleaned = [b for b in log if b.base_offset not in aborted_data]
    second = new_meta()
    second.add_aborted(aborted)
    for batch, discardable in zip(cleaned, _run(second, cleaned), strict=True):
        if not batch.is_control:
            assert discardable is False
        elif batch.control_type == ABORT:
            assert discardable is True
        else:
            assert discardable == (batch.base_offset not in commits_with_data)
    assert second.take_retained_aborted() == []


def test_real_aborted_txn_entries_come_back_unchanged() -> None:
    from kcompact.segment.txn_index import AbortedTxn

    meta: CleanedTransactionMetadata[AbortedTxn] = CleanedTransactionMetadata()
    entry = AbortedTxn(producer_id=4, first_offset=10, last_offset=12, last_stable_offset=13)
    meta.add_aborted([entry])
    assert meta.on_batch_read(data(10, 11, pid=4, txn=True)) is True
    assert meta.on_control_batch_read(marker(12, 4, ABORT), ABORT) is False
    assert meta.take_retained_aborted()[0] is entry
