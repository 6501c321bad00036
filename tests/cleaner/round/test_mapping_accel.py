"""Pass 1's C run over data batches (``_windows.scan_window_key_digests``, taken by
``mapping.iter_dirty_keys``) gives exactly what the per-batch walk gives, on intact and corrupted
segments, for whole segments and chunks, at any slice size."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcompact.cleaner.round import accel, mapping
from kcompact.cleaner.round.mapping import SegmentKeys, iter_dirty_keys
from kcompact.cleaner.round.plan import CleanPlan, SegmentPlan
from kcompact.cleaner.round.steps import plan_clean
from kcompact.records import compression
from tests.builders import PartitionBuilder
from tests.cleaner.round.test_steps import OPTIONS
from tests.cleaner.workers.test_parallel import config, key
from tests.records.scan.accel_compare import accel_switched, counted_zstd_one_call, needs_c


def _partition(log_dir: Path) -> Path:
    """Plain batches (null keys among them), a compressed one, a transaction-free control-free run
    across two segments, the second ending with a batch of each codec; the checkpoint falls inside
    the second batch."""
    b = PartitionBuilder("mix")
    b.batch([(key(i), b"v%d" % i) for i in range(6)])
    b.batch([(key(i % 4), b"w") for i in range(6, 14)] + [(None, b"no key")])
    b.batch([(key(i), b"z") for i in range(3)], compression=4)
    for n in range(6):
        b.batch([(key(i + n), None if i == 2 else b"x" * n) for i in range(5)])
    b.roll()
    for n in range(5):
        b.batch([(key(n), b"y"), (None, b"nk"), (key(n + 1), b"y")])
    for codec in (1, 2, 3, 4, 4):  # every codec, then two zstd batches in a row
        b.batch([(key(codec + i), b"c" * codec) for i in range(4)] + [(None, b"nk")],
                compression=codec)
    b.batch([(key(7), b"after")])
    b.roll()
    b.batch([(key(0), b"active")])
    return b.write(log_dir, cleaner_checkpoint=9)


Walked = tuple[list[object], object]


def _walk(plan: CleanPlan, seg: SegmentPlan, start: int, end: int | None) -> Walked:
    """Every slice as plain lists, then the error (class and message) if one was raised."""
    seen: list[object] = []

    def columns(keys: SegmentKeys) -> tuple[list[int], ...]:
        return tuple(getattr(keys, f).tolist() for f in SegmentKeys.__dataclass_fields__)

    try:
        for keys in iter_dirty_keys(plan, seg, start, end):
            seen.append(columns(keys))
    except Exception as err:  # noqa: BLE001 - comparing them is the point
        return seen, (type(err), str(err))
    return seen, None


def _both(plan: CleanPlan, seg: SegmentPlan, start: int = 0, end: int | None = None) -> Walked:
    with accel_switched(False):
        reference = _walk(plan, seg, start, end)
    with accel_switched(True):
        compiled = _walk(plan, seg, start, end)
    assert compiled == reference
    return reference


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CleanPlan, list[SegmentPlan], list[bytes]]]:
    part = _partition(tmp_path_factory.mktemp("mixed"))
    plan = plan_clean(part, config(), OPTIONS)
    assert plan is not None
    dirty = [seg for seg in plan.segments if seg.map_seed is not None]
    originals = [Path(seg.log_path).read_bytes() for seg in dirty]
    yield plan, dirty, originals


@needs_c
@pytest.mark.parametrize("slice_records", [1, 2, 7, 1 << 16])
def test_c_run_equals_the_per_batch_walk(
    mixed: tuple[CleanPlan, list[SegmentPlan], list[bytes]], slice_records: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan, dirty, _ = mixed
    monkeypatch.setattr(mapping, "SLICE_RECORDS", slice_records)
    for seg in dirty:
        slices, error = _both(plan, seg)
        assert error is None and slices
        for cut in (1, 70, 200, 400):  # chunks: a batch belongs to the range it starts in
            _both(plan, seg, 0, cut)
            _both(plan, seg, cut)


@needs_c
def test_c_run_is_taken_for_plain_batches(
    mixed: tuple[CleanPlan, list[SegmentPlan], list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, dirty, _ = mixed
    calls: list[int] = []
    kernel = accel.scan_window_key_digests

    def counted(*args: int) -> object:
        found = kernel(*args)  # type: ignore[arg-type]
        calls.append(0 if found is None else found[0] - args[1])
        return found

    monkeypatch.setattr(accel, "scan_window_key_digests", counted)
    with accel_switched(True):
        list(iter_dirty_keys(plan, dirty[1]))
    assert sum(calls) > 0  # the second segment's batches after its first went through C


@needs_c
@pytest.mark.parametrize("codecs", ["python", "compiled"])
@pytest.mark.parametrize("zstd", ["not loaded", "one call", "compiled"])
def test_c_run_takes_compressed_batches_of_every_codec(
    mixed: tuple[CleanPlan, list[SegmentPlan], list[bytes]], monkeypatch: pytest.MonkeyPatch, zstd: str,
    codecs: str,
) -> None:
    plan, dirty, _ = mixed
    with accel_switched(False):
        expected = [keys.offsets.tolist() for keys in iter_dirty_keys(plan, dirty[1])]
    seen: list[str] = []
    monkeypatch.setattr(mapping, "decompress", lambda codec, data, seen=seen: seen.append(
        f"codec {codec}") or compression.decompress(codec, data))
    monkeypatch.setattr(mapping, "zstd_one_call", counted_zstd_one_call(seen, zstd != "not loaded"))
    if zstd == "one call":
        monkeypatch.setattr(accel, "_COMPILED_ZSTD", None)
    if codecs == "python":
        monkeypatch.setattr(accel, "native_codecs", lambda: 0)
    with accel_switched(True):
        walked = [keys.offsets.tolist() for keys in iter_dirty_keys(plan, dirty[1])]
    # each compressed batch decompressed once, inside the C run; zstd's usual stream in one call, or
    # in C with no Python call where the windows' compiled library is zstandard's own version; gzip,
    # snappy and lz4 in C with no Python call where the windows take them (accel.native_codecs)
    calls = {"not loaded": ["codec 4"] * 2, "one call": ["zstd one call"] * 2, "compiled": []}[zstd]
    assert seen == ([] if codecs == "compiled" else ["codec 1", "codec 2", "codec 3"]) + calls
    assert walked == expected


@needs_c
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_c_run_on_corrupted_segments_fails_or_reads_like_the_walk(
    mixed: tuple[CleanPlan, list[SegmentPlan], list[bytes]], data: st.DataObject,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan, dirty, originals = mixed
    k = data.draw(st.integers(0, len(dirty) - 1))
    mutated = bytearray(originals[k])
    for _ in range(data.draw(st.integers(1, 4))):
        mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        mutated = mutated[: data.draw(st.integers(0, len(mutated)))]
    monkeypatch.setattr(mapping, "SLICE_RECORDS", data.draw(st.sampled_from([3, 1 << 16])))
    path = Path(dirty[k].log_path)
    path.write_bytes(bytes(mutated))
    try:
        _both(plan, dirty[k], 0, data.draw(st.none() | st.integers(0, len(mutated))))
    finally:
        path.write_bytes(originals[k])
