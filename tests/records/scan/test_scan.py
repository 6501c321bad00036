"""scan_records / scan_keys: same answers as the full decoders, and Kafka's framing errors.

Two independent references: kafka-python's DefaultRecordBatch reader (builds with its own builder),
and kcompact's own record.decode_records, which also gets hand-made records with non-minimal
varints, non-zero attribute bytes and multi-byte fields that exercise the slow paths.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kcompact.errors import CorruptRecordError, KcompactError
from kcompact.records.batch import decode_batch
from kcompact.records.batch_encoding import encode_records_batch
from kcompact.records.batch_header import RecordBatch
from kcompact.records.record import Header, Record, decode_records, encode_record, records_bytes
from kcompact.records.scan import RecordColumns, scan_keys, scan_records
from tests.conftest import real_fixture

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
INT32_MAX = (1 << 31) - 1
HEADER_SIZE = 61

# --- building records by hand (non-minimal varints, attribute bytes) -------------------------


def _raw_varint(value: int, bits: int, pad: int = 0) -> bytes:
    """Zig-zag ``value`` in ``bits`` bits, written with up to ``pad`` redundant zero groups."""
    raw = ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)
    groups = []
    while True:
        groups.append(raw & 0x7F)
        raw >>= 7
        if not raw:
            break
    groups += [0] * min(pad, (bits + 6) // 7 - len(groups))  # Kafka reads at most 5 / 10 bytes
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def _varint(value: int, pad: int = 0) -> bytes:
    return _raw_varint(value, 32, pad)


def _varlong(value: int, pad: int = 0) -> bytes:
    return _raw_varint(value, 64, pad)


def _raw_record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
    headers: Sequence[tuple[bytes, bytes | None]] = (), *, attributes: int = 0,
    null_length: int = -1, pads: Sequence[int] = (0,) * 6,
) -> bytes:
    body = bytes([attributes]) + _varlong(timestamp_delta, pads[1]) + _varint(offset_delta, pads[2])
    body += _varint(null_length, pads[3]) if key is None else _varint(len(key), pads[3]) + key
    body += _varint(null_length, pads[4]) if value is None else _varint(len(value), pads[4]) + value
    body += _varint(len(headers), pads[5])
    for header_key, header_value in headers:
        body += _varint(len(header_key)) + header_key
        body += _varint(-1) if header_value is None else _varint(len(header_value)) + header_value
    return _varint(len(body), pads[0]) + body


def _batch(raw: bytes, count: int, *, base_offset: int = 0, base_timestamp: int = 0,
           log_append_time: int | None = None) -> RecordBatch:
    buf = encode_records_batch(
        raw, count=count, base_offset=base_offset, last_offset_delta=max(count - 1, 0),
        base_timestamp=base_timestamp,
        max_timestamp=base_timestamp if log_append_time is None else log_append_time,
        timestamp_type=0 if log_append_time is None else 1)
    return decode_batch(buf)


def _scan_batch(batch: RecordBatch) -> RecordColumns:
    lat = batch.max_timestamp if batch.timestamp_type == 1 else None
    return scan_records(records_bytes(batch), base_offset=batch.base_offset,
                        base_timestamp=batch.base_timestamp, count=batch.records_count,
                        log_append_time=lat)


def _assert_same(columns: RecordColumns, records: list[Record]) -> None:
    assert columns.count == len(records)
    assert list(columns.offsets) == [r.offset for r in records]
    assert list(columns.timestamps) == [r.timestamp for r in records]
    assert [columns.key(i) for i in range(columns.count)] == [r.key for r in records]
    assert list(columns.value_null) == [int(r.value is None) for r in records]


def _assert_keys_same(batch: RecordBatch, records: list[Record]) -> None:
    offsets, keys = scan_keys(records_bytes(batch), base_offset=batch.base_offset,
                              count=batch.records_count)
    assert list(offsets) == [r.offset for r in records]
    assert keys == [r.key for r in records]
    assert all(type(k) is bytes for k in keys if k is not None)


# --- strategies --------------------------------------------------------------------------------

_keys = st.none() | st.binary(max_size=200)
_headers = st.lists(st.tuples(st.binary(max_size=20), st.none() | st.binary(max_size=20)),
                    max_size=3)


@st.composite
def _hand_records(draw: st.DrawFn) -> tuple[bytes, int, int, int]:
    """(raw records, count, base_offset, base_timestamp), varints padded at random."""
    count = draw(st.integers(0, 12))
    base_offset = draw(st.integers(0, 1 << 62))
    base_timestamp = draw(st.integers(INT64_MIN, INT64_MAX))
    raw = b""
    for _ in range(count):
        pads = [draw(st.integers(0, 2)) for _ in range(6)]
        raw += _raw_record(
            draw(st.integers(-(1 << 31), INT32_MAX) | st.integers(0, 300)),
            draw(st.integers(INT64_MIN, INT64_MAX) | st.integers(-20000, 20000)),
            draw(_keys), draw(_keys), draw(_headers),
            attributes=draw(st.integers(0, 255)),
            null_length=draw(st.sampled_from([-1, -2, -(1 << 31)])), pads=pads)
    return raw, count, base_offset, base_timestamp


@st.composite
def _kafka_python_batch(draw: st.DrawFn) -> tuple[bytes, int]:
    """A batch built by kafka-python's builder, and the base offset patched into it."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 30)
    first = draw(st.integers(-(1 << 61), 1 << 61))
    for _ in range(draw(st.integers(1, 15))):
        builder.append(
            draw(st.integers(0, INT32_MAX)),
            first + draw(st.integers(-100_000, 100_000) | st.integers(-(1 << 61), 1 << 61)),
            draw(_keys), draw(_keys),
            [(k.decode("latin-1"), v) for k, v in draw(_headers) if v is not None])
    buf = builder.build()
    base_offset = draw(st.integers(0, 1 << 62))
    struct.pack_into(">q", buf, 0, base_offset)
    return bytes(buf), base_offset


