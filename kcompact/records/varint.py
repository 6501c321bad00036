"""Zig-zag varints and varlongs, as Kafka writes them inside v2 records (Kafka's ``ByteUtils``).

Why a module of its own: every field of a v2 record except its attribute byte is a variable-length
integer, so these few functions run once per field of every record a full decode touches.

Wire layout (Kafka's ``ByteUtils``)::

    signed value v  --zig-zag-->  unsigned u = (v << 1) ^ (v >> 31)      (varint, 32-bit)
                                  unsigned u = (v << 1) ^ (v >> 63)      (varlong, 64-bit)
    u  -->  base-128 groups, least significant first; bit 7 of a byte = "another byte follows"

    0 -> 00    -1 -> 01    1 -> 02    64 -> 80 01    -282609 -> e1 bf 22

A varint must end within 5 bytes and a varlong within 10. Like Kafka, the decoder accepts
non-minimal encodings and keeps only the low 32 (64) bits of what it read, which is what Java's
fixed-width shifts do; the encoders always write the minimal form.

The unsigned helpers carry no zig-zag step; Kafka's flexible-version message schemas (KRaft metadata
records) use them for lengths and tagged-field counts.

Decoders take any buffer indexable by byte (``bytes``, ``bytearray``, ``memoryview``, ``mmap``) and a
position, and return ``(value, next_position)``. Malformed input raises
:class:`~kcompact.errors.CorruptRecordError` with the position where the varint starts, relative to
that buffer.
"""

from __future__ import annotations

import mmap
from typing import TypeAlias

from kcompact.errors import CorruptRecordError

Buffer: TypeAlias = "bytes | bytearray | memoryview | mmap.mmap"
"""Anything the records layer reads from: indexable by byte, sliceable, buffer protocol."""

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1


def _encode_unsigned(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode_unsigned(buf: Buffer, position: int, max_bytes: int, kind: str) -> tuple[int, int]:
    result = 0
    shift = 0
    index = position
    end = len(buf)
    while True:
        if index >= end:
            raise CorruptRecordError(
                f"{kind} runs past the end of the data; expected a terminating byte, "
                f"found end of data after {index - position} bytes",
                position=position,
            )
        byte = buf[index]
        index += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, index
        shift += 7
        if index - position >= max_bytes:
            raise CorruptRecordError(
                f"{kind} does not terminate; expected at most {max_bytes} bytes, "
                f"found a continuation bit on byte {max_bytes}",
                position=position,
            )


def _check_range(value: int, low: int, high: int, kind: str) -> None:
    if not low <= value <= high:
        raise ValueError(f"{kind} out of range; expected {low}..{high}, found {value}")


def encode_varint(value: int) -> bytes:
    """Encode a signed 32-bit integer as a zig-zag varint.

    Args:
        value: an integer in the int32 range.

    Returns:
        The minimal encoding, 1 to 5 bytes.

    Raises:
        ValueError: ``value`` does not fit in an int32.
    """
    _check_range(value, INT32_MIN, INT32_MAX, "varint")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & _MASK32)


def encode_varlong(value: int) -> bytes:
    """Encode a signed 64-bit integer as a zig-zag varlong.

    Args:
        value: an integer in the int64 range.

    Returns:
        The minimal encoding, 1 to 10 bytes.

    Raises:
        ValueError: ``value`` does not fit in an int64.
    """
    _check_range(value, INT64_MIN, INT64_MAX, "varlong")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & _MASK64)



def decode_varint(buf: Buffer, position: int) -> tuple[int, int]:
    """Decode a zig-zag varint.

    Args:
        buf: the bytes to read from.
        position: where the varint starts in ``buf``.

    Returns:
        ``(value, next_position)``; ``value`` is in the int32 range.

    Raises:
        CorruptRecordError: the varint is longer than 5 bytes or runs off the end of ``buf``.
    """
    raw, position = _decode_unsigned(buf, position, VARINT_MAX_BYTES, "varint")
    raw &= _MASK32
    return (raw >> 1) ^ -(raw & 1), position


def decode_varlong(buf: Buffer, position: int) -> tuple[int, int]:
    """Decode a zig-zag varlong.

    Args:
        buf: the bytes to read from.
        position: where the varlong starts in ``buf``.

    Returns:
        ``(value, next_position)``; ``value`` is in the int64 range.

    Raises:
        CorruptRecordError: the varlong is longer than 10 bytes or runs off the end of ``buf``.
    """
    raw, position = _decode_unsigned(buf, position, VARLONG_MAX_BYTES, "varlong")
    raw &= _MASK64
    return (raw >> 1) ^ -(raw & 1), position


def decode_unsigned_varint(buf: Buffer, position: int) -> tuple[int, int]:
    """Decode an unsigned varint (no zig-zag), as used by Kafka's flexible message schemas.

    Args:
        buf: the bytes to read from.
        position: where the varint starts in ``buf``.

    Returns:
        ``(value, next_position)``; ``value`` is in 0..2**32-1 (Java would see the top half as
        negative ints; callers that need a length check it against their own bounds).

    Raises:
        CorruptRecordError: the varint is longer than 5 bytes or runs off the end of ``buf``.
    """
    raw, position = _decode_unsigned(buf, position, VARINT_MAX_BYTES, "unsigned varint")
    return raw & _MASK32, position



def wrap_int64(value: int) -> int:
    """Java's ``long`` arithmetic: ``value`` kept to its low 64 bits, signed.

    Kafka computes a record's timestamp as base + delta and writes delta as timestamp - base in ``long``s,
    which wrap; so must a reader and a writer of the same bytes.
    """
    if -INT64_MAX - 1 <= value <= INT64_MAX:
        return value
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)
