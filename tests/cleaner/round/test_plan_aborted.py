"""The aborted transactions a cleaning round feeds each segment (``CleanPlan.aborted_in``) are those
Kafka's own lookup finds: ``UnifiedLog.collectAbortedTransactions`` walking the transaction indexes from
the segment holding the start, ``TransactionIndex.collectAbortedTxns`` keeping the entries that overlap the
range and stopping after one whose last stable offset reaches its end."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.round.plan import CleanPlan
from kcompact.cleaner.round.steps import plan_clean
from kcompact.segment.txn_index import AbortedTxn, read_txn_index
from tests.cleaner.workers.test_parallel import NOW, config, transactions


def kafka_collect_aborted(indexes: Sequence[tuple[int, list[AbortedTxn]]], start: int,
                          end: int) -> list[AbortedTxn]:
    """Kafka's lookup, as written there: from the segment holding ``start``, stopping early by LSO."""
    first = bisect.bisect_right([base for base, _entries in indexes], start) - 1
    if first < 0:
        return []  # no segment holds the start
    found: list[AbortedTxn] = []
    for _base, entries in indexes[first:]:
        for entry in entries:
            if entry.last_offset >= start and entry.first_offset < end:
                found.append(entry)
            if entry.last_stable_offset >= end:
                return found
    return found


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> CleanPlan:
    built = plan_clean(transactions(tmp_path_factory.mktemp("plan") / "logdir"), config(),
                       CleanOptions(now_ms=NOW))
    assert built is not None
    return built


def test_each_segment_is_fed_what_kafkas_lookup_finds(plan: CleanPlan) -> None:
    indexes = []
    for seg in plan.segments:
        txn_index = Path(seg.log_path).with_suffix(".txnindex")
        indexes.append((seg.base_offset, read_txn_index(txn_index) if txn_index.exists() else []))
    assert any(entries for _base, entries in indexes)
    for seg in plan.segments:
        expected = kafka_collect_aborted(indexes, seg.base_offset, seg.upper_offset)
        assert plan.aborted_in(seg.base_offset, seg.upper_offset) == expected, seg.base_offset
    assert plan.map_feed() == kafka_collect_aborted(indexes, plan.first_dirty_offset,
                                                    plan.first_uncleanable_offset)


# Two segments (bases 0 and 100): aborted transactions of producers 1..4.
T1 = AbortedTxn(1, first_offset=5, last_offset=20, last_stable_offset=21)
T2 = AbortedTxn(2, first_offset=30, last_offset=60, last_stable_offset=40)  # LSO held by producer 3
T3 = AbortedTxn(3, first_offset=40, last_offset=110, last_stable_offset=111)
T4 = AbortedTxn(4, first_offset=150, last_offset=160, last_stable_offset=161)
INDEXES = [(0, [T1, T2]), (100, [T3, T4])]


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, 200, [T1, T2, T3, T4]),
        (21, 35, [T2]),  # T2's LSO 40 ≥ 35 ends Kafka's search in the first segment
        (21, 45, [T2, T3]),  # T3 starts below 45; its LSO 111 stops Kafka's walk before T4
        (61, 140, [T3]),  # T1, T2 end before 61
        (100, 150, [T3]),  # T4 starts at 150, not below the end
        (120, 170, [T4]),
    ],
)
def test_kafkas_range_rules(plan: CleanPlan, start: int, end: int, expected: list[AbortedTxn]) -> None:
    ruled = dataclasses.replace(plan, aborted=(T1, T2, T3, T4))
    assert ruled.aborted_in(start, end) == expected == kafka_collect_aborted(INDEXES, start, end)
