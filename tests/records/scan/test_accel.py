"""The compiled kernels (records/_accel.c) against the pure-Python reference, on every input.

What a user relies on: with or without the extension, scan_keys, scan_records and filter_v2_batch
give the same values, the same bytes, and on bad input the same exception class, message and
position. Each test runs the public function twice (``accel.enabled`` off, then on) and compares
the outcomes; the raw kernels are also checked to fail exactly where the reference fails (with
its position) and never to decline input the reference accepts, so the fast path is the one that
runs. Tests of the C path skip when the extension is not built, except
:func:`test_extension_is_built_when_required` (CI sets ``KCOMPACT_REQUIRE_ACCEL=1``).
"""

from __future__ import annotations

import mmap
import os
import random
import subprocess
import sys
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcompact.errors import CorruptRecordError
from kcompact.log.offset_map import DIGEST_LAYOUT, key_digests
from kcompact.records.batch import decode_batch, iter_batches
from kcompact.records.batch_encoding import encode_records_batch
from kcompact.records.batch_header import RecordBatch
from kcompact.records.filter import BatchRetention, filter_v2_batch
from kcompact.records.record import records_bytes
from kcompact.records.scan import RecordColumns, accel, scan_key_digests, scan_keys, scan_records
from tests.conftest import real_fixture
from tests.records.scan.accel_compare import Outcome, accel_switched, both, needs_c

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
INT32_MAX = (1 << 31) - 1
INT32_MIN = -(1 << 31)
HEADER_SIZE = 61

# --- building record sections (non-minimal varints, attributes, headers) ------------------------


def _varint(value: int, bits: int = 32, pad: int = 0, junk: int = 0) -> bytes:
    """Zig-zag ``value`` in ``bits`` bits, with up to ``pad`` redundant zero groups.

    When padded to the longest form (5 bytes, varlong 10), ``junk`` goes into the last byte's
    bits above the integer's width: Kafka (and the reference) drop them, as Java's shifts do.
    """
    raw = ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)
    longest = (bits + 6) // 7
    groups = []
    while True:
        groups.append(raw & 0x7F)
        raw >>= 7
        if not raw:
            break
    groups += [0] * min(pad, longest - len(groups))
    if len(groups) == longest:
        groups[-1] |= (junk << (bits - 7 * (longest - 1))) & 0x7F
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


_keys = st.none() | st.binary(max_size=40) | st.sampled_from([b"", b"k" * 200, b"x" * 20_000])
_headers = st.lists(st.tuples(st.binary(max_size=8), st.none() | st.binary(max_size=8)), max_size=2)


@st.composite
def _record(draw: st.DrawFn) -> bytes:
    pads = [draw(st.integers(0, 2) | st.just(9)) for _ in range(6)]
    junk = [draw(st.integers(0, 127)) for _ in range(6)]
    timestamp_delta = draw(st.integers(-300, 300) | st.integers(INT64_MIN, INT64_MAX))
    offset_delta = draw(st.integers(0, 300) | st.integers(INT32_MIN, INT32_MAX))
    body = bytes([draw(st.integers(0, 255))])
    body += _varint(timestamp_delta, 64, pads[1], junk[1])
    body += _varint(offset_delta, 32, pads[2], junk[2])
    for k, part in ((3, draw(_keys)), (4, draw(_keys))):
        null_length = draw(st.sampled_from([-1, -2, INT32_MIN]))
        body += _varint(null_length, 32, pads[k], junk[k]) if part is None else (
            _varint(len(part), 32, pads[k], junk[k]) + part)
    headers = draw(_headers)
    body += _varint(len(headers), 32, pads[5])
    for key, value in headers:
        body += _varint(len(key)) + key
        body += _varint(-1) if value is None else _varint(len(value)) + value
    return _varint(len(body), 32, pads[0], junk[0]) + body


_records = st.lists(_record(), max_size=8)
_base_offsets = st.integers(0, 1000) | st.integers(INT64_MIN, INT64_MAX) | st.sampled_from(
    [INT64_MAX, INT64_MIN, INT64_MAX - 5, 1 << 64, -(1 << 64)])
_timestamps = st.integers(-1000, 1 << 41) | st.integers(INT64_MIN, INT64_MAX) | st.sampled_from(
    [INT64_MAX, INT64_MIN, 1 << 70])
_append_times = st.none() | st.integers(INT64_MIN, INT64_MAX) | st.just(1 << 64)


