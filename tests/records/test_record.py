"""v2 records: canonical encoding, decode semantics, and Kafka's validation of malformed records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptRecordError
from kcompact.records.batch import decode_batch
from kcompact.records.batch_encoding import encode_batch, encode_records_batch
from kcompact.records.batch_header import (
    RECORD_BATCH_OVERHEAD,
    Compression,
    RecordBatch,
    TimestampType,
)
from kcompact.records.record import (
    Header,
    Record,
    decode_record,
    decode_records,
    encode_record,
    records_bytes,
)
from kcompact.records.varint import encode_varint, encode_varlong

RECORD0 = bytes.fromhex("20 00 00 00 08 6b657931 0c 76616c756531 00")  # the worked batch's first record
RECORD1 = bytes.fromhex("24 00 e1bf22 02 08 6b657932 0c 76616c756532 00")


def _batch_of(raw: bytes, count: int, *, codec: int = 0, base_offset: int = 100) -> RecordBatch:
    return decode_batch(encode_records_batch(
        raw, count=count, base_offset=base_offset, last_offset_delta=max(count - 1, 0),
        base_timestamp=1000, max_timestamp=1000, compression=codec))


def _body(*fields: bytes) -> bytes:
    """A record from its body fields, with a length prefix that matches them."""
    body = b"".join(fields)
    return encode_varint(len(body)) + body


def test_spec_records_encode_byte_exact() -> None:
    assert encode_record(0, 0, b"key1", b"value1") == RECORD0
    assert encode_record(1, 1234 - 283843, b"key2", b"value2") == RECORD1


def test_null_key_value_and_headers_encoding() -> None:
    encoded = encode_record(3, -2, None, None, (Header(b"h", None), Header(b"", b"v")))
    assert encoded == bytes.fromhex("18 00 03 06 01 01 04 02 68 01 00 02 76")


@given(
    offset_delta=st.integers(0, 2**31 - 1), timestamp_delta=st.integers(-(2**63), 2**63 - 1),
    key=st.none() | st.binary(max_size=40), value=st.none() | st.binary(max_size=200),
    headers=st.lists(st.builds(Header, st.binary(max_size=8), st.none() | st.binary(max_size=8)),
                     max_size=4),
)
def test_record_round_trip(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
    headers: list[Header],
) -> None:
    encoded = encode_record(offset_delta, timestamp_delta, key, value, headers)
    record, end = decode_record(memoryview(b"\xaa" + encoded), 1, base_offset=10,
                                base_timestamp=0)
    assert end == 1 + len(encoded)
    assert record == Record(10 + offset_delta, timestamp_delta, key, value, tuple(headers))


def test_log_append_time_overrides_record_timestamps() -> None:
    data = encode_batch([Record(5, 17, b"a", b"1"), Record(6, 3, b"b", None)], base_offset=5,
                        timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=999)
    assert [r.timestamp for r in decode_records(decode_batch(data))] == [999, 999]


def test_delete_horizon_deltas_are_relative_to_the_horizon() -> None:
    records = [Record(7, 50, b"a", None), Record(9, 40, b"b", b"x")]
    batch = decode_batch(encode_batch(records, base_offset=5, delete_horizon_ms=10_000))
    assert batch.base_timestamp == 10_000 and batch.max_timestamp == 50
    assert decode_records(batch) == records


def test_records_bytes_decompresses() -> None:
    raw = RECORD0 + RECORD1
    batch = _batch_of(raw, 2, codec=Compression.GZIP)
    assert bytes(batch.payload) != raw and records_bytes(batch) == raw


# --- Kafka's validation -------------------------------------------------------------------

def _assert_corrupt(batch: RecordBatch, fragment: str, position: int) -> None:
    with pytest.raises(CorruptRecordError, match=fragment) as info:
        decode_records(batch)
    assert info.value.position == position
    assert info.value.offset == 100


def test_negative_record_length() -> None:
    _assert_corrupt(_batch_of(RECORD0 + b"\x05" + RECORD1[1:], 2), "found length -3",
                    RECORD_BATCH_OVERHEAD + len(RECORD0))


def test_count_larger_than_records() -> None:
    _assert_corrupt(_batch_of(RECORD0 + RECORD1, 3),
                    "Incorrect declared batch size, premature EOF reached; expected 3 records, "
                    "found 2", RECORD_BATCH_OVERHEAD + len(RECORD0) + len(RECORD1))


def test_count_smaller_than_records() -> None:
    _assert_corrupt(_batch_of(RECORD0 + RECORD1, 1),
                    "Incorrect declared batch size, records still remaining; expected 1 records "
                    "to end the batch, found 19 bytes after them", RECORD_BATCH_OVERHEAD + len(RECORD0))


def test_count_mismatch_inside_compressed_data() -> None:
    with pytest.raises(CorruptRecordError, match=r"records still remaining.*byte 17 of the "
                       r"decompressed records") as info:
        decode_records(_batch_of(RECORD0 + RECORD1 * 3, 1, codec=Compression.ZSTD))
    assert info.value.position == RECORD_BATCH_OVERHEAD


def test_corrupt_compressed_stream_points_at_the_payload() -> None:
    data = bytearray(encode_records_batch(
        b"not gzip at all", count=1, base_offset=100, last_offset_delta=0, base_timestamp=0,
        max_timestamp=0))
    data[22] = Compression.GZIP  # low byte of the attributes
    with pytest.raises(CorruptRecordError) as info:
        decode_records(decode_batch(bytes(data)))
    assert (info.value.position, info.value.offset) == (RECORD_BATCH_OVERHEAD, 100)


def test_record_longer_than_its_fields() -> None:
    fields = b"\x00" + encode_varlong(0) + encode_varint(0) + b"\x01\x01\x00"
    raw = encode_varint(len(fields) + 1) + fields + b"\x00"
    _assert_corrupt(_batch_of(raw, 1), "expected to read 7 bytes in record payload, found 6",
                    RECORD_BATCH_OVERHEAD)


def test_record_length_past_the_data() -> None:
    _assert_corrupt(_batch_of(b"\x7e" + RECORD0[1:], 1), "found length 63", RECORD_BATCH_OVERHEAD)


def test_key_running_past_the_record() -> None:
    raw = _body(b"\x00\x00\x00", encode_varint(30), b"abc")
    _assert_corrupt(_batch_of(raw, 1), "key runs past the end of the record; expected 30 bytes, "
                    "found 3", RECORD_BATCH_OVERHEAD + 4)


@pytest.mark.parametrize(("count", "shown"), [(-1, "expected 0..2, found -1"), (5, "expected 0..2, found 5")])
def test_bad_header_count(count: int, shown: str) -> None:
    raw = _body(b"\x00\x00\x00\x01\x01", encode_varint(count), b"\x00\x00")
    _assert_corrupt(_batch_of(raw, 1), f"invalid number of record headers; {shown}",
                    RECORD_BATCH_OVERHEAD + 6)


def test_negative_header_key_length() -> None:
    raw = _body(b"\x00\x00\x00\x01\x01\x02", encode_varint(-1), b"\x01")
    _assert_corrupt(_batch_of(raw, 1), "invalid negative header key size; expected >= 0, found -1",
                    RECORD_BATCH_OVERHEAD + 7)


def test_unterminated_varint_inside_a_record() -> None:
    raw = _body(b"\x00", b"\xff" * 10, b"\x00")
    _assert_corrupt(_batch_of(raw, 1), "varlong does not terminate", RECORD_BATCH_OVERHEAD + 2)


def test_empty_record_body() -> None:
    _assert_corrupt(_batch_of(b"\x00", 1), "expected at least an attribute byte",
                    RECORD_BATCH_OVERHEAD)
