"""The C windows' own gzip, snappy and lz4 (``cleaner/round/_windows_codecs.c``) and the payloads pass 1 keeps
for pass 2: a batch's records are what ``records.compression.decompress`` gives, or the batch goes to it (a
stream of another shape, or one the strict decoders refuse: a corrupt one is never read otherwise than the
reference reads it); a rebuilt batch is ``compress``'s bytes (gzip's compressed with zlib, snappy's and lz4's
blocks by their library, framed in C); pass 2 decompresses nothing pass 1 kept."""

from __future__ import annotations

import os
import random
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import lz4.frame
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.cleaner.round import accel, filter_windows, mapping
from kcompact.cleaner.round.mapping import SegmentKeys, iter_dirty_keys
from kcompact.cleaner.round.plan import SegmentPlan
from kcompact.cleaner.round.steps import plan_clean
from kcompact.log.offset_map.oracle import OffsetMapOracle
from kcompact.records import compression
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET, RECORD_BATCH_OVERHEAD
from kcompact.records.crc import crc32c
from kcompact.records.record import Record
from tests.builders import PartitionBuilder
from tests.cleaner.round.test_filter_windows import _both, _walk
from tests.cleaner.round.test_steps import OPTIONS, serial_map
from tests.cleaner.round.test_windows_zstd import _value
from tests.cleaner.workers.test_parallel import config, key
from tests.records.scan.accel_compare import accel_switched, needs_c

CODECS = {"gzip": compression.GZIP, "snappy": compression.SNAPPY, "lz4": compression.LZ4}
NONE = np.zeros(0, dtype=np.int64)
batch_shapes = st.lists(st.tuples(st.integers(1, 60), st.integers(0, 3_000), st.integers(0, 2)),
                        min_size=1, max_size=5)


@pytest.fixture(autouse=True)
def _loaded() -> None:
    """Every codec's library imported (the windows take snappy and lz4 only then), no payload kept."""
    for codec in CODECS.values():
        compression.compress(codec, b"x")
    accel.forget_inflated()


def _partition(log_dir: Path, codec: str, shapes: list[tuple[int, int, int]], seed: int) -> Path:
    rng, b = random.Random(seed), PartitionBuilder(codec)
    for records, size, kind in shapes:  # a clean section, then the same keys again: rebuilt batches
        b.batch([(key(rng.randrange(40)), _value(rng, size, kind)) for _ in range(records)],
                compression=CODECS[codec])
    b.roll()
    checkpoint = b.next_offset
    for records, size, kind in shapes:
        b.batch([(key(rng.randrange(40)), _value(rng, size, kind)) for _ in range(records)],
                compression=CODECS[codec])
    b.batch([(key(0), b"kept whole")], compression=CODECS[codec])
    b.roll()
    b.batch([(key(0), b"active")])
    return b.write(log_dir, cleaner_checkpoint=checkpoint)


def _batch(codec: int, payload: bytes, count: int = 1) -> bytes:
    """A batch of ``codec`` and ``count`` records whose stored payload is ``payload`` (length and CRC made
    right)."""
    plain = encode_batch([Record(i, 1 + i, b"k", b"v") for i in range(count)], base_offset=0)
    batch = bytearray(plain[:RECORD_BATCH_OVERHEAD] + payload)
    batch[ATTRIBUTES_OFFSET + 1] |= codec
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    return bytes(batch)


def _records(count: int) -> bytes:
    """The record section of ``count`` keyed records (what a batch's payload inflates to)."""
    plain = encode_batch([Record(i, 1 + i, b"k%d" % i, b"v" * (i % 7) * 40) for i in range(count)], base_offset=0)
    return plain[RECORD_BATCH_OVERHEAD:]


def _counted(calls: list[int]) -> Callable[[int, bytes | memoryview], bytes]:
    def decompress(codec: int, data: bytes | memoryview) -> bytes:
        calls.append(codec)
        return compression.decompress(codec, data)
    return decompress


def _scan(buf: bytes, native: int, calls: list[int]) -> tuple[object, object]:
    """Pass 2's read and pass 1's keys of ``buf``'s batches (nothing kept between them)."""
    accel.forget_inflated()
    run = accel.scan_window_records(buf, 0, len(buf), 64, 1 << 20, 1 << 24, NONE, -1, _counted(calls), None,
                                    native)
    accel.forget_inflated()
    keys = accel.scan_window_key_digests(buf, 0, len(buf), 0, 1 << 20, 0, _counted(calls), None, native)
    accel.forget_inflated()
    return run, keys


