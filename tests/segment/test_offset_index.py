"""Offset index: round trips, Kafka's rules as checks, corruption, and every real .index file."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptIndexError
from kcompact.segment.offset_index import (
    OFFSET_INDEX_ENTRY_SIZE,
    OffsetIndexEntry,
    check_offset_index,
    decode_offset_index,
    encode_offset_index,
    encode_offset_index_columns,
    lookup,
    read_offset_index,
)
from tests.conftest import real_fixture
from tests.segment.test_index_builder import segment_batches

BASE = 1000

_entries = st.lists(
    st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)), max_size=50
).map(lambda pairs: [OffsetIndexEntry(BASE + rel, pos) for rel, pos in pairs])


@given(entries=_entries)
def test_encode_decode_round_trip(entries: list[OffsetIndexEntry]) -> None:
    data = encode_offset_index(entries, BASE)
    assert len(data) == OFFSET_INDEX_ENTRY_SIZE * len(entries)
    assert decode_offset_index(data, BASE) == entries


def test_layout_is_relative_offset_then_position_big_endian() -> None:
    data = encode_offset_index([OffsetIndexEntry(BASE + 0x0102, 0x0A0B0C0D)], BASE)
    assert data == bytes.fromhex("00000102 0a0b0c0d")


def test_write_then_read(tmp_path: Path) -> None:
    entries = [OffsetIndexEntry(1005, 4200), OffsetIndexEntry(1010, 8400)]
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(encode_offset_index(entries, BASE))
    assert path.stat().st_size == 16
    assert read_offset_index(path, BASE) == entries


def test_odd_length_is_corrupt_and_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(
        CorruptIndexError, match="expected a multiple of 8 bytes, found 13 bytes"
    ) as info:
        decode_offset_index(bytes(13), BASE)
    assert info.value.position == 8 and info.value.path is None
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(bytes(13))
    with pytest.raises(CorruptIndexError) as located:
        read_offset_index(path, BASE)
    assert str(located.value).startswith(f"{path} at position 8: offset index size")


def test_missing_file_is_left_to_the_caller(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_offset_index(tmp_path / "00000000000000000000.index", 0)


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        (OffsetIndexEntry(BASE - 1, 0), "expected offset 1000..2147484647, found 999"),
        (OffsetIndexEntry(BASE + 2**31, 0), "found 2147484648"),
        (OffsetIndexEntry(BASE, -1), "impossible position; expected 0..2147483647, found -1"),
    ],
)
def test_encode_rejects_what_does_not_fit(entry: OffsetIndexEntry, fragment: str) -> None:
    with pytest.raises(CorruptIndexError, match=fragment):
        encode_offset_index([entry], BASE)


def test_lookup_finds_the_largest_entry_not_above_the_target() -> None:
    entries = [OffsetIndexEntry(1010, 4200), OffsetIndexEntry(1020, 8400)]
    assert lookup(entries, 1005) == 0
    assert lookup(entries, 1010) == 4200
    assert lookup(entries, 1019) == 4200
    assert lookup(entries, 5000) == 8400
    assert lookup([], 5000) == 0


def test_check_accepts_a_good_index() -> None:
    entries = [OffsetIndexEntry(1010, 4200), OffsetIndexEntry(1020, 8400)]
    log = [(0, 1003), (4200, 1010), (8400, 1020), (9000, 1022)]
    assert check_offset_index(entries, BASE, log_batches=log) == []
    assert check_offset_index([], BASE) == []


def test_check_reports_kafkas_sanity_failure() -> None:
    problems = check_offset_index([OffsetIndexEntry(990, 4200)], BASE)
    assert problems[0].startswith("last offset 990 is below the base offset 1000")
    assert "offset below the segment's base offset: entry 0 has offset 990 < 1000" in problems


def test_check_reports_an_untrimmed_preallocated_file() -> None:
    data = encode_offset_index([OffsetIndexEntry(1010, 4200)], BASE) + bytes(8 * 1000)
    problems = check_offset_index(decode_offset_index(data, BASE), BASE)
    assert problems == [
        (
            "1000 trailing zero-filled slots (a preallocated index that was never trimmed; "
            "Kafka would read them as entries), from entry 1"
        )
    ]


def test_check_reports_order_and_sign_problems_once_per_rule() -> None:
    entries = [
        OffsetIndexEntry(1010, 4200),
        OffsetIndexEntry(1010, 4100),
        OffsetIndexEntry(1005, -3),
        OffsetIndexEntry(1020, 8400),
    ]
    assert check_offset_index(entries, BASE) == [
        "negative position: entry 2 has position -3",
        "offsets not strictly increasing (2 entries), first: entry 1 has offset 1010 after 1010",
        (
            "positions not strictly increasing (2 entries), "
            "first: entry 1 has position 4100 after 4200"
        ),
    ]


def test_check_against_the_log() -> None:
    log = [(0, 1003), (4200, 1010), (8400, 1020)]
    entries = [OffsetIndexEntry(1009, 4200), OffsetIndexEntry(1020, 8401)]
    assert check_offset_index(entries, BASE, log_batches=log) == [
        "entry does not point at a batch start: entry 1 points at position 8401",
        (
            "entry's offset is not the last offset of its batch: entry 0 at position 4200: "
            "expected offset 1010, found 1009"
        ),
    ]


def _real_offset_indexes() -> list[Path]:
    return sorted(real_fixture().glob("*/*/*.index"))


def test_every_real_offset_index_decodes_and_passes_the_checks() -> None:
    checked = 0
    for index in _real_offset_indexes():
        base = int(index.name[:20])
        entries = read_offset_index(index, base)
        log = index.with_suffix(".log")
        batches = [(b[0], b[2]) for b in segment_batches(log)] if log.exists() else None
        assert check_offset_index(entries, base, log_batches=batches) == [], index
        checked += 1
    assert checked == 4  # three next to their .log, one orphan (kraft37 __cluster_metadata 839130)


def _encoded(encode: object, *args: object) -> object:
    try:
        return encode(*args)  # type: ignore[operator]
    except CorruptIndexError as err:
        return type(err), str(err), err.offset


@given(st.lists(st.tuples(st.integers(-3, 3) | st.integers(2**31 - 3, 2**31 + 1), st.integers(-2, 5000)
                          | st.sampled_from([2**31 - 1, 2**31])), max_size=30),
       st.sampled_from([0, 7, 2**40]))
def test_columns_encode_as_entries_do(pairs: list[tuple[int, int]], base: int) -> None:
    """The index builder's columns encoder: the same bytes, and for the first impossible entry the same error."""
    entries = [OffsetIndexEntry(base + relative, position) for relative, position in pairs]
    offsets, positions = array("q", (e.offset for e in entries)), array("q", (e.position for e in entries))
    assert _encoded(encode_offset_index_columns, offsets, positions, base) == \
        _encoded(encode_offset_index, entries, base)
