"""Pass 2's C windows over data batches (``filter_windows``: ``_windows.scan_window_records`` and
``_windows.emit_window``, taken by ``filtering.iter_segment_output``) give exactly what the per-batch walk
gives: every output batch's bytes, last offset and max timestamp, the counters and the transaction
state, on intact and corrupted segments, for whole segments and chunks, at any window size."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcompact.cleaner.round import accel, filter_windows
from kcompact.cleaner.round.filtering import iter_segment_output
from kcompact.cleaner.round.mapping import iter_dirty_keys
from kcompact.cleaner.round.plan import CleanPlan, SegmentPlan
from kcompact.cleaner.round.record_filter import FilterContext
from kcompact.cleaner.round.stats import CleanStats
from kcompact.cleaner.round.steps import plan_clean
from kcompact.log.offset_map.oracle import KeysAt, OffsetMapOracle, RetentionOracle, SortedOffsetsOracle
from kcompact.records import compression
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET, RECORD_BATCH_OVERHEAD
from kcompact.records.crc import crc32c
from kcompact.records.legacy import LegacyEntry
from kcompact.records.record import Record, decode_records
from kcompact.segment.log_file import LogFile
from tests.builders import PartitionBuilder
from tests.cleaner.round.test_steps import OPTIONS, serial_map
from tests.cleaner.workers.test_parallel import DAY, NOW, config, key
from tests.records.scan.accel_compare import accel_switched, counted_zstd_one_call, needs_c


def _raw(b: PartitionBuilder, kvs: list[tuple[bytes | None, bytes | None]], **fields: object) -> None:
    """Append a batch the builder cannot make (a delete horizon, LogAppendTime)."""
    records = [Record(b.next_offset + i, b.ts + i, k, v) for i, (k, v) in enumerate(kvs)]
    b.segments[-1].batches.append(encode_batch(records, base_offset=b.next_offset, **fields))  # type: ignore[arg-type]
    b.next_offset += len(kvs)
    b.ts += len(kvs)


def only_key(key: bytes) -> KeysAt:
    """The oracle's ``keys_at`` for one record: its key wherever asked."""
    return lambda at: [key] * len(at)


def _partition(log_dir: Path) -> Path:
    """A clean section, then plain runs broken by everything the kernel leaves to the per-batch walk:
    a transaction and its ABORT marker, an idempotent producer's last batch, the batch ending at the
    round's upper bound; with null keys, tombstones, delete horizons past and ahead, LogAppendTime,
    batches kept whole, rebuilt and dropped, and compressed batches of every codec among them."""
    b = PartitionBuilder("runs")
    for n in range(4):
        b.batch([(key(i), b"old%d" % n) for i in range(n, 12, 2)])
    _raw(b, [(key(1), None), (key(30), None)], delete_horizon_ms=NOW + DAY)
    b.roll()
    checkpoint = b.next_offset
    b.batch([(key(i), b"a") for i in range(3)])
    b.batch([(key(i % 5), b"b%d" % i) for i in range(8)] + [(None, b"no key")])
    _raw(b, [(key(2), None), (key(40), None), (key(41), b"x")], delete_horizon_ms=NOW - 5)
    _raw(b, [(key(42), None), (key(43), b"y")], delete_horizon_ms=NOW + DAY)
    _raw(b, [(key(3), b"lat"), (key(44), b"lat")], timestamp_type=1, max_timestamp=NOW - DAY)
    b.batch([(key(50 + i), b"whole") for i in range(4)])
    b.batch([(key(i), b"z") for i in range(4)], compression=4)
    b.batch([(key(5), None), (key(6), b"c")])
    b.batch([(key(7), b"t")], producer_id=3, transactional=True)
    b.batch([(key(8), b"d"), (key(9), b"d")])
    b.marker(3, commit=False)
    for n in range(5):
        b.batch([(key(i), b"e%d" % n) for i in range(n, n + 4)] + [(key(60 + n), None)])
    b.batch([(key(70), b"idem"), (key(1), b"idem")], producer_id=7)
    b.batch([(key(1), b"idem")], producer_id=7)  # its last: kept as an empty shell
    b.batch([(key(71), b"after"), (key(2), b"after")])
    b.roll()
    for n in range(6):
        b.batch([(key(i), b"f%d" % n) for i in range(n, 20, 3)])
    for codec in (1, 2, 3, 4):  # compressed: rebuilt (a tombstone kept too), whole, dropped
        b.batch([(key(i), b"g%d" % codec) for i in range(codec, 9, 2)] + [(key(80 + codec), None)],
                compression=codec)
        b.batch([(key(90 + codec), b"whole"), (key(95 + codec), b"whole")], compression=codec)
        b.batch([(key(100), b"gone"), (key(101), b"gone")], compression=codec)
    _raw(b, [(key(5), b"lat"), (key(102), b"lat")], compression=4, timestamp_type=1,
         max_timestamp=NOW - DAY)
    _raw(b, [(key(103), None), (key(104), b"h")], compression=1, delete_horizon_ms=NOW - 5)
    b.batch([(key(i), b"later") for i in (1, 2, 3, 100, 101)])
    _raw(b, [(key(4), None)], delete_horizon_ms=NOW - 5)  # ends at the upper bound: a shell
    b.roll()
    b.batch([(key(0), b"active")])
    return b.write(log_dir, cleaner_checkpoint=checkpoint)