@needs_c
@settings(max_examples=30, deadline=None)
@given(codec=st.sampled_from(sorted(CODECS)), shapes=batch_shapes, seed=st.integers(0, 2**16))
def test_compiled_codecs_read_and_rebuild_as_the_reference(
    codec: str, shapes: list[tuple[int, int, int]], seed: int
) -> None:
    assert accel.native_codecs() == 0b1110
    with tempfile.TemporaryDirectory() as temp:
        plan = plan_clean(_partition(Path(temp), codec, shapes, seed), config(), OPTIONS)
        assert plan is not None
        with accel_switched(False):
            keys = [k.offsets.tolist() for base in plan.dirty_segments
                    for k in iter_dirty_keys(plan, plan.segment(base))]
        oracle = OffsetMapOracle(serial_map(plan), plan.first_dirty_offset)  # pass 1 in C: payloads kept
        with accel_switched(True):
            assert [k.offsets.tolist() for base in plan.dirty_segments
                    for k in iter_dirty_keys(plan, plan.segment(base))] == keys
        for seg in plan.segments:
            assert _both(plan, seg, oracle)[3] is None  # _both asserts the C windows' output is the reference's


@needs_c
@pytest.mark.parametrize("codec", sorted(CODECS))
def test_compiled_codecs_make_no_python_codec_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    part = _partition(tmp_path, codec, [(40, 3_000, 1), (60, 2_000, 0), (5, 10, 2), (30, 3_000, 2)], 7)
    plan = plan_clean(part, config(), OPTIONS)
    assert plan is not None
    oracle = OffsetMapOracle(serial_map(plan), plan.first_dirty_offset)
    with accel_switched(False):
        expected = [_walk(plan, seg, oracle, 0, None) for seg in plan.segments]
    decompressed: list[int] = []
    compressed: list[int] = []
    for module in (filter_windows, mapping):
        monkeypatch.setattr(module, "decompress", _counted(decompressed))

    def compress(c: int, data: bytes | memoryview) -> bytes:
        compressed.append(c)
        return compression.compress(c, data)

    monkeypatch.setattr(filter_windows, "compress", compress)
    with accel_switched(True):
        found = [_walk(plan, seg, oracle, 0, None) for seg in plan.segments]
    assert decompressed == [] and compressed == []  # snappy's and lz4's blocks: their library's own functions
    assert found == expected
    assert sum(stats["batches_rebuilt"] for _, stats, _, _ in found) > 0  # type: ignore[misc]


def _gzip_members(raw: bytes) -> bytes:
    half = len(raw) // 2
    return compression.compress(1, raw[:half]) + compression.compress(1, raw[half:])


def _xerial_twice(raw: bytes) -> bytes:
    half = len(raw) // 2
    return compression.compress(2, raw[:half]) + compression.compress(2, raw[half:])


def _lz4_content_checksum(raw: bytes) -> bytes:
    return bytes(lz4.frame.compress(raw, block_linked=False, content_checksum=True, store_size=False))


OTHER_SHAPES: dict[str, tuple[int, Callable[[bytes], bytes]]] = {
    "gzip of two members": (1, _gzip_members),
    "gzip as Python's gzip module writes it": (1, lambda raw: _gzip_module(raw)),
    "snappy without framing": (2, lambda raw: bytes(compression._library(2).snappy.compress_raw(raw))),
    "xerial twice": (2, _xerial_twice),
    "lz4 with a content checksum": (3, _lz4_content_checksum),
}


def _gzip_module(raw: bytes) -> bytes:
    import gzip
    return gzip.compress(raw, mtime=0)  # OS byte 0x03 and xfl: not Kafka's header, read the same


@needs_c
@pytest.mark.parametrize("shape", sorted(OTHER_SHAPES))
def test_streams_of_other_shapes_are_read_as_the_reference_reads_them(shape: str) -> None:
    """What the decoders do not take (another producer's shapes the reference reads) goes through
    ``decompress``: the same result, one Python call; Kafka's own shape takes none."""
    codec, make = OTHER_SHAPES[shape]
    raw = _records(30)
    buf = _batch(codec, make(raw), 30) + _batch(codec, compression.compress(codec, raw), 30)
    assert compression.decompress(codec, make(raw)) == raw
    reference: list[int] = []
    compiled: list[int] = []
    expected = _scan(buf, 0, reference)
    assert _scan(buf, accel.native_codecs(), compiled) == expected
    assert reference == [codec] * 4
    taken_here = shape == "gzip as Python's gzip module writes it"  # any header zlib reads is read here too
    assert compiled == ([] if taken_here else [codec] * 2)


