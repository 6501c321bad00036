"""Index building (``LogSegment.append``): Kafka's rules one by one, and the indexes real brokers wrote.

The broker-written fixtures settle the algorithm: every ``.index``/``.timeindex`` that sits next to
its ``.log`` in ../shared/fixtures/real is reproduced byte for byte. Files of segments that stayed
active across broker restarts (bitnami2024) carry one extra time-index entry per restart and restart
the byte count there; they are reproduced with :meth:`IndexBuilder.restart` at the restart points
their time indexes reveal.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptIndexError
from kcompact.segment import index_builder
from kcompact.segment.index_builder import IndexBuilder, build_indexes
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


# Runs are queued and indexed together (index_builder's module docstring): by numpy, by the Python loop where
# numpy is not loaded, and with a queue that is indexed every few batches.
INDEXING = ["columns", "by-batch", "short-queue"]


def _indexing(how: str) -> pytest.MonkeyPatch:
    import numpy

    patch = pytest.MonkeyPatch()
    patch.setattr(index_builder, "_numpy", lambda count: None if how == "by-batch" else numpy)
    if how == "short-queue":
        patch.setattr(index_builder, "MAX_QUEUED", 3)
    return patch


def _steps_outcome(builder: IndexBuilder, steps: list[tuple[list[tuple[int, int, int]], bool]],
                   by_run: bool) -> object:
    """Feed ``steps`` (a run of (size, last offset, max timestamp), and whether the broker restarts after
    it) a run at a time or batch by batch: :func:`_outcome` with restarts, and the encoded files."""
    position = 0
    try:
        for run, restart in steps:
            sizes, lasts, stamps = [b[0] for b in run], [b[1] for b in run], [b[2] for b in run]
            if by_run:
                builder.append_run(position, sizes, lasts, stamps)
            else:
                for size, last, stamp in run:
                    builder.append(position, size, last, stamp)
                    position += size
                position -= sum(sizes)
            position += sum(sizes)
            if restart:
                builder.restart()
        offsets, times = builder.finish()
        return offsets, times, builder.finish_encoded()
    except (CorruptIndexError, ValueError) as err:
        return type(err), str(err), builder.next_position


_sized = st.tuples(st.integers(-3, 3), st.integers(0, 2), st.integers(1, 3), st.integers(-2, 12),
                   st.sampled_from([1, 1, 1, 1, 1, 1, 0, -1]))


@pytest.mark.parametrize("how", INDEXING)
@given(st.lists(st.tuples(st.lists(_sized, max_size=40), st.booleans()), max_size=8), st.integers(0, 300),
       st.integers(0, 50))
def test_queued_runs_build_what_batch_by_batch_builds(
    how: str, raw: list[tuple[list[tuple[int, int, int, int, int]], bool]], interval: int, base: int
) -> None:
    """Sizes just around the interval (below, equal, above; now and then far above), timestamps equal,
    decreasing and -1 or below, restarts between runs, and now and then a run whose offsets go back (batch by
    batch, after the queued ones are indexed)."""
    steps, last = [], base - 1
    for raw_run, restart in raw:
        run = []
        for around, far, step, stamp, direction in raw_run:
            last = last + step if direction > 0 else last if direction == 0 else last - step
            run.append((max(1, interval + around) * (1 + far * far), last, stamp * 1000 if stamp > 0 else stamp))
        steps.append((run, restart))
    with _indexing(how).context():
        assert _steps_outcome(IndexBuilder(base, interval), steps, by_run=True) == \
            _steps_outcome(IndexBuilder(base, interval), steps, by_run=False)


@pytest.mark.parametrize("how", INDEXING)
@given(st.lists(st.tuples(st.one_of(st.integers(1, 60), st.integers(1, 9000)), st.integers(-1, 40)), min_size=1,
                max_size=600),
       st.lists(st.integers(0, 600), max_size=6), st.integers(0, 5000), st.integers(-1, 40))
def test_a_segment_split_anywhere_builds_what_batch_by_batch_builds(
    how: str, raw: list[tuple[int, int]], cuts: list[int], interval: int, first_stamp: int
) -> None:
    """One segment's batches cut into runs at arbitrary points, the first batch alone (it never gets an entry);
    small batches among large ones, and long stretches of small ones (a cleaned legacy log's shape)."""
    run = [(size, 10 + i, stamp) for i, (size, stamp) in enumerate(raw)]
    bounds = [0, *sorted(min(cut, len(run)) for cut in cuts), len(run)]
    steps = [([(40, 9, first_stamp)], False)] + [(run[a:b], False) for a, b in pairwise(bounds)]
    with _indexing(how).context():
        assert _steps_outcome(IndexBuilder(9, interval), steps, by_run=True) == \
            _steps_outcome(IndexBuilder(9, interval), steps, by_run=False)


@pytest.mark.parametrize("how", INDEXING)
def test_bytes_since_the_last_entry_carry_across_runs_without_entries(how: str) -> None:
    """Runs of three 100-byte batches with index.interval.bytes 1000: an entry every eleventh batch, counted
    across the runs (and across the short queue's indexing every third batch)."""
    steps = [([(100, 3 * r + i, 1000 + r) for i in range(3)], False) for r in range(12)]
    with _indexing(how).context():
        built = _steps_outcome(IndexBuilder(0, 1000), steps, by_run=True)
    assert built == _steps_outcome(IndexBuilder(0, 1000), steps, by_run=False)
    assert built[0] == [OffsetIndexEntry(offset=11, position=1100), OffsetIndexEntry(offset=22, position=2200),  # type: ignore[index]
                        OffsetIndexEntry(offset=33, position=3300)]


def test_runs_are_indexed_without_a_python_step_per_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cleaner's shape: 20,000 batches around index.interval.bytes in runs of 100. Neither an offset entry
    nor a time offer is made one at a time (only the closing offer), and the entries are batch by batch's."""
    calls: list[str] = []

    def counted(name: str) -> Callable[..., None]:
        real = getattr(IndexBuilder, name)

        def call(self: IndexBuilder, *args: int) -> None:
            calls.append(name)
            real(self, *args)

        return call

    for name in ("_append_offset_entry", "_offer_time_entry"):
        monkeypatch.setattr(IndexBuilder, name, counted(name))
    run = [(3000 + (i * 7919) % 2500, 10 + 2 * i, 1_700_000_000_000 + (i * 37) % 5000) for i in range(20_000)]
    steps = [(run[i:i + 100], False) for i in range(0, len(run), 100)]
    built = _steps_outcome(IndexBuilder(10, 4096), steps, by_run=True)
    assert calls == ["_offer_time_entry"]
    assert built == _steps_outcome(IndexBuilder(10, 4096), steps, by_run=False)
    offsets = built[0]  # type: ignore[index]
    assert 6000 < len(offsets) < 20_000


def test_a_small_segment_is_indexed_without_numpy() -> None:
    """A clean with nothing to rewrite never loads numpy; neither does indexing a few batches (roll, recovery)."""
    script = (
        "import sys\n"
        "from kcompact.segment.index_builder import IndexBuilder\n"
        "builder = IndexBuilder(100, 10)\n"
        "builder.append_run(0, [20, 5, 30, 11, 12], [100, 101, 103, 104, 106], [5, 4, 6, 6, -1])\n"
        "index, timeindex = builder.finish_encoded()\n"
        "print('numpy' in sys.modules, index.hex(), timeindex.hex())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    offsets, times = build_indexes([(0, 20, 100, 5), (20, 5, 101, 4), (25, 30, 103, 6), (55, 11, 104, 6),
                                    (66, 12, 106, -1)], base_offset=100, index_interval_bytes=10)
    assert out == ["False", encode_offset_index(offsets, 100).hex(), encode_time_index(times, 100).hex()]
    assert len(offsets) == 3 and len(times) == 2