# --- equality with the full decoders -------------------------------------------------------------


@given(_kafka_python_batch())
def test_equals_kafka_python_reader(built: tuple[bytes, int]) -> None:
    buf, base_offset = built
    theirs = list(DefaultRecordBatch(buf))
    header = decode_batch(buf)
    columns = _scan_batch(header)
    assert list(columns.offsets) == [r.offset for r in theirs]
    assert list(columns.timestamps) == [r.timestamp for r in theirs]
    assert [columns.key(i) for i in range(columns.count)] == [r.key for r in theirs]
    assert list(columns.value_null) == [int(r.value is None) for r in theirs]
    offsets, keys = scan_keys(buf[HEADER_SIZE:], base_offset=base_offset,
                              count=header.records_count)
    assert list(offsets) == [r.offset for r in theirs]
    assert keys == [r.key for r in theirs]


@given(_hand_records())
def test_equals_decode_records_on_hand_made_records(made: tuple[bytes, int, int, int]) -> None:
    raw, count, base_offset, base_timestamp = made
    batch = _batch(raw, count, base_offset=base_offset, base_timestamp=base_timestamp)
    records = decode_records(batch)
    _assert_same(_scan_batch(batch), records)
    _assert_keys_same(batch, records)


@given(_hand_records(), st.integers(INT64_MIN, INT64_MAX))
def test_log_append_time_gives_every_record_the_batch_time(
    made: tuple[bytes, int, int, int], append_time: int
) -> None:
    raw, count, base_offset, base_timestamp = made
    batch = _batch(raw, count, base_offset=base_offset, base_timestamp=base_timestamp,
                   log_append_time=append_time)
    columns = _scan_batch(batch)
    _assert_same(columns, decode_records(batch))
    assert list(columns.timestamps) == [append_time] * count


@pytest.mark.parametrize(("base_timestamp", "deltas", "expected"), [
    (INT64_MAX, [1, -(1 << 40)], [INT64_MIN, INT64_MAX - (1 << 40)]),  # base near the edge
    (1 << 62, [0, 3 << 61], [1 << 62, (5 << 61) - (1 << 64)]),  # a long delta past the edge
])
def test_timestamp_sum_wraps_like_java(
    base_timestamp: int, deltas: list[int], expected: list[int]
) -> None:
    raw = b"".join(_raw_record(i, d, b"k", b"v") for i, d in enumerate(deltas))
    batch = _batch(raw, len(deltas), base_timestamp=base_timestamp)
    columns = _scan_batch(batch)
    assert list(columns.timestamps) == expected
    _assert_same(columns, decode_records(batch))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(_hand_records(), st.data())
