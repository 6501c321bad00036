"""The two checksums of Kafka's log formats (Kafka's ``Crc32C`` for v2 batches, ``Crc32`` for legacy messages).

* v2 batches: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) over bytes 21..end of the batch,
  computed by the C kernels (``kcompact/_native/common.h``: the CPU's crc32c instruction where it exists)
  where they are built and on, else — and to continue a running checksum — by the ``crc32c`` package,
  their reference (``tests/records/test_crc.py`` holds the two equal). The package is imported on first
  use only: its import (``importlib.metadata`` and what that pulls in) cost a clean more CPU than all
  its checksums.
* v0/v1 messages: CRC-32 (IEEE, the zlib one) over magic..end of the message.

Both return the checksum as an unsigned 32-bit int, the way the header stores it.
"""

from __future__ import annotations

import zlib
from types import ModuleType

from kcompact.records.varint import Buffer

_package: ModuleType | None = None  # the crc32c package, once imported


def crc32c(data: Buffer, value: int = 0) -> int:
    """CRC-32C of ``data``, optionally continuing a running checksum.

    Args:
        data: the bytes to checksum (any buffer-protocol object, e.g. a memoryview of an mmap).
        value: the CRC-32C of the bytes that precede ``data``, to checksum in pieces.

    Returns:
        The checksum, 0..2**32-1; ``crc32c(b"123456789") == 0xE3069283``.
    """
    if value == 0:
        from kcompact.records.scan import accel  # not at import: records.scan imports this module

        kernel = accel.crc32c(data)
        if kernel is not None:
            return kernel
    return crc32c_package(data, value)


def crc32c_package(data: Buffer, value: int = 0) -> int:
    """:func:`crc32c` by the ``crc32c`` package alone (the kernels' reference)."""
    global _package
    if _package is None:
        import crc32c as package

        _package = package
    return int(_package.crc32c(data, value))


def crc32(data: Buffer) -> int:
    """CRC-32 (IEEE, zlib) of ``data``.

    Args:
        data: the bytes to checksum.

    Returns:
        The checksum, 0..2**32-1; ``crc32(b"123456789") == 0xCBF43926``.
    """
    return zlib.crc32(data) & 0xFFFFFFFF
