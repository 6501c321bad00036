"""Which source segments the cleaner merges into one output segment (``groupSegmentsBySize``).

Pure (values in, decisions out); ``Cleaner.groupSegmentsBySize``, checked against Kafka 4.1's ``Cleaner.java``.

Greedy and in order: a group starts with the next segment and takes the segment after it while all
of these hold (sizes are the *source* segments' pre-cleaning sizes, so an output never outgrows
``segment.bytes`` / ``segment.index.bytes``):

* the group's ``.log`` bytes plus the candidate's stay <= ``max_size`` (``segment.bytes``);
* the group's offset-index bytes plus the candidate's stay <= ``max_index_size``
  (``segment.index.bytes``), and likewise the time-index bytes;
* the candidate is empty, or its estimated last offset minus the group's first base offset is
  <= 2^31 - 1, so every offset fits the int32 relative offset of the output's index. The estimate
  is the base of the segment after the candidate, minus one, or ``first_uncleanable_offset`` - 1
  for the last candidate; reading the true last offset would cost a scan.

Empty segments skip the offset check so that cleaned-out segments spaced 2^31 apart still merge
(Kafka's ``testSegmentGroupingWithSparseOffsetsAndEmptySegments``). Python integers do not overflow,
so the sums need none of Java's care about int widths.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol, TypeVar

from kcompact.errors import CleanerStateError
from kcompact.records.varint import INT32_MAX


class SizedSegment(Protocol):
    """What grouping reads of a segment (``round.plan``'s segments; the tests' plain values)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def size_in_bytes(self) -> int: ...

    @property
    def offset_index_bytes(self) -> int: ...

    @property
    def time_index_bytes(self) -> int: ...


SegmentT = TypeVar("SegmentT", bound=SizedSegment)


def group_segments_by_size(
    segments: Sequence[SegmentT],
    *,
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> list[list[SegmentT]]:
    """Group consecutive segments into the cleaner's output segments, exactly as Kafka does.

    Args:
        segments: the segments to clean, ascending by base offset (any objects with the
            :class:`SizedSegment` attributes; they are returned as given).
        max_size: ``segment.bytes``, the most ``.log`` bytes one group may hold.
        max_index_size: ``segment.index.bytes``, the most offset-index bytes and the most
            time-index bytes one group may hold.
        first_uncleanable_offset: the exclusive upper offset of this cleaning round, which bounds
            the last segment's estimated last offset.

    Returns:
        The groups in order; each becomes one output segment based at its first segment's base.

    Raises:
        CleanerStateError: the base offsets are not strictly ascending.
    """
    _check_ascending(segments)
    groups: list[list[SegmentT]] = []
    index = 0
    while index < len(segments):
        group = [segments[index]]
        totals = [group[0].size_in_bytes, group[0].offset_index_bytes, group[0].time_index_bytes]
        index += 1
        while index < len(segments) and _fits(
            segments, index, group[0].base_offset, totals, max_size, max_index_size,
            first_uncleanable_offset,
        ):
            candidate = segments[index]
            group.append(candidate)
            totals[0] += candidate.size_in_bytes
            totals[1] += candidate.offset_index_bytes
            totals[2] += candidate.time_index_bytes
            index += 1
        groups.append(group)
    return groups


def _fits(
    segments: Sequence[SizedSegment],
    index: int,
    group_base_offset: int,
    totals: list[int],
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> bool:
    """Whether ``segments[index]`` may join a group with these (log, offset, time index) totals."""
    candidate = segments[index]
    if (
        totals[0] + candidate.size_in_bytes > max_size
        or totals[1] + candidate.offset_index_bytes > max_index_size
        or totals[2] + candidate.time_index_bytes > max_index_size
    ):
        return False
    if candidate.size_in_bytes == 0:
        return True
    last_offset = _estimated_last_offset(segments, index, first_uncleanable_offset)
    return last_offset - group_base_offset <= INT32_MAX  # Int.MaxValue: the widest range one segment's index holds


def _check_ascending(segments: Sequence[SizedSegment]) -> None:
    for before, after in itertools.pairwise(segments):
        if after.base_offset <= before.base_offset:
            raise CleanerStateError(
                f"segment base offsets out of order; expected a base offset above "
                f"{before.base_offset}, found {after.base_offset}"
            )


def _estimated_last_offset(
    segments: Sequence[SizedSegment], index: int, first_uncleanable_offset: int
) -> int:
    """Kafka's ``lastOffsetForFirstSegment``: next segment's base - 1, else the round's end - 1."""
    if index + 1 < len(segments):
        return segments[index + 1].base_offset - 1
    return first_uncleanable_offset - 1
