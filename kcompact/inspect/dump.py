"""``inspect dump``: the contents of segments and indexes as a stream of JSON-ready items.

What ``kafka-dump-log`` prints, as data, for a ``.log``/``.index``/``.timeindex``/``.txnindex`` file or for
every segment of a partition directory. Every item is a ``dict`` with a ``"type"``; names and key order are
part of kcompact's interface (``--json`` prints them as they are; tests/inspect/test_dump.py fixes them):

* ``file`` — ``file, kind, base_offset, size_in_bytes``: starts the items of one file (kind ``log``,
  ``index``, ``timeindex``, ``txnindex``, or ``checkpoint`` for a KRaft snapshot, whose ``base_offset``
  is the end offset in its name), so an empty file still shows up;
* ``batch`` — ``file, position, base_offset, last_offset, count, magic, compression, timestamp_type,
  is_control, is_transactional, producer_id, producer_epoch, base_sequence, partition_leader_epoch,
  max_timestamp, delete_horizon_ms, size_in_bytes, crc, crc_valid`` (a v0/v1 entry too: ``count`` is its
  message count, the producer fields -1, ``delete_horizon_ms`` null);
* ``record`` (after its batch, with ``records=True``) — ``offset, timestamp, key, value, headers
  [{key, value}], control, coordinator_epoch``; key, value and header values are base64 or null, header keys
  text; ``control`` is COMMIT/ABORT for transaction markers, the control type's name (LEADER_CHANGE,
  SNAPSHOT_HEADER, …, UNKNOWN) for other control records and null for data. Data records of
  ``__cluster_metadata`` (a segment or a KRaft ``.checkpoint`` snapshot) and of ``__consumer_offsets`` get
  one more field, ``decoded`` (what kafka-dump-log's ``--cluster-metadata-decoder`` and
  ``--offsets-decoder`` show): the metadata record's ``{type, version, data}``, or ``{key, value}`` of
  an offsets record (``value`` null for a tombstone); null, with a ``problem`` item, when it does not
  decode. Records of other topics have no ``decoded`` field;
* ``offset_index_entry`` — ``file, offset, position``; ``time_index_entry`` — ``file, timestamp, offset``;
  ``aborted_txn`` — ``file, version, producer_id, first_offset, last_offset, last_stable_offset``;
* ``index_check`` (``verify_index=True``) — ``file, log_file, problems``: one index was compared with its
  segment's ``.log`` (``log_file`` null when the ``.log`` is missing) and ``problems`` items were found;
* ``problem`` — ``file, position, message``: bad input. A CRC failure is reported on the batch itself
  (``crc_valid: false``), not as a problem;
* ``warning`` — ``file, message``: worth knowing, not bad input (a live broker, a missing index).

What is checked: the framing, header and CRC of every batch; with ``records=True`` also every record, the
record count and control records. The walk goes on past a bad entry whenever its frame (offset, size,
magic) is sound — that is all Kafka itself uses to step to the next batch — and stops where the frame breaks
(a size below 14, an unknown magic, an entry running past the end of the file).

The generator never raises for bad content inside a file: it yields ``problem`` items and goes on where the
framing allows. It raises :class:`~kcompact.errors.KcompactError` only for a path it cannot dump at all.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcompact.config import kraft_records, offsets_records
from kcompact.errors import CorruptDataError, KcompactError, TruncatedDataError
from kcompact.records.batch import (
    ENTRY_PREFIX_STRUCT,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V2,
    MIN_BATCH_LENGTH,
    RECORD_OVERHEAD_V0,
    RecordBatch,
    TimestampType,
)
from kcompact.records.control import ControlRecordKey, ControlRecordType, EndTransactionMarker
from kcompact.segment import offset_index, time_index, txn_index
from kcompact.segment.lock import BROKER_LOCK_FILE, broker_holds_lock
from kcompact.segment.log_file import LogFile
from kcompact.segment.names import (
    SegmentFileName,
    parse_partition_dir_name,
    parse_segment_file_name,
)
from kcompact.segment.partition import is_partition_dir, open_partition
from kcompact.segment.verify_index import verify_index_file

if TYPE_CHECKING:
    from kcompact.records.legacy import LegacyEntry
    from kcompact.records.record import Record

    AnyBatch = RecordBatch | LegacyEntry

Item = dict[str, Any]
RecordDecoder = Callable[["Record"], Item]  # a data record -> its ``decoded`` object

DUMPABLE_KINDS = ("log", "index", "timeindex", "txnindex", "checkpoint")
INDEX_KINDS = ("index", "timeindex", "txnindex")
METADATA_TOPIC = "__cluster_metadata"
OFFSETS_TOPIC = "__consumer_offsets"
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
LEGACY_MAX_CODEC = 3  # gzip, snappy, lz4: zstd needs magic 2
RECORD_OVERHEAD_V1 = RECORD_OVERHEAD_V0 + 8  # v1 adds the timestamp
MIN_SIZE_BY_MAGIC = (RECORD_OVERHEAD_V0, RECORD_OVERHEAD_V1, MIN_BATCH_LENGTH)  # smallest size field
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
        path: the file (a KRaft ``.checkpoint`` snapshot too) or partition directory.
        records: also yield every record after its batch.
        verify_index: check index files against the log: ``problem`` items for disagreements and one
            ``index_check`` item per index file.

    Yields:
        JSON-ready items as described in the module docstring.

    Raises:
        KcompactError: the path is neither a segment file nor a partition directory.
    """
    target = Path(path)
    if target.is_dir():
        if not is_partition_dir(target):
            raise KcompactError(
                f"{target}: not a partition directory; expected a <topic>-<partition> directory "
                f"or a .log, .index, .timeindex or .txnindex file")
        yield from _dump_partition(target, records, verify_index)
        return
    parsed = parse_segment_file_name(target.name)
    if parsed is None or parsed.kind not in DUMPABLE_KINDS:
        raise KcompactError(
            f"{target}: not a segment file; expected <offset>.log, .index, .timeindex or .txnindex")
    yield from _dump_file(target, parsed, records, verify_index)