def test_mutated_bytes_scan_fails_only_where_decode_fails(
    made: tuple[bytes, int, int, int], data: st.DataObject
) -> None:
    raw, count, base_offset, base_timestamp = made
    mutated = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        if mutated:
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(mutated)))
    mutated = mutated[:cut] + data.draw(st.binary(max_size=3)) + mutated[cut:]
    count += data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    batch = _batch(bytes(mutated), max(count, 0), base_offset=base_offset,
                   base_timestamp=base_timestamp)
    try:
        records = decode_records(batch)
    except CorruptRecordError:
        records = None
    try:
        columns = _scan_batch(batch)
    except CorruptRecordError:
        assert records is None, "scan_records refused records the full decoder accepts"
        return
    if records is not None:
        _assert_same(columns, records)
        _assert_keys_same(batch, records)
    offsets, _ = scan_keys(bytes(mutated), base_offset=base_offset, count=max(count, 0))
    assert offsets == columns.offsets  # scan_keys accepts what scan_records accepts


# --- the spans -----------------------------------------------------------------------------------


def test_spans_point_at_the_record_parts() -> None:
    records = [encode_record(0, 0, b"k0", b"v0"), encode_record(3, -5, None, None),
               encode_record(7, 300_000, b"x" * 70, b"y" * 300, [Header(b"h", b"z")])]
    data = b"".join(records)
    columns = scan_records(data, base_offset=100, base_timestamp=1000, count=3)
    position = 0
    for i, record in enumerate(records):
        assert columns.record_starts[i] == position
        position += len(record)
        assert columns.record_ends[i] == position
        assert data[columns.record_starts[i] : columns.record_ends[i]] == record
    assert list(columns.offsets) == [100, 103, 107]
    assert list(columns.timestamps) == [1000, 995, 301_000]
    assert list(columns.key_starts)[1] == -1 and list(columns.key_ends)[1] == -1
    assert [columns.key(i) for i in range(3)] == [b"k0", None, b"x" * 70]
    assert list(columns.value_null) == [0, 1, 0]
    # body_starts is the keyLength varint: 2 ("k0"), 1 (null), 140 (70 bytes, 2-byte varint)
    assert [data[columns.body_starts[i]] for i in range(3)] == [0x04, 0x01, 0x8C]
    assert data[columns.key_starts[2] - 2 : columns.key_starts[2]] == b"\x8c\x01"


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_any_buffer_gives_bytes_keys(kind: type) -> None:
    data = encode_record(0, 0, b"key", b"value") + encode_record(1, 0, None, b"v")
    buf = kind(data)
    columns = scan_records(buf, base_offset=0, base_timestamp=0, count=2)
    assert type(columns.data) is bytes and columns.data == data
    assert type(columns.key(0)) is bytes
    offsets, keys = scan_keys(buf, base_offset=5, count=2)
    assert list(offsets) == [5, 6] and keys == [b"key", None] and type(keys[0]) is bytes


def test_empty_batch() -> None:
    columns = scan_records(b"", base_offset=9, base_timestamp=-1, count=0)
    assert columns.count == 0 and len(columns.offsets) == 0 and columns.value_null == bytearray()
    assert scan_keys(b"", base_offset=9, count=0) == (columns.offsets, [])


def test_columns_are_int64_arrays() -> None:
    columns = scan_records(encode_record(0, 0, b"k", None), base_offset=INT64_MAX,
                           base_timestamp=INT64_MIN, count=1)
    for name in ("offsets", "timestamps", "key_starts", "key_ends", "record_starts",
                 "body_starts", "record_ends"):
        assert getattr(columns, name).typecode == "q", name
    assert columns.offsets[0] == INT64_MAX and columns.timestamps[0] == INT64_MIN


# --- corruption: exact class, message, position relative to data --------------------------------

_GOOD = b"".join(encode_record(i, i, b"key-%d" % i, b"v" * 10) for i in range(3))
_SECOND = len(encode_record(0, 0, b"key-0", b"v" * 10))
_THIRD = _SECOND + len(encode_record(1, 1, b"key-1", b"v" * 10))