Walked = tuple[list[tuple[bytes, int, int]], dict[str, object], object, object]


def _walk(plan: CleanPlan, seg: SegmentPlan, oracle: RetentionOracle, start: int,
          end: int | None) -> Walked:
    """Every output batch (each run the walk yields split into its batches), the counters and the
    retained aborted transactions; or only the error (class and message) if one was raised (a round that
    fails keeps no output and no counters)."""
    out: list[tuple[bytes, int, int]] = []
    ctx = FilterContext.at(plan, seg, oracle, CleanStats())
    try:
        for data, sizes, lasts, times in iter_segment_output(plan, seg, ctx, start, end):
            at = 0
            for size, last, ts in zip(sizes, lasts, times, strict=True):
                out.append((bytes(data[at : at + size]), last, ts))
                at += size
            assert at == len(data)
    except Exception as err:  # noqa: BLE001 - comparing them is the point
        return [], {}, None, (type(err), str(err))
    return out, dataclasses.asdict(ctx.stats), ctx.txn.take_retained_aborted(), None


def _both(plan: CleanPlan, seg: SegmentPlan, oracle: RetentionOracle, start: int = 0,
          end: int | None = None) -> Walked:
    with accel_switched(False):
        reference = _walk(plan, seg, oracle, start, end)
    with accel_switched(True):
        compiled = _walk(plan, seg, oracle, start, end)
    assert compiled == reference
    return reference


Round = tuple[CleanPlan, dict[str, RetentionOracle], list[bytes]]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Round]:
    part = _partition(tmp_path_factory.mktemp("runs"))
    plan = plan_clean(part, config(), OPTIONS)
    assert plan is not None and plan.first_dirty_offset > 0
    offset_map = serial_map(plan)
    serial = OffsetMapOracle(offset_map, plan.first_dirty_offset)
    with accel_switched(False):  # the surviving offsets, as a distributed map ships them
        sorted_offsets = sorted(
            o for s in plan.segments for _, o, _ in _kept_offsets(plan, s, serial))
    oracles: dict[str, RetentionOracle] = {
        "map": serial,
        "sorted": SortedOffsetsOracle(np.array(sorted_offsets, dtype=np.int64), plan.map_latest_offset),
    }
    yield plan, oracles, [Path(s.log_path).read_bytes() for s in plan.segments]


def _kept_offsets(plan: CleanPlan, seg: SegmentPlan, oracle: RetentionOracle) -> list[tuple[int, int, int]]:
    """(segment base, offset, 0) of every keyed record the map oracle calls latest (covered ones)."""
    found = []
    with LogFile(seg.log_path) as log:
        for batch in log.iter_batches():
            if batch.is_control or isinstance(batch, LegacyEntry):
                continue
            for r in decode_records(batch):
                if r.key is None or r.offset > oracle.map_latest_offset:
                    continue
                if oracle.is_latest(np.array([r.offset]), only_key(r.key))[0]:
                    found.append((seg.base_offset, r.offset, 0))
    return found


@needs_c
@pytest.mark.parametrize("window", [(1, 1 << 14, 1 << 22), (2, 3, 1 << 22), (128, 1 << 14, 1 << 22),
                                    (128, 1 << 14, 150)])
