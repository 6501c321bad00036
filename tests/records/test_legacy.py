"""Legacy v0/v1 messages: Kafka's checksum vectors, wrapper offsets, corruption, round trips."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import (
    CorruptBatchError,
    CorruptRecordError,
    TruncatedDataError,
    UnsupportedFormatError,
)
from kcompact.records.compression import compress
from kcompact.records.legacy import (
    LegacyEntry,
    decode_legacy_entry,
    legacy_records,
)
from kcompact.records.lz4_framing import xxh32
from kcompact.records.record import Record
from tests.encoders import encode_legacy_message, encode_legacy_wrapper

KAFKA_RECORDS = [Record(0, 283843, b"key1", b"value1"), Record(1, 1234, b"key2", b"value2")]
V0_KEY1 = "0000000000000000 00000018 75f0f41d 00 00 00000004 6b657931 00000006 76616c756531"
V1_KEY1 = ("0000000000000000 00000020 0685b364 01 00 00000000000454c3 00000004 6b657931 "
           "00000006 76616c756531")


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def wrap(inner: bytes, *, magic: int, offset: int, codec: int = 1, timestamp: int = 0,
         timestamp_type: int = 0) -> bytes:
    return encode_legacy_message(offset=offset, magic=magic, key=None,
                                 value=compress(codec, inner, magic=magic), timestamp=timestamp,
                                 compression=codec, timestamp_type=timestamp_type)


# -- Kafka's own vectors (MemoryRecordsTest.testChecksum) -----------------------------

@pytest.mark.parametrize(("magic", "expected_crc", "expected_hex"),
                         [(0, 1978725405, V0_KEY1), (1, 109425508, V1_KEY1)])
def test_kafka_checksum_vectors_uncompressed(
    magic: int, expected_crc: int, expected_hex: str
) -> None:
    data = encode_legacy_message(offset=0, magic=magic, key=b"key1", value=b"value1",
                                 timestamp=283843)
    assert data == hexbytes(expected_hex)
    entry = decode_legacy_entry(data)
    assert entry.crc == expected_crc == entry.compute_crc()
    assert entry.crc_valid()


@pytest.mark.parametrize("magic", (0, 1))
def test_lz4_wrapper_like_kafkas_checksum_test(magic: int) -> None:
    # Kafka's expected CRCs (v0 66944826, v1 1407303399) cover lz4-java's block bytes, which
    # python-lz4 does not reproduce for this input; the envelope and header quirk are checked.
    data = encode_legacy_wrapper(KAFKA_RECORDS, magic=magic, compression=3)
    entry = decode_legacy_entry(data)
    assert (entry.offset, entry.magic, entry.attributes, entry.key) == (1, magic, 3, None)
    assert entry.timestamp == (283843 if magic else -1)
    assert entry.crc_valid()
    frame = bytes(entry.value or b"")
    assert frame[:6] == bytes.fromhex("04224d186040")
    assert frame[6] == xxh32(frame[:6] if magic == 0 else frame[4:6]) >> 8 & 0xFF
    expected = [Record(r.offset, r.timestamp if magic else -1, r.key, r.value)
                for r in KAFKA_RECORDS]
    assert legacy_records(entry) == expected


# -- the entry and its v2-style accessors --------------------------------------------------------

def test_entry_fields_and_batch_like_properties() -> None:
    data = encode_legacy_message(offset=41, magic=1, key=None, value=b"v", timestamp=7,
                                 timestamp_type=1)
    buf = b"\x00" * 5 + data + b"tail"
    entry = decode_legacy_entry(buf, 5)
    assert isinstance(entry, LegacyEntry)
    assert (entry.position, entry.offset, entry.size_in_bytes) == (5, 41, len(data))
    assert bytes(entry.buffer) == data
    assert (entry.magic, entry.compression, entry.timestamp_type, entry.timestamp) == (1, 0, 1, 7)
    assert entry.key is None and bytes(entry.value or b"") == b"v"
    assert (entry.base_offset, entry.last_offset, entry.next_offset) == (41, 41, 42)
    assert (entry.records_count, entry.max_timestamp) == (1, 7)
    assert (entry.is_control, entry.is_transactional, entry.has_delete_horizon) == (False,) * 3
    assert entry.delete_horizon_ms is None
    assert (entry.producer_id, entry.producer_epoch, entry.base_sequence,
            entry.partition_leader_epoch) == (-1, -1, -1, -1)
    assert legacy_records(entry) == [Record(41, 7, None, b"v")]


def test_v0_has_no_timestamp() -> None:
    entry = decode_legacy_entry(encode_legacy_message(offset=3, magic=0, key=b"k", value=None,
                                                      timestamp=99, timestamp_type=1))
    assert (entry.timestamp, entry.timestamp_type, entry.max_timestamp) == (-1, -1, -1)
    assert entry.size_in_bytes == 12 + 14 + 1
    assert legacy_records(entry) == [Record(3, -1, b"k", None)]


def test_negative_key_length_other_than_minus_one_is_null() -> None:
    data = bytearray(encode_legacy_message(offset=0, magic=0, key=None, value=b"x"))
    data[18:22] = struct.pack(">i", -7)
    assert decode_legacy_entry(bytes(data)).key is None


def test_crc_valid_detects_a_flipped_byte() -> None:
    data = bytearray(encode_legacy_message(offset=0, magic=1, key=b"k", value=b"value"))
    data[-1] ^= 1
    entry = decode_legacy_entry(bytes(data))
    assert not entry.crc_valid()
    assert entry.compute_crc() != entry.crc


# -- decode errors -------------------------------------------------------------------------------

def test_size_below_minimum_is_corrupt_batch() -> None:
    data = struct.pack(">qi", 0, 13) + b"\x00" * 13
    with pytest.raises(CorruptBatchError, match="expected at least 14, found 13") as info:
        decode_legacy_entry(data)
    assert info.value.position == 0


def test_v1_size_below_22_is_corrupt_batch() -> None:
    body = struct.pack(">IbB", 0, 1, 0) + b"\x00" * 14  # 20 bytes: room for v0 only
    with pytest.raises(CorruptBatchError, match="v1 message size; expected at least 22"):
        decode_legacy_entry(struct.pack(">qi", 0, len(body)) + body)


def test_entry_running_past_buffer_is_truncated() -> None:
    data = encode_legacy_message(offset=9, magic=1, key=b"k", value=b"v" * 10)
    with pytest.raises(TruncatedDataError, match="runs past the end of the data") as info:
        decode_legacy_entry(b"xx" + data[:-1], 2)
    assert (info.value.position, info.value.offset) == (2, 9)
    with pytest.raises(TruncatedDataError, match="expected 12 bytes, found 5"):
        decode_legacy_entry(data[:5])


def test_key_length_past_the_message_is_corrupt() -> None:
    data = bytearray(encode_legacy_message(offset=0, magic=0, key=b"key", value=b"v"))
    data[18:22] = struct.pack(">i", 100)
    with pytest.raises(CorruptBatchError, match="key length does not fit the message size"):
        decode_legacy_entry(bytes(data))


def test_value_not_filling_the_message_is_corrupt() -> None:
    data = bytearray(encode_legacy_message(offset=0, magic=0, key=None, value=b"value"))
    data[-9:-5] = struct.pack(">i", 2)  # value length 2 of 5 bytes
    with pytest.raises(CorruptBatchError, match="value ends early"):
        decode_legacy_entry(bytes(data))
    data[-9:-5] = struct.pack(">i", 6)
    with pytest.raises(CorruptBatchError, match="value length does not fit"):
        decode_legacy_entry(bytes(data))


@pytest.mark.parametrize("magic", (2, 3, -1))
def test_other_magic_is_refused(magic: int) -> None:
    data = bytearray(encode_legacy_message(offset=0, magic=1, key=None, value=b"v" * 60))
    data[16] = magic & 0xFF
    with pytest.raises(CorruptBatchError, match=f"magic; expected 0 or 1, found {magic}"):
        decode_legacy_entry(bytes(data))


# -- compressed wrappers -------------------------------------------------------------------------

def test_v0_wrapper_inner_offsets_are_absolute() -> None:
    inner = b"".join(encode_legacy_message(offset=o, magic=0, key=b"k", value=b"%d" % o)
                     for o in (100, 102, 105))
    entry = decode_legacy_entry(wrap(inner, magic=0, offset=105, codec=2))
    assert [r.offset for r in legacy_records(entry)] == [100, 102, 105]
    assert (entry.base_offset, entry.last_offset, entry.records_count) == (100, 105, 3)


def test_v1_wrapper_relative_offsets_with_gaps() -> None:
    records = [Record(o, 10 + o, b"k", b"v") for o in (50, 52, 57)]
    data = encode_legacy_wrapper(records, magic=1, compression=1)
    entry = decode_legacy_entry(data)
    inner = decode_legacy_entry(compress_inner_of(entry))
    assert inner.offset == 0  # relative to the first record
    assert entry.offset == 57 and entry.timestamp == 67  # CreateTime: max inner timestamp
    assert legacy_records(entry) == records


def compress_inner_of(entry: LegacyEntry) -> bytes:
    from kcompact.records.compression import decompress

    return decompress(entry.compression, entry.value or b"", magic=entry.magic)


def test_v1_wrapper_offset_zero_means_base_zero() -> None:
    inner = b"".join(encode_legacy_message(offset=o, magic=1, key=None, value=b"x", timestamp=5)
                     for o in range(3))
    entry = decode_legacy_entry(wrap(inner, magic=1, offset=0))
    assert [r.offset for r in legacy_records(entry)] == [0, 1, 2]


def test_v1_wrapper_offset_below_last_inner_is_corrupt() -> None:
    inner = b"".join(encode_legacy_message(offset=o, magic=1, key=None, value=b"x")
                     for o in range(5))
    data = b"pad" + wrap(inner, magic=1, offset=3)
    with pytest.raises(CorruptRecordError, match="less than the last inner message offset") as info:
        legacy_records(decode_legacy_entry(data, 3))
    assert (info.value.position, info.value.offset) == (3, 3)


def test_log_append_time_wrapper_stamps_inner_messages() -> None:
    records = [Record(10, 1, b"a", b"1"), Record(11, 2, b"b", b"2")]
    data = encode_legacy_wrapper(records, magic=1, compression=3, timestamp_type=1,
                                 log_append_time=999)
    entry = decode_legacy_entry(data)
    assert (entry.timestamp_type, entry.timestamp, entry.max_timestamp) == (1, 999, 999)
    inner = decode_legacy_entry(compress_inner_of(entry))
    assert inner.timestamp_type == 1 and inner.timestamp == 999  # Kafka writes it inside too
    assert [r.timestamp for r in legacy_records(entry)] == [999, 999]
    # A reader takes the wrapper's time even when inner messages say otherwise.
    other = b"".join(encode_legacy_message(offset=o, magic=1, key=None, value=b"x", timestamp=o)
                     for o in range(2))
    lat = decode_legacy_entry(wrap(other, magic=1, offset=1, timestamp=555, timestamp_type=1))
    assert [r.timestamp for r in legacy_records(lat)] == [555, 555]


def test_kafka_4298_v1_wrapper_with_v0_inner_messages() -> None:
    inner = b"".join(encode_legacy_message(offset=o, magic=0, key=b"k", value=b"v")
                     for o in range(3))
    entry = decode_legacy_entry(wrap(inner, magic=1, offset=20, timestamp=77, timestamp_type=1))
    assert legacy_records(entry) == [Record(o, -1, b"k", b"v") for o in (18, 19, 20)]


def test_nested_compression_is_corrupt() -> None:
    nested = wrap(encode_legacy_message(offset=0, magic=1, key=None, value=b"x"), magic=1, offset=0)
    with pytest.raises(CorruptRecordError, match="inner messages must not be compressed"):
        legacy_records(decode_legacy_entry(wrap(nested, magic=1, offset=0)))


def test_empty_wrapper_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="holds no inner messages"):
        legacy_records(decode_legacy_entry(wrap(b"", magic=0, offset=0)))


def test_null_wrapper_value_is_corrupt() -> None:
    data = encode_legacy_message(offset=0, magic=1, key=None, value=None, compression=1)
    entry = decode_legacy_entry(data)
    with pytest.raises(CorruptRecordError, match="null value"):
        legacy_records(entry)
    with pytest.raises(CorruptRecordError, match="null value"):
        _ = entry.base_offset


def test_wrapper_value_that_does_not_decompress() -> None:
    data = b"\x00" * 7 + encode_legacy_message(offset=4, magic=1, key=None, value=b"junk!",
                                               compression=3)
    with pytest.raises(CorruptRecordError, match="lz4 payload does not decompress") as info:
        legacy_records(decode_legacy_entry(data, 7))
    assert (info.value.position, info.value.offset) == (7, 4)


def test_partial_inner_message_is_refused_not_dropped() -> None:
    inner = b"".join(encode_legacy_message(offset=o, magic=0, key=None, value=b"x")
                     for o in range(2))
    entry = decode_legacy_entry(wrap(inner[:-3], magic=0, offset=1))
    with pytest.raises(CorruptRecordError, match="inner message at byte 27 of the decompressed"):
        legacy_records(entry)


def test_wrapper_records_are_decompressed_once() -> None:
    records = [Record(o, o, None, b"v") for o in range(4)]
    entry = decode_legacy_entry(encode_legacy_wrapper(records, magic=1, compression=2))
    first = legacy_records(entry)
    assert entry.base_offset == 0 and entry.records_count == 4
    assert legacy_records(entry) is first


def test_zstd_or_unknown_codec_in_a_legacy_wrapper_is_unsupported() -> None:
    data = bytearray(encode_legacy_message(offset=0, magic=1, key=None, value=b"xx", compression=1))
    data[17] = 4
    with pytest.raises(UnsupportedFormatError, match="zstd compression in a magic 1 message"):
        legacy_records(decode_legacy_entry(bytes(data)))
    data[17] = 6
    with pytest.raises(UnsupportedFormatError, match="unknown compression codec"):
        legacy_records(decode_legacy_entry(bytes(data)))


# -- encoders ------------------------------------------------------------------------------------

def test_encoder_argument_errors() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_legacy_wrapper([], magic=1, compression=1)
    with pytest.raises(ValueError, match="needs a codec"):
        encode_legacy_wrapper(KAFKA_RECORDS, magic=1, compression=0)
    with pytest.raises(ValueError, match="needs log_append_time"):
        encode_legacy_wrapper(KAFKA_RECORDS, magic=1, compression=1, timestamp_type=1)
    with pytest.raises(UnsupportedFormatError, match="expected magic 2"):
        encode_legacy_wrapper(KAFKA_RECORDS, magic=1, compression=4)
    with pytest.raises(ValueError, match="expected 0 or 1, found 2"):
        encode_legacy_message(offset=0, magic=2, key=None, value=None)


def test_walked_by_iter_batches() -> None:
    from kcompact.records.batch import iter_batches

    log = (encode_legacy_message(offset=0, magic=0, key=b"a", value=b"1")
           + encode_legacy_wrapper(KAFKA_RECORDS[:1] + [Record(2, 5, b"c", None)], magic=1,
                                   compression=1)
           + encode_legacy_message(offset=3, magic=1, key=b"d", value=b"4", timestamp=9))
    entries = list(iter_batches(log))
    assert all(isinstance(e, LegacyEntry) for e in entries)
    assert [(e.base_offset, e.last_offset) for e in entries] == [(0, 0), (0, 2), (3, 3)]
    assert [e.position for e in entries] == [0, entries[0].size_in_bytes,
                                             entries[0].size_in_bytes + entries[1].size_in_bytes]


optional_bytes = st.none() | st.binary(max_size=40)
record_lists = st.lists(
    st.tuples(st.integers(0, 3), st.integers(-1, 2**40), optional_bytes, optional_bytes),
    min_size=1, max_size=20)


@given(rows=record_lists, start=st.integers(0, 2**40), magic=st.sampled_from((0, 1)),
       codec=st.sampled_from((1, 2, 3)))
def test_wrapper_round_trip(rows: list[tuple[int, int, bytes | None, bytes | None]], start: int,
                            magic: int, codec: int) -> None:
    records, offset = [], start
    for gap, timestamp, key, value in rows:
        offset += gap
        records.append(Record(offset, timestamp if magic else -1, key, value))
    entry = decode_legacy_entry(encode_legacy_wrapper(records, magic=magic, compression=codec))
    assert entry.crc_valid() and entry.compression == codec
    assert legacy_records(entry) == records
    assert entry.max_timestamp == (max(-1, *(r.timestamp for r in records)) if magic else -1)


@given(offset=st.integers(-(2**63), 2**63 - 1), magic=st.sampled_from((0, 1)), key=optional_bytes,
       value=optional_bytes, timestamp=st.integers(-(2**63), 2**63 - 1))
def test_message_round_trip(offset: int, magic: int, key: bytes | None, value: bytes | None,
                            timestamp: int) -> None:
    data = encode_legacy_message(offset=offset, magic=magic, key=key, value=value,
                                 timestamp=timestamp)
    entry = decode_legacy_entry(data)
    assert entry.size_in_bytes == len(data) and entry.crc_valid()
    assert legacy_records(entry) == [Record(offset, timestamp if magic else -1, key, value)]