_MIN_OFFSETS = (INT64_MIN, 2)  # scan_key_digests: every keyed record, or those from offset 2


def _scanboth(data: object, count: int, base_offset: int, base_timestamp: int,
               log_append_time: int | None) -> tuple[Outcome, Outcome]:
    keys = both(lambda: scan_keys(data, base_offset=base_offset, count=count))  # type: ignore[arg-type]
    for min_offset in _MIN_OFFSETS:
        both(lambda m=min_offset: scan_key_digests(  # type: ignore[misc]
            data, base_offset=base_offset, count=count, min_offset=m))  # type: ignore[arg-type]
    return keys, both(lambda: scan_records(
        data, base_offset=base_offset, base_timestamp=base_timestamp,  # type: ignore[arg-type]
        count=count, log_append_time=log_append_time))


def _kernel_agrees(data: bytes, count: int, base_offset: int, base_timestamp: int) -> None:
    """The raw kernels fail exactly where the reference fails, at its position, else return."""
    kernels = accel.kernels
    assert kernels is not None
    calls: list[tuple[Callable[[], object], Callable[[], object]]] = [
        (lambda: kernels.scan_keys(data, base_offset, count),
         lambda: scan_keys(data, base_offset=base_offset, count=count)),
        *[(lambda m=m: kernels.scan_key_digests(data, base_offset, count, m),
           lambda m=m: scan_key_digests(data, base_offset=base_offset, count=count, min_offset=m))
          for m in _MIN_OFFSETS],
        (lambda: kernels.scan_records(data, base_offset, base_timestamp, count, None),
         lambda: scan_records(data, base_offset=base_offset, base_timestamp=base_timestamp,
                              count=count)),
    ]
    for call, reference in calls:
        expected: int | None = None
        with accel_switched(False):
            try:
                reference()
            except CorruptRecordError as err:
                expected = err.position
        found: int | None = None
        try:
            call()
        except kernels.ScanError as err:
            found = err.args[0]
        assert found == expected


# --- valid and mutated record sections ----------------------------------------------------------


@needs_c
@given(_records, _base_offsets, _timestamps, _append_times)
def test_valid_sections_scan_identically(
    records: list[bytes], base_offset: int, base_timestamp: int, log_append_time: int | None
) -> None:
    data = b"".join(records)
    keys, columns = _scanboth(data, len(records), base_offset, base_timestamp, log_append_time)
    if abs(base_offset) < (1 << 62) and log_append_time is None:
        assert keys[0] == "returned" and columns[0] == "returned"


@needs_c
@given(_records, st.integers(0, 1 << 40), st.integers(INT64_MIN, INT64_MAX))
def test_kernels_take_every_valid_section_themselves(
    records: list[bytes], base_offset: int, base_timestamp: int
) -> None:
    _kernel_agrees(b"".join(records), len(records), base_offset, base_timestamp)


@needs_c
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(_records, st.data())
def test_mutated_sections_fail_identically(records: list[bytes], data: st.DataObject) -> None:
    mutated = bytearray(b"".join(records))
    for _ in range(data.draw(st.integers(0, 4))):
        if mutated:
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(mutated)))
    if data.draw(st.booleans()):
        mutated = mutated[:cut]
    else:
        mutated[cut:cut] = data.draw(st.binary(max_size=3))
    count = max(0, len(records) + data.draw(st.sampled_from([0, 0, -1, 1])))
    base_offset = data.draw(st.sampled_from([0, INT64_MAX - 3, INT64_MIN]))
    _scanboth(bytes(mutated), count, base_offset, 0, None)
    _kernel_agrees(bytes(mutated), count, base_offset, 0)


