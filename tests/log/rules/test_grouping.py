"""Kafka's groupSegmentsBySize, ported from LogCleanerTest's grouping cases, plus properties.

Segment layouts below are what Kafka's tests build: a one-record "hello"/"hello" v2 batch is 78
bytes, and with index.interval.bytes=1 every batch gets an 8-byte offset-index entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CleanerStateError
from kcompact.log.rules.grouping import group_segments_by_size
from kcompact.records.varint import INT32_MAX

BATCH = 78  # one "hello"/"hello" record in a v2 batch
HUGE = INT32_MAX


@dataclass(frozen=True, slots=True)
class GroupingSegment:
    """One source segment's sizes: ``.log`` bytes, and index bytes as entries x entry size."""

    base_offset: int
    size_in_bytes: int
    offset_index_bytes: int  # offset-index entries x 8
    time_index_bytes: int  # time-index entries x 12


def seg(base: int, batches: int, *, time_entries: int | None = None) -> GroupingSegment:
    """A segment of one-record batches, each with an offset-index (and time-index) entry."""
    entries = batches if time_entries is None else time_entries
    return GroupingSegment(base, batches * BATCH, batches * 8, entries * 12)


def bases(groups: list[list[GroupingSegment]]) -> list[list[int]]:
    return [[s.base_offset for s in group] for group in groups]


def ten_segments() -> list[GroupingSegment]:
    # segment.bytes=300: three 78-byte batches per segment, the tenth (active) holds one. The
    # records carry no timestamp, so the time indexes stay empty, as in Kafka's test.
    return [seg(3 * i, 3, time_entries=0) for i in range(9)] + [seg(27, 1, time_entries=0)]


def test_segment_grouping_by_huge_limits_gives_one_group() -> None:
    segments = ten_segments()
    groups = group_segments_by_size(
        segments, max_size=HUGE, max_index_size=HUGE, first_uncleanable_offset=28
    )
    assert groups == [segments]


@pytest.mark.parametrize(("max_size", "max_index_size"), [(1, HUGE), (HUGE, 1)])
def test_segment_grouping_by_tiny_limits_gives_singletons(
    max_size: int, max_index_size: int
) -> None:
    segments = ten_segments()
    groups = group_segments_by_size(
        segments, max_size=max_size, max_index_size=max_index_size, first_uncleanable_offset=28
    )
    assert groups == [[s] for s in segments]


def test_segment_grouping_by_log_size() -> None:
    segments = ten_segments()
    limit = sum(s.size_in_bytes for s in segments[:3]) + 1
    groups = group_segments_by_size(
        segments, max_size=limit, max_index_size=HUGE, first_uncleanable_offset=28
    )
    assert [len(g) for g in groups] == [3, 3, 3, 1]
    assert [s for g in groups for s in g] == segments


def test_segment_grouping_by_offset_index_size() -> None:
    segments = ten_segments()
    limit = sum(s.offset_index_bytes for s in segments[:3]) + 1
    groups = group_segments_by_size(
        segments, max_size=HUGE, max_index_size=limit, first_uncleanable_offset=28
    )
    assert [len(g) for g in groups] == [3, 3, 3, 1]


def test_segment_grouping_by_time_index_size() -> None:
    # Offset indexes are tiny here, so only the time-index sum can split the groups.
    segments = [GroupingSegment(i, 10, 0, 12) for i in range(5)]
    groups = group_segments_by_size(
        segments, max_size=HUGE, max_index_size=24, first_uncleanable_offset=5
    )
    assert bases(groups) == [[0, 1], [2, 3], [4]]


def test_limits_are_inclusive() -> None:
    segments = [GroupingSegment(0, 100, 8, 12), GroupingSegment(1, 100, 8, 12)]
    groups = group_segments_by_size(
        segments, max_size=200, max_index_size=24, first_uncleanable_offset=2
    )
    assert bases(groups) == [[0, 1]]


def test_segment_grouping_with_sparse_offsets() -> None:
    # segment.bytes=400: five batches fill segment 0 (offsets 0-4); segment 1 starts at 5.
    first = seg(0, 5)
    # A follower append at Int.MaxValue - 1, then one at Int.MaxValue: end offset 2^31.
    layout = [first, seg(5, 3)]
    groups = group_segments_by_size(
        layout, max_size=HUGE, max_index_size=HUGE, first_uncleanable_offset=INT32_MAX + 1
    )
    assert bases(groups) == [[0, 5]]
    # One more record: the last offset becomes Int.MaxValue + 1, out of segment 0's reach.
    layout = [first, seg(5, 4)]
    groups = group_segments_by_size(
        layout, max_size=HUGE, max_index_size=HUGE, first_uncleanable_offset=INT32_MAX + 2
    )
    assert bases(groups) == [[0], [5]]
    # Fill on to four segments: 5 holds up to Int.MaxValue + 2, then Int.MaxValue + 3 ... + 7.
    layout = [first, seg(5, 5), seg(INT32_MAX + 3, 5), seg(INT32_MAX + 8, 1)]
    groups = group_segments_by_size(
        layout, max_size=HUGE, max_index_size=HUGE, first_uncleanable_offset=INT32_MAX + 9
    )
    assert bases(groups) == [[0], [5], [INT32_MAX + 3, INT32_MAX + 8]]


