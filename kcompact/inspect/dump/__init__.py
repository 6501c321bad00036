"""``inspect dump``: the contents of segments, indexes, snapshots and checkpoints as a stream of JSON-ready items.

What ``kafka-dump-log`` prints, as data, for a ``.log``/``.index``/``.timeindex``/``.txnindex`` file or for
every segment of a partition directory; also for a producer ``.snapshot``, ``leader-epoch-checkpoint``,
the log dir's offset checkpoints and ``partition.metadata`` (their items: :mod:`kcompact.inspect.dump.other_files`),
and, for a ``.log`` or a partition, only the part a :class:`~kcompact.inspect.dump.window.DumpFilter` selects
(offsets, times, a key, ``--max-bytes``; :mod:`kcompact.inspect.dump.window`). Every item is a ``dict`` with a
``"type"``; names and key order are
part of kcompact's interface (``--json`` prints them as they are; tests/inspect/dump/test_dump.py fixes them):

* ``file`` — ``file, kind, base_offset, size_in_bytes``: starts the items of one file (kind ``log``,
  ``index``, ``timeindex``, ``txnindex``, or ``checkpoint`` for a KRaft snapshot, whose ``base_offset``
  is the end offset in its name; ``snapshot`` for a producer snapshot, ``leader-epoch-checkpoint``,
  ``offset-checkpoint``, ``partition-metadata`` with ``base_offset`` null), so an empty file still shows
  up; the entries of those four: ``producer_snapshot_entry``, ``leader_epoch_entry``,
  ``offset_checkpoint_entry``, ``partition_metadata`` (fields in :mod:`kcompact.inspect.dump.other_files`);
* ``batch`` — ``file, position, base_offset, last_offset, count, magic, compression, timestamp_type,
  is_control, is_transactional, producer_id, producer_epoch, base_sequence, partition_leader_epoch,
  max_timestamp, delete_horizon_ms, size_in_bytes, crc, crc_valid`` (a v0/v1 entry too: ``count`` is its
  message count, the producer fields -1, ``delete_horizon_ms`` null);
* ``record`` (after its batch, with ``records=True``) — ``offset, timestamp, key, value, headers
  [{key, value}], control, coordinator_epoch``; key, value and header values are base64 or null, header keys
  text; ``control`` is COMMIT/ABORT for transaction markers, the control type's name (LEADER_CHANGE,
  SNAPSHOT_HEADER, …, UNKNOWN) for other control records and null for data. Data records of
  ``__cluster_metadata`` (a segment or a KRaft ``.checkpoint`` snapshot), of ``__consumer_offsets`` and of
  ``__transaction_state`` get one more field, ``decoded`` (what kafka-dump-log's
  ``--cluster-metadata-decoder``, ``--offsets-decoder`` and ``--transaction-log-decoder`` show): the
  metadata record's ``{type, version, data}``, or ``{key, value}`` of an offsets or transaction log record
  (each ``{version, data}``; ``value`` null for a tombstone); null, with a ``problem`` item, when it does not
  decode. Records of other topics have no ``decoded`` field;
* ``offset_index_entry`` — ``file, offset, position``; ``time_index_entry`` — ``file, timestamp, offset``;
  ``aborted_txn`` — ``file, version, producer_id, first_offset, last_offset, last_stable_offset``;
* ``index_check`` (``verify_index=True``) — ``file, log_file, problems``: one index was compared with its
  segment's ``.log`` (``log_file`` null when the ``.log`` is missing) and ``problems`` items were found;
* ``problem`` — ``file, position, message``: bad input. A CRC failure is reported on the batch itself
  (``crc_valid: false``), not as a problem;
* ``warning`` — ``file, message``: worth knowing, not bad input (a live broker, a missing index, what is
  wrong with an index a broker starting on the log dir rebuilds: ``segment.startup_recovery``).

What is checked: the framing, header and CRC of every batch; with ``records=True`` also every record, the
record count and control records. The walk goes on past a bad entry whenever its frame (offset, size,
magic) is sound — that is all Kafka itself uses to step to the next batch — and stops where the frame breaks
(a size below 14, an unknown magic, an entry running past the end of the file).

The generator never raises for bad content inside a file: it yields ``problem`` items and goes on where the
framing allows. It raises :class:`~kcompact.errors.KcompactError` only for a path it cannot dump at all.

This module picks what to dump (a file by its kind, or every segment of a directory) and warns about a
live broker; the dumpers per file kind are :mod:`kcompact.inspect.dump.log` (``.log``, ``.checkpoint``)
:mod:`kcompact.inspect.dump.index` (indexes and ``--verify-index``) and
:mod:`kcompact.inspect.dump.other_files` (snapshots, checkpoints, ``partition.metadata``); the item
constructors are :mod:`kcompact.inspect.dump.items`.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Generator, Iterator
from pathlib import Path

from kcompact.errors import KcompactError, RefusedError
from kcompact.inspect.dump.index import check_index, check_segment_indexes, dump_index
from kcompact.inspect.dump.items import Item, warning_item
from kcompact.inspect.dump.log import dump_log, record_decoder
from kcompact.inspect.dump.other_files import NAMED_FILES, dump_named_file, dump_producer_snapshot
from kcompact.inspect.dump.window import DumpFilter, DumpWindow
from kcompact.segment.lock import BROKER_LOCK_FILE, broker_holds_lock
from kcompact.segment.names import SegmentFileName, parse_segment_file_name
from kcompact.segment.partition import METADATA_TOPIC, is_partition_dir, named_path, open_partition
from kcompact.segment.startup_recovery import recovered_at_start

__all__ = ["DUMPABLE_KINDS", "INDEX_KINDS", "dump_path"]

DUMPABLE_KINDS = ("log", "index", "timeindex", "txnindex", "checkpoint")
INDEX_KINDS = ("index", "timeindex", "txnindex")


def dump_path(
    path: str | os.PathLike[str], *, records: bool = False, verify_index: bool = False,
    selection: DumpFilter | None = None, all_files: bool = False,
) -> Iterator[Item]:
    """Dump a segment file, a producer snapshot, a checkpoint file or a whole partition directory.

    Args:
        path: the file (``.log``, ``.index``, ``.timeindex``, ``.txnindex``, a KRaft ``.checkpoint``
            snapshot, a producer ``.snapshot``, one of :data:`NAMED_FILES`) or partition directory.
        records: also yield every record after its batch.
        verify_index: check index files against the log: ``problem`` items for disagreements and one
            ``index_check`` item per index file.
        selection: which batches and records of a ``.log`` or partition to show (None: all); a
            ``key`` no record has ends the dump with a ``warning`` item saying so.
        all_files: of a partition directory, also every file in it besides the ``.log`` files.

    Yields:
        JSON-ready items as described in the module docstring.

    Raises:
        KcompactError: the path is none of those, or a selection is asked of a file without records.
        RefusedError: a selection whose ``from`` bound is after its ``to`` bound.
    """
    target = named_path(path)
    _check_bounds(target, selection)
    if selection is not None and selection.key is not None:
        found = 0
        for item in _dump_target(target, records, verify_index, selection, all_files):
            found += item["type"] == "record"
            yield item
        if not found:
            yield warning_item(target, f"no record has the key {_key_text(selection.key)}"
                               + ("" if selection == DumpFilter(key=selection.key) else " in the selected range"))
        return
    yield from _dump_target(target, records, verify_index, selection, all_files)


def _key_text(key: bytes) -> str:
    """A key as the user gave it: UTF-8 text, else ``base64:…``."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    return repr(text) if text and text.isprintable() else f"base64:{base64.b64encode(key).decode('ascii')}"


BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
"""KRaft's bootstrap metadata in ``metadata.log.dir`` (``BootstrapDirectory``: written by ``kafka-storage format``
with ``BatchFileWriter``, read with ``BatchFileReader``): metadata records in v2 batches, like a snapshot."""


def _dump_target(target: Path, records: bool, verify_index: bool, selection: DumpFilter | None,
                 all_files: bool) -> Iterator[Item]:
    window = None if selection is None or selection == DumpFilter() else DumpWindow(selection)
    if target.is_dir():
        if not is_partition_dir(target):
            raise KcompactError(
                f"{target}: not a partition directory; expected a <topic>-<partition> directory "
                f"or a .log, .index, .timeindex or .txnindex file")
        yield from _dump_partition(target, records, verify_index, window)
        if all_files:
            yield from _dump_other_files(target)
        return
    parsed = parse_segment_file_name(target.name)
    record_file = ((parsed is not None and parsed.kind in ("log", "checkpoint"))
                   or target.name == BOOTSTRAP_CHECKPOINT)
    if window is not None and not record_file:
        raise KcompactError(f"{target}: --from-offset, --to-offset, --from-time, --to-time, --key and "
                            f"--max-bytes select records; expected a .log file or a partition directory")
    if target.name in NAMED_FILES:
        yield from dump_named_file(target)
        return
    if target.name == BOOTSTRAP_CHECKPOINT:  # KRaft's bootstrap metadata: record batches from offset 0
        yield from dump_log(target, 0, records, record_decoder(f"{METADATA_TOPIC}-0"), live_active=False,
                            kind="checkpoint", window=window)
        return
    if parsed is not None and parsed.kind == "snapshot" and parsed.temp_suffix is None:
        yield from dump_producer_snapshot(target, parsed.base_offset)
        return
    if parsed is None or parsed.kind not in DUMPABLE_KINDS:
        raise KcompactError(
            f"{target}: not a segment file; expected <offset>.log, .index, .timeindex, "
            f".txnindex or .snapshot, a checkpoint file or partition.metadata")
    yield from _dump_file(target, parsed, records, verify_index, window)


def _check_bounds(target: Path, selection: DumpFilter | None) -> None:
    """Refuse a range that ends before it starts (it would show nothing, as if the log were empty)."""
    if selection is None:
        return
    for name, low, high in (("offset", selection.from_offset, selection.to_offset),
                            ("time", selection.from_time, selection.to_time)):
        if low is not None and high is not None and low > high:
            raise RefusedError(f"{target}: --from-{name} {low} is after --to-{name} {high}; expected "
                               f"--from-{name} at or below --to-{name}")


