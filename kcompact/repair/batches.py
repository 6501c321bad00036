"""Batch-level helpers of the salvage walk: decoding an entry of either format, its first offset, and
whether its records parse the way Kafka's cleaner and producer-state replay parse them (``LogSegment.recover``,
``Cleaner.doClean``).

Kept apart from ``salvage.py`` so the walk reads as the algorithm; nothing here looks beyond one batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kcompact.errors import CorruptDataError, UnsupportedFormatError
from kcompact.records.batch import decode_batch
from kcompact.records.batch_header import MAGIC_VALUE_V2, RecordBatch
from kcompact.records.control import ControlRecordKey, EndTransactionMarker
from kcompact.records.legacy import LegacyEntry, decode_legacy_entry, legacy_records
from kcompact.records.record import decode_records

if TYPE_CHECKING:
    AnyBatch = RecordBatch | LegacyEntry


def decode_copy(data: bytearray) -> RecordBatch | None:
    """Decode a v2 batch from a private copy of ``data``; None when its header is refused."""
    try:
        return decode_batch(bytes(data))
    except (CorruptDataError, UnsupportedFormatError):
        return None


def decode_entry(view: memoryview, pos: int, magic: int) -> AnyBatch:
    """Decode the entry at ``pos`` by its magic byte (CRC not checked).

    Raises:
        CorruptDataError: the header does not parse.
        UnsupportedFormatError: unknown attribute bits or codec.
    """
    if magic == MAGIC_VALUE_V2:
        return decode_batch(view, pos)
    return decode_legacy_entry(view, pos)


def error_message(err: CorruptDataError | UnsupportedFormatError) -> str:
    """The message of an error without the file/position prefix."""
    return err.message if isinstance(err, CorruptDataError) else str(err)


def first_offset_of(batch: AnyBatch) -> int | None:
    """The batch's first offset; a legacy wrapper's needs its messages (None when they do not parse)."""
    if isinstance(batch, RecordBatch):
        return batch.base_offset
    if batch.compression == 0:
        return batch.offset
    try:
        return batch.base_offset
    except (CorruptDataError, UnsupportedFormatError):
        return None


def records_problem(batch: AnyBatch) -> tuple[str | None, int | None, str | None]:
    """Decode every record as Kafka's cleaner and producer-state replay would.

    Args:
        batch: a decoded batch or legacy entry.

    Returns:
        ``(problem, control_type, note)``: the first parse failure (None when every record parses), the
        first control record's type for a control batch, and a note when the records could not be
        checked (a codec library is missing; the batch is then kept).
    """
    try:
        if isinstance(batch, LegacyEntry):
            legacy_records(batch)
            return None, None, None
        records = decode_records(batch)
        if not batch.is_control or not records:
            return None, None, None
        key = ControlRecordKey.parse(records[0].key)
        if key.type.is_transaction_marker:
            EndTransactionMarker.parse(records[0].value)
        return None, int(key.type), None
    except CorruptDataError as err:
        return err.message, None, None
    except UnsupportedFormatError as err:
        return None, None, f"records not checked: {err}"
