"""``inspect dump``: the contents of segments and indexes as a stream of JSON-ready objects.

What ``kafka-dump-log`` prints, as data. Every item is a ``dict`` with a ``"type"``; the field names are part
of kcompact's interface (README.md documents them and tests/inspect/test_dump.py fixes them):

* ``batch`` — ``file, position, base_offset, last_offset, count, magic, compression, timestamp_type,
  is_control, is_transactional, producer_id, producer_epoch, base_sequence, partition_leader_epoch,
  max_timestamp, delete_horizon_ms, size_in_bytes, crc, crc_valid``;
* ``record`` (after its batch, with ``records=True``) — ``offset, timestamp, key, value, headers, control,
  coordinator_epoch``; key, value and header values are base64 strings or null, header keys are text;
* ``offset_index_entry`` — ``file, offset, position``; ``time_index_entry`` — ``file, timestamp, offset``;
  ``aborted_txn`` — ``file, producer_id, first_offset, last_offset, last_stable_offset``;
* ``problem`` — ``file, position, message``: a CRC failure is reported on the batch itself
  (``crc_valid: false``); a record that does not parse, a broken frame, an index that disagrees with the
  log is a problem. After a framing problem the rest of that file cannot be walked.

The generator never raises for bad content inside a file: it yields ``problem`` items and goes on where the
framing allows. It raises :class:`~kcompact.errors.KcompactError` only for a path it cannot dump at all.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcompact.errors import CorruptDataError, KcompactError
from kcompact.records.batch import TimestampType
from kcompact.records.control import ControlRecordKey, ControlRecordType, EndTransactionMarker
from kcompact.segment import offset_index, time_index, txn_index
from kcompact.segment.log_file import LogFile
from kcompact.segment.names import parse_segment_file_name
from kcompact.segment.partition import is_partition_dir, open_partition

if TYPE_CHECKING:
    from kcompact.records.batch import RecordBatch
    from kcompact.records.legacy import LegacyEntry

Item = dict[str, Any]

TIMESTAMP_TYPE_NAMES = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


def dump_path(
    path: str | os.PathLike[str], *, records: bool = False, verify_index: bool = False
) -> Iterator[Item]:
    """Dump a ``.log``/``.index``/``.timeindex``/``.txnindex`` file or a whole partition directory.

    Args:
        path: the file or partition directory.
        records: also yield every record after its batch.
        verify_index: check index files against the log and yield ``problem`` items for disagreements.

    Yields:
        JSON-ready items as described in the module docstring.

    Raises:
        KcompactError: the path is neither a segment file nor a partition directory.
    """
    target = Path(path)
    if target.is_dir():
        if not is_partition_dir(target):
            raise KcompactError(f"{target}: not a partition directory or segment file")
        partition = open_partition(target)
        for segment in partition.segments:
            yield from _dump_log(segment.log_path, segment.base_offset, records)
            if verify_index:
                for index in (segment.index_path, segment.time_index_path, segment.txn_index_path):
                    if index is not None:
                        yield from _verify(index, segment.base_offset, segment.log_path)
        return
    parsed = parse_segment_file_name(target.name)
    if parsed is None or parsed.kind not in ("log", "index", "timeindex", "txnindex"):
        raise KcompactError(
            f"{target}: not a segment file; expected <20-digit offset>.log, .index, .timeindex or .txnindex"
        )
    if parsed.kind == "log":
        yield from _dump_log(target, parsed.base_offset, records)
        return
    yield from _dump_index(target, parsed.kind, parsed.base_offset)
    if verify_index:
        sibling = target.with_name(target.name.replace(f".{parsed.kind}", ".log", 1))
        yield from _verify(target, parsed.base_offset, sibling)


def _dump_log(path: Path, base_offset: int, records: bool) -> Iterator[Item]:
    with LogFile(path) as log:
        try:
            for batch in log.iter_batches():
                yield batch_item(batch, path)
                if records:
                    yield from _record_items(batch, path)
        except CorruptDataError as err:
            yield problem_item(path, err.position, err.message)


def batch_item(batch: RecordBatch | LegacyEntry, path: Path) -> Item:
    """The ``batch`` item of one v2 batch or legacy entry."""
    return {
        "type": "batch",
        "file": str(path),
        "position": batch.position,
        "base_offset": batch.base_offset if batch.magic >= 2 else _legacy_base(batch),
        "last_offset": batch.last_offset,
        "count": batch.records_count if batch.magic >= 2 else _legacy_count(batch),
        "magic": batch.magic,
        "compression": _compression_label(batch.compression),
        "timestamp_type": TIMESTAMP_TYPE_NAMES.get(
            TimestampType(batch.timestamp_type), str(batch.timestamp_type)
        ),
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


def _legacy_base(batch: RecordBatch | LegacyEntry) -> int | None:
    try:
        return batch.base_offset
    except CorruptDataError:
        return None


def _legacy_count(batch: RecordBatch | LegacyEntry) -> int | None:
    try:
        return batch.records_count
    except CorruptDataError:
        return None


def _compression_label(codec: int) -> str:
    labels = ("none", "gzip", "snappy", "lz4", "zstd")
    return labels[codec] if 0 <= codec < len(labels) else str(codec)


def _record_items(batch: RecordBatch | LegacyEntry, path: Path) -> Iterator[Item]:
    try:
        decoded = _decode(batch)
    except CorruptDataError as err:
        yield problem_item(path, batch.position, err.message)
        return
    for record in decoded:
        control: str | None = None
        coordinator_epoch: int | None = None
        if batch.is_control and record.key is not None:
            try:
                key = ControlRecordKey.parse(record.key)
                control = _control_name(key.type)
                if key.type in (ControlRecordType.ABORT, ControlRecordType.COMMIT) and record.value:
                    coordinator_epoch = EndTransactionMarker.parse(record.value).coordinator_epoch
            except CorruptDataError as err:
                yield problem_item(path, batch.position, f"control record at offset {record.offset}: {err.message}")
        yield {
            "type": "record",
            "offset": record.offset,
            "timestamp": record.timestamp,
            "key": _b64(record.key),
            "value": _b64(record.value),
            "headers": [
                {"key": h.key.decode("utf-8", "replace"), "value": _b64(h.value)} for h in record.headers
            ],
            "control": control,
            "coordinator_epoch": coordinator_epoch,
        }


def _decode(batch: RecordBatch | LegacyEntry) -> list[Any]:
    if batch.magic >= 2:
        from kcompact.records.record import decode_records

        return decode_records(batch)  # type: ignore[arg-type]
    from kcompact.records.legacy import legacy_records

    return legacy_records(batch)  # type: ignore[arg-type]


def _control_name(control_type: int) -> str:
    try:
        return ControlRecordType(control_type).name
    except ValueError:
        return "UNKNOWN"


def _b64(data: bytes | memoryview | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode("ascii")


def problem_item(path: Path, position: int | None, message: str) -> Item:
    """A ``problem`` item: something in ``path`` at ``position`` is wrong."""
    return {"type": "problem", "file": str(path), "position": position, "message": message}


def _dump_index(path: Path, kind: str, base_offset: int) -> Iterator[Item]:
    data = path.read_bytes()
    try:
        if kind == "index":
            for entry in offset_index.decode_offset_index(data, base_offset):
                yield {"type": "offset_index_entry", "file": str(path), "offset": entry.offset,
                       "position": entry.position}
        elif kind == "timeindex":
            for tentry in time_index.decode_time_index(data, base_offset):
                yield {"type": "time_index_entry", "file": str(path), "timestamp": tentry.timestamp,
                       "offset": tentry.offset}
        else:
            for txn in txn_index.decode_txn_index(data):
                yield {"type": "aborted_txn", "file": str(path), "producer_id": txn.producer_id,
                       "first_offset": txn.first_offset, "last_offset": txn.last_offset,
                       "last_stable_offset": txn.last_stable_offset}
    except CorruptDataError as err:
        yield problem_item(path, err.position, err.message)


def _verify(index_path: Path, base_offset: int, log_path: Path) -> Iterator[Item]:
    from kcompact.segment.verify_index import verify_index_file

    for message in verify_index_file(index_path, base_offset, log_path):
        yield problem_item(index_path, None, message)