def test_segment_grouping_following_load_of_zero_index() -> None:
    # The second segment's index is empty, yet its data reaches Int.MaxValue + 1: only the
    # estimate from first_uncleanable_offset keeps it out of segment 0's group.
    layout = [GroupingSegment(0, 2 * BATCH, 0, 0), GroupingSegment(INT32_MAX // 2, 2 * BATCH, 0, 0)]
    groups = group_segments_by_size(
        layout, max_size=HUGE, max_index_size=HUGE, first_uncleanable_offset=INT32_MAX + 2
    )
    assert bases(groups) == [[0], [INT32_MAX // 2]]


def test_segment_grouping_with_sparse_offsets_and_empty_segments() -> None:
    step = INT32_MAX + 1  # each of three segments holds offsets i*2^31 and (i+1)*2^31 - 1
    layout = [GroupingSegment(i * step, 2 * 74, 0, 0) for i in range(3)]
    layout.append(GroupingSegment(3 * step, 74, 0, 0))  # the active segment
    first_uncleanable = 3 * step  # log end - 1
    groups = group_segments_by_size(
        layout, max_size=HUGE, max_index_size=HUGE, first_uncleanable_offset=first_uncleanable
    )
    assert len(groups) == 3
    # Cleaned, the first two segments are empty: they now merge despite 2^31 offsets between them.
    cleaned = [GroupingSegment(0, 0, 0, 0), GroupingSegment(step, 0, 0, 0), *layout[2:]]
    groups = group_segments_by_size(
        cleaned, max_size=HUGE, max_index_size=HUGE, first_uncleanable_offset=first_uncleanable
    )
    assert bases(groups) == [[0, step], [2 * step, 3 * step]]


def test_first_segment_of_a_group_is_taken_whatever_its_size() -> None:
    big = GroupingSegment(0, 10_000, 10_000, 10_000)
    groups = group_segments_by_size([big], max_size=1, max_index_size=1, first_uncleanable_offset=1)
    assert groups == [[big]]


def test_no_segments_give_no_groups() -> None:
    assert (
        group_segments_by_size([], max_size=1, max_index_size=1, first_uncleanable_offset=0) == []
    )


def test_sums_beyond_int32_do_not_wrap() -> None:
    # Java sums these in longs; a wrapped int32 sum would wrongly admit the third segment.
    layout = [GroupingSegment(i, INT32_MAX // 2 + 10, 0, 0) for i in range(3)]
    groups = group_segments_by_size(
        layout, max_size=INT32_MAX, max_index_size=INT32_MAX, first_uncleanable_offset=3
    )
    assert bases(groups) == [[0], [1], [2]]


def test_unordered_segments_are_refused() -> None:
    layout = [GroupingSegment(10, 1, 0, 0), GroupingSegment(10, 1, 0, 0)]
    with pytest.raises(CleanerStateError, match="expected a base offset above 10, found 10"):
        group_segments_by_size(layout, max_size=9, max_index_size=9, first_uncleanable_offset=11)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[GroupingSegment], int]:
    gaps = draw(st.lists(st.integers(1, 2**32), min_size=0, max_size=12))
    base, segments = draw(st.integers(0, 2**33)), []
    for gap in gaps:
        size = draw(st.sampled_from([0, 1, 50, 400, 2**31]))
        segments.append(
            GroupingSegment(base, size, draw(st.integers(0, 80)), draw(st.integers(0, 120)))
        )
        base += gap
    return segments, base


@given(layouts(), st.integers(1, 2**32), st.integers(1, 200))
def test_groups_are_greedy_and_within_limits(
    layout: tuple[list[GroupingSegment], int], max_size: int, max_index_size: int
) -> None:
    segments, end = layout
    groups = group_segments_by_size(
        segments, max_size=max_size, max_index_size=max_index_size, first_uncleanable_offset=end
    )
    assert [s for g in groups for s in g] == segments
    bounds = [s.base_offset for s in segments[1:]] + [end] if segments else []
    last_offset = {s.base_offset: bound - 1 for s, bound in zip(segments, bounds, strict=True)}

    def admissible(group: list[GroupingSegment], candidate: GroupingSegment) -> bool:
        return (
            sum(s.size_in_bytes for s in group) + candidate.size_in_bytes <= max_size
            and sum(s.offset_index_bytes for s in group) + candidate.offset_index_bytes
            <= max_index_size
            and sum(s.time_index_bytes for s in group) + candidate.time_index_bytes
            <= max_index_size
            and (
                candidate.size_in_bytes == 0
                or last_offset[candidate.base_offset] - group[0].base_offset <= INT32_MAX
            )
        )

    for number, group in enumerate(groups):
        assert group
        for size in range(1, len(group)):
            assert admissible(group[:size], group[size])
        if number + 1 < len(groups):
            assert not admissible(group, groups[number + 1][0])
