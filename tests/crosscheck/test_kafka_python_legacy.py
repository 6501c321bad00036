"""kafka-python, an independent implementation: its legacy messages and codec framing vs ours.

kafka-python writes v0/v1 entries with ``LegacyRecordBatchBuilder`` (compressed wrappers get
offset 0 and timestamp 0, as a producer sends them) and reads them with ``LegacyRecordBatch``; its
``kafka.codec`` helpers implement Kafka's xerial snappy, lz4 (both header-checksum flavours), gzip
and zstd framing. Snappy needs python-snappy and magic-0 lz4 needs xxhash on its side.
"""

from __future__ import annotations

import random

import pytest
from kafka import codec as kcodec
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kcompact.records.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress, decompress
from kcompact.records.legacy import decode_legacy_entry, legacy_records
from kcompact.records.record import Record
from tests.encoders import encode_legacy_message, encode_legacy_wrapper

ROWS = [
    (1_700_000_000_000, b"key-0", b"value-0"),
    (1_700_000_000_005, None, b"no key"),
    (1_699_999_999_999, b"tombstone", None),
    (1_700_000_000_010, b"big", bytes(range(256)) * 300),
    (-1, b"", b""),
]


def needs(codec: int, magic: int) -> None:
    if codec == SNAPPY:
        pytest.importorskip("snappy", reason="kafka-python's snappy needs python-snappy")
    if codec == LZ4 and magic == 0:
        pytest.importorskip("xxhash", reason="kafka-python's magic-0 lz4 needs xxhash")


def their_batch(magic: int, codec: int) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=2**30)
    for offset, (timestamp, key, value) in enumerate(ROWS):
        assert builder.append(offset, timestamp=timestamp, key=key, value=value) is not None
    return bytes(builder.build())


def their_records(data: bytes) -> list[tuple[int, int | None, bytes | None, bytes | None, bool]]:
    out = []
    for batch in MemoryRecords(data):
        assert batch.validate_crc()
        out += [(r.offset, r.timestamp, r.key, r.value, r.validate_crc()) for r in batch]
    return out


@pytest.mark.parametrize("codec", (NONE, GZIP, SNAPPY, LZ4))
@pytest.mark.parametrize("magic", (0, 1))
def test_we_read_what_kafka_python_writes(magic: int, codec: int) -> None:
    needs(codec, magic)
    data = their_batch(magic, codec)
    ours, position = [], 0
    while position < len(data):
        entry = decode_legacy_entry(data, position)
        assert entry.crc_valid() and entry.magic == magic and entry.compression == codec
        assert entry.timestamp_type == (0 if magic else -1)
        ours += legacy_records(entry)
        position += entry.size_in_bytes
    expected = [Record(o, ts if magic else -1, k, v) for o, (ts, k, v) in enumerate(ROWS)]
    assert ours == expected
    theirs = [(o, -1 if ts is None else ts, k, v) for o, ts, k, v, _ in their_records(data)]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in ours] == theirs
    if codec != NONE:  # a producer's wrapper: offset 0 (the broker assigns), timestamp 0
        wrapper = decode_legacy_entry(data)
        assert (wrapper.offset, wrapper.key, wrapper.records_count) == (0, None, len(ROWS))
        assert wrapper.timestamp == (0 if magic else -1)


@pytest.mark.parametrize("codec", (NONE, GZIP, SNAPPY, LZ4))
@pytest.mark.parametrize("magic", (0, 1))
def test_kafka_python_reads_what_we_write(magic: int, codec: int) -> None:
    needs(codec, magic)
    records = [Record(1000 + o, ts if magic else -1, k, v) for o, (ts, k, v) in enumerate(ROWS)]
    if codec == NONE:
        data = b"".join(encode_legacy_message(offset=r.offset, magic=magic, key=r.key,
                                              value=r.value, timestamp=r.timestamp)
                        for r in records)
    else:
        data = encode_legacy_wrapper(records, magic=magic, compression=codec)
        wrapper = LegacyRecordBatch(data, magic)
        assert wrapper.compression_type == codec and wrapper.validate_crc()
    theirs = their_records(data)
    assert all(crc_ok for *_, crc_ok in theirs)
    expected_ts = [r.timestamp if magic else None for r in records]
    assert [(o, ts, k, v) for o, ts, k, v, _ in theirs] == [
        (r.offset, ts, r.key, r.value) for r, ts in zip(records, expected_ts, strict=True)]


PAYLOADS = [b"x", bytes(100_000), random.Random(5).randbytes(70_000) + b"abc" * 30_000]


@pytest.mark.parametrize("payload", PAYLOADS, ids=("1B", "zeros", "mixed"))
def test_codec_framing_agrees_with_kafka_codec(payload: bytes) -> None:
    assert kcodec.gzip_decode(compress(GZIP, payload)) == payload
    assert decompress(GZIP, kcodec.gzip_encode(payload)) == payload
    assert kcodec.lz4_decode(compress(LZ4, payload, magic=1)) == payload
    assert decompress(LZ4, kcodec.lz4_encode(payload), magic=2) == payload  # content-size flag
    assert kcodec.zstd_decode(compress(ZSTD, payload)) == payload
    assert decompress(ZSTD, kcodec.zstd_encode(payload)) == payload


@pytest.mark.parametrize("payload", PAYLOADS, ids=("1B", "zeros", "mixed"))
def test_snappy_xerial_agrees_with_kafka_codec(payload: bytes) -> None:
    needs(SNAPPY, 2)
    assert kcodec.snappy_decode(compress(SNAPPY, payload)) == payload
    assert decompress(SNAPPY, kcodec.snappy_encode(payload)) == payload
    assert decompress(SNAPPY, kcodec.snappy_encode(payload, xerial_compatible=False)) == payload
    assert compress(SNAPPY, payload)[:16] == kcodec.snappy_encode(payload)[:16]


@pytest.mark.parametrize("payload", PAYLOADS, ids=("1B", "zeros", "mixed"))
def test_old_kafka_lz4_header_checksum_agrees(payload: bytes) -> None:
    needs(LZ4, 0)
    ours = compress(LZ4, payload, magic=0)
    assert kcodec.lz4_decode_old_kafka(ours) == payload
    theirs = kcodec.lz4_encode_old_kafka(payload)
    assert theirs[6] == ours[6]  # the same broken HC byte over magic+FLG+BD
    assert decompress(LZ4, theirs, magic=0) == payload


def test_kafka_python_reads_our_log_append_time_wrapper() -> None:
    records = [Record(7 + o, ts, k, v) for o, (ts, k, v) in enumerate(ROWS)]
    data = encode_legacy_wrapper(records, magic=1, compression=GZIP, timestamp_type=1,
                                 log_append_time=1_800_000_000_000)
    wrapper = LegacyRecordBatch(data, 1)
    assert wrapper.timestamp_type == 1 and wrapper.validate_crc()
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in wrapper] == [
        (r.offset, 1_800_000_000_000, 1) for r in records]
