"""Time index: round trips, Kafka's rules as checks, corruption, and every real .timeindex file."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptIndexError, FileAccessError
from kcompact.segment.time_index import (
    TIME_INDEX_ENTRY_SIZE,
    TimeIndexEntry,
    check_time_index,
    decode_time_index,
    encode_time_index,
    encode_time_index_columns,
    read_time_index,
    read_time_index_tail,
)
from tests.conftest import real_fixture
from tests.segment.test_index_builder import segment_batches

BASE = 500

_entries = st.lists(
    st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**31 - 1)), max_size=50
).map(lambda pairs: [TimeIndexEntry(ts, BASE + rel) for ts, rel in pairs])


@given(entries=_entries)
def test_encode_decode_round_trip(entries: list[TimeIndexEntry]) -> None:
    data = encode_time_index(entries, BASE)
    assert len(data) == TIME_INDEX_ENTRY_SIZE * len(entries)
    assert decode_time_index(data, BASE) == entries


def test_layout_is_timestamp_then_relative_offset_big_endian() -> None:
    data = encode_time_index([TimeIndexEntry(0x0102030405060708, BASE + 9)], BASE)
    assert data == bytes.fromhex("0102030405060708 00000009")


def test_write_then_read(tmp_path: Path) -> None:
    entries = [TimeIndexEntry(1_700_000_000_000, 505), TimeIndexEntry(1_700_000_000_900, 530)]
    path = tmp_path / "00000000000000000500.timeindex"
    path.write_bytes(encode_time_index(entries, BASE))
    assert path.stat().st_size == 24
    assert read_time_index(path, BASE) == entries


def test_length_not_a_multiple_of_12_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000500.timeindex"
    path.write_bytes(bytes(30))
    with pytest.raises(
        CorruptIndexError, match="expected a multiple of 12 bytes, found 30"
    ) as info:
        read_time_index(path, BASE)
    assert info.value.path == str(path) and info.value.position == 24


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        (TimeIndexEntry(5, BASE - 1), "expected offset 500..2147484147, found 499"),
        (TimeIndexEntry(2**63, BASE), "timestamp outside int64"),
    ],
)
def test_encode_rejects_what_does_not_fit(entry: TimeIndexEntry, fragment: str) -> None:
    with pytest.raises(CorruptIndexError, match=fragment):
        encode_time_index([entry], BASE)


@pytest.mark.parametrize("slots", [0, 1, 3])
@pytest.mark.parametrize("extra", [b"", b"\x00" * 5, b"\x01" * 11])
def test_the_tail_is_the_last_entry_of_the_whole_file(tmp_path: Path, slots: int, extra: bytes) -> None:
    path = tmp_path / "00000000000000000500.timeindex"
    entries = [TimeIndexEntry(1_000 + 7 * i, BASE + 3 * i) for i in range(slots)]
    path.write_bytes(encode_time_index(entries, BASE) + extra)
    try:
        whole = read_time_index(path, BASE)
    except CorruptIndexError:  # the largest timestamp of an index that does not parse is unknown
        whole = []
    expected = whole[-1].timestamp if whole else -1
    assert read_time_index_tail(path) == (expected, path.stat().st_size)
    assert (expected == -1) == (slots == 0 or extra != b"")


def test_the_tail_of_a_missing_time_index_names_it(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000500.timeindex"
    with pytest.raises(FileAccessError, match="00000000000000000500.timeindex"):
        read_time_index_tail(path)


def test_check_reports_kafkas_sanity_failures() -> None:
    problems = check_time_index([TimeIndexEntry(90, 510), TimeIndexEntry(80, 499)], BASE)
    sanity = "(Kafka's sanity check fails: CorruptIndexException)"
    assert problems[:2] == [
        f"last offset 499 is below the base offset 500 {sanity}",
        f"last timestamp 80 is below the first 90 {sanity}",
    ]
    assert "timestamps decrease: entry 1 has timestamp 80 after 90" in problems
    assert "offsets decrease: entry 1 has offset 499 after 510" in problems


def test_check_reports_an_untrimmed_preallocated_file_but_not_a_lone_epoch_entry() -> None:
    data = encode_time_index([TimeIndexEntry(70, 510)], BASE) + bytes(12 * 3)
    problems = check_time_index(decode_time_index(data, BASE), BASE)
    assert (
        "3 trailing zero-filled slots (a preallocated index that was never trimmed" in problems[-1]
    )
    assert check_time_index(decode_time_index(bytes(24), BASE), BASE)[0].startswith("2 trailing")
    assert check_time_index([TimeIndexEntry(0, BASE)], BASE) == []


def test_check_against_the_log() -> None:
    log = [(502, 40), (505, 70), (509, 70), (512, 60), (515, 95)]  # (last offset, max timestamp)
    good = [TimeIndexEntry(70, 505), TimeIndexEntry(95, 515)]
    assert check_time_index(good, BASE, log_batches=log) == []
    bad = [TimeIndexEntry(40, 503), TimeIndexEntry(65, 505), TimeIndexEntry(70, 509)]
    assert check_time_index(bad, BASE, log_batches=log) == [
        "entry's offset is not the last offset of a batch: entry 0 has offset 503",
        (
            "entry's timestamp is not the running maximum at its batch: entry 1 at offset 505: "
            "expected timestamp 70, found 65"
        ),
        (
            "entry's offset is not where its timestamp was first reached: entry 2: "
            "timestamp 70 was first reached at offset 505; found offset 509"
        ),
    ]


def test_every_real_time_index_decodes_and_passes_the_checks() -> None:
    checked = 0
    for index in sorted(real_fixture().glob("*/*/*.timeindex")):
        base = int(index.name[:20])
        entries = read_time_index(index, base)
        assert entries, index  # every one of them was trimmed and holds at least the final entry
        assert read_time_index_tail(index) == (entries[-1].timestamp, index.stat().st_size)
        log = index.with_suffix(".log")
        batches = [(b[2], b[3]) for b in segment_batches(log)] if log.exists() else None
        assert check_time_index(entries, base, log_batches=batches) == [], index
        checked += 1
    assert checked == 16


def _encoded(encode: object, *args: object) -> object:
    try:
        return encode(*args)  # type: ignore[operator]
    except CorruptIndexError as err:
        return type(err), str(err), err.offset


@given(st.lists(st.tuples(st.integers(-2, 2**45) | st.sampled_from([-(2**63), 2**63 - 1]),
                          st.integers(-3, 3) | st.integers(2**31 - 3, 2**31 + 1)), max_size=30),
       st.sampled_from([0, 7, 2**40]))
def test_columns_encode_as_entries_do(pairs: list[tuple[int, int]], base: int) -> None:
    """The index builder's columns encoder: the same bytes, and for the first impossible entry the same error."""
    entries = [TimeIndexEntry(timestamp, base + relative) for timestamp, relative in pairs]
    timestamps, offsets = array("q", (e.timestamp for e in entries)), array("q", (e.offset for e in entries))
    assert _encoded(encode_time_index_columns, timestamps, offsets, base) == _encoded(encode_time_index, entries, base)


def test_columns_encoder_names_a_timestamp_outside_int64() -> None:
    entries = [TimeIndexEntry(5, 3), TimeIndexEntry(2**63, 4)]
    with pytest.raises(CorruptIndexError, match=r"time index entry 1 has a timestamp outside int64"):
        encode_time_index_columns([5, 2**63], [3, 4], 0)
    assert _encoded(encode_time_index_columns, [5, 2**63], [3, 4], 0) == _encoded(encode_time_index, entries, 0)
