"""The C walk of legacy entries (``_legacy.c``) against its pure-Python reference.

On any run of v0/v1 entries, plain or compressed, with fields overwritten, a CRC flipped, a v2
batch after them or a torn tail, the kernel must stop where the reference stops and give the same
rows and digests; and the reference must agree with ``decode_legacy_entry`` on what it took.
"""

from __future__ import annotations

import struct
from array import array

from hypothesis import given
from hypothesis import strategies as st
from xxhash import xxh3_128_digest

from kcompact.records.batch_encoding import encode_batch
from kcompact.records.filter import BatchRetention, filter_legacy_entry
from kcompact.records.legacy import decode_legacy_entry, legacy_records
from kcompact.records.record import Record
from kcompact.records.scan.legacy_rows import (
    KEY_END,
    KEY_START,
    LEGACY_COMPRESSED,
    LEGACY_CRC,
    LEGACY_DIGESTS,
    OFFSET,
    ROW_FIELDS,
    SIZE,
    VALUE_START,
    legacy_emit,
    legacy_emit_reference,
    legacy_entries,
    legacy_entries_reference,
)
from tests.encoders import encode_legacy_message, encode_legacy_wrapper
from tests.records.scan.accel_compare import needs_c

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
_OPTIONAL = st.none() | st.binary(max_size=12)


@st.composite
def _entry(draw: st.DrawFn) -> bytes:
    magic = draw(st.integers(0, 1))
    if draw(st.integers(0, 4)) == 0:  # a compressed wrapper now and then
        records = [Record(i, draw(INT64), draw(_OPTIONAL), draw(_OPTIONAL)) for i in range(2)]
        return encode_legacy_wrapper(records, magic=magic, compression=1)
    return encode_legacy_message(offset=draw(INT64), magic=magic, key=draw(_OPTIONAL),
                                 value=draw(_OPTIONAL), timestamp=draw(INT64),
                                 timestamp_type=draw(st.integers(0, 1)))


@st.composite
def _segment(draw: st.DrawFn) -> bytes:
    """Legacy entries back to back, some bytes overwritten, maybe a v2 batch, a cut or padding."""
    data = bytearray(b"".join(draw(st.lists(_entry(), max_size=6))))
    for _ in range(draw(st.integers(0, 3))):
        if len(data) >= 30:
            at = draw(st.integers(0, len(data) - 4))
            value = draw(st.sampled_from([-1, 0, 1, 2, 13, 14, 21, 22, 0x7F, 0x80, 1 << 30]))
            struct.pack_into(">i", data, at, value) if draw(st.booleans()) else \
                struct.pack_into(">B", data, at, value % 256)
    if draw(st.booleans()):
        data += encode_batch([Record(0, 0, b"k", b"v")], base_offset=0)
    tail = draw(st.sampled_from([b"", bytes(5), bytes(16), bytes(17), b"\x01", bytes(40)]))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut] if draw(st.booleans()) else data) + tail


@needs_c
@given(_segment(), st.integers(0, 7), st.integers(0, 8), st.integers(0, 400))
def test_the_kernel_stops_where_the_reference_stops_with_the_same_rows(
    data: bytes, flags: int, max_entries: int, limit: int
) -> None:
    for args in ((0, len(data), 100), (0, limit, max_entries)):
        assert legacy_entries(data, *args, flags) == legacy_entries_reference(data, *args, flags)
        assert legacy_entries(memoryview(data), *args, flags) == legacy_entries(data, *args, flags)


@given(_segment())
def test_the_rows_are_what_decode_legacy_entry_reads(data: bytes) -> None:
    reached, raw, digests = legacy_entries_reference(
        data, 0, len(data), 100, LEGACY_DIGESTS | LEGACY_COMPRESSED)
    rows = array("q", raw)
    at = 0
    for n in range(len(rows) // ROW_FIELDS):
        row = rows[n * ROW_FIELDS : (n + 1) * ROW_FIELDS]
        entry = decode_legacy_entry(data, at)
        assert (row[OFFSET], row[SIZE]) == (entry.offset, entry.size_in_bytes)
        key = None if row[KEY_START] < 0 else data[row[KEY_START] : row[KEY_END]]
        assert key == (None if entry.key is None else bytes(entry.key))
        assert (row[VALUE_START] < 0) == (entry.value is None)
        assert digests[16 * n : 16 * n + 16] == (bytes(16) if key is None else xxh3_128_digest(key))
        at += entry.size_in_bytes
    assert reached == at


def test_a_bad_crc_a_wrapper_and_a_v2_batch_each_end_a_run() -> None:
    plain = encode_legacy_message(offset=5, magic=1, key=b"k", value=b"v", timestamp=7)
    wrapper = encode_legacy_wrapper([Record(6, 7, b"k", b"v")], magic=1, compression=1)
    flipped = bytearray(plain)
    flipped[-1] ^= 1
    v2 = encode_batch([Record(0, 0, b"k", b"v")], base_offset=7)
    assert legacy_entries_reference(plain + bytes(flipped), 0, 999, 9, LEGACY_CRC)[0] == len(plain)
    assert legacy_entries_reference(plain + bytes(flipped), 0, 999, 9, 0)[0] == 2 * len(plain)
    assert legacy_entries_reference(plain + wrapper, 0, 999, 9, 0)[0] == len(plain)
    assert legacy_entries_reference(plain + wrapper, 0, 999, 9, LEGACY_COMPRESSED)[0] == \
        len(plain) + len(wrapper)
    assert legacy_entries_reference(plain + v2, 0, 999, 9, 0)[0] == len(plain)


@needs_c
@given(st.lists(_entry(), max_size=6), st.sampled_from([-1, 0, 5, 1 << 40, (1 << 63) - 1]))
def test_the_emitter_writes_what_filter_legacy_entry_writes(entries: list[bytes], horizon: int) -> None:
    data = b"".join(entries)
    _, raw, _ = legacy_entries_reference(data, 0, len(data), 100, 0)  # plain messages only
    assert legacy_emit(data, raw, horizon) == legacy_emit_reference(data, raw, horizon)
    expected = []
    at = 0
    for _ in range(len(raw) // (8 * ROW_FIELDS)):
        entry = decode_legacy_entry(data, at)
        record = legacy_records(entry)[0]
        out = filter_legacy_entry(entry, [record], [0], retention=BatchRetention.DELETE_EMPTY,
                                  delete_horizon_ms=horizon if record.value is None and horizon >= 0
                                  else None)
        expected.append(bytes(out.data))
        at += entry.size_in_bytes
    assert legacy_emit_reference(data, raw, horizon)[0] == b"".join(expected)
