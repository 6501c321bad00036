"""Transaction index: round trips, checks, corruption, and the overlap rule every reader uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptIndexError
from kcompact.segment.txn_index import (
    TXN_INDEX_ENTRY_SIZE,
    AbortedTxn,
    check_txn_index,
    decode_txn_index,
    encode_txn_index,
    read_txn_index,
)

_int64 = st.integers(-(2**63), 2**63 - 1)
_entries = st.lists(st.builds(AbortedTxn, _int64, _int64, _int64, _int64), max_size=30)


@given(entries=_entries)
def test_encode_decode_round_trip(entries: list[AbortedTxn]) -> None:
    data = encode_txn_index(entries)
    assert len(data) == TXN_INDEX_ENTRY_SIZE * len(entries)
    assert decode_txn_index(data) == entries


def test_layout_matches_kafkas_aborted_txn() -> None:
    data = encode_txn_index(
        [AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=21)]
    )
    assert data == bytes.fromhex(
        "00000000000000000007000000000000000a00000000000000140000000000000015"
    )


def test_write_then_read(tmp_path: Path) -> None:
    entries = [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10)]
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(encode_txn_index(entries))
    assert read_txn_index(path) == entries


def test_length_not_a_multiple_of_34_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(encode_txn_index([AbortedTxn(1, 0, 5, 6)]) + b"\x00" * 5)
    with pytest.raises(
        CorruptIndexError, match="expected a multiple of 34 bytes, found 39 bytes"
    ) as info:
        read_txn_index(path)
    assert info.value.path == str(path) and info.value.position == 34


def test_unknown_version_is_corrupt() -> None:
    data = encode_txn_index([AbortedTxn(1, 0, 5, 6), AbortedTxn(1, 7, 9, 10, version=1)])
    with pytest.raises(CorruptIndexError, match="version; expected 0, found 1") as info:
        decode_txn_index(data)
    assert info.value.position == 34 and info.value.offset == 9


def test_encode_rejects_fields_too_wide() -> None:
    with pytest.raises(CorruptIndexError, match="does not fit the index"):
        encode_txn_index([AbortedTxn(2**63, 0, 5, 6)])


def test_check_reports_kafkas_sanity_failure_and_order() -> None:
    entries = [
        AbortedTxn(1, 90, 99, 100),
        AbortedTxn(1, 100, 120, 121),
        AbortedTxn(2, 101, 120, 121),
    ]
    assert check_txn_index(entries, 100) == [
        (
            "last offset below the segment's base offset (Kafka recovers the segment): "
            "entry 0 has last offset 99 < 100"
        ),
        "last offsets not strictly increasing: entry 2 has last offset 120 after 120",
    ]
    assert check_txn_index(entries[1:2], 100) == []


def test_an_aborted_transaction_overlaps_a_range_by_kafkas_bounds() -> None:
    txn = AbortedTxn(producer_id=1, first_offset=10, last_offset=20, last_stable_offset=21)
    assert txn.overlaps(20, 30) and txn.overlaps(0, 11) and txn.overlaps(12, 13)
    assert not txn.overlaps(21, 30)  # ends before the range: last_offset < start
    assert not txn.overlaps(0, 10)  # starts at the range's (exclusive) end
