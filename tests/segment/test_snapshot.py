"""Producer state snapshots: round trips, corruption, and every .snapshot file a broker wrote."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptDataError, TruncatedDataError
from kcompact.segment.snapshot import (
    PRODUCER_ENTRY,
    ProducerSnapshotEntry,
    decode_producer_snapshot,
    read_producer_snapshot,
)
from tests.conftest import real_fixture
from tests.encoders import encode_producer_snapshot


def _ints(bits: int) -> st.SearchStrategy[int]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


_entry = st.builds(
    ProducerSnapshotEntry,
    _ints(64),
    _ints(16),
    _ints(32),
    _ints(64),
    _ints(32),
    _ints(64),
    _ints(32),
    _ints(64),
)
ENTRY = ProducerSnapshotEntry(
    producer_id=1000,
    producer_epoch=0,
    last_sequence=4,
    last_offset=10,
    offset_delta=4,
    timestamp=1_728_489_000_000,
    coordinator_epoch=-1,
    current_txn_first_offset=-1,
)


@given(entries=st.lists(_entry, max_size=20))
def test_encode_decode_round_trip(entries: list[ProducerSnapshotEntry]) -> None:
    data = encode_producer_snapshot(entries)
    assert len(data) == 10 + PRODUCER_ENTRY.size * len(entries)
    assert decode_producer_snapshot(data) == entries


def test_empty_snapshot_is_kafkas_ten_bytes() -> None:
    # version 1, CRC-32C of the 4-byte count 0, count 0
    assert encode_producer_snapshot([]) == bytes.fromhex("0001 48674bc7 00000000")


def test_bad_crc_is_corrupt_and_names_the_file(tmp_path: Path) -> None:
    data = bytearray(encode_producer_snapshot([ENTRY]))
    data[20] ^= 0x01
    path = tmp_path / "00000000000000000011.snapshot"
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError, match="producer snapshot CRC-32C does not match") as info:
        read_producer_snapshot(path)
    assert type(info.value) is CorruptDataError
    assert str(info.value).startswith(f"{path} at position 2: ")


@pytest.mark.parametrize(
    ("data", "error", "fragment", "position"),
    [
        (
            b"\x00\x01\x00",
            TruncatedDataError,
            "ends inside its header; expected at least 10 bytes, found 3",
            3,
        ),
        (
            struct.pack(">hIi", 2, 0, 0),
            CorruptDataError,
            "unknown producer snapshot version; expected 1, found 2",
            0,
        ),
    ],
)
def test_short_or_unknown_snapshots(
    data: bytes, error: type[Exception], fragment: str, position: int
) -> None:
    with pytest.raises(error, match=fragment) as info:
        decode_producer_snapshot(data)
    assert isinstance(info.value, CorruptDataError) and info.value.position == position


def _with_crc(body: bytes) -> bytes:
    from kcompact.records.crc import crc32c

    return struct.pack(">hI", 1, crc32c(body)) + body


@pytest.mark.parametrize(
    ("body", "error", "fragment"),
    [
        (
            struct.pack(">i", -1),
            CorruptDataError,
            "count is negative; expected 0 or more, found -1",
        ),
        (struct.pack(">i", 2) + bytes(46), TruncatedDataError, "expected 102 bytes, found 56"),
        (struct.pack(">i", 0) + b"\x00", CorruptDataError, "expected 10 bytes, found 11"),
    ],
)
def test_count_must_match_the_length(body: bytes, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment) as info:
        decode_producer_snapshot(_with_crc(body))
    assert type(info.value) is error


def test_every_real_snapshot_decodes() -> None:
    files = sorted(real_fixture().glob("*/*/*.snapshot"))
    assert len(files) == 83
    producers = 0
    for path in files:
        snapshot_offset = int(path.name[:20])
        entries = read_producer_snapshot(path)
        assert encode_producer_snapshot(entries) == path.read_bytes(), path  # byte-exact
        for entry in entries:
            producers += 1
            assert entry.producer_id >= 0 and entry.producer_epoch >= 0, path
            # The snapshot is taken at the map end offset: every producer's last offset lies below
            # it.
            assert entry.last_offset < snapshot_offset, path
            assert entry.current_txn_first_offset == -1, path  # no transactions in these fixtures
    assert producers == 7  # 79 of the 83 files are empty (10 bytes)


def test_real_snapshot_values() -> None:
    path = real_fixture("bitnami2024-rolled-logdir", "first-0", "00000000000000000011.snapshot")
    [entry] = read_producer_snapshot(path)
    assert entry.last_offset == 10
    assert entry.last_sequence - entry.offset_delta >= 0
