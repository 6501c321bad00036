"""Read Kafka's generated message encoding (KRaft metadata and ``__consumer_offsets`` records).

Why: Kafka serialises its internal records with code generated from JSON schemas, in one of two
encodings; :mod:`kcompact.config.kraft.records` (metadata records, flexible from version 0) and
:mod:`kcompact.records.messages.consumer_offsets` (offsets keys and values, classic) both read them through
:class:`MessageReader`, which bounds every read to the record and raises
:class:`~kcompact.errors.CorruptRecordError` with a ``position`` relative to the buffer.

Flexible-version encoding:
int8/16/32/64 are big-endian two's complement, uint16 big-endian, bool one byte, uuid 16 bytes;
strings and arrays are compact: uvarint ``length + 1`` then the bytes/elements, 0 meaning null;
the body ends with a tagged-fields section: uvarint count, then per field uvarint tag, uvarint size
and ``size`` bytes. Tags are ascending. Tagged fields a decoder does not know are skipped.

Classic encoding: the same fixed-size fields; strings are an int16 length, bytes and arrays an int32
length or count, -1 meaning null; no tagged fields.

Uuids are kept in the form Kafka prints them: URL-safe base64 of the 16 bytes without padding.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import TypeVar

from kcompact.errors import CorruptRecordError
from kcompact.records.varint import Buffer, decode_unsigned_varint

T = TypeVar("T")

INT8 = struct.Struct(">b")  # int8: resource type, recovery state, bool bytes
INT16 = struct.Struct(">h")  # int16: feature levels, security protocol
UINT16 = struct.Struct(">H")  # uint16: port
INT32 = struct.Struct(">i")  # int32: broker ids, partition ids, epochs
INT64 = struct.Struct(">q")  # int64: broker epoch
UUID_SIZE = 16


def format_uuid(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without ``=`` padding."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


class MessageReader:
    """Reads Kafka's generated message encoding from ``buf[position:end]``.

    ``flexible`` picks compact lengths (uvarint ``n + 1``) over the classic ones (int16 for
    strings, int32 for bytes and arrays, -1 = null); ``consumer_offsets`` uses the classic form.
    """

    def __init__(self, buf: Buffer, position: int, end: int, *, flexible: bool = True) -> None:
        self.buf = buf
        self.position = position
        self.end = end
        self.flexible = flexible

    def _take(self, size: int, what: str) -> memoryview:
        if size < 0 or self.position + size > self.end:
            raise CorruptRecordError(
                f"{what} runs past the end of the record; expected {size} bytes, "
                f"found {self.end - self.position}", position=self.position)
        view = memoryview(self.buf)[self.position : self.position + size]
        self.position += size
        return view

    def fixed(self, fmt: struct.Struct, what: str) -> int:
        value: int = fmt.unpack(self._take(fmt.size, what))[0]
        return value

    def boolean(self, what: str) -> bool:
        return self.fixed(INT8, what) != 0

    def uuid(self, what: str) -> str:
        return format_uuid(bytes(self._take(UUID_SIZE, what)))

    def uvarint(self) -> int:
        if self.position >= self.end:
            raise CorruptRecordError(
                "varint runs past the end of the record; expected a byte, found none",
                position=self.position)
        value, self.position = decode_unsigned_varint(self.buf, self.position)
        return value

    def _length(self, classic: struct.Struct, what: str) -> int:
        """A length or count: compact uvarint ``n + 1`` or classic ``classic``; -1 = null."""
        if self.flexible:
            return self.uvarint() - 1
        return max(self.fixed(classic, f"{what} length"), -1)

    def nullable_bytes(self, what: str) -> bytes | None:
        length = self._length(INT32, what)
        return None if length < 0 else bytes(self._take(length, what))

    def nullable_string(self, what: str) -> str | None:
        length = self._length(INT16, what)
        if length < 0:
            return None
        try:
            return bytes(self._take(length, what)).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError(
                f"{what} is not UTF-8; expected a string, found undecodable bytes",
                position=self.position - length) from None

    def string(self, what: str) -> str:
        start = self.position
        value = self.nullable_string(what)
        if value is None:
            raise CorruptRecordError(
                f"{what} is null; expected a non-nullable string, found length 0", position=start)
        return value

    def nullable_array(self, read: Callable[[MessageReader], T], what: str) -> tuple[T, ...] | None:
        start = self.position
        count = self._length(INT32, what)
        if count < 0:
            return None
        if count > self.end - self.position:  # every element takes at least one byte
            raise CorruptRecordError(
                f"{what} declares {count} elements; expected at most "
                f"{self.end - self.position}, found {count}", position=start)
        return tuple(read(self) for _ in range(count))

    def array(self, read: Callable[[MessageReader], T], what: str) -> tuple[T, ...]:
        start = self.position
        value = self.nullable_array(read, what)
        if value is None:
            raise CorruptRecordError(
                f"{what} is null; expected a non-nullable array, found length 0", position=start)
        return value

    def tagged_fields(self) -> dict[int, MessageReader]:
        """Read the tagged-fields section; one sub-reader per tag, bounded to its size."""
        tags: dict[int, MessageReader] = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            start = self.position
            self._take(size, f"tagged field {tag}")
            if tags and tag <= max(tags):
                raise CorruptRecordError(
                    f"tagged field out of order; expected a tag above {max(tags)}, found {tag}",
                    position=start)
            tags[tag] = MessageReader(self.buf, start, start + size)
        return tags