_GOOD_RECORDS = [  # key "key" value "v"; null key, null value; empty key, empty value
    _varint(len(body)) + body
    for body in (b"\x00\x00\x00\x06key\x02v\x00", b"\x00\x02\x02\x01\x01\x00",
                 b"\x00\x04\x04\x00\x00\x00")
]
_GOOD = b"".join(_GOOD_RECORDS)
_BIG = _varint(26) + b"\x00\x00\x00" + _varint(20) + b"k" * 20 + b"\x01\x00"  # 27 bytes
_CUTS = [  # (data, count, base_offset): each error of the reference, and where it is reported
    (_GOOD, 3, 0), (_GOOD, 4, 0), (_GOOD, 2, 0), (_GOOD, 22, 0), (_GOOD, -1, 0),
    (_GOOD[:-1], 3, 0), (_GOOD + b"\x00", 3, 0), (_GOOD, 3, INT64_MAX - 1),
    (_GOOD, 3, INT64_MIN), (b"\x8a\x00" + bytes(6), 1, 0),  # non-minimal 2-byte length
    (_BIG + b"\x80", 2, 0),  # a length's second byte past the data
    (_BIG + b"\x0c\x00\x00\x00\x02\x00\x80", 2, 0),  # a value length's second byte past it
    (b"\x80\x80\x80\x80\x80\x01" + bytes(8), 1, 0),  # varint that does not terminate
    (b"\x1c\x00" + b"\xff" * 10 + bytes(3), 1, 0),  # varlong that does not terminate
    (b"\x0c\x00" + b"\x80" * 5, 1, 0),  # varlong running past the data (reported at it)
    (b"\x0c\x00\x00\x00\x0e\x00\x00", 1, 0),  # key past the record
    (b"\x0c\x00\x00\x00\x06\x00\x00\x00", 1, 0),  # key one byte past the record
    (b"\x14\x00\x00\x80\x80\x80\x80\x70\x01\x01\x00", 1, 5),  # bits past 32 are dropped
    (b"\x1e\x00" + b"\x80" * 9 + b"\x7f\x00\x01\x01\x00", 1, 0),  # and past 64
    (b"\x0c\x00\x00\x00\x01\x80\x80\x80", 1, 0),  # value length past the data
    (b"\x0c\x00\x00\x00\x00\x04\x00" + b"\x0c" + bytes(6), 2, 0),  # value past the record
    (b"\x0c\x00\x00\x00\x81\x80\x80\x80\x0f\x00", 1, 0),  # null keyLength past the record
    (b"", 0, 0), (b"\x00", 0, 0),
]


@needs_c
@pytest.mark.parametrize(("data", "count", "base_offset"), _CUTS)
def test_each_reference_error_is_reported_identically(
    data: bytes, count: int, base_offset: int
) -> None:
    _scanboth(data, count, base_offset, 0, None)
    _kernel_agrees(data, count, base_offset, 0)


@needs_c
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview, "mmap", "slice", "strided", "q-array"])
def test_every_buffer_kind_scans_identically(kind: object) -> None:
    data: object
    if kind == "mmap":
        data = mmap.mmap(-1, len(_GOOD))
        data[:] = _GOOD
    elif kind == "strided":
        data = memoryview(_GOOD + _GOOD)[::2]  # not contiguous: the kernels decline it
    elif kind == "q-array":
        data = array("q", (_GOOD + bytes(8 - len(_GOOD) % 8)))  # len() counts items, not bytes
    elif kind == "slice":
        data = memoryview(bytearray(b"\xff" + _GOOD))[1:]
    else:
        data = kind(_GOOD)  # type: ignore[operator]
    _scanboth(data, 3, 7, 100, None)
    _scanboth(data, 3, 7, 100, 555)


@needs_c
@pytest.mark.parametrize("argument", [True, 2.0, 1 << 64, "0"])
def test_odd_arguments_behave_like_the_reference(argument: object) -> None:
    _scanboth(_GOOD, 3, argument, 0, None)  # type: ignore[arg-type]
    _scanboth(_GOOD, 3, 0, argument, None)  # type: ignore[arg-type]
    _scanboth(_GOOD, 3, 0, 0, argument)  # type: ignore[arg-type]
    _scanboth(_GOOD, argument, 0, 0, None)  # type: ignore[arg-type]
    both(lambda: scan_key_digests(_GOOD, base_offset=0, count=3, min_offset=argument))  # type: ignore[arg-type]


@needs_c
@given(_records, st.integers(-5, 400))
def test_key_digests_are_the_offset_maps_digests_of_the_wanted_keys(
    records: list[bytes], min_offset: int
) -> None:
    """scan_key_digests hashes in C what key_digests hashes in Python: the keyed records at or above
    min_offset (Kafka's buildOffsetMapForSegment), XXH3-128 in DIGEST_LAYOUT."""
    data = b"".join(records)
    offsets, keys = scan_keys(data, base_offset=0, count=len(records))
    wanted = [i for i, key in enumerate(keys) if key is not None and offsets[i] >= min_offset]
    with accel_switched(True):
        found_offsets, digests = scan_key_digests(data, base_offset=0, count=len(records),
                                                  min_offset=min_offset)
    assert array("q", found_offsets).tolist() == [offsets[i] for i in wanted]
    hi, lo = key_digests([keys[i] for i in wanted])  # type: ignore[misc]
    packed = np.frombuffer(digests, dtype=DIGEST_LAYOUT)
    assert packed["hi"].tolist() == hi.tolist() and packed["lo"].tolist() == lo.tolist()


