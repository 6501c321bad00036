"""Zig-zag varint/varlong and unsigned varint: encodings as Kafka's ByteUtils writes them, length boundaries,
corruption."""

from __future__ import annotations

import mmap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptRecordError
from kcompact.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)
from tests.encoders import encode_unsigned_varint

# (value, encoding) pairs as Kafka's ByteUtils writes them
SPEC_EXAMPLES = [
    (0, "00"), (-1, "01"), (1, "02"), (4, "08"), (6, "0c"), (16, "20"), (18, "24"),
    (-282609, "e1bf22"),
]

# (value, encoded length): zig-zag doubles magnitudes, so each 7-bit group boundary sits at
# 2**(7k-1) on the positive side and one further out on the negative side.
VARINT_SIZES = [
    (0, 1), (63, 1), (-64, 1), (64, 2), (-65, 2),
    (2**13 - 1, 2), (-(2**13), 2), (2**13, 3), (-(2**13) - 1, 3),
    (2**20 - 1, 3), (2**20, 4), (-(2**20), 3), (-(2**20) - 1, 4),
    (2**27 - 1, 4), (2**27, 5), (-(2**27), 4), (-(2**27) - 1, 5),
    (INT32_MAX, 5), (INT32_MIN, 5),
]
VARLONG_SIZES = VARINT_SIZES + [
    (2**31, 5), (-(2**31) - 1, 5), (2**34, 6), (2**55 - 1, 8), (2**55, 9),
    (2**62 - 1, 9), (2**62, 10), (-(2**62), 9), (-(2**62) - 1, 10),
    (INT64_MAX, 10), (INT64_MIN, 10),
]

BOUNDARY_INTS = st.sampled_from([v for v, _ in VARINT_SIZES]).flatmap(
    lambda v: st.sampled_from([x for x in (v - 1, v, v + 1) if INT32_MIN <= x <= INT32_MAX]))


@pytest.mark.parametrize(("value", "hex_bytes"), SPEC_EXAMPLES)
def test_spec_examples(value: int, hex_bytes: str) -> None:
    encoded = bytes.fromhex(hex_bytes)
    assert encode_varint(value) == encoded
    assert encode_varlong(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))
    assert decode_varlong(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(("value", "size"), VARINT_SIZES)
def test_varint_length_boundaries(value: int, size: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size
    assert decode_varint(encoded, 0) == (value, size)


@pytest.mark.parametrize(("value", "size"), VARLONG_SIZES)
def test_varlong_length_boundaries(value: int, size: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size
    assert decode_varlong(encoded, 0) == (value, size)


@given(st.one_of(st.integers(INT32_MIN, INT32_MAX), BOUNDARY_INTS), st.binary(max_size=4))
def test_varint_round_trip_at_any_position(value: int, prefix: bytes) -> None:
    encoded = encode_varint(value)
    assert decode_varint(prefix + encoded + b"\xff", len(prefix)) == (
        value, len(prefix) + len(encoded))


@given(st.one_of(st.integers(INT64_MIN, INT64_MAX),
                 st.sampled_from([v for v, _ in VARLONG_SIZES])))
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert decode_varlong(memoryview(encoded), 0) == (value, len(encoded))


@given(st.integers(0, 2**32 - 1))
def test_unsigned_varint_round_trip(value: int) -> None:
    encoded = encode_unsigned_varint(value)
    assert decode_unsigned_varint(encoded, 0) == (value, len(encoded))


def test_unsigned_varint_has_no_zig_zag() -> None:
    assert encode_unsigned_varint(1) == b"\x01"
    assert encode_unsigned_varint(300) == b"\xac\x02"
    assert encode_unsigned_varint(2**32 - 1) == b"\xff\xff\xff\xff\x0f"


def test_decodes_from_mmap() -> None:
    with mmap.mmap(-1, 16) as mapped:
        mapped[5:8] = bytes.fromhex("e1bf22")
        assert decode_varint(mapped, 5) == (-282609, 8)


def test_non_minimal_encodings_are_accepted_like_kafka() -> None:
    assert decode_varint(b"\x80\x80\x00", 0) == (0, 3)
    assert decode_varlong(b"\x82\x80\x80\x80\x80\x80\x80\x80\x80\x00", 0) == (1, 10)


def test_bits_beyond_32_are_dropped_like_javas_int_shift() -> None:
    # Kafka's readVarint shifts the fifth byte into a 32-bit int: the top 3 of its 7 bits vanish.
    assert decode_varint(b"\xff\xff\xff\xff\x7f", 0) == (INT32_MIN, 5)
    assert decode_varint(b"\xfe\xff\xff\xff\x0f", 0) == (INT32_MAX, 5)


def test_unterminated_varint() -> None:
    with pytest.raises(CorruptRecordError, match="does not terminate; expected at most 5") as info:
        decode_varint(b"\x00\x80\x80\x80\x80\x80\x01", 1)
    assert info.value.position == 1


def test_unterminated_varlong() -> None:
    with pytest.raises(CorruptRecordError, match="expected at most 10 bytes") as info:
        decode_varlong(b"\x80" * 11, 0)
    assert info.value.position == 0


def test_varint_running_off_the_buffer() -> None:
    with pytest.raises(CorruptRecordError, match="runs past the end") as info:
        decode_varint(b"\x01\x02\x80\x80", 2)
    assert info.value.position == 2
    with pytest.raises(CorruptRecordError, match="found end of data after 0 bytes"):
        decode_varlong(b"", 0)
    with pytest.raises(CorruptRecordError, match="unsigned varint runs past the end"):
        decode_unsigned_varint(b"\xff", 0)


@pytest.mark.parametrize(
    ("encoder", "value"),
    [(encode_varint, INT32_MAX + 1), (encode_varint, INT32_MIN - 1),
     (encode_varlong, INT64_MAX + 1), (encode_varlong, INT64_MIN - 1),
     (encode_unsigned_varint, -1), (encode_unsigned_varint, 2**32)],
)
def test_out_of_range_values_are_refused(encoder: object, value: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        encoder(value)  # type: ignore[operator]
