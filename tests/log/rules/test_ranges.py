"""Kafka's cleaner range rules, ported from LogCleanerManagerTest and LogCleanerTest.

Kafka's tests build logs by appending; here the same layouts are written down as segment values.
``filthy(n)`` is LogCleanerManagerTest's setupIncreasinglyFilthyLogs: n one-record batches, a roll
after batches 0, 5, 10, ..., and a final roll, so the active segment is empty.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CleanerStateError
from kcompact.log.rules.ranges import (
    CleanableRange,
    OpenTxn,
    RangeInputs,
    SegmentStats,
    cleaner_order,
    compute_cleanable_range,
    pick_order,
    pick_ranks,
)
from kcompact.records.varint import INT64_MAX
from tests.conftest import real_fixture

NOW = 1_400_000_000_000  # MockTime's start in Kafka's tests: 2014-05-13T16:53:20Z
RECORD = 75  # bytes of one one-record batch
HOUR = 3_600_000


def seg(base: int, next_offset: int, *, ts: int = NOW, largest: int | None = None) -> SegmentStats:
    """A segment of one-record batches [base, next_offset), all stamped ``ts``."""
    size = (next_offset - base) * RECORD
    first = ts if size else -1
    return SegmentStats(base, size, ts if largest is None else largest, first, next_offset)


def from_bases(bases: list[int], log_end: int, *, ts: int = NOW) -> list[SegmentStats]:
    ends = bases[1:] + [log_end]
    return [seg(b, e, ts=ts) for b, e in zip(bases, ends, strict=True)]


def filthy(batches: int) -> list[SegmentStats]:
    bases = [0]
    for i in range(batches):
        if i % 5 == 0:
            bases.append(i + 1)
    if bases[-1] != batches:
        bases.append(batches)
    return from_bases(bases, batches)


def inputs(segments: list[SegmentStats], **changes: object) -> RangeInputs:
    log_end = segments[-1].next_offset if segments else 0
    base = RangeInputs(
        segments=segments,
        log_start_offset=0,
        log_end_offset=log_end,
        checkpoint_offset=None,
        high_watermark=log_end,
        high_watermark_source="replication-offset-checkpoint",
        first_unstable_offset=None,
        open_txn=None,
        now_ms=NOW,
        min_cleanable_dirty_ratio=0.05,
        min_compaction_lag_ms=0,
        max_compaction_lag_ms=INT64_MAX,
        segment_ms=7 * 24 * HOUR,
        segment_bytes=1024,
        policy=("compact",),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def sizes(segments: list[SegmentStats]) -> int:
    return sum(s.size_in_bytes for s in segments)


# -- LogCleanerManagerTest --


def test_dirty_offset_reset_if_larger_than_end_offset() -> None:
    rng = compute_cleanable_range(inputs(filthy(20), checkpoint_offset=200))
    assert rng.first_dirty_offset == 0
    assert (rng.checkpoint_reset, rng.force_update_checkpoint) == ("past-log-end", True)
    assert rng.eligible


def test_dirty_offset_reset_if_smaller_than_start_offset() -> None:
    rng = compute_cleanable_range(inputs(filthy(20), log_start_offset=10, checkpoint_offset=0))
    assert rng.first_dirty_offset == 10
    assert (rng.checkpoint_reset, rng.force_update_checkpoint) == ("below-log-start", True)
    assert rng.eligible


def test_log_start_offset_larger_than_active_segment_base_offset() -> None:
    only = [seg(0, 9)]  # three appends of three records, never rolled
    rng = compute_cleanable_range(inputs(only, log_start_offset=2, checkpoint_offset=0))
    assert rng.first_dirty_offset == 2
    assert (rng.first_uncleanable_offset, rng.dirty_bytes) == (0, 0)
    assert rng.clean_bytes == rng.total_bytes == only[0].size_in_bytes  # as logSegments(-1, 2)
    assert not rng.eligible


def test_dirty_offset_larger_than_active_segment_base_offset() -> None:
    rng = compute_cleanable_range(inputs([seg(0, 6)], checkpoint_offset=3))
    assert (rng.first_dirty_offset, rng.checkpoint_reset) == (3, None)
    assert (rng.first_uncleanable_dirty_offset, rng.first_uncleanable_offset) == (3, 0)
    assert rng.dirty_bytes == 0 and not rng.eligible
    assert rng.blocking_rule == "active-segment"


def eight_segments(ts: int = NOW) -> list[SegmentStats]:
    return from_bases([10 * i for i in range(8)], 75, ts=ts)  # active segment 70, log end 75


def test_cleanable_offsets_for_none() -> None:
    rng = compute_cleanable_range(inputs(eight_segments(), high_watermark=50, checkpoint_offset=0))
    assert rng.first_dirty_offset == 0
    assert rng.last_stable_offset == rng.high_watermark == 50
    assert rng.first_uncleanable_dirty_offset == 50
    assert rng.blocking_rule == "high-watermark"


def test_high_watermark_inside_a_segment_is_rounded_down() -> None:
    rng = compute_cleanable_range(inputs(eight_segments(), high_watermark=55, checkpoint_offset=0))
    assert (rng.first_uncleanable_dirty_offset, rng.first_uncleanable_offset) == (55, 50)
    assert rng.dirty_bytes == 5 * 10 * RECORD


def test_cleanable_offsets_active_segment() -> None:
    rng = compute_cleanable_range(inputs(eight_segments(), checkpoint_offset=0))
    assert rng.first_uncleanable_dirty_offset == rng.active_segment_base_offset == 70


def test_cleanable_offsets_for_time() -> None:
    t0 = NOW - HOUR - 1
    segments = eight_segments(ts=t0)
    # Segment 30 was active at t0: one record from t0, the rest from t1 = now.
    segments[3] = SegmentStats(30, 10 * RECORD, NOW, t0, 40)
    segments[4:] = from_bases([40, 50, 60, 70], 75)
    rng = compute_cleanable_range(inputs(segments, min_compaction_lag_ms=HOUR, checkpoint_offset=0))
    assert rng.first_dirty_offset == 0
    assert rng.first_uncleanable_dirty_offset == rng.lag_boundary_offset == 30
    assert rng.blocking_rule == "min-compaction-lag"


def test_cleanable_offsets_for_short_time() -> None:
    segments = eight_segments(ts=NOW - HOUR - 1)
    rng = compute_cleanable_range(inputs(segments, min_compaction_lag_ms=HOUR, checkpoint_offset=0))
    assert rng.lag_boundary_offset is None
    assert rng.first_uncleanable_dirty_offset == 70


def test_min_compaction_lag_boundary_is_exclusive() -> None:
    # Uncleanable only while largest timestamp > now - lag: exactly at the lag it is cleanable.
    at_lag = compute_cleanable_range(
        inputs(eight_segments(ts=NOW - HOUR), min_compaction_lag_ms=HOUR, checkpoint_offset=0)
    )
    assert at_lag.lag_boundary_offset is None
    inside = compute_cleanable_range(
        inputs(eight_segments(ts=NOW - HOUR + 1), min_compaction_lag_ms=HOUR, checkpoint_offset=0)
    )
    assert inside.lag_boundary_offset == 0


def test_cleanable_offsets_needs_checkpoint_reset() -> None:
    segments = filthy(20)
    assert not compute_cleanable_range(
        inputs(segments, log_start_offset=10, checkpoint_offset=15)
    ).force_update_checkpoint
    below = compute_cleanable_range(inputs(segments, log_start_offset=20, checkpoint_offset=15))
    assert (below.force_update_checkpoint, below.checkpoint_reset) == (True, "below-log-start")
    past = compute_cleanable_range(inputs(segments, log_start_offset=20, checkpoint_offset=25))
    assert (past.force_update_checkpoint, past.checkpoint_reset) == (True, "past-log-end")


def test_checkpoint_updated_for_invalid_offset_no_cleaning() -> None:
    rng = compute_cleanable_range(inputs(filthy(20), log_start_offset=20, checkpoint_offset=15))
    assert not rng.eligible
    assert (rng.force_update_checkpoint, rng.first_dirty_offset) == (True, 20)


def test_checkpoint_updated_for_invalid_offset_not_selected() -> None:
    tp0 = compute_cleanable_range(inputs(filthy(20), log_start_offset=15, checkpoint_offset=10))
    tp1 = compute_cleanable_range(inputs(filthy(25), checkpoint_offset=5))
    assert cleaner_order([("foo-0", tp0), ("foo-1", tp1)]) == [("foo-1", 1), ("foo-0", 2)]
    assert tp0.force_update_checkpoint and tp0.first_dirty_offset == 15


def test_undecided_transactional_data_not_cleanable() -> None:
    lag, t0 = HOUR, NOW - HOUR - 1
    txn = OpenTxn(producer_id=15, producer_epoch=0, first_offset=0, first_timestamp_ms=t0)
    undecided = inputs(
        [seg(0, 3, ts=t0), seg(3, 3)],
        high_watermark=3,
        first_unstable_offset=0,
        open_txn=txn,
        min_compaction_lag_ms=lag,
        checkpoint_offset=0,
    )
    rng = compute_cleanable_range(undecided)
    assert (rng.first_dirty_offset, rng.first_uncleanable_dirty_offset) == (0, 0)
    assert (rng.last_stable_offset, rng.blocking_rule) == (0, "open-transaction")
    # The abort marker lands at 3 and is rolled: the first segment is cleanable at once...
    decided = dataclasses.replace(
        undecided,
        segments=[seg(0, 3, ts=t0), seg(3, 4), seg(4, 4)],
        log_end_offset=4,
        high_watermark=4,
        first_unstable_offset=None,
        open_txn=None,
    )
    assert compute_cleanable_range(decided).first_uncleanable_dirty_offset == 3
    # ... and the marker's segment once the lag has passed.
    later = dataclasses.replace(decided, now_ms=NOW + lag + 1)
    assert compute_cleanable_range(later).first_uncleanable_dirty_offset == 4


def test_grab_filthiest_compacted_log_returns_log_with_dirtiest_ratio() -> None:
    ranges = [
        (f"wishing-well-{n}", compute_cleanable_range(inputs(filthy(b), checkpoint_offset=20)))
        for n, b in enumerate((20, 25, 30))
    ]
    assert cleaner_order(ranges) == [
        ("wishing-well-2", 1),
        ("wishing-well-1", 2),
        ("wishing-well-0", None),
    ]


# -- max.compaction.lag.ms (KIP-354; LogCleanerIntegrationTest.testMaxLogCompactionLag) --


def lagging(first_ts: int, **changes: object) -> CleanableRange:
    segments = [seg(0, 10, ts=first_ts), seg(10, 20, ts=first_ts), seg(20, 25)]
    base = {"min_cleanable_dirty_ratio": 1.0, "max_compaction_lag_ms": 1000, "checkpoint_offset": 0}
    return compute_cleanable_range(inputs(segments, **{**base, **changes}))


def test_max_compaction_lag_makes_a_log_eligible_below_the_ratio() -> None:
    rng = lagging(NOW - 5000)
    assert rng.dirty_ratio == 1.0  # not above a threshold of 1.0
    assert (rng.max_compaction_delay_ms, rng.must_clean, rng.eligible) == (4000, True, True)


def test_max_compaction_lag_not_yet_exceeded() -> None:
    rng = lagging(NOW - 1000)  # exactly at now - lag: Kafka needs strictly earlier
    assert (rng.max_compaction_delay_ms, rng.need_compaction_now, rng.eligible) == (0, False, False)


@pytest.mark.parametrize("stamp", [0, -1])
def test_max_compaction_lag_ignores_non_positive_timestamps(stamp: int) -> None:
    assert lagging(stamp).max_compaction_delay_ms == 0


def test_max_compaction_lag_looks_only_at_dirty_non_active_segments() -> None:
    old = NOW - 10 * HOUR
    segments = [seg(0, 10, ts=old), seg(10, 20), seg(20, 25, ts=old)]  # old clean and active
    rng = compute_cleanable_range(
        inputs(segments, max_compaction_lag_ms=1000, checkpoint_offset=10)
    )
    assert rng.max_compaction_delay_ms == 0
    with_clean = compute_cleanable_range(
        inputs(segments, max_compaction_lag_ms=1000, checkpoint_offset=5)  # holds segment 0
    )
    assert with_clean.max_compaction_delay_ms == 10 * HOUR - 1000


def test_max_compaction_lag_needs_dirty_bytes() -> None:
    rng = lagging(NOW - 5000, high_watermark=0)
    assert (rng.need_compaction_now, rng.dirty_bytes, rng.must_clean, rng.eligible) == (
        True,
        0,
        False,
        False,
    )


def test_must_clean_gives_eligibility_not_priority() -> None:
    forced = lagging(NOW - 5000, min_cleanable_dirty_ratio=0.99, checkpoint_offset=10)
    dirtiest = compute_cleanable_range(inputs(filthy(30), checkpoint_offset=0))
    clean = compute_cleanable_range(inputs(filthy(20), checkpoint_offset=20))
    assert forced.must_clean and forced.dirty_ratio < dirtiest.dirty_ratio
    order = cleaner_order([("clean", clean), ("forced", forced), ("dirtiest", dirtiest)])
    assert order == [("dirtiest", 1), ("forced", 2), ("clean", None)]


def test_equal_ratios_keep_the_given_order() -> None:
    rng = compute_cleanable_range(inputs(filthy(25), checkpoint_offset=0))
    assert cleaner_order([("b", rng), ("a", rng)]) == [("b", 1), ("a", 2)]


# -- LogCleanerTest: LogToClean --


def six_single_record_segments() -> list[SegmentStats]:
    return from_bases([0, 1, 2, 3, 4, 5], 6)


def test_log_to_clean() -> None:
    segments = six_single_record_segments()
    rng = compute_cleanable_range(inputs(segments, checkpoint_offset=5))
    assert rng.total_bytes == sizes(segments) - segments[-1].size_in_bytes
    assert (rng.dirty_bytes, rng.dirty_ratio) == (0, 0.0)


def test_log_to_clean_with_uncleanable_section() -> None:
    segs = six_single_record_segments()
    rng = compute_cleanable_range(inputs(segs, checkpoint_offset=2, high_watermark=4))
    assert rng.clean_bytes == sizes(segs[:2])
    assert rng.dirty_bytes == sizes(segs[2:4])
    assert rng.total_bytes == sizes(segs[:4])
    assert rng.dirty_ratio == sizes(segs[2:4]) / sizes(segs[:4])


def test_segment_straddling_first_dirty_counts_as_clean_and_dirty() -> None:
    segs = eight_segments()
    rng = compute_cleanable_range(inputs(segs, checkpoint_offset=25))
    assert rng.clean_bytes == sizes(segs[:3])
    assert rng.dirty_bytes == sizes(segs[2:7])
    assert rng.dirty_ratio == sizes(segs[2:7]) / (sizes(segs[:3]) + sizes(segs[2:7]))


def test_offset_gaps_follow_the_segment_holding_the_offset() -> None:
    segs = [seg(0, 10), seg(15, 25), seg(30, 31)]  # offsets 10-14 and 25-29 never existed
    rng = compute_cleanable_range(inputs(segs, checkpoint_offset=12))
    assert rng.clean_bytes == sizes(segs[:1])
    assert rng.dirty_bytes == sizes(segs[:2])
    assert rng.first_uncleanable_offset == 30


# -- one test per blocking rule, detail sentence included --


def test_rule_active_segment() -> None:
    segs = [seg(0, 10, ts=NOW - 3 * HOUR), SegmentStats(10, 150, NOW, NOW - 2 * HOUR, 12)]
    rng = compute_cleanable_range(inputs(segs, checkpoint_offset=0))
    assert rng.blocking_rule == "active-segment" and rng.eligible
    assert rng.blocking_detail == (
        "the active segment (base offset 10, 150 B) is never cleaned; its first batch is "
        "2h old; a batch stamped after 2014-05-20T14:53:20Z (in 6d 22h; segment.ms 7d) rolls it; "
        "or an append that would take it past segment.bytes 1.0 KiB (874 B left) rolls it"
    )


def test_rule_active_segment_compacted_roll_on_max_compaction_lag() -> None:
    segs = [seg(0, 10), SegmentStats(10, 150, NOW, NOW - 2 * HOUR, 12)]
    rng = compute_cleanable_range(inputs(segs, checkpoint_offset=10, max_compaction_lag_ms=HOUR))
    assert "a batch stamped now is past max.compaction.lag.ms 1h, so the next append rolls it" in (
        rng.blocking_detail
    )


def test_rule_active_segment_without_timestamps() -> None:
    segs = [seg(0, 10), SegmentStats(10, 150, NOW, -1, 12)]
    rng = compute_cleanable_range(inputs(segs, checkpoint_offset=10))
    assert rng.blocking_detail == (
        "the active segment (base offset 10, 150 B) is never cleaned; its first batch has no "
        "timestamp, so time rolls it only once the broker has held it open for segment.ms; or an "
        "append that would take it past segment.bytes 1.0 KiB (874 B left) rolls it"
    )


def test_rule_active_segment_empty_log() -> None:
    rng = compute_cleanable_range(
        inputs([], log_start_offset=7, log_end_offset=7, high_watermark=7)
    )
    assert (rng.total_bytes, rng.dirty_ratio, rng.eligible) == (0, 0.0, False)
    assert (rng.first_dirty_offset, rng.first_uncleanable_offset) == (7, 7)
    assert rng.blocking_detail == (
        "the active segment (base offset 7, 0 B) is never cleaned; it is empty and rolls "
        "only once data is appended"
    )


def test_rule_high_watermark() -> None:
    rng = compute_cleanable_range(inputs(eight_segments(), high_watermark=55, checkpoint_offset=0))
    assert rng.blocking_rule == "high-watermark"
    assert rng.blocking_detail == (
        "the high watermark 55 (from replication-offset-checkpoint) caps cleaning: offsets from "
        "it on are not known to be replicated, so the segment holding it (base offset 50) and all "
        "after it stay dirty"
    )


def test_high_watermark_is_clamped_into_the_log() -> None:
    past = compute_cleanable_range(inputs(eight_segments(), high_watermark=900))
    assert past.high_watermark == 75
    below = compute_cleanable_range(
        inputs(eight_segments(), log_start_offset=20, high_watermark=3, checkpoint_offset=20)
    )
    assert (below.high_watermark, below.blocking_rule) == (20, "high-watermark")
    assert "the high watermark 20 (from replication-offset-checkpoint, clamped from 3)" in (
        below.blocking_detail
    )


def test_rule_open_transaction() -> None:
    txn = OpenTxn(
        producer_id=4001, producer_epoch=3, first_offset=42, first_timestamp_ms=NOW - 90_000
    )
    rng = compute_cleanable_range(
        inputs(eight_segments(), first_unstable_offset=42, open_txn=txn, checkpoint_offset=0)
    )
    assert (rng.blocking_rule, rng.last_stable_offset, rng.first_uncleanable_offset) == (
        "open-transaction",
        42,
        40,
    )
    assert rng.blocking_detail == (
        "an open transaction of producer id 4001 (epoch 3) beginning at offset 42, 1m 30s old, "
        "is undecided, so the segment holding it (base offset 40) and all after it wait for its "
        "commit or abort"
    )


def test_open_transaction_below_log_start_is_raised_to_it() -> None:
    rng = compute_cleanable_range(
        inputs(eight_segments(), log_start_offset=20, first_unstable_offset=5, checkpoint_offset=20)
    )
    assert (rng.first_unstable_offset, rng.last_stable_offset) == (20, 20)


def test_rule_min_compaction_lag() -> None:
    segs = from_bases([0, 10, 20], 25, ts=NOW - 2 * HOUR)
    segs[1] = seg(10, 20, ts=NOW - 20 * 60_000)
    rng = compute_cleanable_range(inputs(segs, min_compaction_lag_ms=HOUR, checkpoint_offset=0))
    assert (rng.blocking_rule, rng.first_uncleanable_offset) == ("min-compaction-lag", 10)
    assert rng.blocking_detail == (
        "segment 10 holds data 20m old (largest timestamp 2014-05-13T16:33:20Z), within "
        "min.compaction.lag.ms 1h; it becomes cleanable at 2014-05-13T17:33:20Z (in 40m)"
    )


def test_caps_at_the_same_offset_go_in_rule_order() -> None:
    segs = from_bases([0, 10, 20], 25)  # all data newer than the lag
    rng = compute_cleanable_range(
        inputs(segs, high_watermark=0, first_unstable_offset=0, min_compaction_lag_ms=HOUR)
    )
    assert rng.blocking_rule == "high-watermark"  # high watermark 0 = first unstable = lag bound


def test_rule_below_dirty_ratio() -> None:
    segs = eight_segments()
    rng = compute_cleanable_range(
        inputs(
            segs, checkpoint_offset=60, min_cleanable_dirty_ratio=0.5, max_compaction_lag_ms=HOUR
        )
    )
    assert (rng.blocking_rule, rng.eligible) == ("below-dirty-ratio", False)
    assert rng.blocking_detail == (
        "dirty ratio 0.1429 (750 of 5250 bytes) is not above min.cleanable.dirty.ratio 0.5; the "
        "oldest dirty data (first batch 2014-05-13T16:53:20Z) forces a clean under "
        "max.compaction.lag.ms 1h after 2014-05-13T17:53:20Z"
    )
    unlimited = compute_cleanable_range(
        inputs(segs, checkpoint_offset=60, min_cleanable_dirty_ratio=0.5)
    )
    assert unlimited.blocking_detail.endswith(", and max.compaction.lag.ms is unlimited")


def test_rule_checkpoint_reset() -> None:
    rng = compute_cleanable_range(inputs(filthy(20), checkpoint_offset=200))
    assert rng.blocking_rule == "checkpoint-reset"
    assert rng.blocking_detail.startswith(
        "cleaner-offset-checkpoint holds 200, past the log end offset 20; the broker resets the "
        "first dirty offset to the log start offset 0 and rewrites the checkpoint; then the "
        "active segment (base offset 20, 0 B) is never cleaned"
    )


def test_missing_checkpoint_is_no_reset_rule() -> None:
    rng = compute_cleanable_range(inputs(filthy(20)))
    assert (rng.checkpoint_reset, rng.force_update_checkpoint) == ("missing", False)
    assert (rng.first_dirty_offset, rng.blocking_rule) == (0, "active-segment")


def test_rule_cleanup_policy() -> None:
    rng = compute_cleanable_range(inputs(filthy(20), policy=("delete",)))
    assert (rng.blocking_rule, rng.eligible) == ("cleanup-policy", False)
    assert rng.blocking_detail == (
        "cleanup.policy is delete; the broker's cleaner only compacts logs whose policy includes "
        "compact"
    )
    both = compute_cleanable_range(inputs(filthy(20), policy=("compact", "delete")))
    assert both.eligible


def test_from_start_cleans_from_the_log_start_within_the_caps() -> None:
    segs = eight_segments()
    rng = compute_cleanable_range(
        inputs(segs, log_start_offset=10, checkpoint_offset=60, high_watermark=45), from_start=True
    )
    assert (rng.first_dirty_offset, rng.first_uncleanable_offset) == (10, 40)
    assert (rng.clean_bytes, rng.blocking_rule) == (sizes(segs[:1]), "high-watermark")


def test_unordered_segments_are_refused() -> None:
    with pytest.raises(CleanerStateError, match="expected a base offset above 10, found 5"):
        compute_cleanable_range(inputs([seg(0, 10), seg(10, 12), seg(5, 6)]))


# -- the broker's own cleaner-offset-checkpoint --


@pytest.mark.parametrize(("partition", "checkpoint"), [("31", 3), ("44", 9)])
def test_broker_checkpoint_is_where_our_range_ends(partition: str, checkpoint: int) -> None:
    directory = real_fixture("kraft37-cleaned-logdir", f"__consumer_offsets-{partition}")
    logs = sorted(directory.glob("*.log"))
    bases = [int(p.stem) for p in logs]
    assert bases[-1] == checkpoint  # the broker cleaned up to its then active segment
    log_end = int(max(directory.glob("*.snapshot")).stem)  # written at the log end on shutdown
    segs = [
        SegmentStats(b, p.stat().st_size, NOW, NOW, n)
        for b, p, n in zip(bases, logs, [*bases[1:], log_end], strict=True)
    ]
    before = compute_cleanable_range(inputs(segs, checkpoint_offset=None))
    assert before.first_uncleanable_offset == checkpoint
    after = compute_cleanable_range(inputs(segs, checkpoint_offset=checkpoint))
    assert (after.dirty_bytes, after.eligible, after.blocking_rule) == (0, False, "active-segment")
    assert after.total_bytes == logs[0].stat().st_size


# -- properties --


@st.composite
def partitions(draw: st.DrawFn) -> RangeInputs:
    counts = draw(st.lists(st.integers(0, 6), min_size=1, max_size=7))
    gaps = draw(st.lists(st.integers(0, 3), min_size=len(counts), max_size=len(counts)))
    segments, base = [], draw(st.integers(0, 50))
    for count, gap in zip(counts, gaps, strict=True):
        ts = NOW - draw(st.integers(-HOUR, 10 * HOUR))
        segments.append(seg(base, base + count, ts=ts))
        base += max(count + gap, 1)
    log_end = segments[-1].next_offset
    log_start = draw(st.integers(segments[0].base_offset, log_end))
    maybe = st.none() | st.integers(0, log_end + 5)
    return inputs(
        segments,
        log_start_offset=log_start,
        checkpoint_offset=draw(maybe),
        high_watermark=draw(st.integers(0, log_end + 5)),
        first_unstable_offset=draw(maybe),
        min_compaction_lag_ms=draw(st.sampled_from([0, HOUR])),
        max_compaction_lag_ms=draw(st.sampled_from([INT64_MAX, HOUR])),
        min_cleanable_dirty_ratio=draw(st.sampled_from([0.0, 0.5, 1.0])),
    )


@given(partitions(), st.booleans())
def test_range_invariants(inp: RangeInputs, from_start: bool) -> None:
    rng = compute_cleanable_range(inp, from_start=from_start)
    bases = {s.base_offset for s in inp.segments}
    assert rng.total_bytes == rng.clean_bytes + rng.dirty_bytes
    assert 0.0 <= rng.dirty_ratio <= 1.0
    assert rng.first_uncleanable_offset in bases
    assert rng.first_uncleanable_offset <= rng.active_segment_base_offset
    assert rng.first_uncleanable_dirty_offset >= rng.first_dirty_offset
    assert rng.last_stable_offset <= rng.high_watermark <= inp.log_end_offset
    assert rng.first_dirty_offset >= inp.log_start_offset
    if from_start:
        assert rng.first_dirty_offset == inp.log_start_offset
    if rng.eligible:
        assert rng.dirty_bytes > 0
    assert rng.blocking_rule and rng.blocking_detail


def test_pick_ranks_highest_ratio_first_ties_in_listing_order() -> None:
    # LogCleanerManager.grabFilthiestCompactedLog: the max dirty ratio among the eligible logs
    ranks = pick_ranks([(True, 0.5), (False, 0.9), (True, 0.7), (True, 0.5), (False, 0.1)])
    assert ranks == [2, None, 1, 3, None]
    assert pick_ranks([]) == []
    assert pick_order([(True, 0.5), (False, 0.9), (True, 0.7), (True, 0.5)]) == [2, 0, 3]
