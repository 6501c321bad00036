"""Cross-check of the v2 core against kafka-python, an independent implementation.

Both directions: kafka-python's ``DefaultRecordBatchBuilder`` writes and kcompact reads, comparing
every header field and record; kcompact writes and kafka-python's ``MemoryRecords`` reads,
validating the CRC and comparing every record. Control batches are written by hand with
``encode_control_batch`` and read back as kafka-python ``ControlRecord``s.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import encode_varint as kp_encode_varint

from kcompact.records.batch import decode_batch, iter_batches
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.batch_header import Compression, RecordBatch, TimestampType
from kcompact.records.control import ControlRecordType
from kcompact.records.record import Header, Record, decode_records
from kcompact.records.varint import encode_varlong
from tests.encoders import encode_control_batch

CODECS = list(Compression)


def _kp_build(codec: int, transactional: bool, rows: list[tuple[Any, ...]]) -> bytes:
    producer = (42, 7, 100) if transactional else (-1, -1, -1)
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional,
        producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
        batch_size=1 << 20)
    for offset, timestamp, key, value, headers in rows:
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


def _assert_same_header(ours: RecordBatch, theirs: DefaultRecordBatch) -> None:
    assert (ours.base_offset, ours.partition_leader_epoch, ours.magic, ours.crc) == (
        theirs.base_offset, theirs.leader_epoch, theirs.magic, theirs.crc)
    assert (ours.attributes, ours.compression, ours.timestamp_type) == (
        theirs.attributes, theirs.compression_type, theirs.timestamp_type)
    assert (ours.is_transactional, ours.is_control) == (
        theirs.is_transactional, theirs.is_control_batch)
    assert (ours.last_offset_delta, ours.last_offset, ours.next_offset) == (
        theirs.last_offset_delta, theirs.last_offset, theirs.next_offset)
    assert (ours.base_timestamp, ours.max_timestamp) == (
        theirs.first_timestamp, theirs.max_timestamp)
    assert (ours.producer_id, ours.producer_epoch, ours.base_sequence, ours.last_sequence) == (
        theirs.producer_id, theirs.producer_epoch, theirs.base_sequence, theirs.last_sequence)
    assert (ours.records_count, ours.size_in_bytes) == (
        theirs.records_count, theirs.size_in_bytes)


def _assert_same_records(ours: list[Record], theirs: DefaultRecordBatch) -> None:
    their_records = list(theirs)
    assert len(ours) == len(their_records)
    for mine, other in zip(ours, their_records, strict=True):
        assert (mine.offset, mine.timestamp, mine.key, mine.value) == (
            other.offset, other.timestamp, other.key, other.value)
        assert [(h.key.decode(), h.value) for h in mine.headers] == list(other.headers)


ROWS = [
    (0, 1_700_000_000_000, b"key-0", b"value " * 40, []),
    (1, 1_700_000_000_009, None, b"value " * 40, [("trace", b"abc"), ("empty", None)]),
    (2, 1_699_999_999_000, b"key-2", None, []),
    (5, 1_700_000_000_001, None, None, [("h\u00e9", b"")]),
]


@pytest.mark.parametrize("codec", CODECS, ids=[c.label for c in CODECS])
@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_we_read_what_kafka_python_writes(codec: Compression, transactional: bool) -> None:
    data = _kp_build(codec, transactional, ROWS)
    ours = decode_batch(data)
    assert ours.compression is codec  # the builder kept compression (data is compressible)
    assert ours.crc_valid()
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    _assert_same_header(ours, theirs)
    _assert_same_records(decode_records(ours), theirs)


_text = st.text(max_size=6)
_bytes = st.none() | st.binary(max_size=30)


@given(
    rows=st.lists(st.tuples(st.integers(0, 2), st.integers(-1, 2**42), _bytes, _bytes,
                            st.lists(st.tuples(_text, _bytes), max_size=3)),
                  min_size=1, max_size=6),
    codec=st.sampled_from(CODECS), log_append=st.booleans(),
    horizon=st.none() | st.integers(0, 2**42), transactional=st.booleans(),
    base_offset=st.integers(0, 2**40),
)
def test_kafka_python_reads_what_we_write(
    rows: list[tuple[Any, ...]], codec: Compression, log_append: bool, horizon: int | None,
    transactional: bool, base_offset: int,
) -> None:
    offset, records = base_offset, []
    for gap, timestamp, key, value, headers in rows:
        offset += gap
        records.append(Record(offset, timestamp, key, value,
                              tuple(Header(k.encode(), v) for k, v in headers)))
    data = encode_batch(
        records, base_offset=base_offset, compression=codec, timestamp_type=int(log_append),
        max_timestamp=2**41 if log_append else None, delete_horizon_ms=horizon,
        producer_id=9 if transactional else -1, producer_epoch=1 if transactional else -1,
        base_sequence=0 if transactional else -1, is_transactional=transactional,
        partition_leader_epoch=3)
    theirs = MemoryRecords(data + data).next_batch()
    assert isinstance(theirs, DefaultRecordBatch) and theirs.validate_crc()
    ours = decode_batch(data)
    _assert_same_header(ours, theirs)
    _assert_same_records(decode_records(ours), theirs)


@pytest.mark.parametrize("kind", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_kafka_python_reads_our_control_batches(kind: ControlRecordType) -> None:
    data = encode_control_batch(offset=500, timestamp=1_700_000_000_000, producer_id=42,
                                producer_epoch=7, control_type=kind, coordinator_epoch=3)
    batch = MemoryRecords(data).next_batch()
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert (record.offset, record.version, record.type) == (500, 0, kind)
    assert (record.abort, record.commit) == (
        kind is ControlRecordType.ABORT, kind is ControlRecordType.COMMIT)


def test_log_of_mixed_batches_walks_the_same() -> None:
    parts = [
        _kp_build(Compression.LZ4, False, ROWS),
        encode_control_batch(offset=10, timestamp=5, producer_id=42, producer_epoch=7,
                             control_type=ControlRecordType.COMMIT),
        encode_batch([Record(11, 6, b"k", b"v")], base_offset=11,
                     timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=77),
    ]
    log = b"".join(parts)
    ours = list(iter_batches(log))
    theirs = list(MemoryRecords(log))
    assert [b.size_in_bytes for b in ours] == [len(p) for p in parts]
    for mine, other in zip(ours, theirs, strict=True):
        assert isinstance(mine, RecordBatch)
        _assert_same_header(mine, other)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_matches_kafka_python(value: int) -> None:
    out = bytearray()
    kp_encode_varint(value, out.append)
    assert encode_varlong(value) == bytes(out)