@needs_c
def test_columns_data_is_the_given_bytes_object() -> None:
    data = bytes(_GOOD)
    with accel_switched(True):
        assert scan_records(data, base_offset=0, base_timestamp=0, count=3).data is data
        copied = scan_records(bytearray(data), base_offset=0, base_timestamp=0, count=3).data
    assert type(copied) is bytes and copied == data


# --- the rebuild --------------------------------------------------------------------------------


def _batch(records: Sequence[bytes], *, base_offset: int, base_timestamp: int,
           log_append_time: int | None, compression: int = 0,
           horizon: int | None = None) -> RecordBatch:
    buf = encode_records_batch(
        b"".join(records), count=len(records), base_offset=base_offset,
        last_offset_delta=max(len(records) - 1, 0), base_timestamp=base_timestamp,
        max_timestamp=base_timestamp if log_append_time is None else log_append_time,
        timestamp_type=0 if log_append_time is None else 1, compression=compression,
        producer_id=7, producer_epoch=1, base_sequence=3, partition_leader_epoch=5,
        delete_horizon_ms=horizon)
    return decode_batch(buf)


def _scan_batch(batch: RecordBatch) -> RecordColumns:
    with accel_switched(False):
        return scan_records(
            records_bytes(batch), base_offset=batch.base_offset,
            base_timestamp=batch.base_timestamp, count=batch.records_count,
            log_append_time=batch.max_timestamp if batch.timestamp_type == 1 else None)


def _filterboth(batch: RecordBatch, columns: RecordColumns, keep: Sequence[int],
                 horizon: int | None) -> Outcome:
    return both(lambda: filter_v2_batch(
        batch, columns, keep, retention=BatchRetention.DELETE_EMPTY, delete_horizon_ms=horizon))


@needs_c
@given(st.lists(_record(), min_size=1, max_size=8), st.integers(0, 1 << 62),
       st.integers(-(1 << 50), 1 << 50) | st.integers(INT64_MIN, INT64_MAX),
       st.none() | st.integers(INT64_MIN, INT64_MAX), st.none() | st.integers(-1, 1 << 45),
       st.data())
def test_rebuild_is_byte_identical_for_any_kept_subset(
    records: list[bytes], base_offset: int, base_timestamp: int, log_append_time: int | None,
    horizon: int | None, data: st.DataObject,
) -> None:
    batch = _batch(records, base_offset=base_offset, base_timestamp=base_timestamp,
                   log_append_time=log_append_time)
    columns = _scan_batch(batch)
    keep = sorted(data.draw(st.sets(st.integers(0, len(records) - 1), min_size=1)))
    _filterboth(batch, columns, keep, horizon)
    rebuilt = accel.rebuild_records(
        columns.data, (columns.body_starts, columns.record_ends, columns.offsets,
                       columns.timestamps), keep, base_offset, horizon)
    deltas_fit = all(INT64_MIN <= columns.timestamps[i] - (
        columns.timestamps[keep[0]] if horizon is None else horizon) <= INT64_MAX for i in keep)
    assert (rebuilt is not None) == deltas_fit  # the C path is the one that ran


@needs_c
@pytest.mark.parametrize("keep", [[2, 0], [1, 1], [-1], [0, 3], [0, 1.0], (0, 2), range(2), []])
def test_rebuild_of_odd_keep_lists_behaves_like_the_reference(keep: Sequence[int]) -> None:
    batch = _batch([*_GOOD_RECORDS], base_offset=10,
                   base_timestamp=1000, log_append_time=None)
    _filterboth(batch, _scan_batch(batch), keep, None)


@needs_c
@pytest.mark.parametrize(("column", "value"), [
    ("offsets", 10 + (1 << 31)), ("offsets", 10 - (1 << 31) - 1), ("offsets", INT64_MIN),
    ("timestamps", INT64_MIN), ("timestamps", INT64_MAX), ("body_starts", -1),
    ("body_starts", 10**6), ("record_ends", 10**6), ("record_ends", 0),
])
def test_rebuild_of_out_of_range_columns_fails_like_the_reference(column: str, value: int) -> None:
    batch = _batch([*_GOOD_RECORDS], base_offset=10,
                   base_timestamp=1000, log_append_time=None)
    columns = _scan_batch(batch)
    getattr(columns, column)[1] = value
    _filterboth(batch, columns, [0, 1, 2], None)
    _filterboth(batch, columns, [0, 1, 2], 5)


