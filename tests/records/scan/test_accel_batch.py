"""decode_batch and iter_batches with the C header kernel against the pure-Python reference.

The kernel builds a :class:`RecordBatch` without its ``__init__`` and lets ``iter_batches`` skip
its own framing checks for a batch it accepts, so: every field and the buffer view must be what
the reference gives, the batch must still be a frozen dataclass, and on any malformed prefix,
header or tail the walk must yield the same batches and then raise the same error.
"""

from __future__ import annotations

import dataclasses
import functools
import mmap
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.records.batch import decode_batch, iter_batches
from kcompact.records.batch_encoding import encode_records_batch
from kcompact.records.batch_header import RecordBatch
from kcompact.records.scan import accel
from tests.conftest import real_fixture
from tests.records.scan.accel_compare import accel_switched, both, needs_c, walked

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
HEADER_SIZE = 61
# Byte positions of header fields a test overwrites (DefaultRecordBatch's layout).
SIZE_AT, MAGIC_AT, ATTRIBUTES_AT, COUNT_AT = 8, 16, 21, 57


def _batch_bytes(draw: st.DrawFn) -> bytes:
    records = draw(st.binary(max_size=40))
    return encode_records_batch(
        records, count=draw(st.integers(0, 5)), base_offset=draw(st.integers(INT64_MIN, INT64_MAX)),
        last_offset_delta=draw(st.integers(-(1 << 31), (1 << 31) - 1)),
        base_timestamp=draw(st.integers(INT64_MIN, INT64_MAX)),
        max_timestamp=draw(st.integers(INT64_MIN, INT64_MAX)),
        compression=0, timestamp_type=draw(st.integers(0, 1)),
        producer_id=draw(st.integers(INT64_MIN, INT64_MAX)),
        producer_epoch=draw(st.integers(-(1 << 15), (1 << 15) - 1)),
        base_sequence=draw(st.integers(-(1 << 31), (1 << 31) - 1)),
        partition_leader_epoch=draw(st.integers(-(1 << 31), (1 << 31) - 1)),
        is_transactional=draw(st.booleans()), is_control=draw(st.booleans()))


@st.composite
def _segment(draw: st.DrawFn) -> bytes:
    """A few batches back to back, some header fields overwritten, maybe cut or padded."""
    data = bytearray(b"".join(_batch_bytes(draw) for _ in range(draw(st.integers(0, 4)))))
    for _ in range(draw(st.integers(0, 3))):
        if len(data) >= HEADER_SIZE:
            at = draw(st.integers(0, len(data) - HEADER_SIZE)) if draw(st.booleans()) else 0
            field, fmt = draw(st.sampled_from([
                (SIZE_AT, ">i"), (MAGIC_AT, ">B"), (ATTRIBUTES_AT, ">h"), (COUNT_AT, ">i")]))
            value = draw(st.sampled_from([-1, 0, 1, 2, 3, 5, 7, 13, 48, 49, 0x7F, 0x80, 200]))
            struct.pack_into(fmt, data, at + field, value % 256 if fmt == ">B" else value)
    tail = draw(st.sampled_from([b"", bytes(5), bytes(16), bytes(17), b"\x01", bytes(70)]))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut] if draw(st.booleans()) else data) + tail


@needs_c
@given(_segment(), st.integers(0, 200))
def test_walks_and_decodes_agree_on_any_segment(data: bytes, start: int) -> None:
    both(lambda: iter_batches(data), walked)
    both(lambda: iter_batches(data, start, len(data) - start // 3), walked)
    both(lambda: decode_batch(data, start))
    both(lambda: decode_batch(memoryview(data)[: len(data) // 2], 0))


_FIRST = encode_records_batch(b"\x00" * 20, count=2, base_offset=0, last_offset_delta=1,
                              base_timestamp=0, max_timestamp=0)
_SIZE = len(_FIRST) - 12
_EDITS = [  # (header field at, struct format, value): each check of the reference at its limits
    *[(SIZE_AT, ">i", v) for v in (-1, 0, 13, 14, 48, 49, _SIZE - 1, _SIZE, _SIZE + 1, 1 << 30)],
    *[(MAGIC_AT, ">B", v) for v in (0, 1, 2, 3, 0x80, 0xFF)],
    *[(ATTRIBUTES_AT, ">h", v) for v in (-1, 4, 5, 7, 0x47, 0x7F, 0x80, 0x100, -0x8000)],
    *[(COUNT_AT, ">i", v) for v in (-(1 << 31), -1, 0, (1 << 31) - 1)],
]


@needs_c
@pytest.mark.parametrize("which", [0, 1], ids=["first", "second"])
@pytest.mark.parametrize(("field", "fmt", "value"), _EDITS)
def test_each_header_check_agrees(which: int, field: int, fmt: str, value: int) -> None:
    data = bytearray(_FIRST * 3)
    struct.pack_into(fmt, data, which * len(_FIRST) + field, value)
    both(functools.partial(iter_batches, bytes(data)), walked)
    both(lambda: decode_batch(bytes(data), which * len(_FIRST)))


@needs_c
def test_every_cut_agrees() -> None:
    data = _FIRST * 2
    for end in range(len(data) + 1):
        both(functools.partial(iter_batches, data[:end]), walked)
        both(functools.partial(iter_batches, data, 0, end), walked)
        both(functools.partial(decode_batch, data[:end], len(_FIRST) if end > 80 else 0))


@needs_c
@pytest.mark.parametrize("position", [-61, -1, True, 1 << 64, 2.0, None])
def test_odd_positions_behave_like_the_reference(position: object) -> None:
    data = _valid() * 2
    both(lambda: decode_batch(data, position))  # type: ignore[arg-type]
    both(lambda: iter_batches(data, position), walked)  # type: ignore[arg-type]


def _valid() -> bytes:
    return encode_records_batch(b"\x00" * 7, count=1, base_offset=5, last_offset_delta=0,
                                base_timestamp=1, max_timestamp=2, producer_id=9)


@needs_c
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "mmap", "strided"])
def test_every_buffer_kind_decodes_identically(kind: str) -> None:
    data = _valid()
    buf: object = {"bytes": data, "bytearray": bytearray(data),
                   "memoryview": memoryview(data), "strided": memoryview(data * 2)[::2]}.get(kind)
    if kind == "mmap":
        buf = mmap.mmap(-1, len(data))
        buf[:] = data
    both(lambda: decode_batch(buf, 0))  # type: ignore[arg-type]
    both(lambda: iter_batches(buf), walked)  # type: ignore[arg-type]


@needs_c
def test_kernel_batch_is_the_frozen_dataclass_the_reference_builds() -> None:
    data = _valid()
    with accel_switched(True):
        batch = decode_batch(data, 0)
    with accel_switched(False):
        reference = decode_batch(data, 0)
    assert accel.decode_batch(data, 0, RecordBatch, accel.member_slots(RecordBatch)) is not None
    assert type(batch) is RecordBatch and batch == reference and repr(batch) == repr(reference)
    assert isinstance(batch.buffer, memoryview) and batch.buffer.obj is data
    assert batch.crc_valid() and batch.last_offset == 5 and batch.producer_id == 9
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.base_offset = 1  # type: ignore[misc]


@needs_c
def test_every_broker_written_segment_walks_identically() -> None:
    logs = sorted(real_fixture().rglob("*.log"))
    assert logs, "expected the real fixtures' segments"
    for log in logs:
        data = log.read_bytes()
        assert both(functools.partial(iter_batches, data), walked)[2] is None, log
