"""CRC-32C and CRC-32: published check values, chaining, buffer types, and a bitwise reference."""

from __future__ import annotations

import mmap
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.records.crc import crc32, crc32c, crc32c_package
from kcompact.records.scan import accel
from tests.records.scan.accel_compare import needs_c


def test_check_values() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32(b"123456789") == 0xCBF43926
    assert crc32c(b"") == 0 == crc32(b"")


def test_iscsi_check_values() -> None:
    # RFC 3720 (iSCSI) B.4, the CRC-32C test vectors Kafka's Crc32C tests use as well
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C


def _bitwise_crc(data: bytes, reflected_polynomial: int) -> int:
    """The textbook bit-at-a-time reflected CRC-32: an oracle independent of every library."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (reflected_polynomial if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_kafka_checksum_of_worked_example() -> None:
    # MemoryRecordsTest.testChecksum's batch: bytes 21.. of the two-record batch checksum to Kafka's 3851219455
    covered = bytes.fromhex(
        "0000 00000001 00000000000454c3 00000000000454c3 ffffffffffffffff ffff ffffffff 00000002"
        "2000000008 6b657931 0c 76616c756531 00"
        "2400e1bf2202 08 6b657932 0c 76616c756532 00".replace(" ", ""))
    assert crc32c(covered) == 3851219455


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_crc32c_chains(head: bytes, tail: bytes) -> None:
    assert crc32c(tail, crc32c(head)) == crc32c(head + tail)


@given(st.binary(max_size=200))
def test_crcs_match_the_bitwise_reference(data: bytes) -> None:
    # kafka-python's calc_crc32c is the same crc32c package when it is installed, and crc32 is zlib's:
    # compare with the polynomials themselves instead (Castagnoli 0x1EDC6F41, IEEE 0x04C11DB7, reflected)
    assert crc32c(data) == _bitwise_crc(data, 0x82F63B78)
    assert crc32c_package(data) == _bitwise_crc(data, 0x82F63B78)
    assert crc32(memoryview(data)) == _bitwise_crc(data, 0xEDB88320)


def test_accepts_memoryview_slices_and_mmap() -> None:
    with mmap.mmap(-1, 12) as mapped:
        mapped[3:12] = b"123456789"
        assert crc32c(memoryview(mapped)[3:]) == 0xE3069283
        assert crc32(memoryview(mapped)[3:]) == 0xCBF43926


@needs_c
@given(st.binary(max_size=3000), st.integers(0, 15), st.booleans())
def test_the_kernels_own_crc32c_is_the_packages(data: bytes, skip: int, portable: bool) -> None:
    """The C kernels check and write batch CRCs with no call into Python (``common.h``): the CPU's
    instruction and the table path both equal the ``crc32c`` package, at every alignment and length."""
    view = memoryview(data)[min(skip, len(data)):]
    assert accel.crc32c(view, portable) == crc32c_package(view)
    assert accel.crc32c(b"123456789", portable) == 0xE3069283


def test_without_the_kernels_the_package_computes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``KCOMPACT_NO_ACCEL`` (or no compiler): the checksum is the package's, chained or not."""
    monkeypatch.setattr(accel, "enabled", False)
    assert accel.crc32c(b"123456789") is None
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"56789", crc32c(b"1234")) == 0xE3069283


@needs_c
@pytest.mark.parametrize("size", [767, 768, 769, 3 * 4096 - 1, 3 * 4096, 3 * 4096 + 1, 3 * 4096 + 3 * 256 + 9,
                                  100_003, 1 << 20])
@pytest.mark.parametrize("skip", [0, 5])
def test_the_kernels_three_streams_join_to_the_packages_crc(size: int, skip: int) -> None:
    """Batches long enough for the x86-64 path's three streams (three blocks of 256 or of 4,096 bytes, joined by
    the zero-bytes operator), at the block edges and unaligned: the same checksum as the package."""
    data = memoryview(random.Random(size).randbytes(size + skip))[skip:]
    assert accel.crc32c(data) == crc32c_package(data) == accel.crc32c(data, True)