@needs_c
@pytest.mark.parametrize("compression", [1, 2, 3, 4])
def test_rebuild_of_compressed_batches_is_identical(compression: int) -> None:
    records = [_varint(len(body)) + body for body in
               (b"\x00\x00\x00\x06key\x02v\x00", b"\x00\x04\x02\x06kez\x01\x00")] * 3
    batch = _batch(records, base_offset=3, base_timestamp=9, log_append_time=None,
                   compression=compression, horizon=9)
    columns = _scan_batch(batch)
    outcome = _filterboth(batch, columns, [1, 2, 5], 9)
    assert outcome[0] == "returned"


# --- broker-written batches ---------------------------------------------------------------------


def _real_batches() -> list[RecordBatch]:
    batches = []
    for log in sorted(real_fixture().rglob("*.log")):
        batches += [b for b in iter_batches(log.read_bytes()) if isinstance(b, RecordBatch)]
    return batches


@needs_c
def test_every_broker_written_batch_scans_and_rebuilds_identically() -> None:
    rng = random.Random(11)
    batches = _real_batches()
    assert len(batches) > 1000, "expected the real fixtures' ~24 000 v2 batches"
    for batch in batches:
        data = records_bytes(batch)
        lat = batch.max_timestamp if batch.timestamp_type == 1 else None
        keys, columns = _scanboth(data, batch.records_count, batch.base_offset,
                                   batch.base_timestamp, lat)
        assert keys[0] == columns[0] == "returned"
        _kernel_agrees(bytes(data), batch.records_count, batch.base_offset,
                       batch.base_timestamp)
        if batch.records_count:
            keep = sorted(rng.sample(range(batch.records_count),
                                     rng.randint(1, batch.records_count)))
            horizon = rng.choice([None, batch.base_timestamp + 10])
            assert _filterboth(batch, _scan_batch(batch), keep, horizon)[0] == "returned"


# --- the switch ---------------------------------------------------------------------------------


def _enabled_in_child(env: dict[str, str]) -> str:
    code = "from kcompact.records.scan import accel; print(accel.enabled)"
    clean = {k: v for k, v in os.environ.items() if k != accel.NO_ACCEL_ENV}
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, check=True,
                          capture_output=True, text=True, cwd=Path(__file__).parents[3])
    return done.stdout.strip()


@needs_c
def test_no_accel_environment_variable_forces_pure_python() -> None:
    assert _enabled_in_child({}) == "True"
    assert _enabled_in_child({accel.NO_ACCEL_ENV: "0"}) == "True"
    assert _enabled_in_child({accel.NO_ACCEL_ENV: "1"}) == "False"


def test_switched_off_the_kernels_are_not_called(monkeypatch: pytest.MonkeyPatch) -> None:
    class Exploding:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"kernel {name} used while accel.enabled is False")

    monkeypatch.setattr(accel, "kernels", Exploding())
    monkeypatch.setattr(accel, "enabled", False)
    batch = _batch(_GOOD_RECORDS[:2], base_offset=0, base_timestamp=0,
                   log_append_time=None)
    columns = scan_records(b"".join(_GOOD_RECORDS[:2]), base_offset=0, base_timestamp=0, count=2)
    assert scan_keys(b"".join(_GOOD_RECORDS[:2]), base_offset=0, count=2)[1] == [b"key", None]
    out = filter_v2_batch(batch, columns, [1], retention=BatchRetention.DELETE_EMPTY,
                          delete_horizon_ms=None)
    assert out.records_kept == 1


def test_extension_is_built_when_required() -> None:
    """CI sets KCOMPACT_REQUIRE_ACCEL=1: there the fast path must be the one under test."""
    if os.environ.get("KCOMPACT_REQUIRE_ACCEL", "") in ("", "0"):
        pytest.skip("KCOMPACT_REQUIRE_ACCEL is not set: the pure-Python fallback is allowed")
    assert accel.kernels is not None, f"kcompact.records.scan._accel did not import: {accel.import_error}"
    if os.environ.get(accel.NO_ACCEL_ENV, "") in ("", "0"):
        assert accel.enabled, "the extension imported but the scan and the filter do not use it"
