"""Control records: a marker batch byte for byte (EndTransactionMarker), key/value parsing and its refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptRecordError
from kcompact.records.batch import decode_batch
from kcompact.records.batch_header import Compression, TimestampType
from kcompact.records.control import ControlRecordKey, ControlRecordType, EndTransactionMarker
from kcompact.records.record import decode_records
from tests.encoders import encode_control_batch

# EndTransactionMarker: COMMIT, coordinator epoch 5, offset 100, ts 1700000000000, pid 7, epoch 3, leader 2
COMMIT_MARKER = bytes.fromhex("""
    0000000000000064 00000042 00000002 02 c60df61d 0030 00000000
    0000018bcfe56800 0000018bcfe56800 0000000000000007 0003 ffffffff 00000001
    20 00 00 00 08 00000001 0c 000000000005 00
""")


def test_commit_marker_matches_spec_hex() -> None:
    data = encode_control_batch(
        offset=100, timestamp=1_700_000_000_000, producer_id=7, producer_epoch=3,
        control_type=ControlRecordType.COMMIT, coordinator_epoch=5, partition_leader_epoch=2)
    assert len(data) == 78
    assert data == COMMIT_MARKER


def test_marker_batch_decodes_as_a_transactional_control_batch() -> None:
    batch = decode_batch(COMMIT_MARKER)
    assert batch.crc_valid() and batch.is_control and batch.is_transactional
    assert batch.compression is Compression.NONE
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert (batch.base_offset, batch.last_offset, batch.base_sequence) == (100, 100, -1)
    (record,) = decode_records(batch)
    assert record.offset == 100 and record.timestamp == 1_700_000_000_000
    assert record.value is not None  # a marker is never a tombstone
    assert ControlRecordKey.parse(record.key) == ControlRecordKey(0, ControlRecordType.COMMIT)
    assert EndTransactionMarker.parse(record.value) == EndTransactionMarker(0, 5)


def test_abort_marker() -> None:
    data = encode_control_batch(offset=5, timestamp=9, producer_id=1, producer_epoch=0,
                                control_type=ControlRecordType.ABORT)
    (record,) = decode_records(decode_batch(data))
    assert ControlRecordKey.parse(record.key).type is ControlRecordType.ABORT
    assert EndTransactionMarker.parse(record.value).coordinator_epoch == 0


def test_only_transaction_markers_are_encoded() -> None:
    with pytest.raises(ValueError, match="not a transaction marker type"):
        encode_control_batch(offset=0, timestamp=0, producer_id=1, producer_epoch=0,
                             control_type=ControlRecordType.LEADER_CHANGE)


def test_unknown_type_keeps_its_number() -> None:
    key = ControlRecordKey.parse(b"\x00\x00\x00\x09")
    assert key.type == 9 and key.type.name == "UNKNOWN"
    assert not key.type.is_transaction_marker
    assert key.encode() == b"\x00\x00\x00\x09"
    assert ControlRecordType(6) is ControlRecordType.KRAFT_VOTERS


def test_higher_versions_and_longer_payloads_are_read() -> None:
    assert ControlRecordKey.parse(b"\x00\x01\x00\x00\xff") == ControlRecordKey(
        1, ControlRecordType.ABORT)
    assert EndTransactionMarker.parse(b"\x00\x02\x00\x00\x00\x07\xee").coordinator_epoch == 7


@pytest.mark.parametrize(("key", "fragment"), [
    (b"\x00\x00\x01", "expected at least 4 bytes, found 3"),
    (None, "expected at least 4 bytes, found -1"),
    (b"\xff\xff\x00\x01", "invalid control record key version; expected >= 0, found -1"),
])
def test_bad_control_keys(key: bytes | None, fragment: str) -> None:
    with pytest.raises(CorruptRecordError, match=fragment):
        ControlRecordKey.parse(key)


@pytest.mark.parametrize(("value", "fragment"), [
    (b"\x00\x00\x00\x00\x05", "expected at least 6 bytes, found 5"),
    (None, "expected at least 6 bytes, found -1"),
    (b"\x80\x00\x00\x00\x00\x05", "invalid end transaction marker version; expected >= 0"),
])
def test_bad_marker_values(value: bytes | None, fragment: str) -> None:
    with pytest.raises(CorruptRecordError, match=fragment):
        EndTransactionMarker.parse(value)


@given(st.integers(0, 2**15 - 1), st.integers(-(2**31), 2**31 - 1), st.integers(0, 2**15 - 1))
def test_key_and_marker_round_trip(version: int, coordinator_epoch: int, type_id: int) -> None:
    marker = EndTransactionMarker(version, coordinator_epoch)
    assert EndTransactionMarker.parse(marker.encode()) == marker
    key = ControlRecordKey(version, ControlRecordType(type_id))
    assert ControlRecordKey.parse(memoryview(key.encode())) == key
