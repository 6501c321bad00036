"""Control records: their key, the end-transaction marker value, and marker batches (Kafka's ``ControlRecordType``,
``EndTransactionMarker``).

Why: the cleaner decides what to do with a transaction's data by the COMMIT/ABORT marker that
closes it, and keeps or drops the marker itself by the same rules; repair and inspect name them.
A control batch (attribute bit 5) carries control records whose key says what they are.

Control record key, 4 bytes (a longer key with a higher version is read as version 0)::

    0  int16  version   0 today; negative means corruption
    2  int16  type      ControlRecordType

End-transaction marker value (COMMIT/ABORT only), 6 bytes::

    0  int16  version            0 today; negative means corruption
    2  int32  coordinator_epoch  epoch of the transaction coordinator that wrote it

A transaction marker batch is always: magic 2, no compression, CreateTime, transactional and
control bits set, the producer's id and epoch, base_sequence -1, and exactly one record with
offset and timestamp deltas 0 - 78 bytes in all.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from kcompact.errors import CorruptRecordError
from kcompact.value import frozen

CURRENT_CONTROL_RECORD_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0

CONTROL_RECORD_KEY_STRUCT = struct.Struct(
    ">h"  # version
    "h"  # type
)
END_TXN_MARKER_STRUCT = struct.Struct(
    ">h"  # version
    "i"  # coordinator_epoch
)


class ControlRecordType(IntEnum):
    """The ``type`` of a control record key; an unknown type keeps its number, named UNKNOWN."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def _missing_(cls, value: object) -> ControlRecordType | None:
        # Kafka maps unknown ids to UNKNOWN and clients skip such records; keep the id for reports.
        if not isinstance(value, int):
            return None
        member = int.__new__(cls, value)
        member._name_ = "UNKNOWN"
        member._value_ = value
        return member

    @property
    def is_transaction_marker(self) -> bool:
        """True for COMMIT and ABORT."""
        return self in (ControlRecordType.ABORT, ControlRecordType.COMMIT)


@frozen
class ControlRecordKey:
    """The key of a control record."""

    version: int
    type: ControlRecordType

    @classmethod
    def parse(cls, key: bytes | memoryview | None) -> ControlRecordKey:
        """Read a control record key.

        Args:
            key: the record's key bytes.

        Returns:
            The key; versions above 0 are read as version 0, as Kafka does.

        Raises:
            CorruptRecordError: a null key, fewer than 4 bytes, or a negative version.
        """
        size = -1 if key is None else len(key)
        if key is None or size < CONTROL_RECORD_KEY_STRUCT.size:
            raise CorruptRecordError(
                f"invalid control record key size; expected at least "
                f"{CONTROL_RECORD_KEY_STRUCT.size} bytes, found {size}")
        version, type_id = CONTROL_RECORD_KEY_STRUCT.unpack_from(key, 0)
        if version < 0:
            raise CorruptRecordError(
                f"invalid control record key version; expected >= 0, found {version}")
        return cls(version, ControlRecordType(type_id))

    def encode(self) -> bytes:
        """The 4-byte key."""
        return CONTROL_RECORD_KEY_STRUCT.pack(self.version, self.type)


@frozen
class EndTransactionMarker:
    """The value of a COMMIT or ABORT control record."""

    version: int
    coordinator_epoch: int

    @classmethod
    def parse(cls, value: bytes | memoryview | None) -> EndTransactionMarker:
        """Read an end-transaction marker value.

        Args:
            value: the control record's value bytes.

        Returns:
            The marker; versions above 0 are read as version 0, as Kafka does.

        Raises:
            CorruptRecordError: a null value, fewer than 6 bytes, or a negative version.
        """
        size = -1 if value is None else len(value)
        if value is None or size < END_TXN_MARKER_STRUCT.size:
            raise CorruptRecordError(
                f"invalid end transaction marker value size; expected at least "
                f"{END_TXN_MARKER_STRUCT.size} bytes, found {size}")
        version, coordinator_epoch = END_TXN_MARKER_STRUCT.unpack_from(value, 0)
        if version < 0:
            raise CorruptRecordError(
                f"invalid end transaction marker version; expected >= 0, found {version}")
        return cls(version, coordinator_epoch)

    def encode(self) -> bytes:
        """The 6-byte value."""
        return END_TXN_MARKER_STRUCT.pack(self.version, self.coordinator_epoch)

