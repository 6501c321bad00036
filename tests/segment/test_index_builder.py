"""Index building (``LogSegment.append``): Kafka's rules one by one, and the indexes real brokers wrote.

The broker-written fixtures settle the algorithm: every ``.index``/``.timeindex`` that sits next to
its ``.log`` in ../shared/fixtures/real is reproduced byte for byte. Files of segments that stayed
active across broker restarts (bitnami2024) carry one extra time-index entry per restart and restart
the byte count there; they are reproduced with :meth:`IndexBuilder.restart` at the restart points
their time indexes reveal.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptIndexError
from kcompact.segment.index_builder import VECTOR_RUN, IndexBuilder, build_indexes
from kcompact.segment.offset_index import (
    OffsetIndexEntry,
    check_offset_index,
    encode_offset_index,
    read_offset_index,
)
from kcompact.segment.time_index import (
    TimeIndexEntry,
    check_time_index,
    encode_time_index,
    read_time_index,
)
from tests.conftest import real_fixture

Batch = tuple[int, int, int, int]  # position, size_in_bytes, last_offset, max_timestamp

# Just enough of the v2 batch header to index a segment: offset(8) length(4) epoch(4) magic(1)
# crc(4) attributes(2) last_offset_delta(4) base_timestamp(8) max_timestamp(8).
_HEADER = struct.Struct(">qiibIhiqq")


def walk_v2_batches(data: bytes) -> list[Batch]:
    """(position, size, last offset, max timestamp) of each batch of a v2 segment (local walker)."""
    batches = []
    position = 0
    while position + _HEADER.size <= len(data):
        base, length, _epoch, magic, _crc, _attrs, delta, _base_ts, max_ts = _HEADER.unpack_from(
            data, position
        )
        assert magic == 2, f"not a v2 batch at {position}"
        batches.append((position, length + 12, base + delta, max_ts))
        position += length + 12
    assert position == len(data)
    return batches


def segment_batches(log: Path) -> list[Batch]:
    return walk_v2_batches(log.read_bytes())


def reference_indexes(
    batches: list[Batch], base: int, interval: int
) -> tuple[list[OffsetIndexEntry], list[TimeIndexEntry]]:
    """LogSegment.recover's formulation (valid bytes minus the last entry's position), apart."""
    offsets: list[OffsetIndexEntry] = []
    times: list[TimeIndexEntry] = []
    last_entry_position = 0
    max_ts, max_ts_offset = -1, base

    def offer() -> None:
        if max_ts > (times[-1].timestamp if times else -1):
            times.append(TimeIndexEntry(max_ts, max_ts_offset))

    for position, _size, last_offset, batch_max_ts in batches:
        if batch_max_ts > max_ts:
            max_ts, max_ts_offset = batch_max_ts, last_offset
        if position - last_entry_position > interval:
            offsets.append(OffsetIndexEntry(last_offset, position))
            offer()
            last_entry_position = position
    offer()
    return offsets, times


def contiguous(sizes_and_batches: list[tuple[int, int, int]]) -> list[Batch]:
    """Lay out (size, offset delta, max timestamp) batches back to back from offset 0."""
    batches, position, offset = [], 0, -1
    for size, delta, max_ts in sizes_and_batches:
        offset += delta
        batches.append((position, size, offset, max_ts))
        position += size
    return batches


def test_first_batch_is_never_indexed_even_with_interval_zero() -> None:
    batches = contiguous([(100, 1, 5), (100, 1, 6), (100, 1, 7)])
    offsets, times = build_indexes(batches, base_offset=0, index_interval_bytes=0)
    assert offsets == [OffsetIndexEntry(1, 100), OffsetIndexEntry(2, 200)]
    assert times == [TimeIndexEntry(6, 1), TimeIndexEntry(7, 2)]


def test_interval_is_a_strict_greater_than_on_bytes_since_the_last_entry() -> None:
    batches = contiguous([(100, 1, 1)] * 8)
    offsets, _ = build_indexes(batches, base_offset=0, index_interval_bytes=200)
    # 300 bytes since the start at position 300 (200 is not enough), then again 300 bytes later.
    assert offsets == [OffsetIndexEntry(3, 300), OffsetIndexEntry(6, 600)]


def test_time_entries_keep_the_first_batch_that_reached_the_running_max() -> None:
    batches = contiguous([(100, 1, 10), (100, 2, 30), (100, 1, 30), (100, 1, 20), (100, 3, 25)])
    offsets, times = build_indexes(batches, base_offset=0, index_interval_bytes=0)
    assert [e.offset for e in offsets] == [2, 3, 4, 7]
    # 30 first appears at offset 2; later index points offer (30, 2) again and are ignored.
    assert times == [TimeIndexEntry(30, 2)]


def test_final_entry_is_added_only_when_larger_than_the_last() -> None:
    builder = IndexBuilder(base_offset=10, index_interval_bytes=50)
    builder.append(0, 100, 10, 500)
    builder.append(100, 100, 12, 400)  # index point: offers (500, 10)
    builder.append(200, 100, 13, 900)
    offsets, times = builder.finish()
    assert offsets == [OffsetIndexEntry(12, 100), OffsetIndexEntry(13, 200)]
    assert times == [TimeIndexEntry(500, 10), TimeIndexEntry(900, 13)]
    assert builder.finish() == (offsets, times)


def test_timestamps_minus_one_never_index() -> None:
    batches = contiguous([(5000, 1, -1)] * 4)
    offsets, times = build_indexes(batches, base_offset=0)
    assert offsets == [
        OffsetIndexEntry(1, 5000),
        OffsetIndexEntry(2, 10000),
        OffsetIndexEntry(3, 15000),
    ]
    assert times == []


def test_negative_timestamps_other_than_minus_one_never_index_either() -> None:
    _, times = build_indexes(contiguous([(10, 1, -5), (10, 1, -2)]), base_offset=0)
    assert times == []


def test_empty_segment_has_empty_indexes() -> None:
    assert build_indexes([], base_offset=7) == ([], [])


@pytest.mark.parametrize("last_offset", [99, 100 + 2**31])
def test_batch_outside_the_relative_offset_range_is_kafkas_overflow(last_offset: int) -> None:
    builder = IndexBuilder(base_offset=100)
    with pytest.raises(
        CorruptIndexError, match="does not fit the segment's relative offsets"
    ) as info:
        builder.append(0, 80, last_offset, 1)
    assert info.value.offset == last_offset
    assert info.value.position == 0


def test_index_entry_that_does_not_increase_is_rejected() -> None:
    batches = [(0, 100, 5, 1), (100, 100, 9, 1), (200, 100, 9, 1)]
    with pytest.raises(CorruptIndexError, match="would not increase; expected offset > 9, found 9"):
        build_indexes(batches, base_offset=0, index_interval_bytes=0)


@pytest.mark.parametrize(("position", "size"), [(1, 100), (0, 0)], ids=["gap", "empty batch"])
def test_batches_must_be_contiguous(position: int, size: int) -> None:
    with pytest.raises(ValueError, match="contiguous"):
        IndexBuilder(0).append(position, size, 0, 0)


def test_append_after_finish_and_negative_interval_are_caller_bugs() -> None:
    builder = IndexBuilder(0)
    builder.finish()
    with pytest.raises(ValueError, match="after finish"):
        builder.append(0, 100, 0, 0)
    with pytest.raises(ValueError, match="index_interval_bytes"):
        IndexBuilder(0, -1)


def test_incremental_and_one_shot_agree_and_track_the_size() -> None:
    batches = contiguous([(3000, 1, 5), (3000, 4, 2), (3000, 2, 9), (3000, 1, 9)])
    builder = IndexBuilder(0)
    for batch in batches:
        builder.append(*batch)
    assert builder.next_position == 12000
    assert builder.finish() == build_indexes(batches, base_offset=0)


_batch_specs = st.lists(
    st.tuples(st.integers(61, 6000), st.integers(1, 50), st.integers(-1, 10**6)), max_size=60
)


@given(specs=_batch_specs, interval=st.integers(0, 9000), base=st.integers(0, 2**40))
def test_builder_matches_recoverys_formulation_and_passes_the_checks(
    specs: list[tuple[int, int, int]], interval: int, base: int
) -> None:
    batches = [(p, s, base + o, t) for p, s, o, t in contiguous(specs)]
    offsets, times = build_indexes(batches, base_offset=base, index_interval_bytes=interval)
    assert (offsets, times) == reference_indexes(batches, base, interval)
    assert check_offset_index(offsets, base, log_batches=[(b[0], b[2]) for b in batches]) == []
    assert check_time_index(times, base, log_batches=[(b[2], b[3]) for b in batches]) == []


# Segments whose .index/.timeindex Kafka finished (non-active, or active and cleanly shut down
# once).
EXACT = [
    ("kraft37-cleaned-logdir", "__cluster_metadata-0", 1725413, True),
    ("kraft37-cleaned-logdir", "__consumer_offsets-31", 0, False),
    ("kraft37-cleaned-logdir", "__consumer_offsets-31", 3, False),
    ("kraft37-cleaned-logdir", "__consumer_offsets-44", 0, False),
    ("kraft37-cleaned-logdir", "__consumer_offsets-44", 9, False),
    ("kraft37-consumer-offsets", "__consumer_offsets-6", 0, True),
    ("bitnami2024-rolled-logdir", "first-0", 0, False),
    ("bitnami2024-rolled-logdir", "sensor-data-0", 0, False),
]


@pytest.mark.parametrize(("log_dir", "partition", "base", "has_index"), EXACT)
def test_builder_reproduces_broker_written_indexes(
    log_dir: str, partition: str, base: int, has_index: bool
) -> None:
    directory = real_fixture(log_dir, partition)
    stem = f"{base:020d}"
    offsets, times = build_indexes(segment_batches(directory / f"{stem}.log"), base_offset=base)
    assert encode_time_index(times, base) == (directory / f"{stem}.timeindex").read_bytes()
    if has_index:  # the others' .index files were left out of the source repositories
        assert encode_offset_index(offsets, base) == (directory / f"{stem}.index").read_bytes()


# Active segments of a broker restarted several times: (partition, last offsets before each
# restart).
RESTARTED = [
    ("__cluster_metadata-0", [6436]),
    ("__consumer_offsets-0", [2, 8, 33]),
    ("__consumer_offsets-39", [2, 8, 33]),
    ("__consumer_offsets-3", [1]),
    ("__consumer_offsets-19", [1]),
    ("__consumer_offsets-20", [1]),
    ("sensor-data-topic-0", [3, 33]),
]


@pytest.mark.parametrize(("partition", "restarts"), RESTARTED)
def test_builder_with_restarts_reproduces_long_lived_active_segments(
    partition: str, restarts: list[int]
) -> None:
    directory = real_fixture("bitnami2024-rolled-logdir", partition)
    log = directory / "00000000000000000000.log"
    batches = segment_batches(log)
    builder = IndexBuilder(0)
    for batch in batches:
        builder.append(*batch)
        if batch[2] in restarts:
            builder.restart()
    offsets, times = builder.finish()
    assert times == read_time_index(log.with_suffix(".timeindex"), 0)
    # Without the restarts the time index would lack the entries each shutdown added.
    assert build_indexes(batches, base_offset=0)[1] != times
    index = log.with_suffix(".index")
    if index.exists():
        assert offsets == read_offset_index(index, 0)


def _outcome(builder: IndexBuilder, runs: list[list[tuple[int, int, int]]], by_run: bool) -> object:
    """Feed ``runs`` of (size, last offset, max timestamp) batch by batch or a run at a time: the entries,
    or the error and the entries made before it."""
    position = 0
    try:
        for run in runs:
            sizes, lasts, stamps = [b[0] for b in run], [b[1] for b in run], [b[2] for b in run]
            if by_run:
                builder.append_run(position, sizes, lasts, stamps)
            else:
                at = position
                for size, last, stamp in run:
                    builder.append(at, size, last, stamp)
                    at += size
            position += sum(sizes)
        return builder.finish()
    except (CorruptIndexError, ValueError) as err:
        try:
            after: object = builder.finish()
        except (CorruptIndexError, ValueError) as again:  # the state the failure left cannot close either
            after = type(again), str(again)
        return type(err), str(err), after


_batch = st.tuples(st.integers(-3, 9000), st.integers(-5, 400), st.integers(-3, 50))


@given(st.lists(st.lists(_batch, max_size=12), max_size=6), st.integers(0, 5000), st.integers(0, 120))
def test_a_run_at_a_time_builds_what_batch_by_batch_builds(
    raw: list[list[tuple[int, int, int]]], interval: int, base: int
) -> None:
    # Mostly increasing last offsets (each a step after the last), now and then going back or out of range;
    # sizes now and then not positive: the run path must fail exactly where append fails.
    runs, last = [], base - 1
    for raw_run in raw:
        run = []
        for size, step, stamp in raw_run:
            last = last + step if step > -5 else last - 1
            run.append((size, last, stamp * 1000))
        runs.append(run)
    assert _outcome(IndexBuilder(base, interval), runs, by_run=True) == \
        _outcome(IndexBuilder(base, interval), runs, by_run=False)


@given(st.lists(st.tuples(st.integers(1, 300), st.integers(1, 3), st.integers(-3, 50)), min_size=1,
                max_size=1200), st.integers(0, 5000), st.integers(0, 3000), st.integers(-2, 40))
def test_a_long_run_of_small_batches_builds_what_batch_by_batch_builds(
    raw: list[tuple[int, int, int]], interval: int, split: int, first_stamp: int
) -> None:
    """Runs of VECTOR_RUN batches or more are indexed entry by entry (binary search over the sizes)."""
    last = 9
    run: list[tuple[int, int, int]] = []
    for size, step, stamp in raw:
        last += step
        run.append((size, last, stamp * 1000))
    runs = [[(40, 9, first_stamp * 1000)], run[:split], run[split:]]
    assert _outcome(IndexBuilder(9, interval), runs, by_run=True) == \
        _outcome(IndexBuilder(9, interval), runs, by_run=False)


def test_a_long_run_takes_the_entry_by_entry_path_and_builds_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[int] = []
    by_entries = IndexBuilder._append_run_by_entries

    def spying(self: IndexBuilder, *args: Any) -> None:
        taken.append(len(args[1]))
        by_entries(self, *args)

    monkeypatch.setattr(IndexBuilder, "_append_run_by_entries", spying)
    run = [(100 + i % 7, 10 + i, (i * 37) % 500) for i in range(3000)]
    assert _outcome(IndexBuilder(10, 4096), [run[:1000], run[1000:]], by_run=True) == \
        _outcome(IndexBuilder(10, 4096), [run], by_run=False)
    assert taken == [1000, 2000]
    assert VECTOR_RUN <= 1000
