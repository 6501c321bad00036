"""scan_segment on damaged buffers: what is kept, what is isolated, and exactly where."""

from __future__ import annotations

import os
import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.records.batch import iter_batches
from kcompact.records.batch_encoding import encode_batch, encode_records_batch
from kcompact.records.record import Record
from kcompact.repair import salvage
from kcompact.repair.salvage import (
    FIX_BASE_OFFSET,
    FIX_LENGTH,
    REGION_CORRUPT,
    REGION_OFFSET_ORDER,
    REGION_RECORDS,
    REGION_TORN_TAIL,
    REGION_ZERO_PADDING,
    scan_segment,
)
from tests.encoders import encode_legacy_message

BASE_TS = 1_700_000_000_000


def make_batches(count: int = 20, per_batch: int = 3, base: int = 0) -> list[bytes]:
    out, offset = [], base
    for i in range(count):
        records = [Record(offset + j, BASE_TS + offset + j, f"k{i}-{j}".encode(), b"v" * (10 + i))
                   for j in range(per_batch)]
        out.append(encode_batch(records, base_offset=offset))
        offset += per_batch
    return out


def layout(batches: list[bytes]) -> list[int]:
    positions, pos = [], 0
    for b in batches:
        positions.append(pos)
        pos += len(b)
    return positions


def scan(data: bytes, *, base: int = 0, first: int | None = None, end: int | None = None):  # type: ignore[no-untyped-def]
    return scan_segment(data, base_offset=base, first_offset=base if first is None else first,
                        end_offset=end)


def test_intact_segment_keeps_every_batch_unchanged() -> None:
    batches = make_batches()
    result = scan(b"".join(batches))
    assert [k.position for k in result.kept] == layout(batches)
    assert result.damaged == () and not result.log_changed
    assert [(k.base_offset, k.last_offset) for k in result.kept] == [(3 * i, 3 * i + 2) for i in range(20)]


def test_flipped_payload_byte_isolates_exactly_that_batch() -> None:
    batches = make_batches()
    data = bytearray(b"".join(batches))
    pos = layout(batches)[7]
    data[pos + 70] ^= 0xFF
    result = scan(bytes(data))
    assert len(result.kept) == 19
    (region,) = result.damaged
    assert (region.position, region.size_in_bytes, region.kind) == (pos, len(batches[7]), REGION_CORRUPT)
    assert "fails its CRC" in region.reason and region.offset == 21
    assert region.cleaner_reads_it is False  # the flipped byte broke a record's framing


def test_crc_failure_with_parseable_records_is_what_the_cleaner_would_launder() -> None:
    batches = make_batches()
    data = bytearray(b"".join(batches))
    pos = layout(batches)[3]
    data[pos + len(batches[3]) - 2] ^= 0x01  # last byte of the last value: records still parse
    (region,) = scan(bytes(data)).damaged
    assert region.cleaner_reads_it is True


def test_corrupted_length_field_is_restored_and_nothing_is_lost() -> None:
    batches = make_batches()
    pos = layout(batches)[5]
    for bad_length in (7, 30, 10_000_000, -5):
        data = bytearray(b"".join(batches))
        struct.pack_into(">i", data, pos + 8, bad_length)
        result = scan(bytes(data))
        assert result.damaged == ()
        (fixed,) = [k for k in result.kept if k.fix is not None]
        assert (fixed.fix, fixed.position, fixed.base_offset) == (FIX_LENGTH, pos, 15)
        assert fixed.patched == batches[5]
        assert f"found {bad_length}" in (fixed.fix_detail or "")


@pytest.mark.parametrize("bad_base", [-1, 3, 2**40, 16])
def test_flipped_base_offset_is_restored_when_the_gap_proves_it(bad_base: int) -> None:
    batches = make_batches()
    pos = layout(batches)[9]
    data = bytearray(b"".join(batches))
    struct.pack_into(">q", data, pos, bad_base)
    result = scan(bytes(data))
    assert result.damaged == ()
    assert [k.base_offset for k in result.kept] == [3 * i for i in range(20)]
    (fixed,) = [k for k in result.kept if k.fix is not None]
    assert fixed.fix == FIX_BASE_OFFSET and fixed.patched == batches[9]


def test_base_offset_of_the_last_batch_is_restored_from_the_next_segment() -> None:
    batches = make_batches(5)
    data = bytearray(b"".join(batches))
    struct.pack_into(">q", data, layout(batches)[4], 99)
    # in the last segment a higher base offset cannot be told from a gap left by compaction
    assert scan(bytes(data)).kept[-1].base_offset == 99
    restored = scan(bytes(data), end=15)
    assert restored.damaged == () and restored.kept[-1].base_offset == 12


def test_duplicated_batch_is_isolated_and_named_a_copy() -> None:
    batches = make_batches()
    pos = layout(batches)[4] + len(batches[4])
    data = b"".join(batches[:5]) + batches[4] + b"".join(batches[5:])
    result = scan(data)
    assert len(result.kept) == 20
    (region,) = result.damaged
    assert (region.position, region.kind) == (pos, REGION_OFFSET_ORDER)
    assert "a copy of the batch kept at position" in region.reason


def test_garbage_between_batches_is_cut_out_exactly() -> None:
    batches = make_batches()
    garbage = random.Random(1).randbytes(3000)
    pos = layout(batches)[10]
    data = b"".join(batches[:10]) + garbage + b"".join(batches[10:])
    result = scan(data)
    assert len(result.kept) == 20
    (region,) = result.damaged
    assert (region.position, region.size_in_bytes) == (pos, len(garbage))


