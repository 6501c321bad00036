"""v2 batches: byte-exact examples (a CRC of Kafka's own tests, 3851219455), header properties, round trips,
framing walk, corruption."""

from __future__ import annotations

import dataclasses
import mmap
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptBatchError, TruncatedDataError, UnsupportedFormatError
from kcompact.records.batch import decode_batch, iter_batches, tail_kind
from kcompact.records.batch_encoding import encode_batch, encode_empty_batch, encode_records_batch
from kcompact.records.batch_header import (
    RECORD_BATCH_OVERHEAD,
    Compression,
    RecordBatch,
    TimestampType,
)
from kcompact.records.record import Header, Record, decode_records, encode_record, records_bytes
from tests.conftest import real_fixture


def _hex(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


# MemoryRecordsTest.testChecksum's batch: two records, base offset 0, CreateTime, no producer, leader epoch -1
WORKED_EXAMPLE = _hex("""
    0000000000000000 00000055 ffffffff 02 e58cf1ff 0000 00000001
    00000000000454c3 00000000000454c3 ffffffffffffffff ffff ffffffff 00000002
    20 00 00 00 08 6b657931 0c 76616c756531 00
    24 00 e1bf22 02 08 6b657932 0c 76616c756532 00
""")
WORKED_RECORDS = [Record(0, 283843, b"key1", b"value1"), Record(1, 1234, b"key2", b"value2")]

# DefaultRecordBatch.writeEmptyHeader: the RETAIN_EMPTY shell of base 15, last 37, pid 23423, epoch 145, seq 983
EMPTY_SHELL = _hex("""
    000000000000000f 00000031 0000000f 02 5d4e3d62 0000 00000016
    ffffffffffffffff 0000018bcfe56800 0000000000005b7f 0091 000003d7 00000000
""")


def _patched(data: bytes, position: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, position, value)
    return bytes(out)


def test_worked_example_encodes_byte_exact() -> None:
    assert encode_batch(WORKED_RECORDS, base_offset=0) == WORKED_EXAMPLE


def test_worked_example_decodes() -> None:
    batch = decode_batch(WORKED_EXAMPLE)
    assert (batch.position, batch.base_offset, batch.batch_length, batch.magic) == (0, 0, 85, 2)
    assert batch.crc == 3851219455 == batch.compute_crc()
    assert batch.crc_valid()
    assert (batch.base_timestamp, batch.max_timestamp, batch.records_count) == (283843, 283843, 2)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.partition_leader_epoch == -1
    assert (batch.size_in_bytes, batch.last_offset, batch.next_offset) == (97, 1, 2)
    assert batch.compression is Compression.NONE and batch.timestamp_type is TimestampType.CREATE_TIME
    assert not (batch.is_transactional or batch.is_control or batch.has_delete_horizon)
    assert batch.delete_horizon_ms is None and not batch.has_producer_id
    assert batch.last_sequence == -1
    assert bytes(batch.payload) == WORKED_EXAMPLE[RECORD_BATCH_OVERHEAD:]
    assert bytes(batch.buffer) == WORKED_EXAMPLE
    assert decode_records(batch) == WORKED_RECORDS


def test_empty_shell_matches_spec_hex() -> None:
    shell = decode_batch(EMPTY_SHELL)
    assert (shell.base_offset, shell.last_offset, shell.records_count) == (15, 37, 0)
    assert shell.crc_valid()
    assert encode_empty_batch(shell) == EMPTY_SHELL


def test_empty_shell_of_a_compressed_batch_with_horizon() -> None:
    original = decode_batch(encode_batch(
        [Record(20, 1_700_000_000_000, b"k", None), Record(30, 1_700_000_000_005, b"k", b"v")],
        base_offset=15, last_offset_delta=22, compression=Compression.GZIP,
        timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=1_700_000_000_000,
        producer_id=23423, producer_epoch=145, base_sequence=983, partition_leader_epoch=15,
        is_transactional=True, delete_horizon_ms=1_800_000_000_000))
    shell = decode_batch(encode_empty_batch(original))
    assert shell.size_in_bytes == RECORD_BATCH_OVERHEAD and shell.crc_valid()
    assert shell.compression is Compression.NONE and not shell.has_delete_horizon
    assert shell.timestamp_type is TimestampType.LOG_APPEND_TIME and shell.is_transactional
    assert (shell.base_timestamp, shell.max_timestamp) == (-1, 1_700_000_000_000)
    assert (shell.base_offset, shell.last_offset, shell.partition_leader_epoch) == (15, 37, 15)
    assert (shell.producer_id, shell.producer_epoch, shell.base_sequence) == (23423, 145, 983)


@pytest.mark.parametrize(
    ("base_sequence", "delta", "expected"),
    [(-1, 5, -1), (0, 5, 5), (2**31 - 1, 0, 2**31 - 1), (2**31 - 1, 1, 0), (2**31 - 3, 5, 2)],
)
def test_last_sequence_wraps_like_kafka(base_sequence: int, delta: int, expected: int) -> None:
    batch = decode_batch(encode_records_batch(
        b"", count=0, base_offset=0, last_offset_delta=delta, base_timestamp=-1,
        max_timestamp=-1, producer_id=1, producer_epoch=0, base_sequence=base_sequence))
    assert batch.last_sequence == expected
    assert batch.has_producer_id


def test_enum_labels() -> None:
    assert [c.label for c in Compression] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert int(TimestampType.NO_TIMESTAMP_TYPE) == -1 and int(TimestampType.LOG_APPEND_TIME) == 1


_records = st.lists(
    st.tuples(
        st.integers(0, 3),  # offset gap
        st.integers(-1, 2**42),  # timestamp
        st.none() | st.binary(max_size=12),
        st.none() | st.binary(max_size=12),
        st.lists(st.tuples(st.binary(max_size=6), st.none() | st.binary(max_size=6)),
                 max_size=3),
    ),
    min_size=1, max_size=6,
)


@given(
    records=_records, base_offset=st.integers(0, 2**40), codec=st.sampled_from(list(Compression)),
    log_append=st.booleans(), horizon=st.none() | st.integers(0, 2**42),
    producer=st.sampled_from([(-1, -1, -1), (0, 0, 0), (2**63 - 1, 32767, 2**31 - 1), (7, 3, 9)]),
    leader_epoch=st.integers(-1, 2**31 - 1), transactional=st.booleans(),
)
def test_batch_round_trip(
    records: list[tuple[int, int, bytes | None, bytes | None, list[tuple[bytes, bytes | None]]]],
    base_offset: int, codec: Compression, log_append: bool, horizon: int | None,
    producer: tuple[int, int, int], leader_epoch: int, transactional: bool,
) -> None:
    offset, built = base_offset, []
    for gap, timestamp, key, value, headers in records:
        offset += gap
        built.append(Record(offset, timestamp, key, value,
                            tuple(Header(k, v) for k, v in headers)))
    append_time = 2**41 if log_append else None
    data = encode_batch(
        built, base_offset=base_offset, compression=codec, timestamp_type=int(log_append),
        producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
        partition_leader_epoch=leader_epoch, is_transactional=transactional,
        delete_horizon_ms=horizon, max_timestamp=append_time)
    batch = decode_batch(b"\x00" * 3 + data, 3)
    assert batch.position == 3 and batch.size_in_bytes == len(data) and batch.crc_valid()
    assert (batch.compression, batch.timestamp_type) == (codec, TimestampType(int(log_append)))
    assert (batch.base_offset, batch.last_offset) == (base_offset, offset)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert (batch.partition_leader_epoch, batch.is_transactional) == (leader_epoch, transactional)
    assert batch.delete_horizon_ms == horizon and batch.records_count == len(built)
    expected_base = built[0].timestamp if horizon is None else horizon
    assert batch.base_timestamp == expected_base
    expected_max = append_time if log_append else max(r.timestamp for r in built)
    assert batch.max_timestamp == expected_max
    if log_append:
        built = [Record(r.offset, batch.max_timestamp, r.key, r.value, r.headers) for r in built]
    assert decode_records(batch) == built


def test_encode_batch_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([], base_offset=0)
    with pytest.raises(ValueError, match="needs max_timestamp"):
        encode_batch(WORKED_RECORDS, base_offset=0, timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(ValueError, match="compression codec"):
        encode_batch(WORKED_RECORDS, base_offset=0, compression=5)
    with pytest.raises(ValueError, match="out of range"):
        encode_batch(WORKED_RECORDS, base_offset=0, producer_epoch=40000)
    with pytest.raises(ValueError, match="delete horizon"):
        encode_records_batch(b"", count=0, base_offset=0, last_offset_delta=0, base_timestamp=5,
                             max_timestamp=5, delete_horizon_ms=6)


# --- corruption ---------------------------------------------------------------------------

def test_flipped_crc_byte_is_detected_but_still_decodes() -> None:
    data = bytearray(WORKED_EXAMPLE)
    data[18] ^= 0x01
    assert not decode_batch(bytes(data)).crc_valid()
    data = bytearray(WORKED_EXAMPLE)
    data[-3] ^= 0x40  # a record byte
    assert not decode_batch(bytes(data)).crc_valid()


def test_truncated_batch() -> None:
    with pytest.raises(TruncatedDataError, match="batch declares 97 bytes but only 96 remain"):
        decode_batch(WORKED_EXAMPLE[:-1])
    with pytest.raises(TruncatedDataError, match="batch declares 97 bytes but only 40 remain"):
        decode_batch(WORKED_EXAMPLE[:40])
    with pytest.raises(TruncatedDataError, match="header runs past the end") as info:
        decode_batch(b"\x00" * 5 + WORKED_EXAMPLE[:10], 5)
    assert info.value.position == 5


def test_batch_length_below_empty_batch() -> None:
    with pytest.raises(CorruptBatchError, match="expected >= 49, found 48") as info:
        decode_batch(_patched(WORKED_EXAMPLE, 8, ">i", 48))
    assert info.value.offset == 0


def test_negative_record_count() -> None:
    with pytest.raises(CorruptBatchError, match="negative record count"):
        decode_batch(_patched(WORKED_EXAMPLE, 57, ">i", -1))


@pytest.mark.parametrize(
    ("attributes", "fragment"),
    [(0x05, "unknown compression codec; expected 0..4, found 5"),
     (0x07, "found 7"),
     (0x80, "unknown attribute bits"),
     (0x0100, "found attributes 0x0100")],
)
def test_unsupported_attributes(attributes: int, fragment: str) -> None:
    with pytest.raises(UnsupportedFormatError, match=fragment):
        decode_batch(_patched(WORKED_EXAMPLE, 21, ">h", attributes))


def test_decode_batch_refuses_other_magic() -> None:
    with pytest.raises(UnsupportedFormatError, match="wrong magic; expected 2, found 1"):
        decode_batch(_patched(WORKED_EXAMPLE, 16, ">b", 1))


# --- framing walk -------------------------------------------------------------------------

def _log(*batches: bytes) -> bytes:
    return b"".join(batches)


def test_iter_batches_walks_positions() -> None:
    second = encode_batch([Record(2, 5, None, b"x")], base_offset=2)
    data = _log(WORKED_EXAMPLE, second, EMPTY_SHELL)
    batches = list(iter_batches(data))
    assert [b.position for b in batches] == [0, 97, 97 + len(second)]
    assert [b.base_offset for b in batches] == [0, 2, 15]
    middle = list(iter_batches(data, start=97, end=97 + len(second)))
    assert [b.base_offset for b in middle] == [2]


def test_iter_batches_over_mmap(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_log(WORKED_EXAMPLE, EMPTY_SHELL))
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        batches = list(iter_batches(mm))
        assert [b.base_offset for b in batches] == [0, 15]
        assert all(isinstance(b, RecordBatch) and b.crc_valid() for b in batches)
        del batches  # release the views before the mmap closes


def test_size_field_below_minimum_overhead() -> None:
    data = _log(WORKED_EXAMPLE, _patched(EMPTY_SHELL, 8, ">i", 13))
    walk = iter_batches(data)
    next(walk)
    with pytest.raises(CorruptBatchError, match="smaller than minimum record overhead") as info:
        next(walk)
    assert info.value.position == 97 and info.value.offset == 15


@pytest.mark.parametrize(("magic", "shown"), [(3, "found 3"), (-1, "found -1")])
def test_invalid_magic_in_framing(magic: int, shown: str) -> None:
    with pytest.raises(CorruptBatchError, match=f"invalid magic byte; expected 0, 1 or 2, {shown}"):
        list(iter_batches(_patched(WORKED_EXAMPLE, 16, ">b", magic)))


def test_entry_running_past_end() -> None:
    with pytest.raises(TruncatedDataError, match="entry declares 61 bytes but only 60 remain"):
        list(iter_batches(_log(WORKED_EXAMPLE, EMPTY_SHELL[:-1])))
    with pytest.raises(TruncatedDataError, match="only 50 remain") as info:
        list(iter_batches(_log(WORKED_EXAMPLE, EMPTY_SHELL), end=97 + 50))
    assert info.value.position == 97


def test_zero_tail_ends_walk_quietly_and_other_tails_raise() -> None:
    padded = _log(WORKED_EXAMPLE, bytes(16))
    assert [b.base_offset for b in iter_batches(padded)] == [0]
    assert tail_kind(padded, 97, len(padded)) == "zero-padding"
    torn = _log(WORKED_EXAMPLE, EMPTY_SHELL[:16])
    with pytest.raises(TruncatedDataError, match="partial entry at the end") as info:
        list(iter_batches(torn))
    assert info.value.position == 97
    assert tail_kind(torn, 97, len(torn)) == "truncated"
    assert tail_kind(WORKED_EXAMPLE, 97, 97) == "none"


def test_iter_batches_dispatches_legacy_entries() -> None:
    legacy = pytest.importorskip("kcompact.records.legacy")
    v1_message = _hex("0000000000000000 00000020 0685b364 01 00 00000000000454c3"
                      "00000004 6b657931 00000006 76616c756531")  # LegacyRecord v0
    entries = list(iter_batches(_log(v1_message, EMPTY_SHELL)))
    assert isinstance(entries[0], legacy.LegacyEntry) and entries[0].magic == 1
    assert isinstance(entries[1], RecordBatch) and entries[1].position == len(v1_message)


# --- broker-written data ------------------------------------------------------------------

def test_real_fixtures_decode_and_reencode_byte_exact() -> None:
    logs = sorted(real_fixture().glob("*/*/*.log"))
    exact = 0
    for path in logs:
        for batch in iter_batches(path.read_bytes()):
            assert isinstance(batch, RecordBatch), path
            assert batch.crc_valid(), (path, batch.position)
            records = decode_records(batch)
            if batch.timestamp_type is TimestampType.LOG_APPEND_TIME:
                continue  # readers overwrite record timestamps, deltas are not recoverable
            raw = b"".join(
                encode_record(r.offset - batch.base_offset, r.timestamp - batch.base_timestamp,
                              r.key, r.value, r.headers) for r in records)
            assert raw == bytes(records_bytes(batch)), (path, batch.position)
            if batch.compression is Compression.NONE and records:
                again = encode_batch(
                    records, base_offset=batch.base_offset,
                    last_offset_delta=batch.last_offset_delta, max_timestamp=batch.max_timestamp,
                    producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                    base_sequence=batch.base_sequence, is_control=batch.is_control,
                    partition_leader_epoch=batch.partition_leader_epoch,
                    is_transactional=batch.is_transactional,
                    delete_horizon_ms=batch.delete_horizon_ms)
                assert again == bytes(batch.buffer), (path, batch.position)
                exact += 1
    assert exact > 20000  # the fixtures hold ~23.8k uncompressed batches


@pytest.mark.parametrize("codec", range(8))
def test_compression_of_every_codec_bit_pattern(codec: int) -> None:
    decoded = decode_batch(encode_batch([Record(0, 0, b"k", b"v")], base_offset=0), 0)
    batch = dataclasses.replace(decoded, attributes=0x30 | codec)  # control and transactional bits set
    if codec <= 4:
        assert batch.compression is Compression(codec)
    else:  # decode_batch refuses these first; the property itself still does not invent a codec
        with pytest.raises(ValueError, match="is not a valid Compression"):
            _ = batch.compression
