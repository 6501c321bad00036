"""CRC-32C and CRC-32: check values, chaining, buffer types, and kafka-python agreement."""

from __future__ import annotations

import mmap
import zlib

from hypothesis import given
from hypothesis import strategies as st
from kafka.record.util import calc_crc32c

from kcompact.records.crc import crc32, crc32c


def test_check_values() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32(b"123456789") == 0xCBF43926
    assert crc32c(b"") == 0 == crc32(b"")


def test_kafka_checksum_of_worked_example() -> None:
    # spec §1.9: bytes 21.. of the two-record batch checksum to Kafka's 3851219455
    covered = bytes.fromhex(
        "0000 00000001 00000000000454c3 00000000000454c3 ffffffffffffffff ffff ffffffff 00000002"
        "2000000008 6b657931 0c 76616c756531 00"
        "2400e1bf2202 08 6b657932 0c 76616c756532 00".replace(" ", ""))
    assert crc32c(covered) == 3851219455


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_crc32c_chains(head: bytes, tail: bytes) -> None:
    assert crc32c(tail, crc32c(head)) == crc32c(head + tail)


@given(st.binary(max_size=500))
def test_crc32c_matches_kafka_python(data: bytes) -> None:
    assert crc32c(data) == calc_crc32c(data)
    assert crc32(memoryview(data)) == zlib.crc32(data)


def test_accepts_memoryview_slices_and_mmap() -> None:
    with mmap.mmap(-1, 12) as mapped:
        mapped[3:12] = b"123456789"
        assert crc32c(memoryview(mapped)[3:]) == 0xE3069283
        assert crc32(memoryview(mapped)[3:]) == 0xCBF43926