def test_torn_tail_and_zero_padding() -> None:
    batches = make_batches()
    data = b"".join(batches)
    torn = scan(data[:-10])
    assert len(torn.kept) == 19 and torn.damaged[0].kind == REGION_TORN_TAIL
    assert torn.damaged[0].position == layout(batches)[19]
    for zeros in (5, 17, 4096):
        padded = scan(data + bytes(zeros))
        assert len(padded.kept) == 20
        assert [(r.kind, r.size_in_bytes) for r in padded.damaged] == [(REGION_ZERO_PADDING, zeros)]


def test_crc_valid_batch_whose_records_do_not_parse_goes_to_quarantine() -> None:
    batches = make_batches(3)
    # count 5 declared for 3 records, with a correct CRC: Kafka's cleaner fails on it
    records = batches[1][61:]
    bad = encode_records_batch(records, count=5, base_offset=3, last_offset_delta=2,
                               base_timestamp=BASE_TS + 3, max_timestamp=BASE_TS + 5)
    result = scan(batches[0] + bad + batches[2])
    assert [k.base_offset for k in result.kept] == [0, 6]
    (region,) = result.damaged
    assert region.kind == REGION_RECORDS and "Incorrect declared batch size" in region.reason


def test_offsets_past_the_next_segment_or_below_the_first_are_refused() -> None:
    batches = make_batches(4)
    result = scan(b"".join(batches), end=9)
    assert [k.base_offset for k in result.kept] == [0, 3, 6]
    assert result.damaged[0].kind == REGION_OFFSET_ORDER
    shifted = scan(b"".join(batches), first=4)
    assert [k.base_offset for k in shifted.kept] == [6, 9]


def test_legacy_entries_are_kept_and_resynchronised() -> None:
    entries = [encode_legacy_message(offset=i, magic=1, key=b"k%d" % i, value=b"v" * 20,
                                     timestamp=BASE_TS + i) for i in range(10)]
    data = bytearray(b"".join(entries))
    data[len(entries[0]) * 4 + 30] ^= 0x10
    result = scan(bytes(data))
    assert [k.base_offset for k in result.kept] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert result.damaged[0].position == len(entries[0]) * 4


def test_crc_valid_legacy_wrapper_that_does_not_decompress_goes_to_quarantine() -> None:
    entries = [encode_legacy_message(offset=i, magic=1, key=b"k", value=b"v", timestamp=BASE_TS)
               for i in range(3)]
    wrapper = encode_legacy_message(offset=3, magic=1, key=None, value=b"not gzip at all",
                                    timestamp=BASE_TS, compression=1)
    result = scan(b"".join(entries) + wrapper + encode_legacy_message(
        offset=4, magic=1, key=b"k", value=b"v", timestamp=BASE_TS))
    assert [k.base_offset for k in result.kept] == [0, 1, 2, 4]
    (region,) = result.damaged
    assert region.kind == REGION_RECORDS and region.offset is None


def test_all_garbage_and_all_zero_segments_are_one_region() -> None:
    garbage = os.urandom(50_000)
    assert [r.size_in_bytes for r in scan(garbage).damaged] == [50_000]
    assert [r.kind for r in scan(bytes(50_000)).damaged] == [REGION_ZERO_PADDING]


def test_resynchronisation_skips_long_zero_runs_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = make_batches(3)
    data = batches[0] + bytes(8_000_000) + b"".join(batches[1:])
    examined: list[int] = []
    real_examine = salvage._Scanner.examine

    def counting(self: salvage._Scanner, pos: int, lower: int) -> salvage._Entry:
        examined.append(pos)
        return real_examine(self, pos, lower)

    monkeypatch.setattr(salvage._Scanner, "examine", counting)
    result = scan(data)
    assert len(result.kept) == 3 and result.damaged[0].size_in_bytes == 8_000_000
    # The zero run is skipped by the pattern search, not tried position by position: a handful of
    # positions are examined (the batches, the start of the run), not 8 million.
    assert len(examined) < 20, sorted(set(examined))[:20]


@given(st.data())
def test_damage_anywhere_keeps_every_untouched_batch(data: st.DataObject) -> None:
    batches = make_batches(12)
    blob = bytearray(b"".join(batches))
    start = data.draw(st.integers(0, len(blob) - 1))
    length = data.draw(st.integers(1, 300))
    noise = data.draw(st.binary(min_size=length, max_size=length))
    blob[start : start + length] = noise
    result = scan(bytes(blob))
    touched = {i for i, p in enumerate(layout(batches))
               if p < start + length and start < p + len(batches[i])}
    kept = {k.base_offset // 3 for k in result.kept}
    assert set(range(12)) - touched <= kept
    covered = sorted([(k.position, k.size_in_bytes) for k in result.kept]
                     + [(r.position, r.size_in_bytes) for r in result.damaged])
    position = 0
    for pos, size in covered:  # kept batches and damaged regions tile the buffer
        assert pos == position
        position += size
    assert position == len(blob)
    kept_offsets = [k.last_offset for k in result.kept]
    assert kept_offsets == sorted(set(kept_offsets))
    rebuilt = b"".join(k.patched or bytes(blob[k.position : k.position + k.size_in_bytes])
                       for k in result.kept)
    assert all(b.crc_valid() for b in iter_batches(rebuilt))