@needs_c
@settings(max_examples=400, deadline=None)
@given(codec=st.sampled_from(sorted(CODECS)), data=st.data())
def test_a_corrupt_stream_is_read_as_the_reference_reads_it(codec: str, data: st.DataObject) -> None:
    """Bytes of a Kafka stream changed, cut or added: the windows with their own decoders return exactly what
    they return through ``decompress`` (the records, or a stop before the batch the walk then reports)."""
    count = data.draw(st.integers(1, 40))
    payload = bytearray(compression.compress(CODECS[codec], _records(count)))
    for _ in range(data.draw(st.integers(1, 3))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        payload = payload[: data.draw(st.integers(1, len(payload)))]
    payload += data.draw(st.binary(max_size=12))
    buf = _batch(CODECS[codec], bytes(payload), count)
    assert _scan(buf, accel.native_codecs(), []) == _scan(buf, 0, [])


@needs_c
def test_pass_two_takes_what_pass_one_decompressed(tmp_path: Path) -> None:
    """Each compressed batch pass 1 read is not decompressed again by pass 2 (its records are taken from what
    pass 1 kept, the compressed bytes compared whole), and nothing stays kept once pass 2 took it; a batch whose
    bytes differ is decompressed."""
    raws = [_records(20 + n) for n in range(6)]
    buf = b"".join(_batch(codec, compression.compress(codec, raw), 20 + n)
                   for n, raw in enumerate(raws) for codec in (1, 2, 3))
    expected = _scan(buf, 0, [])[0]
    keys = accel.scan_window_key_digests(buf, 0, len(buf), 0, 1 << 20, 0, _counted([]), None, 0)
    assert keys is not None and accel.kernels is not None and accel.kernels.inflated_held() > 0
    calls: list[int] = []
    run = accel.scan_window_records(buf, 0, len(buf), 64, 1 << 20, 1 << 24, NONE, -1, _counted(calls), None, 0)
    assert run == expected and calls == []
    assert accel.kernels.inflated_held() == 0
    accel.scan_window_key_digests(buf, 0, len(buf), 0, 1 << 20, 0, _counted([]), None, 0)
    # the first batch's bytes changed (another gzip header), its records the same
    changed = _batch(1, _gzip_module(raws[0]), 20) + buf[len(_batch(1, compression.compress(1, raws[0]), 20)):]
    run = accel.scan_window_records(changed, 0, len(changed), 64, 1 << 20, 1 << 24, NONE, -1, _counted(calls),
                                    None, 0)
    assert run is not None and calls == [1]  # only the changed batch
    accel.forget_inflated()
    assert accel.kernels.inflated_held() == 0


@needs_c
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_worker_starts_with_nothing_kept() -> None:
    buf = _batch(1, compression.compress(1, _records(10)), 10)
    accel.scan_window_key_digests(buf, 0, len(buf), 0, 1 << 20, 0, _counted([]), None, accel.native_codecs())
    assert accel.kernels is not None and accel.kernels.inflated_held() > 0
    pid = os.fork()
    if pid == 0:
        os._exit(0 if accel.kernels.inflated_held() == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert accel.kernels.inflated_held() > 0  # the parent's stay


@needs_c
@pytest.mark.parametrize("limit, keeps", [(1 << 30, True), (0, False)])
def test_only_a_small_rounds_pass_one_keeps_payloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int, keeps: bool
) -> None:
    """A round's pass 1 (``fill_offset_map``) keeps what it decompressed only when its dirty segments are
    small (``KEEP_INFLATED_DIRTY_BYTES``): a larger round's peak memory holds no kept payload, and its
    pass 2 decompresses each batch again."""
    part = _partition(tmp_path, "gzip", [(40, 3_000, 1), (60, 2_000, 0)], 11)
    plan = plan_clean(part, config(), OPTIONS)
    assert plan is not None and accel.kernels is not None
    monkeypatch.setattr(mapping, "KEEP_INFLATED_DIRTY_BYTES", limit)
    held: list[int] = []

    def slices() -> Iterator[tuple[SegmentPlan, list[SegmentKeys]]]:
        assert plan is not None and accel.kernels is not None
        for base in plan.dirty_segments:
            seg = plan.segment(base)
            yield seg, list(iter_dirty_keys(plan, seg))
            held.append(accel.kernels.inflated_held())

    mapping.fill_offset_map(plan, mapping.new_offset_map(plan, None), slices())
    assert (held[-1] > 0) is keeps