@pytest.mark.parametrize("oracle_name", ["map", "sorted"])
@pytest.mark.parametrize("fence", [None, 12])
def test_c_runs_equal_the_per_batch_walk(
    mixed: Round, window: tuple[int, int, int], oracle_name: str, fence: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan, oracles, _ = mixed
    plan = dataclasses.replace(plan, fence_offset=fence)
    monkeypatch.setattr(filter_windows, "RUN_BATCHES", window[0])
    monkeypatch.setattr(filter_windows, "RUN_RECORDS", window[1])
    monkeypatch.setattr(filter_windows, "RUN_BYTES", window[2])
    outcomes = {"batches_copied": 0, "batches_rebuilt": 0, "batches_dropped": 0}
    for seg in plan.segments:
        out, stats, _, error = _both(plan, seg, oracles[oracle_name])
        assert error is None and out
        outcomes = {name: count + stats[name] for name, count in outcomes.items()}  # type: ignore[operator]
        for cut in (1, 100, 300, 700):  # chunks: a batch belongs to the range it starts in
            _both(plan, seg, oracles[oracle_name], 0, cut)
            _both(plan, seg, oracles[oracle_name], cut)
    assert all(outcomes.values())  # batches were copied, rebuilt and dropped


@needs_c
def test_c_runs_are_taken_for_plain_batches(mixed: Round, monkeypatch: pytest.MonkeyPatch) -> None:
    plan, oracles, _ = mixed
    taken: list[int] = []
    kernel = accel.emit_window

    def counted(*args: object) -> object:
        found = kernel(*args)  # type: ignore[arg-type]
        assert found is not None
        taken.append(len(found[1]) // 40)
        return found

    monkeypatch.setattr(accel, "emit_window", counted)
    with accel_switched(True):
        for seg in plan.segments:
            _walk(plan, seg, oracles["map"], 0, None)
    batches = sum(1 for s in plan.segments for _ in _batches(s))
    assert sum(taken) >= batches // 2  # most batches went through C


@needs_c
@pytest.mark.parametrize("codecs", ["python", "compiled"])
@pytest.mark.parametrize("zstd", ["not loaded", "one call", "compiled"])
def test_c_runs_take_compressed_batches_of_every_codec(
    mixed: Round, monkeypatch: pytest.MonkeyPatch, zstd: str, codecs: str
) -> None:
    """Compressed batches are decompressed and rebuilt inside the windows (once each), and the
    result is the per-batch walk's (``test_c_runs_equal_the_per_batch_walk``); zstd batches, once
    zstandard is loaded, by its one bounded call, or with no Python call at all where the windows'
    compiled library is zstandard's own version; gzip, snappy and lz4 batches with no Python call
    where the windows take them themselves (``accel.native_codecs``), their rebuilt records compressed
    in C too (snappy's and lz4's blocks by their library, ``compression.block_compressors``)."""
    plan, oracles, _ = mixed
    with accel_switched(False):
        expected = _walk(plan, plan.segments[-1], oracles["map"], 0, None)[0]
    inflated: list[str] = []
    deflated: list[int] = []
    monkeypatch.setattr(filter_windows, "decompress", lambda codec, data, seen=inflated: seen.append(
        f"codec {codec}") or compression.decompress(codec, data))
    monkeypatch.setattr(filter_windows, "zstd_one_call", counted_zstd_one_call(inflated, zstd != "not loaded"))
    monkeypatch.setattr(filter_windows, "compress", lambda codec, data, seen=deflated: seen.append(
        codec) or compression.compress(codec, data))
    if zstd == "one call":
        monkeypatch.setattr(accel, "_COMPILED_ZSTD", None)
    if codecs == "python":
        monkeypatch.setattr(accel, "native_codecs", lambda: 0)
        monkeypatch.setattr(filter_windows, "block_compressors", lambda: (None, None))
    else:
        assert accel.native_codecs() == 0b1110  # gzip, snappy and lz4: their libraries are loaded
    accel.forget_inflated()  # no batch kept by an earlier pass 1: each is decompressed here
    with accel_switched(True):
        out, _, _, error = _walk(plan, plan.segments[-1], oracles["map"], 0, None)
    assert error is None and out == expected
    python_codecs = [i for i in inflated if i not in ("zstd one call", "codec 4")]
    if codecs == "python":
        assert set(python_codecs) == {"codec 1", "codec 2", "codec 3"} and len(python_codecs) == 10
    else:
        assert python_codecs == []
    assert inflated.count("zstd one call") == (4 if zstd == "one call" else 0)
    assert inflated.count("codec 4") == (4 if zstd == "not loaded" else 0)
    # each codec's first batch rebuilt in C; zstd's compressed in C itself when compiled, gzip's too and
    # snappy's and lz4's blocks through their library's block function, framed in C, with the codecs compiled
    assert sorted(set(deflated)) == (([] if codecs == "compiled" else [1, 2, 3])
                                     + ([] if zstd == "compiled" else [4]))


def _batches(seg: SegmentPlan) -> list[int]:
    with LogFile(seg.log_path) as log:
        return [b.position for b in log.iter_batches()]


@needs_c
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_c_runs_on_corrupted_segments_fail_or_filter_like_the_walk(
    mixed: Round, data: st.DataObject, monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan, oracles, originals = mixed
    k = data.draw(st.integers(0, len(plan.segments) - 1))
    mutated = bytearray(originals[k])
    for _ in range(data.draw(st.integers(1, 4))):
        mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        mutated = mutated[: data.draw(st.integers(0, len(mutated)))]
    monkeypatch.setattr(filter_windows, "RUN_BATCHES", data.draw(st.sampled_from([2, 128])))
    path = Path(plan.segments[k].log_path)
    path.write_bytes(bytes(mutated))
    try:
        _both(plan, plan.segments[k], oracles["map"], 0,
              data.draw(st.none() | st.integers(0, len(mutated))))
    finally:
        path.write_bytes(originals[k])


@needs_c
def test_a_window_holds_about_run_bytes_of_batches(mixed: Round, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of big values: a window's output buffer (copies included) stays near RUN_BYTES."""
    plan, oracles, _ = mixed
    monkeypatch.setattr(filter_windows, "RUN_BYTES", 300)
    largest = max(b1 - b0 for s in plan.segments for b0, b1 in _spans(s))
    windows: list[int] = []
    kernel = accel.scan_window_records

    def measured(*args: object) -> object:
        found = kernel(*args)  # type: ignore[arg-type]
        if found is not None:
            windows.append(found[0] - args[1])  # type: ignore[operator]
        return found

    monkeypatch.setattr(accel, "scan_window_records", measured)
    with accel_switched(True):
        for seg in plan.segments:
            _walk(plan, seg, oracles["map"], 0, None)
    assert windows and max(windows) < 300 + largest and sum(w > 0 for w in windows) > 5


def _spans(seg: SegmentPlan) -> list[tuple[int, int]]:
    with LogFile(seg.log_path) as log:
        return [(b.position, b.position + b.size_in_bytes) for b in log.iter_batches()]


def _refused_stream(b: PartitionBuilder) -> None:
    """Append a zstd batch whose CRC is right but whose stream the codec refuses (a producer's bug)."""
    records = [Record(b.next_offset, b.ts, key(120), b"lost")]
    batch = bytearray(encode_batch(records, base_offset=b.next_offset, compression=4))
    batch[RECORD_BATCH_OVERHEAD + 4 :] = bytes(len(batch) - RECORD_BATCH_OVERHEAD - 4)  # after the magic
    batch[CRC_OFFSET : CRC_OFFSET + 4] = crc32c(bytes(batch[ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
    b.segments[-1].batches.append(bytes(batch))
    b.next_offset += 1
    b.ts += 1


@needs_c
def test_a_stream_the_codec_refuses_fails_like_the_walk(tmp_path: Path) -> None:
    """The windows stop before a compressed batch whose stream does not decompress, and the per-batch
    walk raises its exact error (file and position), in both passes."""
    b = PartitionBuilder("refused")
    b.batch([(key(0), b"first")])
    for n in range(3):
        b.batch([(key(n), b"z%d" % n)], compression=4)
    _refused_stream(b)
    b.batch([(key(9), b"after")], compression=4)
    b.roll()
    b.batch([(key(0), b"active")])
    part = b.write(tmp_path, cleaner_checkpoint=0)
    plan = plan_clean(part, config(), OPTIONS)
    assert plan is not None
    for oracle_error in ("map", "walk"):
        with accel_switched(False):
            reference = _error_of(plan, oracle_error)
        with accel_switched(True):
            compiled = _error_of(plan, oracle_error)
        assert compiled == reference and reference is not None
        assert "00000000000000000000.log" in reference[1] and "position" in reference[1]


def _error_of(plan: CleanPlan, stage: str) -> tuple[type, str] | None:
    """The error pass 1 (``map``) or pass 2 (``walk``, after a map built without the bad batch's
    segment) raises on the plan's first segment."""
    seg = plan.segments[0]
    try:
        if stage == "map":
            for _ in iter_dirty_keys(plan, seg):
                pass
        else:
            oracle = SortedOffsetsOracle(np.arange(plan.end_offset, dtype=np.int64), plan.map_latest_offset)
            for _ in iter_segment_output(plan, seg, FilterContext.at(plan, seg, oracle, CleanStats())):
                pass
    except Exception as err:  # noqa: BLE001 - comparing them is the point
        return type(err), str(err)
    return None
