"""The C windows' own zstd (the vendored library, ``kcompact/_vendor/zstd``, python-zstandard's version):
pass 2 rebuilds zstd batches byte for byte as the reference path (``records.compression.compress``, Kafka's
frame: the data in blocks that are not the last, then an empty last block) — small and large record
sections (several 128 KiB blocks), compressible or not — with no Python call per batch, in both passes."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.cleaner.round import accel, filter_windows, mapping
from kcompact.cleaner.round.mapping import iter_dirty_keys
from kcompact.cleaner.round.stages import plan_clean
from kcompact.errors import CorruptRecordError
from kcompact.log.offset_map.oracle import OffsetMapOracle
from kcompact.records import compression
from tests.builders import PartitionBuilder
from tests.cleaner.round.test_filter_windows import _both, _walk
from tests.cleaner.round.test_stages import OPTIONS, serial_map
from tests.cleaner.round.test_zstd_one_call import _batch
from tests.cleaner.workers.test_parallel import config, key
from tests.records.scan.accel_compare import accel_switched, needs_c

# (records, value size, how compressible: 0 random .. 2 one repeated byte)
batch_shapes = st.lists(st.tuples(st.integers(1, 60), st.integers(0, 4_000), st.integers(0, 2)),
                        min_size=1, max_size=6)


def _value(rng: random.Random, size: int, kind: int) -> bytes:
    if kind == 0:
        return rng.randbytes(size)
    if kind == 1:
        return (b"kcompact-%d-" % rng.randrange(50) * (size // 10 + 1))[:size]
    return bytes([rng.randrange(256)]) * size


def _partition(log_dir: Path, shapes: list[tuple[int, int, int]], seed: int) -> Path:
    rng, b = random.Random(seed), PartitionBuilder("zstd")
    for records, size, kind in shapes:  # a clean section, then the same keys again: rebuilt batches
        b.batch([(key(rng.randrange(40)), _value(rng, size, kind)) for _ in range(records)], compression=4)
    b.roll()
    checkpoint = b.next_offset
    for records, size, kind in shapes:
        b.batch([(key(rng.randrange(40)), _value(rng, size, kind)) for _ in range(records)], compression=4)
    b.batch([(key(0), b"kept whole")], compression=4)
    b.roll()
    b.batch([(key(0), b"active")])
    return b.write(log_dir, cleaner_checkpoint=checkpoint)


@needs_c
@settings(max_examples=40, deadline=None)
@given(shapes=batch_shapes, seed=st.integers(0, 2**16))
def test_compiled_zstd_rebuilds_as_the_reference(shapes: list[tuple[int, int, int]], seed: int) -> None:
    compression.compress(compression.ZSTD, b"x")  # zstandard loaded: the windows take zstd themselves
    assert accel.zstd_codec(compression.zstd_one_call()) is True
    with tempfile.TemporaryDirectory() as temp:
        plan = plan_clean(_partition(Path(temp), shapes, seed), config(), OPTIONS)
        assert plan is not None
        oracle = OffsetMapOracle(serial_map(plan), plan.first_dirty_offset)
        for seg in plan.segments:
            error = _both(plan, seg, oracle)[3]  # _both asserts the C windows' output is the reference's
            assert error is None


@needs_c
def test_compiled_zstd_makes_no_python_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Big sections (several blocks of 128 KiB) too; neither pass calls Python's compress or decompress."""
    part = _partition(tmp_path, [(40, 4_000, 1), (60, 3_000, 0), (5, 10, 2), (30, 4_000, 2)], 7)
    compression.compress(compression.ZSTD, b"x")
    plan = plan_clean(part, config(), OPTIONS)
    assert plan is not None
    oracle = OffsetMapOracle(serial_map(plan), plan.first_dirty_offset)
    with accel_switched(False):
        expected = [_walk(plan, seg, oracle, 0, None) for seg in plan.segments]
        keys = [k.offsets.tolist() for seg in plan.segments if seg.base_offset in plan.dirty_segments
                for k in iter_dirty_keys(plan, seg)]
    calls: list[str] = []

    def refuse(*_args: object) -> bytes:
        calls.append("python")
        raise AssertionError("a Python codec call")

    for module in (filter_windows, mapping):
        monkeypatch.setattr(module, "decompress", refuse)
    monkeypatch.setattr(filter_windows, "compress", refuse)
    with accel_switched(True):
        found = [_walk(plan, seg, oracle, 0, None) for seg in plan.segments]
        walked = [k.offsets.tolist() for seg in plan.segments if seg.base_offset in plan.dirty_segments
                for k in iter_dirty_keys(plan, seg)]
    assert calls == []
    assert found == expected and walked == keys
    assert sum(stats["batches_rebuilt"] for _, stats, _, _ in found) > 0  # type: ignore[misc]


@needs_c
@pytest.mark.parametrize("window_log", [27, 28])
def test_a_frame_beyond_the_streams_window_limit_is_refused_as_the_reference_refuses_it(window_log: int) -> None:
    """The windows decompress a frame in one call into their own buffer; a frame whose header asks for a window
    over 2**27 bytes (what python-zstandard's and zstd-jni's streams refuse) goes to ``decompress`` instead,
    which raises for it as the per-batch walk does; one at the limit is decompressed in C, no Python call."""
    import zstandard

    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=window_log, write_content_size=False)
    writer = zstandard.ZstdCompressor(compression_params=params).compressobj()
    records = _batch(b"")[1]
    frame = writer.compress(records) + writer.flush()
    batch = _batch(frame)[0]
    calls: list[int] = []

    def decompress(codec: int, data: bytes | memoryview) -> bytes:
        calls.append(codec)
        return compression.decompress(codec, data)

    compression.compress(compression.ZSTD, b"x")
    found = accel.scan_window_key_digests(batch, 0, len(batch), 0, 1 << 16, 0, decompress, True)
    assert found is not None
    if window_log == 27:
        assert calls == [] and found[0] == len(batch)  # taken in C
    else:
        assert calls == [compression.ZSTD] and found[0] == 0  # refused: the per-batch walk raises
        with pytest.raises(CorruptRecordError, match="too much memory"):
            compression.decompress(compression.ZSTD, frame)
