"""rules.aborted: the aborted transactions a broker's recovery writes to a txn index, and the merge
of a ``.txnindex``'s entries with them.

The hypothesis test holds :func:`derive_transactions` against a model in the shape of Kafka's
``ProducerStateManager``: each producer's ``currentTxnFirstOffset``, the ongoing transactions by
first offset, and ``lastStableOffset`` as the first ongoing one of another producer.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from kcompact.log.rules.aborted import (
    AbortedEntry,
    TxnRow,
    aborted_transactions,
    derive_transactions,
    merge_aborted,
)
from kcompact.log.rules.transactions import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT

ABORT, COMMIT, LEADER_CHANGE = CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, 2


def data(pid: int, offset: int, epoch: int = 0, ts: int = 0, txn: bool = True) -> TxnRow:
    return TxnRow(pid, epoch, offset, ts, txn, False, None)


def marker(pid: int, offset: int, kind: int | None, epoch: int = 0) -> TxnRow:
    return TxnRow(pid, epoch, offset, 0, True, True, kind)


def aborted(rows: list[TxnRow]) -> list[AbortedEntry]:
    return aborted_transactions(derive_transactions(rows))


def test_an_abort_is_indexed_from_its_first_data_offset_to_its_marker() -> None:
    rows = [data(7, 10, ts=500), data(7, 12), marker(7, 15, ABORT)]
    assert aborted(rows) == [AbortedEntry(7, 10, 15, 16)]
    (txn,) = derive_transactions(rows)
    assert (txn.first_offset, txn.first_timestamp_ms) == (10, 500)
    assert (txn.marker_offset, txn.aborted) == (15, True)


def test_the_last_stable_offset_is_the_earliest_other_open_transaction() -> None:
    rows = [data(1, 0), data(2, 3), data(3, 5), marker(1, 8, ABORT), marker(2, 9, COMMIT),
            marker(3, 10, ABORT)]
    assert aborted(rows) == [AbortedEntry(1, 0, 8, 3), AbortedEntry(3, 5, 10, 11)]


def test_an_epoch_bump_continues_the_open_transaction() -> None:
    """ProducerAppendInfo.appendDataBatch opens a transaction only when none is open, whatever the
    epoch: the transaction a fenced producer left open ends at the coordinator's ABORT marker, and
    its first offset (and the last stable offset of another producer's abort meanwhile) stays the
    first data batch's."""
    rows = [data(1, 0, epoch=4), data(2, 2), data(1, 3, epoch=5), marker(2, 4, ABORT),
            marker(1, 5, ABORT, epoch=5)]
    assert aborted(rows) == [AbortedEntry(2, 2, 4, 0), AbortedEntry(1, 0, 5, 6)]


def test_markers_without_data_and_emptied_markers_make_no_entry() -> None:
    rows = [marker(1, 0, ABORT), data(2, 1), marker(2, 2, None), marker(2, 3, LEADER_CHANGE),
            marker(2, 4, COMMIT), marker(2, 5, ABORT)]
    assert aborted(rows) == []
    (txn,) = derive_transactions(rows)
    assert (txn.first_offset, txn.marker_offset, txn.aborted) == (1, 4, False)


def test_non_transactional_data_and_no_producer_play_no_part() -> None:
    rows = [data(-1, 0, txn=False), data(1, 1, txn=False), data(-1, 2), marker(1, 3, ABORT)]
    assert derive_transactions(rows) == []


@dataclass(frozen=True, slots=True)
class Entry:
    producer_id: int
    first_offset: int
    last_offset: int


def test_merge_keeps_the_files_entries_and_adds_what_it_lacks_by_last_offset() -> None:
    indexed = [Entry(1, 0, 5), Entry(9, 7, 7)]  # the second one is the file's, however wrong
    derived = [Entry(2, 1, 3), Entry(1, 0, 5), Entry(3, 6, 8)]
    merged, lacking = merge_aborted(indexed, derived)
    assert lacking == [Entry(2, 1, 3), Entry(3, 6, 8)]
    assert merged == [Entry(2, 1, 3), Entry(1, 0, 5), Entry(9, 7, 7), Entry(3, 6, 8)]
    assert merge_aborted([], derived) == (derived[:1] + derived[1:], derived)


def kafka_model(
    rows: list[TxnRow],
) -> tuple[list[tuple[int, int, int, int]], list[tuple[int, int]]]:
    """(aborted (pid, first, marker, lso) in marker order, still open (pid, first)), computed the
    way ProducerStateManager keeps them: currentTxnFirstOffset per producer, ongoingTxns by first
    offset."""
    current: dict[int, int] = {}
    ongoing: dict[int, int] = {}  # first offset -> producer id (Kafka's TreeMap)
    out = []
    for row in rows:
        if row.producer_id < 0:  # RecordBatch.hasProducerId
            continue
        if not row.is_control:
            if row.is_transactional and row.producer_id not in current:
                current[row.producer_id] = row.base_offset
                ongoing[row.base_offset] = row.producer_id
            continue
        if row.control_type not in (ABORT, COMMIT):  # emptied (no record) or not a txn marker
            continue
        first = current.pop(row.producer_id, None)
        if first is None:
            continue
        others = [f for f in sorted(ongoing) if ongoing[f] != row.producer_id]
        if row.control_type == ABORT:
            out.append((row.producer_id, first, row.base_offset,
                        others[0] if others else row.base_offset + 1))
        del ongoing[first]
    return out, sorted((pid, first) for pid, first in current.items())


ROW = st.tuples(
    st.sampled_from([-1, 1, 2, 3, 4]),
    st.integers(0, 3),
    st.integers(1, 3),  # offset step
    st.sampled_from(["txn", "plain", ABORT, COMMIT, None, LEADER_CHANGE]),
)


@given(st.lists(ROW, max_size=60))
def test_derived_aborts_match_kafkas_producer_state_manager(
    spec: list[tuple[int, int, int, str | int | None]],
) -> None:
    rows: list[TxnRow] = []
    offset = 0
    for pid, epoch, step, kind in spec:
        offset += step
        if isinstance(kind, str):
            rows.append(data(pid, offset, epoch=epoch, txn=kind == "txn"))
        else:
            rows.append(marker(pid, offset, kind, epoch=epoch))
    expected_aborted, expected_open = kafka_model(rows)
    txns = derive_transactions(rows)
    assert [tuple(e) for e in aborted_transactions(txns)] == expected_aborted
    still_open = sorted((t.producer_id, t.first_offset) for t in txns if t.marker_offset is None)
    assert still_open == expected_open
    assert [t.first_offset for t in txns] == sorted(t.first_offset for t in txns)
