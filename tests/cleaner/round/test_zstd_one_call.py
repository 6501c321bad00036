"""The C windows' zstd shortcut (``cleaner/round/_windows.c`` ``zstd_one_block_bound`` + ``zstd_one_call``) asks
zstandard for exactly the one bounded call ``records.compression.decompress`` makes: the same bound
on every payload shape (stated content sizes of each width, single segment, dictionary ids, checksum,
RLE and multi-block frames, Kafka's data block and empty last block, bytes after the frame,
truncations), none where the reference makes none, and whatever the call raises sends the batch
through ``decompress`` itself."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.cleaner.round import accel
from kcompact.records import compression
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET, RECORD_BATCH_OVERHEAD
from kcompact.records.crc import crc32c
from kcompact.records.record import Record
from tests.records.scan.accel_compare import accel_switched, needs_c

BLOCK_MAX = 128 * 1024


@st.composite
def zstd_shaped(draw: st.DrawFn) -> bytes:
    """Bytes laid out like a zstd frame header and first block, every field drawn (contents are junk:
    only the shape matters here), sometimes cut or extended."""
    descriptor = draw(st.integers(0, 255))
    single = descriptor & 0x20
    size_field = (0, 2, 4, 8, 1, 2, 4, 8)[descriptor >> 6 | (4 if single else 0)]
    dict_id = (0, 1, 2, 4)[descriptor & 3]
    stated = draw(st.sampled_from([0, 1, 255, 256, 257, 65_791, BLOCK_MAX, BLOCK_MAX + 1, 2**40]))
    field = (stated - (256 if size_field == 2 else 0)) % (1 << (8 * size_field)) if size_field else 0
    header = struct.pack("<IB", draw(st.sampled_from([0xFD2FB528] * 3 + [0xFD2FB529])), descriptor)
    header += b"" if single else bytes([draw(st.integers(0, 255))])
    header += bytes(dict_id) + field.to_bytes(size_field, "little")
    kind = draw(st.integers(0, 3))  # raw, RLE, compressed, reserved
    content = draw(st.integers(0, 300))
    block = draw(st.sampled_from([1, 1, 1, 0])) | kind << 1 | content << 3  # mostly the last block
    stored = 1 if kind == 1 else content
    frame = header + block.to_bytes(3, "little") + bytes(stored)
    if not block & 1:  # Kafka's own shape (an empty last block after the data's), or blocks that are almost it
        frame += draw(st.sampled_from([b"\x01\x00\x00", b"\x01\x00\x00", b"\x00\x00\x00", b"\x01\x08\x00", b""]))
    frame += bytes(4 if descriptor & 4 else 0)
    if draw(st.integers(0, 3)) == 0:
        frame = frame[: draw(st.integers(0, len(frame)))]
    return frame + bytes(draw(st.sampled_from([0] * 5 + [1, 5])))


def _batch(payload: bytes) -> tuple[bytes, bytes]:
    """A zstd batch of one keyed record whose stored payload is ``payload`` (CRC made right), and
    the uncompressed records it stands for."""
    plain = encode_batch([Record(0, 1, b"k", b"v")], base_offset=0)
    raw = plain[RECORD_BATCH_OVERHEAD:]
    batch = bytearray(plain[:RECORD_BATCH_OVERHEAD] + payload)
    batch[ATTRIBUTES_OFFSET + 1] |= 4  # codec zstd
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    return bytes(batch), raw


@needs_c
@settings(max_examples=500, deadline=None)
@given(payload=zstd_shaped(), answer=st.sampled_from(["inflates", "raises", "overflows"]))
def test_the_c_bound_is_the_references_and_a_refused_call_falls_back(payload: bytes, answer: str) -> None:
    batch, raw = _batch(payload)
    bounds: list[int] = []
    generic: list[int] = []

    def one_call(data: object, max_output_size: int) -> bytes:
        bounds.append(max_output_size)
        if answer == "overflows":  # more than the bound: the C side must not take it
            return raw + bytes(max_output_size)
        if answer == "raises" or len(raw) > max_output_size:
            raise ValueError("not a zstd stream")  # as zstandard.ZstdError would
        return raw

    def decompress(codec: int, data: object) -> bytes:
        generic.append(codec)
        return raw

    with accel_switched(True):
        found = accel.scan_window_key_digests(batch, 0, len(batch), 0, 1 << 16, 0, decompress, one_call)
    assert found is not None and found[0] == len(batch)  # the batch was taken, its one key put
    expected = compression._zstd_one_block_bound(memoryview(payload), 2**31)
    assert bounds == ([expected] if expected else [])
    took = expected and answer == "inflates" and len(raw) <= expected
    assert generic == ([] if took else [4])