def _dump_file(target: Path, parsed: SegmentFileName, records: bool,
               verify_index: bool) -> Iterator[Item]:
    live = yield from _live_check(target.parent.parent)
    live_active = live and _is_active(target, parsed)
    decoder = record_decoder(target.parent.name)
    if parsed.kind == "checkpoint":  # a KRaft snapshot: batches like a segment's, no indexes
        yield from _dump_log(target, parsed.base_offset, records, decoder, live_active=False,
                             kind="checkpoint")
        return
    sibling = {kind: _sibling(target, parsed, kind) for kind in ("log", *INDEX_KINDS)}
    if parsed.kind == "log":
        yield from _dump_log(target, parsed.base_offset, records, decoder, live_active=live_active)
        if verify_index:
            indexes = (sibling["index"], sibling["timeindex"], sibling["txnindex"])
            yield from _verify_segment(target, parsed.base_offset,
                                       tuple(p if p.exists() else None for p in indexes),
                                       live_active=live_active)
        return
    yield from _dump_index(target, parsed.kind, parsed.base_offset)
    if verify_index:
        yield from _verify(target, parsed.base_offset, sibling["log"], live_active=live_active)


def _is_active(target: Path, parsed: SegmentFileName) -> bool:
    """Whether no ``.log`` with a higher base offset sits next to ``target`` (its segment is last)."""
    try:
        names = [parse_segment_file_name(p.name) for p in target.parent.iterdir()]
    except OSError:
        return True  # unknown: the lenient reading
    return not any(n is not None and n.kind == "log" and n.temp_suffix is None
                   and n.base_offset > parsed.base_offset for n in names)


def _sibling(path: Path, parsed: SegmentFileName, kind: str) -> Path:
    """The file of the same segment (and the same temporary suffix) holding ``kind``."""
    suffix = "" if parsed.temp_suffix is None else f".{parsed.temp_suffix}"
    return path.with_name(f"{parsed.name.split('.', 1)[0]}.{kind}{suffix}")


def _dump_partition(directory: Path, records: bool, verify_index: bool) -> Iterator[Item]:
    partition = open_partition(directory)
    live = yield from _live_check(directory.parent)
    decoder = record_decoder(directory.name)
    for number, segment in enumerate(partition.segments):
        live_active = live and number == len(partition.segments) - 1
        yield from _dump_log(segment.log_path, segment.base_offset, records, decoder,
                             live_active=live_active)
        if verify_index:
            indexes = (segment.index_path, segment.time_index_path, segment.txn_index_path)
            yield from _verify_segment(segment.log_path, segment.base_offset, indexes,
                                       live_active=live_active)
    if verify_index:
        for orphan in partition.orphan_indexes:
            yield warning_item(orphan, "index file without its .log (an orphan a broker deletes at "
                                       "startup); not checked")


def _live_check(log_dir: Path) -> Generator[Item, None, bool]:
    """Warn when a running broker holds ``log_dir``; return whether it does (via ``yield from``)."""
    lock = log_dir / BROKER_LOCK_FILE
    try:
        live = broker_holds_lock(log_dir)
    except (KcompactError, OSError) as err:  # reading is allowed anyway; say what is unknown
        yield warning_item(lock, f"cannot tell whether a broker holds this lock ({err}); if one "
                                 f"runs, the active segment may change while it is read")
        return False
    if live:
        yield warning_item(lock, "held by a running Kafka broker: the active segment may change while "
                                 "it is read (a partial last batch, preallocated indexes)")
    return live