def _dump_file(target: Path, parsed: SegmentFileName, records: bool,
               verify_index: bool, window: DumpWindow | None = None) -> Iterator[Item]:
    live = yield from _live_check(target.parent.parent)
    live_active = live and _is_active(target, parsed)
    decoder = record_decoder(target.parent.name)
    if parsed.kind == "checkpoint":  # a KRaft snapshot: batches like a segment's, no indexes
        yield from dump_log(target, parsed.base_offset, records, decoder, live_active=False,
                            kind="checkpoint", window=window)
        return
    sibling = {kind: _sibling(target, parsed, kind) for kind in ("log", *INDEX_KINDS)}
    rebuilt = verify_index and not live and parsed.temp_suffix is None and (
        parsed.base_offset in _rebuilt_at_start(target.parent))
    if parsed.kind == "log":
        start = yield from _start(window, parsed.base_offset, None, target, sibling["index"],
                                  sibling["timeindex"])
        if start is None:
            return
        yield from dump_log(target, parsed.base_offset, records, decoder, live_active=live_active,
                            start=start, window=window)
        if verify_index:
            indexes = (sibling["index"], sibling["timeindex"], sibling["txnindex"])
            yield from check_segment_indexes(target, parsed.base_offset,
                                             tuple(p if p.exists() else None for p in indexes),
                                             live_active=live_active, rebuilt_at_start=rebuilt)
        return
    yield from dump_index(target, parsed.kind, parsed.base_offset)
    if verify_index:
        yield from check_index(target, parsed.base_offset, sibling["log"], live_active=live_active,
                               rebuilt_at_start=rebuilt)


def _rebuilt_at_start(directory: Path) -> frozenset[int]:
    """The base offsets of the segments of ``directory`` whose indexes a broker starting on its log dir rebuilds
    (``segment.startup_recovery``); none where it is no partition directory kcompact can read."""
    try:
        return recovered_at_start(open_partition(directory)) if is_partition_dir(directory) else frozenset()
    except KcompactError:
        return frozenset()


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


def _dump_partition(directory: Path, records: bool, verify_index: bool,
                    window: DumpWindow | None = None) -> Iterator[Item]:
    partition = open_partition(directory)
    live = yield from _live_check(directory.parent)
    decoder = record_decoder(directory.name)
    if not partition.segments:
        yield warning_item(directory, "no segment (no .log file): nothing to dump; a broker loading this "
                                      "directory creates an empty segment at its log start offset")
    segments = partition.segments
    rebuilt = recovered_at_start(partition) if verify_index and not live else frozenset()
    for number, segment in enumerate(segments):
        live_active = live and number == len(segments) - 1
        next_base = segments[number + 1].base_offset if number + 1 < len(segments) else None
        start = yield from _start(window, segment.base_offset, next_base, segment.log_path,
                                  segment.index_path, segment.time_index_path)
        if start is None:
            continue
        yield from dump_log(segment.log_path, segment.base_offset, records, decoder,
                            live_active=live_active, start=start, window=window)
        if verify_index:
            indexes = (segment.index_path, segment.time_index_path, segment.txn_index_path)
            yield from check_segment_indexes(segment.log_path, segment.base_offset, indexes,
                                             live_active=live_active,
                                             rebuilt_at_start=segment.base_offset in rebuilt)
    if verify_index:
        for orphan in partition.orphan_indexes:
            yield warning_item(orphan, "index file without its .log (an orphan a broker deletes at "
                                       "startup); not checked")


def _dump_other_files(directory: Path) -> Iterator[Item]:
    """Every file of a partition directory besides its ``.log`` files, in name order (``--all-files``)."""
    for path in sorted(p for p in directory.iterdir() if p.is_file()):
        parsed = parse_segment_file_name(path.name)
        if path.name in NAMED_FILES:
            yield from dump_named_file(path)
        elif parsed is None or parsed.temp_suffix is not None:
            yield warning_item(path, "not a file inspect dump reads; left out")
        elif parsed.kind in INDEX_KINDS:
            yield from dump_index(path, parsed.kind, parsed.base_offset)
        elif parsed.kind == "snapshot":
            yield from dump_producer_snapshot(path, parsed.base_offset)
        elif parsed.kind == "checkpoint":  # a KRaft snapshot
            yield from dump_log(path, parsed.base_offset, False, record_decoder(directory.name),
                                live_active=False, kind="checkpoint")


def _start(window: DumpWindow | None, base_offset: int, next_base: int | None, log_path: Path,
           index_path: Path | None, time_index_path: Path | None) -> Generator[Item, None, int | None]:
    """Where the walk of a segment starts (None: skip it); a warning when its index entry was wrong."""
    if window is None:
        return 0
    found = window.start_position(base_offset, next_base, log_path, index_path, time_index_path)
    if found is not None and found.note is not None and index_path is not None:
        yield warning_item(index_path, found.note)
    return None if found is None else found.position


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
