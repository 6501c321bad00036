"""``inspect dump`` for ``.log`` segments and KRaft ``.checkpoint`` snapshots: walk the entries.

Why apart from the dispatch in :mod:`kcompact.inspect.dump`: this is the part that knows the batch
framing. It turns each v2 batch or v0/v1 entry into a ``batch`` item and, on request, each record into
a ``record`` item (with a ``decoded`` field for ``__cluster_metadata`` and ``__consumer_offsets``), and
it recovers from a bad entry by stepping over it whenever its frame is sound::

    int64  offset          base offset (v2); the message's offset, a wrapper's last inner one (v0/v1)
    int32  size            bytes after this field: at least MIN_SIZE_BY_MAGIC[magic]
    ...    (int32 partition_leader_epoch or crc)
    int8   magic           at MAGIC_OFFSET: 0, 1 or 2

Item names and key order are those of :mod:`kcompact.inspect.dump`'s docstring.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.config.kraft import records as kraft_records
from kcompact.errors import CorruptDataError, KcompactError, TruncatedDataError
from kcompact.inspect.dump.items import Item, file_item, problem_item, warning_item
from kcompact.inspect.dump.window import DumpWindow, Verdict
from kcompact.records.batch import ENTRY_PREFIX_STRUCT, HEADER_SIZE_UP_TO_MAGIC, RECORD_OVERHEAD_V0
from kcompact.records.batch_header import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V2,
    MIN_BATCH_LENGTH,
    RecordBatch,
    TimestampType,
)
from kcompact.records.control import ControlRecordKey, ControlRecordType, EndTransactionMarker
from kcompact.records.messages import consumer_offsets as offsets_records
from kcompact.records.messages import transaction_log as txn_log_records
from kcompact.segment.log_file import LogFile
from kcompact.segment.names import parse_partition_dir_name
from kcompact.segment.partition import METADATA_TOPIC

if TYPE_CHECKING:
    from kcompact.records.legacy import LegacyEntry
    from kcompact.records.record import Record

    AnyBatch = RecordBatch | LegacyEntry

RecordDecoder = Callable[["Record"], Item]  # a data record -> its ``decoded`` object

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
LEGACY_MAX_CODEC = 3  # gzip, snappy, lz4: zstd needs magic 2
RECORD_OVERHEAD_V1 = RECORD_OVERHEAD_V0 + 8  # v1 adds the timestamp
MIN_SIZE_BY_MAGIC = (RECORD_OVERHEAD_V0, RECORD_OVERHEAD_V1, MIN_BATCH_LENGTH)  # smallest size field
TIMESTAMP_TYPE_NAMES = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


def dump_log(path: Path, base_offset: int, records: bool, decoder: RecordDecoder | None, *,
             live_active: bool, kind: str = "log", start: int = 0,
             window: DumpWindow | None = None) -> Iterator[Item]:
    """Dump the batches (and, with ``records``, the records) of one ``.log`` or snapshot.

    Args:
        path: the ``.log`` (or KRaft ``.checkpoint``) file.
        base_offset: the base offset in its name.
        records: also yield every record after its batch.
        decoder: what fills the records' ``decoded`` field (see :func:`record_decoder`), or None.
        live_active: the file is the active segment of a partition a running broker holds, so a
            partial last entry is a ``warning``, not a ``problem``.
        kind: the ``kind`` of the ``file`` item.
        start: the byte position of the first entry to read (a batch boundary).
        window: the selection (``--from-offset``, ``--key``, …): which batches and records are shown.

    Yields:
        A ``file`` item, then ``batch``, ``record``, ``problem`` and ``warning`` items.
    """
    try:
        log = LogFile(path)
    except OSError as err:
        yield problem_item(path, None, f"cannot read the file: {err.strerror or err}")
        return
    with log:
        yield file_item(path, kind, base_offset, log.size_in_bytes)
        position: int | None = min(start, log.size_in_bytes)
        while position is not None:
            position = yield from _walk(log, position, records, decoder, live_active, window)


def _walk(log: LogFile, start: int, records: bool, decoder: RecordDecoder | None,
          live_active: bool, window: DumpWindow | None = None) -> Generator[Item, None, int | None]:
    """Yield the items of the entries from ``start``; return where to resume after a bad one, or None."""
    position = start
    try:
        for batch in log.iter_batches(start):
            verdict = Verdict.SHOW if window is None else window.verdict(batch)
            if verdict in (Verdict.STOP, Verdict.STOP_FILE):
                return None
            if verdict is Verdict.SHOW:
                yield from _batch_items(batch, log.path, records, decoder, window)
            position = batch.position + batch.size_in_bytes
    except CorruptDataError as err:
        if live_active and isinstance(err, TruncatedDataError):
            yield warning_item(log.path, f"ends in a partial entry at position {position}, which "
                                         f"the running broker may be writing; stopped there")
            return None
        yield problem_item(log.path, err.position, err.message)
        return _next_frame(log.buffer, position)
    except KcompactError as err:  # UnsupportedFormatError has no position: the walk knows it
        message = str(err).removeprefix(f"{log.path}: ")
        yield problem_item(log.path, position, _without_buffer_prefix(message, position))
        return _next_frame(log.buffer, position)
    return None


def _next_frame(buffer: memoryview, position: int) -> int | None:
    """Where the entry after the one at ``position`` starts, when that entry's frame is sound.

    Sound: a known magic, a size at least that magic's smallest entry, and the entry inside the file.
    """
    if len(buffer) - position < HEADER_SIZE_UP_TO_MAGIC:
        return None
    _offset, size = ENTRY_PREFIX_STRUCT.unpack_from(buffer, position)
    magic = buffer[position + MAGIC_OFFSET]
    if magic >= len(MIN_SIZE_BY_MAGIC) or size < MIN_SIZE_BY_MAGIC[magic]:
        return None
    end = position + LOG_OVERHEAD + size
    return end if end <= len(buffer) else None


def _without_buffer_prefix(message: str, position: int) -> str:
    # records.batch names the buffer position in UnsupportedFormatError messages; the problem item
    # already carries the (same) file position.
    return message.removeprefix(f"v2 batch at buffer position {position}: ")


def _batch_items(batch: AnyBatch, path: Path, records: bool,
                 decoder: RecordDecoder | None, window: DumpWindow | None = None) -> Iterator[Item]:
    if window is not None and window.selection.selects_records:
        yield from _selected_items(batch, path, decoder, window)
        return
    if isinstance(batch, RecordBatch):
        yield batch_item(batch, path)
        if records:
            yield from _record_items(batch, _decode_v2(batch), path, decoder, window)
        return
    if batch.compression > LEGACY_MAX_CODEC:
        yield problem_item(path, batch.position,
                           f"unknown compression codec for a magic {batch.magic} message; expected "
                           f"0..{LEGACY_MAX_CODEC}, found {batch.compression}")
        return
    decoded = _decode_legacy(batch)
    item = batch_item(batch, path)
    if isinstance(decoded, KcompactError):
        item.update(base_offset=None, count=None)
    else:
        item.update(base_offset=decoded[0].offset, count=len(decoded))
    yield item
    if isinstance(decoded, KcompactError) or records:
        yield from _record_items(batch, decoded, path, decoder, window)


def _selected_items(batch: AnyBatch, path: Path, decoder: RecordDecoder | None,
                    window: DumpWindow) -> Iterator[Item]:
    """``--key``: the batch and its matching records, only when it holds one (or does not decode)."""
    if isinstance(batch, RecordBatch):
        decoded = _decode_v2(batch)
    elif batch.compression > LEGACY_MAX_CODEC:
        decoded = KcompactError(f"unknown compression codec for a magic {batch.magic} message")
    else:
        decoded = _decode_legacy(batch)
    if isinstance(decoded, KcompactError):
        item = batch_item(batch, path)
        if not isinstance(batch, RecordBatch):
            item.update(base_offset=None, count=None)
        yield item
        yield from _record_items(batch, decoded, path, decoder)
        return
    if not any(window.shows_record(r.offset, r.key) for r in decoded):
        return
    item = batch_item(batch, path)
    if not isinstance(batch, RecordBatch):
        item.update(base_offset=decoded[0].offset, count=len(decoded))
    yield item
    yield from _record_items(batch, decoded, path, decoder, window)


def batch_item(batch: AnyBatch, path: Path) -> Item:
    """The ``batch`` item of one v2 batch or legacy entry (for a legacy wrapper, ``base_offset`` and
    ``count`` need its records: :func:`dump_path` fills them in)."""
    legacy = batch.magic < MAGIC_VALUE_V2
    return {
        "type": "batch",
        "file": str(path),
        "position": batch.position,
        "base_offset": batch.last_offset if legacy else batch.base_offset,
        "last_offset": batch.last_offset,
        "count": 1 if legacy else batch.records_count,
        "magic": batch.magic,
        "compression": COMPRESSION_NAMES[batch.compression],
        "timestamp_type": TIMESTAMP_TYPE_NAMES[TimestampType(batch.timestamp_type)],
        "is_control": batch.is_control,
        "is_transactional": batch.is_transactional,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "partition_leader_epoch": batch.partition_leader_epoch,
        "max_timestamp": batch.max_timestamp,
        "delete_horizon_ms": batch.delete_horizon_ms,
        "size_in_bytes": batch.size_in_bytes,
        "crc": batch.crc,
        "crc_valid": batch.crc_valid(),
    }


def _decode_v2(batch: RecordBatch) -> list[Record] | KcompactError:
    from kcompact.records.record import decode_records

    try:
        return decode_records(batch)
    except CorruptDataError as err:
        position = batch.position + (err.position or 0)
        return CorruptDataError(err.message, position=position, offset=err.offset)
    except KcompactError as err:
        return err


def _decode_legacy(entry: LegacyEntry) -> list[Record] | KcompactError:
    from kcompact.records.legacy import legacy_records

    try:
        return legacy_records(entry)  # errors name the entry's position in the file already
    except KcompactError as err:
        return err


def _record_items(
    batch: AnyBatch, decoded: list[Record] | KcompactError, path: Path,
    decoder: RecordDecoder | None = None, window: DumpWindow | None = None,
) -> Iterator[Item]:
    if isinstance(decoded, KcompactError):
        position = decoded.position if isinstance(decoded, CorruptDataError) else None
        message = decoded.message if isinstance(decoded, CorruptDataError) else str(decoded)
        yield problem_item(path, batch.position if position is None else position, message)
        return
    for record in decoded:
        if window is not None and not window.shows_record(record.offset, record.key):
            continue
        control: str | None = None
        coordinator_epoch: int | None = None
        if batch.is_control:
            try:
                control, coordinator_epoch = _control_fields(record)
            except CorruptDataError as err:
                yield problem_item(path, batch.position,
                                   f"control record at offset {record.offset}: {err.message}")
        item = {
            "type": "record",
            "offset": record.offset,
            "timestamp": record.timestamp,
            "key": _b64(record.key),
            "value": _b64(record.value),
            "headers": [
                {"key": h.key.decode("utf-8", "replace"), "value": _b64(h.value)}
                for h in record.headers
            ],
            "control": control,
            "coordinator_epoch": coordinator_epoch,
        }
        if decoder is not None and not batch.is_control:
            item["decoded"] = yield from _decoded(decoder, record, batch.position, path)
        yield item


def record_decoder(partition_dir_name: str) -> RecordDecoder | None:
    """The decoder of the data records of a partition directory's topic, if it has one.

    Args:
        partition_dir_name: the directory's name, ``<topic>-<partition>``.

    Returns:
        The ``__cluster_metadata``, ``__consumer_offsets`` or ``__transaction_state`` decoder, else None.
    """
    parsed = parse_partition_dir_name(partition_dir_name)
    topic = None if parsed is None else parsed.topic
    if topic == METADATA_TOPIC:
        return _decode_metadata
    if topic == OFFSETS_TOPIC:
        return _decode_offsets
    if topic == TRANSACTION_STATE_TOPIC:
        return _decode_transaction_log
    return None


def _decode_metadata(record: Record) -> Item:
    return kraft_records.decode_metadata_record(record.value).as_json_dict()


def _decode_offsets(record: Record) -> Item:
    key = offsets_records.decode_offsets_key(record.key)
    value = offsets_records.decode_offsets_value(key, record.value)
    return {"key": offsets_records.as_json_dict(key), "value": offsets_records.as_json_dict(value)}


def _decode_transaction_log(record: Record) -> Item:
    key = txn_log_records.decode_txn_key(record.key)
    value = None if isinstance(key, txn_log_records.UnknownTxnKey) else (
        txn_log_records.decode_txn_value(record.value))
    return {"key": txn_log_records.as_json_dict(key), "value": txn_log_records.as_json_dict(value)}


def _decoded(decoder: RecordDecoder, record: Record, position: int,
             path: Path) -> Generator[Item, None, Item | None]:
    """The ``decoded`` field of one record; a ``problem`` item (and None) when it does not decode."""
    try:
        return decoder(record)
    except KcompactError as err:
        message = err.message if isinstance(err, CorruptDataError) else str(err)
        yield problem_item(path, position, f"record at offset {record.offset} does not decode: "
                                           f"{message}")
        return None


def _control_fields(record: Record) -> tuple[str, int | None]:
    """The control type's name and, for COMMIT/ABORT, the marker's coordinator epoch."""
    key = ControlRecordKey.parse(record.key)
    if key.type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return key.type.name, EndTransactionMarker.parse(record.value).coordinator_epoch
    return key.type.name, None


def _b64(data: bytes | memoryview | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode("ascii")