_CORRUPTIONS = [
    # (data, count, message fragment, position)
    (_GOOD[:-1], 3, "record 2 length out of range", _THIRD),
    (_GOOD + b"\x00", 3, "bytes left over after the last record", len(_GOOD)),
    (_GOOD, 4, "records end early; expected 4 records, found 3", len(_GOOD)),
    (_GOOD, 10, "record count larger than the data can hold; expected at most 9 records", 0),
    (_GOOD, -1, "negative record count", 0),
    (_GOOD[:_SECOND] + b"\x01" + _GOOD[_SECOND + 1 :], 3, "record 1 length out of range",
     _SECOND),
    (b"\x0a" + bytes(6), 1, "record 0 length out of range; expected 6..6 bytes, found 5", 0),
    (_raw_record(0, 0, b"abc", b"") .replace(b"\x06abc", b"\x0eabc"), 1,
     "record 0 key runs past the end of the record", 0),
    (b"\xff\xff\xff\xff\xff\x01" + bytes(8), 1, "varint does not terminate", 0),
    (b"\x1c\x00" + b"\xff" * 10 + bytes(3), 1, "varlong does not terminate", 2),
    (_GOOD + b"\x0c\x00\x80\x00\x80\x00\x80", 4, "record 3 runs past the end of the data",
     len(_GOOD)),
]


@pytest.mark.parametrize(("data", "count", "fragment", "position"), _CORRUPTIONS)
def test_corruption_raises_corrupt_record_error(
    data: bytes, count: int, fragment: str, position: int
) -> None:
    with pytest.raises(CorruptRecordError, match=fragment) as caught:
        scan_records(data, base_offset=0, base_timestamp=0, count=count)
    assert caught.value.position == position and caught.value.path is None
    with pytest.raises(CorruptRecordError, match=fragment):
        scan_keys(data, base_offset=0, count=count)


def test_value_past_the_record_is_caught_by_scan_records() -> None:
    record = _raw_record(0, 0, b"k", b"vv").replace(b"\x04vv", b"\x08vv")
    with pytest.raises(CorruptRecordError, match="record 0 value runs past the end of the record"):
        scan_records(record, base_offset=0, base_timestamp=0, count=1)
    assert scan_keys(record, base_offset=0, count=1)[1] == [b"k"]  # values are not read there


def test_offset_past_int64_is_refused() -> None:
    data = encode_record(1, 0, b"k", b"v")
    with pytest.raises(CorruptRecordError, match="record 0 offset out of range"):
        scan_records(data, base_offset=INT64_MAX, base_timestamp=0, count=1)
    with pytest.raises(CorruptRecordError, match="record 0 offset out of range"):
        scan_keys(data, base_offset=INT64_MAX, count=1)


def test_random_garbage_never_escapes_as_a_python_error() -> None:
    rng = random.Random(7)
    refused = 0
    for _ in range(3000):
        data = rng.randbytes(rng.randrange(0, 40))
        count = rng.randrange(0, 6)
        try:
            scan_keys(data, base_offset=0, count=count)
        except KcompactError:
            refused += 1
        try:
            scan_records(data, base_offset=0, base_timestamp=0, count=count)
        except KcompactError:
            refused += 1
    assert refused > 3000  # mostly refused, and always as a KcompactError


# --- the broker's own files --------------------------------------------------------------------


def _real_batches(compressed: bool) -> list[RecordBatch]:
    """Every v2 batch of every broker-written segment (legacy entries are not scan's input)."""
    batches = []
    for log in sorted(real_fixture().rglob("*.log")):
        buf = log.read_bytes()
        position = 0
        while len(buf) - position >= HEADER_SIZE:
            (size,) = struct.unpack_from(">i", buf, position + 8)
            if buf[position + 16] == 2:
                batch = decode_batch(buf, position)
                if (batch.compression != 0) == compressed:
                    batches.append(batch)
            position += size + 12
    return batches


@pytest.mark.parametrize("compressed", [False, True], ids=["uncompressed", "compressed"])
def test_broker_written_batches_scan_like_decode_records(compressed: bool) -> None:
    batches = _real_batches(compressed)
    assert batches, "expected the real fixtures to hold such batches"
    for batch in batches:
        records = decode_records(batch)
        _assert_same(_scan_batch(batch), records)
        _assert_keys_same(batch, records)