def _verify_segment(log_path: Path, base_offset: int, indexes: tuple[Path | None, ...], *,
                    live_active: bool) -> Iterator[Item]:
    """Check the existing ``(.index, .timeindex, .txnindex)`` of one segment; warn about missing ones."""
    index, time_index_path, _txn = indexes
    if index is None:
        yield warning_item(log_path, "no .index: a broker recovers this segment at startup and "
                                     "rebuilds its indexes")
    elif time_index_path is None:
        yield warning_item(log_path, "no .timeindex: a broker creates an empty one and does not "
                                     "rebuild it (time rules then use the .log's mtime)")
    for path in indexes:
        if path is not None:
            yield from _verify(path, base_offset, log_path, live_active=live_active)


def _verify(index_path: Path, base_offset: int, log_path: Path, *,
            live_active: bool) -> Iterator[Item]:
    found = verify_index_file(index_path, base_offset, log_path, live_active=live_active)
    for message in found:
        yield problem_item(index_path, None, message)
    yield {"type": "index_check", "file": str(index_path),
           "log_file": str(log_path) if log_path.exists() else None, "problems": len(found)}


def _file_item(path: Path, kind: str, base_offset: int, size_in_bytes: int) -> Item:
    return {"type": "file", "file": str(path), "kind": kind, "base_offset": base_offset,
            "size_in_bytes": size_in_bytes}


def _dump_log(path: Path, base_offset: int, records: bool, decoder: RecordDecoder | None, *,
              live_active: bool, kind: str = "log") -> Iterator[Item]:
    try:
        log = LogFile(path)
    except OSError as err:
        yield problem_item(path, None, f"cannot read the file: {err.strerror or err}")
        return
    with log:
        yield _file_item(path, kind, base_offset, log.size_in_bytes)
        position: int | None = 0
        while position is not None:
            position = yield from _walk(log, position, records, decoder, live_active)


def _walk(log: LogFile, start: int, records: bool, decoder: RecordDecoder | None,
          live_active: bool) -> Generator[Item, None, int | None]:
    """Yield the items of the entries from ``start``; return where to resume after a bad one, or None."""
    position = start
    try:
        for batch in log.iter_batches(start):
            yield from _batch_items(batch, log.path, records, decoder)
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
                 decoder: RecordDecoder | None) -> Iterator[Item]:
    if isinstance(batch, RecordBatch):
        yield batch_item(batch, path)
        if records:
            yield from _record_items(batch, _decode_v2(batch), path, decoder)
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
        yield from _record_items(batch, decoded, path, decoder)


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
    decoder: RecordDecoder | None = None,
) -> Iterator[Item]:
    if isinstance(decoded, KcompactError):
        position = decoded.position if isinstance(decoded, CorruptDataError) else None
        message = decoded.message if isinstance(decoded, CorruptDataError) else str(decoded)
        yield problem_item(path, batch.position if position is None else position, message)
        return
    for record in decoded:
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
        The ``__cluster_metadata`` or ``__consumer_offsets`` decoder, else None.
    """
    parsed = parse_partition_dir_name(partition_dir_name)
    topic = None if parsed is None else parsed.topic
    if topic == METADATA_TOPIC:
        return _decode_metadata
    if topic == OFFSETS_TOPIC:
        return _decode_offsets
    return None


def _decode_metadata(record: Record) -> Item:
    return kraft_records.decode_metadata_record(record.value).as_json_dict()


def _decode_offsets(record: Record) -> Item:
    key = offsets_records.decode_offsets_key(record.key)
    value = offsets_records.decode_offsets_value(key, record.value)
    return {"key": offsets_records.as_json_dict(key), "value": offsets_records.as_json_dict(value)}


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


def problem_item(path: Path, position: int | None, message: str) -> Item:
    """A ``problem`` item: something in ``path`` at ``position`` is wrong."""
    return {"type": "problem", "file": str(path), "position": position, "message": message}


def warning_item(path: Path, message: str) -> Item:
    """A ``warning`` item about ``path``: worth knowing, not bad input."""
    return {"type": "warning", "file": str(path), "message": message}


def _dump_index(path: Path, kind: str, base_offset: int) -> Iterator[Item]:
    try:
        data = path.read_bytes()
    except OSError as err:
        yield problem_item(path, None, f"cannot read the file: {err.strerror or err}")
        return
    yield _file_item(path, kind, base_offset, len(data))
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
                yield {"type": "aborted_txn", "file": str(path), "version": txn.version,
                       "producer_id": txn.producer_id, "first_offset": txn.first_offset,
                       "last_offset": txn.last_offset, "last_stable_offset": txn.last_stable_offset}
    except CorruptDataError as err:
        yield problem_item(path, err.position, err.message)
