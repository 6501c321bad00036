"""The two checksums of Kafka's log formats (Kafka's ``Crc32C`` for v2 batches, ``Crc32`` for legacy messages).

* v2 batches: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) over bytes 21..end of the batch,
  computed with the ``crc32c`` package, which uses the CPU's crc32c instruction where it exists —
  this runs over every byte of every batch a verify touches. The C kernels compute the same checksum
  themselves (``kcompact/_native/common.h``), this function their reference.
* v0/v1 messages: CRC-32 (IEEE, the zlib one) over magic..end of the message.

Both return the checksum as an unsigned 32-bit int, the way the header stores it.
"""

from __future__ import annotations

import zlib

import crc32c as _crc32c

from kcompact.records.varint import Buffer


def crc32c(data: Buffer, value: int = 0) -> int:
    """CRC-32C of ``data``, optionally continuing a running checksum.

    Args:
        data: the bytes to checksum (any buffer-protocol object, e.g. a memoryview of an mmap).
        value: the CRC-32C of the bytes that precede ``data``, to checksum in pieces.

    Returns:
        The checksum, 0..2**32-1; ``crc32c(b"123456789") == 0xE3069283``.
    """
    return int(_crc32c.crc32c(data, value))


def crc32(data: Buffer) -> int:
    """CRC-32 (IEEE, zlib) of ``data``.

    Args:
        data: the bytes to checksum.

    Returns:
        The checksum, 0..2**32-1; ``crc32(b"123456789") == 0xCBF43926``.
    """
    return zlib.crc32(data) & 0xFFFFFFFF
