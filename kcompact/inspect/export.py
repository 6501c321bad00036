"""A partition's (or log dir's) records as columns, and ``kcompact export``: them as Parquet, in-process.

The records come from kcompact's format layer only (``LogFile.iter_batches``, ``decode_records`` for
v2, ``legacy_records`` for magic 0/1, every codec), segment by segment. ``spark export`` reads them
with the same functions on its executors (``kcompact.spark.datasource``); ``kcompact export`` reads
them here and writes Parquet with pyarrow (imported when it runs: the ``export`` or ``spark`` extra),
without Spark's start-up. One row per record::

    topic string, partition int, offset bigint, timestamp bigint,    (timestamp -1 for magic 0)
    key binary, value binary,                                        (null key / null value kept)
    headers array<struct<key: string, value: binary>>,               (key UTF-8, as Kafka's String)
    is_tombstone boolean,                                            (value is null)
    is_control boolean, is_transactional boolean, producer_id bigint (the batch's; legacy: false, -1)

Two isolation levels:

* ``read_uncommitted`` (the plain export): every record stored in the segments, control records and
  aborted transactions included, flagged — a faithful copy of the log;
* ``read_committed`` (what ``--latest`` reads): what a read_committed consumer fetching from the
  log start receives — offsets at or above the partition's log start offset and below its last stable
  offset, no control records, no records of aborted transactions. A broker answers a read_committed
  fetch with nothing at or above the last stable offset (``UnifiedLog.read`` with
  ``FetchIsolation.TXN_COMMITTED``): ``UnifiedLog.lastStableOffset``, the first offset of the earliest
  transaction that is undecided (no COMMIT/ABORT marker) or decided but whose marker is not yet below
  the high watermark (``ProducerStateManager.firstUnstableOffset``), else the high watermark. So the
  view stops there, even where later records are plainly committed: a consumer reads none of them
  until that transaction ends. The high watermark is the log dir's ``replication-offset-checkpoint``
  entry; a partition without one is bounded by its open transactions and its log end only (what a
  broker would have is unknown offline), and says so. :class:`ViewStop` says, per partition, where
  the view stops and why (the rule is ``kcompact.log.rules.producer_state``'s, fed by
  ``kcompact.log.state.log_state``). Transactions are the spans ``log_state`` finds in the log
  (first data batch to COMMIT/ABORT marker).

``--latest`` then keeps, per (topic, partition, key), the record with the highest offset, and drops
it when it is a tombstone: the table a consumer reading the partition from the start ends up with.
Keyless records have no place in that table and are left out.

A segment is read twice, by the check and by the export, and must be the same file both times: its size and
a cheap identity are taken when it is listed (``SegmentRef``, ``kcompact.segment.stamp``: for a local file its
modification and change times and inode, for an object its ETag or modification time) and compared again when
each pass opens it and when it is done with it. A segment that changed before the check's end (a broker or a
copy still writing it, an object replaced) leaves its partition out as an :class:`ExportFailure`; one that
changed after it stops the export, leaving nothing: without this, an object cut at a batch boundary between the
passes still parsed, and its partition was exported short, without a word.

Corrupt data is never exported as data. Every batch's CRC (CRC-32C for v2, CRC-32 for a legacy entry)
is checked before its records are read, and a partition is checked whole (:func:`check_segments`)
before any of its rows is written: one that fails is left out whole, as a :class:`ExportFailure`
naming the file and byte position (``inspect dirty-ratio``'s failed row, ``clean``'s ``failures``), and
the others are exported; the command then exits 2. A partition named alone that fails, or every
partition failing, is the error itself: nothing is written. A batch that passes its CRC but whose
records do not parse (bytes a faulty writer produced) stops the export, leaving nothing either.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from kcompact.config.sources import ConfigSources
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CorruptDataError, KcompactError, RefusedError, UnsupportedFormatError
from kcompact.log.rules.high_watermark import SoleReplica, sole_replica_from_metadata, sole_replica_of
from kcompact.log.state.log_state import (
    HW_FROM_CHECKPOINT,
    HW_FROM_SOLE_REPLICA,
    LogState,
    TxnSpan,
    load_log_state,
)
from kcompact.records.batch_header import RecordBatch
from kcompact.records.legacy import LegacyEntry, legacy_records
from kcompact.records.record import Record, decode_records
from kcompact.segment.files import replacing
from kcompact.segment.log_file import LogFile, crc_error_or
from kcompact.segment.names import parse_partition_dir_name, segment_file_name
from kcompact.segment.partition import (
    METADATA_TOPIC,
    Partition,
    is_partition_dir,
    open_partition,
)
from kcompact.segment.partition_filter import PartitionFilter, require_partition_dirs
from kcompact.segment.progress import ProgressCallback, ReadProgress, read_progress
from kcompact.segment.remote import (
    LocalInputs,
    RemoteFile,
    StorageOptions,
    list_remote,
    mirrored,
    named_as_url,
    remote_partition_dirs,
    remote_segments,
    remote_stamp,
)
from kcompact.segment.stamp import local_stamp, refuse_changed
from kcompact.segment.url import is_url
from kcompact.value import frozen

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)
CHUNK_ROWS = 8192  # records per Arrow batch
SPLIT_BYTES = 64 * 1024 * 1024  # segment bytes per Spark input partition (a bigger segment is one alone)

EXPORT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "bigint"),
    ("key", "binary"),
    ("value", "binary"),
    ("headers", "array<struct<key: string, value: binary>>"),
    ("is_tombstone", "boolean"),
    ("is_control", "boolean"),
    ("is_transactional", "boolean"),
    ("producer_id", "bigint"),
)


@frozen
class SegmentRef:
    """One segment to read (a Spark input partition reads one or more), as listed.

    Attributes:
        partition_dir: its partition directory (a URL for a remote one).
        base_offset: its base offset (its file name).
        size_in_bytes: its ``.log``'s size when listed.
        identity: its ``.log``'s identity when listed (``kcompact.segment.stamp``; "": its size only is checked).
    """

    partition_dir: str
    base_offset: int
    size_in_bytes: int
    identity: str = ""



@frozen
class ExportFailure:
    """A partition left out of an export: the first of its batches that fails (its CRC, or framing).

    Attributes:
        partition_dir: the partition directory (as listed: a URL for a remote one).
        error: the error, naming the file and byte position (picklable: Spark tasks return it).
    """

    partition_dir: str
    error: KcompactError

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` form: ``partition_dir`` and ``error`` (the one-line message)."""
        return {"partition_dir": self.partition_dir, "error": str(self.error)}


STOP_OPEN_TRANSACTION = "open transaction"
STOP_UNREPLICATED_TRANSACTION = "transaction marker not below the high watermark"
STOP_HIGH_WATERMARK = "high watermark"
STOP_LOG_END = "log end"


@frozen
class ViewStop:
    """Where a partition's read_committed view stops (its last stable offset), and why.

    Attributes:
        partition_dir: the partition directory (as listed: a URL for a remote one).
        topic: its topic.
        partition: its partition number.
        stops_at: the first offset left out (records below it are read, none at or above it).
        reason: :data:`STOP_OPEN_TRANSACTION` (a transaction without a marker),
            :data:`STOP_UNREPLICATED_TRANSACTION` (its marker is at or above the high watermark),
            :data:`STOP_HIGH_WATERMARK` or :data:`STOP_LOG_END`.
        log_end_offset: the partition's log end offset.
        high_watermark: its ``replication-offset-checkpoint`` entry (capped at the log end); None when
            it has none (then only transactions and the log end bound the view).
        producer_id: the transaction's producer (a transaction reason), else None.
        first_offset: the transaction's first offset (a transaction reason), else None.
    """

    partition_dir: str
    topic: str
    partition: int
    stops_at: int
    reason: str
    log_end_offset: int
    high_watermark: int | None
    producer_id: int | None = None
    first_offset: int | None = None
    high_watermark_note: str | None = None  # why the high watermark is the log end (a sole replica, as clean says)

    def describe(self) -> str:
        """One sentence: where the view stops and why (``orders-0: read_committed view stops …``)."""
        head = f"{self.topic}-{self.partition}: the read_committed view stops at offset {self.stops_at}"
        if self.reason == STOP_OPEN_TRANSACTION:
            why = (f"producer {self.producer_id}'s transaction from offset {self.first_offset} has no "
                   f"COMMIT or ABORT marker (a consumer reads nothing at or after it until it ends)")
        elif self.reason == STOP_UNREPLICATED_TRANSACTION:
            why = (f"producer {self.producer_id}'s transaction from offset {self.first_offset} has its "
                   f"marker at or above the high watermark {self.high_watermark} (not yet replicated)")
        elif self.reason == STOP_HIGH_WATERMARK:
            why = f"the high watermark (replication-offset-checkpoint; the log ends at {self.log_end_offset})"
        else:
            why = "the log end"
        unknown = ("" if self.high_watermark is not None else
                   "; no high watermark in replication-offset-checkpoint: bounded by the last stable "
                   "offset and the log end only")
        note = f"; {self.high_watermark_note}" if self.high_watermark_note else ""
        return f"{head}: {why}{unknown}{note}"

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` form: every attribute, and ``text`` (:meth:`describe`)."""
        return {"partition_dir": self.partition_dir, "topic": self.topic, "partition": self.partition,
                "stops_at": self.stops_at, "reason": self.reason, "producer_id": self.producer_id,
                "first_offset": self.first_offset, "high_watermark": self.high_watermark,
                "log_end_offset": self.log_end_offset, "high_watermark_note": self.high_watermark_note,
                "text": self.describe()}


def view_stop(state: LogState, partition_dir: str | None = None) -> ViewStop:
    """Where a read_committed consumer's view of a loaded partition stops: Kafka's last stable offset.

    Args:
        state: the partition as loaded (its producer state replayed with the high watermark).
        partition_dir: the name to report it under (None: its local path).

    Returns:
        The :class:`ViewStop` (never below the log start offset, never above the log end).
    """
    partition = state.partition
    has_hw = state.high_watermark_source in (HW_FROM_CHECKPOINT, HW_FROM_SOLE_REPLICA)
    lso = max(state.log_start_offset,
              state.producers.last_stable_offset(log_end_offset=state.log_end_offset))
    stop = ViewStop(str(partition.path) if partition_dir is None else partition_dir, partition.topic,
                    partition.partition, lso, STOP_LOG_END, state.log_end_offset,
                    state.high_watermark if has_hw else None, high_watermark_note=state.high_watermark_note)
    pending = state.open_transaction()
    if pending is not None and max(pending.first_offset, state.log_start_offset) == lso:
        undecided = any(t.first_offset == pending.first_offset for t in state.producers.open_transactions())
        return replace(stop, reason=STOP_OPEN_TRANSACTION if undecided else STOP_UNREPLICATED_TRANSACTION,
                       producer_id=pending.producer_id, first_offset=pending.first_offset)
    if lso < state.log_end_offset:
        return replace(stop, reason=STOP_HIGH_WATERMARK)
    return stop


@frozen
class ExportSummary:
    """What ``kcompact export`` or ``spark export`` wrote (``partitions``: those exported), and the
    partitions it left out (``failures``: the command exits 2)."""

    output: str
    records: int
    partitions: int
    segments: int
    latest: bool
    failures: tuple[ExportFailure, ...] = ()
    stops: tuple[ViewStop, ...] = ()  # with ``latest``: where each exported partition's view stops

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` form (``failures`` as :meth:`ExportFailure.as_dict`, ``stops`` as
        :meth:`ViewStop.as_dict`: empty without ``latest``)."""
        return {"output": self.output, "records": self.records, "partitions": self.partitions,
                "segments": self.segments, "latest": self.latest,
                "failures": [failure.as_dict() for failure in self.failures],
                "stops": [stop.as_dict() for stop in self.stops]}


def list_segments(paths: Iterable[str | Path], storage_options: StorageOptions | None = None,
                  selection: PartitionFilter | None = None) -> list[SegmentRef]:
    """The non-empty segments of the partitions under ``paths``, partition by partition.

    A log dir contributes its live partitions (not ``-delete``/``-future``/``-stray`` directories, not
    ``__cluster_metadata``); a partition directory named explicitly is always read.

    Args:
        paths: partition directories and/or log dirs, local or URLs (``s3://…``, see
            ``kcompact.segment.remote``).
        storage_options: fsspec options for the URLs.
        selection: keep only the partitions it matches (``--topic`` …; None: all).

    Returns:
        One reference per segment holding bytes, in offset order within each partition.

    Raises:
        KcompactError: a path is neither a partition directory nor a log dir (a directory holding no
            partition directory is not one).
    """
    refs: list[SegmentRef] = []
    paths = list(paths)
    options = storage_options or {}
    listings = list_remote([str(raw) for raw in paths if is_url(raw)], options)  # once each, in parallel
    for raw in paths:
        if is_url(raw):
            listing = listings[str(raw).rstrip("/")]
            refs += [SegmentRef(part, base, size, identity)
                     for part in remote_partition_dirs(str(raw), options, listing)
                     if selection is None or selection.matches_dir(part)
                     for base, size, identity in remote_segments(part, options, listing) if size > 0]
            continue
        path = Path(raw).absolute()  # executors run elsewhere: no path relative to the driver's cwd
        if is_partition_dir(path):
            parts = [open_partition(path)]
        elif path.is_dir():
            parts = [p for p in map(open_partition, require_partition_dirs(path))
                     if p.name.kind == "live" and p.topic != METADATA_TOPIC]
        else:
            raise KcompactError(f"{path}: not a log dir or partition directory")
        if selection is not None:
            parts = [p for p in parts if selection.matches_dir(p.path)]
        refs += [_local_ref(p.path, s.base_offset) for p in parts for s in p.segments if s.size_in_bytes > 0]
    return refs


def _local_ref(partition_dir: Path, base_offset: int) -> SegmentRef:
    """A local segment as listed: its size and identity now (``kcompact.segment.stamp``)."""
    size, identity = local_stamp(partition_dir / segment_file_name(base_offset, "log"))
    return SegmentRef(str(partition_dir), base_offset, size, identity)


def split_segments(refs: Sequence[SegmentRef], split_bytes: int = SPLIT_BYTES) -> list[tuple[SegmentRef, ...]]:
    """Consecutive segments packed into splits of at most ``split_bytes`` (a bigger one alone).

    Args:
        refs: segments in reading order.
        split_bytes: the most bytes of segments per split.

    Returns:
        The splits, in order; together they hold every reference once.
    """
    splits: list[tuple[SegmentRef, ...]] = []
    current: list[SegmentRef] = []
    size = 0
    for ref in refs:
        if current and size + ref.size_in_bytes > split_bytes:
            splits.append(tuple(current))
            current, size = [], 0
        current.append(ref)
        size += ref.size_in_bytes
    if current:
        splits.append(tuple(current))
    return splits


def by_partition(refs: Sequence[SegmentRef]) -> list[tuple[SegmentRef, ...]]:
    """``refs`` cut where the partition changes (list order keeps a partition's segments together)."""
    groups: list[list[SegmentRef]] = []
    for ref in refs:
        if not groups or groups[-1][0].partition_dir != ref.partition_dir:
            groups.append([])
        groups[-1].append(ref)
    return [tuple(group) for group in groups]


def check_segments(refs: Sequence[SegmentRef], storage_options: StorageOptions | None = None
                   ) -> KcompactError | None:
    """The first batch of these segments that fails its CRC or does not frame, as its error.

    One walk over the batch headers and a CRC over every byte, no record decoded: cheap next to the
    export's decoding, and done before a partition's first row is written so that a corrupt one is
    left out whole. A segment behind a URL is read by range (its bytes once, nothing else).

    Args:
        refs: segments (usually one partition's, in offset order).
        storage_options: fsspec options for segments behind URLs.

    Returns:
        The error (naming the file, or the URL, and byte position), or None when every batch passes.
    """
    for ref in refs:
        try:
            with open_segment(ref, storage_options) as log:
                for batch in log.iter_batches():
                    log.check_crc(batch)
            refuse_changed_segment(ref, log)
        except KcompactError as err:
            return named_as_url(err, ref.partition_dir) if is_url(ref.partition_dir) else err
    return None


def open_segment(ref: SegmentRef, storage_options: StorageOptions | None = None) -> LogFile:
    """A segment's ``.log``: a local file, or (behind a URL) an object read by byte range whose errors
    name it by :func:`kcompact.segment.remote.stand_in` until :func:`~kcompact.segment.remote.named_as_url`;
    the file as listed (``ref``'s size and identity, see the module docstring).

    Raises:
        KcompactError: the file cannot be read, or is no longer the one listed (naming it).
    """
    listed = (ref.size_in_bytes, ref.identity)
    if not is_url(ref.partition_dir):
        log = LogFile(segment_log_path(ref))
        _closing_on_error(log, lambda: refuse_changed(str(log.path), listed, local_stamp(log.path)))
        return log
    url = f"{ref.partition_dir.rstrip('/')}/{segment_file_name(ref.base_offset, 'log')}"
    options = dict(storage_options or {})
    log = LogFile(RemoteFile(url, ref.size_in_bytes, tuple(sorted(options.items()))))
    # the bytes are all read: what stood there as they were read, by the count and the store's word (named by
    # the stand-in path, as every error of the format layer, which named_as_url turns into the URL)
    named = str(log.path)
    if log.size_in_bytes != ref.size_in_bytes:
        _closing_on_error(log, lambda: refuse_changed(named, listed, (log.size_in_bytes, ref.identity)))
    if ref.identity:
        _closing_on_error(log, lambda: refuse_changed(named, listed, remote_stamp(url, options)))
    return log


def refuse_changed_segment(ref: SegmentRef, log: LogFile) -> None:
    """At the end of a pass over a segment :func:`open_segment` opened: a local file mapped, not read whole,
    is still the one listed (a remote one was read whole when opened).

    Raises:
        KcompactError: it changed (naming it).
    """
    if not is_url(ref.partition_dir):
        refuse_changed(str(log.path), (ref.size_in_bytes, ref.identity), local_stamp(log.path))


def _closing_on_error(log: LogFile, check: Callable[[], None]) -> None:
    try:
        check()
    except BaseException:
        log.close()
        raise


def split_report(refs: Sequence[SegmentRef], storage_options: StorageOptions | None = None, *,
                 views_for: Collection[str] = (), sole_replica: bool = False
                 ) -> tuple[list[ExportFailure], list[CommittedView]]:
    """:func:`check_segments` per partition of a split, as failures, and the read_committed view of each
    sound partition named in ``views_for`` (where it stops, what it skips).

    A segment behind a URL is read by range: the split's own bytes. A view needs the partition's whole log
    (every batch header, its indexes, snapshots and log dir checkpoints: ``log.state.log_state``), so a
    partition behind a URL is copied for it, once, by the one task that the caller names it to.

    Args:
        refs: the split's segments.
        storage_options: fsspec options for segments behind URLs.
        views_for: the partition directories (as listed) whose :class:`CommittedView` this split finds.
        sole_replica: ``--sole-replica``, as :meth:`CommittedView.of_partition` takes it.

    Returns:
        The failures, and the views of the partitions of ``views_for`` that do not fail (named as given).
    """
    failures: list[ExportFailure] = []
    views: list[CommittedView] = []
    for group in by_partition(refs):
        given = group[0].partition_dir
        err = check_segments(group, storage_options)
        if err is not None:
            failures.append(ExportFailure(given, err))
        elif given in views_for:
            views.append(CommittedView.of(given, storage_options, sole_replica=sole_replica))
    return failures, views


def segment_log_path(ref: SegmentRef) -> Path:
    """The ``.log`` file of a (local) segment reference."""
    return Path(ref.partition_dir) / segment_file_name(ref.base_offset, "log")


def _named_as_given(err: KcompactError, local_dir: str, given: str) -> KcompactError:
    """An error about a local mirror's file, naming the file under the URL the user gave instead (in its
    message too: a CRC error's advice names the partition directory)."""
    return LocalInputs((), ((local_dir, given),)).named_error(err)


def iter_split_columns(refs: Sequence[SegmentRef], isolation: str = READ_UNCOMMITTED,
                       chunk_rows: int = CHUNK_ROWS, storage_options: StorageOptions | None = None,
                       views: Mapping[str, CommittedView] | None = None) -> Iterator[dict[str, list[Any]]]:
    """:func:`iter_segment_columns` over a split's segments, each partition's transactions found once.

    Args:
        refs: the split's segments.
        isolation: :data:`READ_UNCOMMITTED` or :data:`READ_COMMITTED`.
        chunk_rows: the most records per yielded chunk.
        storage_options: fsspec options for segments behind URLs (read by byte range: the split's own).
        views: the read_committed views already found, by partition directory (``spark export`` finds
            them in its first job); a partition without one has its view found here.

    Yields:
        Column chunks, segment after segment.
    """
    committed: dict[str, CommittedView] = dict(views or {})
    for ref in refs:
        yield from iter_segment_columns(ref, isolation, chunk_rows, committed, storage_options)


def iter_segment_columns(
    ref: SegmentRef,
    isolation: str = READ_UNCOMMITTED,
    chunk_rows: int = CHUNK_ROWS,
    committed_cache: dict[str, CommittedView] | None = None,
    storage_options: StorageOptions | None = None,
) -> Iterator[dict[str, list[Any]]]:
    """The records of one segment as column lists (:data:`EXPORT_COLUMNS`), ``chunk_rows`` at a time.

    Args:
        ref: the segment (behind a URL: read by byte range, its own bytes only).
        isolation: :data:`READ_UNCOMMITTED` or :data:`READ_COMMITTED` (see the module docstring).
        chunk_rows: the most records per yielded chunk.
        committed_cache: read_committed views by partition directory, reused across segments.
        storage_options: fsspec options for a segment behind a URL.

    Yields:
        ``{column: [values…]}`` chunks, in offset order.

    Raises:
        CorruptDataError: a batch fails its CRC (``BatchCrcError``), or a batch or record does not
            parse (names the file, or the URL, and position).
    """
    try:
        yield from _segment_columns(ref, isolation, chunk_rows, committed_cache, storage_options)
    except KcompactError as err:
        if not is_url(ref.partition_dir):
            raise
        raise named_as_url(err, ref.partition_dir) from err


def _segment_columns(ref: SegmentRef, isolation: str, chunk_rows: int,
                     committed_cache: dict[str, CommittedView] | None,
                     storage_options: StorageOptions | None) -> Iterator[dict[str, list[Any]]]:
    name = parse_partition_dir_name(ref.partition_dir.rstrip("/").rsplit("/", 1)[-1])
    if name is None:
        raise KcompactError(f"{ref.partition_dir}: not a partition directory")
    committed = None
    if isolation == READ_COMMITTED:
        cache = {} if committed_cache is None else committed_cache
        committed = cache.get(ref.partition_dir) or cache.setdefault(
            ref.partition_dir, CommittedView.of(ref.partition_dir, storage_options))
    columns = _empty_columns()
    with open_segment(ref, storage_options) as log:
        for batch in log.iter_batches():
            if committed is not None and not committed.keeps_batch(batch):
                continue
            log.check_crc(batch)  # never a flipped byte exported as data
            for record in _records(batch, log.path):
                if committed is None or committed.keeps_record(record.offset):
                    _append(columns, name.topic, name.partition, batch, record)
            if len(columns["offset"]) >= chunk_rows:
                yield columns
                columns = _empty_columns()
    refuse_changed_segment(ref, log)
    if columns["offset"]:
        yield columns


def _empty_columns() -> dict[str, list[Any]]:
    return {name: [] for name, _ in EXPORT_COLUMNS}


def _records(batch: RecordBatch | LegacyEntry, path: Path) -> list[Record]:
    try:
        if isinstance(batch, LegacyEntry):
            return legacy_records(batch)
        return decode_records(batch)
    except CorruptDataError as err:
        raise crc_error_or(err, path, batch) from err


def _append(columns: dict[str, list[Any]], topic: str, partition: int, batch: RecordBatch | LegacyEntry,
            record: Record) -> None:
    columns["topic"].append(topic)
    columns["partition"].append(partition)
    columns["offset"].append(record.offset)
    columns["timestamp"].append(record.timestamp)
    columns["key"].append(record.key)
    columns["value"].append(record.value)
    columns["headers"].append([{"key": h.key.decode("utf-8", "replace"), "value": h.value}
                               for h in record.headers])
    columns["is_tombstone"].append(record.value is None)
    columns["is_control"].append(batch.is_control)
    columns["is_transactional"].append(batch.is_transactional)
    columns["producer_id"].append(batch.producer_id)


@frozen
class CommittedView:
    """What a read_committed consumer skips: control batches, aborted transactions, and everything at
    or above the last stable offset (``stop``). Small and picklable (a Spark job finds it, another reads
    with it): of the transactions only those that are not committed are kept — a committed one's batches
    are read whichever span they fall in, so the earlier kept span a search lands on reads them too.

    Attributes:
        log_start_offset: the partition's log start offset.
        spans: producer id -> its aborted or undecided transactions, by first offset.
        stop: where the view stops (named as the partition directory was given).
    """

    log_start_offset: int
    spans: dict[int, list[TxnSpan]]
    stop: ViewStop

    @classmethod
    def of(cls, partition_dir: str, storage_options: StorageOptions | None = None, *,
           sole_replica: bool = False) -> CommittedView:
        """The view of a partition directory; one behind a URL is copied whole to a local temporary
        directory for it (its whole log's batch headers, indexes, snapshots and log dir checkpoints).

        Raises:
            KcompactError: the partition does not load (naming the file, or the URL).
        """
        if not is_url(partition_dir):
            return cls.of_partition(open_partition(partition_dir), partition_dir, sole_replica=sole_replica)
        with mirrored([partition_dir], storage_options or {}) as local:
            here = str(local[partition_dir])
            try:
                return cls.of_partition(open_partition(here), partition_dir, sole_replica=sole_replica)
            except KcompactError as err:
                raise _named_as_given(err, here, partition_dir) from err

    @classmethod
    def of_partition(cls, partition: Partition, partition_dir: str, *, sole_replica: bool = False) -> CommittedView:
        """The view of a (local) partition, its stop named ``partition_dir``; a partition whose only replica is
        this broker (``sole_replica``: ``--sole-replica``) has its log end as its high watermark, as in ``clean``."""
        state = load_log_state(partition, TopicConfig.defaults(), sole_replica=_sole_replica(partition, sole_replica))
        spans: dict[int, list[TxnSpan]] = {}
        for span in state.transactions:
            if span.marker_offset is None or span.aborted:
                spans.setdefault(span.producer_id, []).append(span)
        for found in spans.values():
            found.sort(key=lambda s: s.first_offset)
        return cls(state.log_start_offset, spans, view_stop(state, partition_dir))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able form (:meth:`from_dict` reads it back)."""
        return {"log_start_offset": self.log_start_offset,
                "spans": [[s.producer_id, s.producer_epoch, s.first_offset, s.first_timestamp_ms, s.marker_offset,
                           s.aborted] for found in self.spans.values() for s in found],
                "stop": {f.name: getattr(self.stop, f.name) for f in fields(ViewStop)}}

    @classmethod
    def from_dict(cls, found: Mapping[str, Any]) -> CommittedView:
        """The view :meth:`as_dict` wrote."""
        spans: dict[int, list[TxnSpan]] = {}
        for pid, epoch, first, first_ts, marker, aborted in found["spans"]:
            spans.setdefault(pid, []).append(TxnSpan(pid, epoch, first, first_ts, marker, aborted))
        return cls(int(found["log_start_offset"]), spans, ViewStop(**found["stop"]))

    def keeps_record(self, offset: int) -> bool:
        return self.log_start_offset <= offset < self.stop.stops_at

    def keeps_batch(self, batch: RecordBatch | LegacyEntry) -> bool:
        if batch.is_control or batch.last_offset < self.log_start_offset:
            return False
        if batch.base_offset >= self.stop.stops_at:
            return False
        if not batch.is_transactional or batch.producer_id < 0:
            return True
        spans = self.spans.get(batch.producer_id, [])
        i = bisect.bisect_right([s.first_offset for s in spans], batch.base_offset) - 1
        if i < 0:
            return True  # a transaction begun before anything left in the log: its marker is gone too
        span = spans[i]
        if span.marker_offset is not None and batch.base_offset > span.marker_offset:
            return True
        return span.marker_offset is not None and not span.aborted


def arrow_schema() -> Any:
    """:data:`EXPORT_COLUMNS` as a pyarrow schema (pyarrow imported here: the ``export`` or ``spark`` extra).

    Raises:
        UnsupportedFormatError: pyarrow is not installed.
    """
    pa = _pyarrow()
    return pa.schema([
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("is_tombstone", pa.bool_()),
        ("is_control", pa.bool_()),
        ("is_transactional", pa.bool_()),
        ("producer_id", pa.int64()),
    ])


def refuse_output_in_log_dir(output: Path, paths: Iterable[str | Path]) -> None:
    """Refuse an output directory inside a log dir or partition directory the export reads.

    A broker refuses to start on a log dir holding a directory it cannot parse as a partition
    (``LogManager.loadLogs``), and a partition directory holds only the files Kafka names.

    Args:
        output: the ``--output`` directory (local).
        paths: the export's inputs; URLs are skipped.

    Raises:
        RefusedError: ``output`` lies inside an input log dir, an input partition directory, or the
            log dir holding one.
    """
    where = Path(os.path.abspath(output))
    for raw in paths:
        if is_url(raw):
            continue
        path = Path(os.path.abspath(raw))
        for directory in (path, path.parent) if is_partition_dir(path) else (path,):
            if where.is_relative_to(directory):
                raise RefusedError(f"{output}: inside {directory}, which the export reads: a broker refuses "
                                   "to start on a log dir holding a directory it does not know; write the "
                                   "export elsewhere")


def export_parquet(paths: Iterable[str | Path], output: str | Path, *, latest: bool = False,
                   progress: ProgressCallback | None = None,
                   selection: PartitionFilter | None = None,
                   storage_options: StorageOptions | None = None, sole_replica: bool = False) -> ExportSummary:
    """Write the records under ``paths`` (or, with ``latest``, their compacted view) as Parquet, in-process.

    The output is a directory holding one ``part-00000.parquet`` (the shape Spark writes, so either
    reads the other's), written under a temporary name and renamed into place when complete: a failed
    export leaves nothing at ``output``. Each partition is checked (:func:`check_segments`) before its
    first row is written; one that fails is left out whole and named in ``failures``.

    Args:
        paths: partition directories and/or log dirs, local or URLs (``s3://…``: each segment read by
            byte range, once for the check and once for the export; with ``latest`` each partition is
            copied to a local temporary directory while it is read, one at a time, see
            ``kcompact.segment.remote``).
        output: a new local directory.
        latest: the latest live value per key (read_committed: below each partition's last stable
            offset, see :class:`ViewStop`), as ``spark export --latest``.
        progress: called with the segment bytes read so far.
        selection: export only the partitions it matches (``--topic`` …; None: all).
        storage_options: fsspec options for the URLs.
        sole_replica: ``--sole-replica``: with ``latest``, a partition whose only replica is this broker (the
            KRaft metadata says so, or this flag where it says nothing) is read to its log end, its high
            watermark as ``clean`` takes it (the stop's ``high_watermark_note`` says why).

    Returns:
        The :class:`ExportSummary` (``failures``: the partitions left out).

    Raises:
        KcompactError: ``output`` exists, a path is not a partition or log dir, the one partition (or
            every partition) fails its check (that error), or a segment does not parse.
        UnsupportedFormatError: pyarrow is not installed.
    """
    target = Path(output)
    if target.exists():
        raise KcompactError(f"{output}: the --output directory; expected a new path, found it exists")
    refuse_output_in_log_dir(target, paths)
    refs = list_segments(paths, storage_options, selection)
    pa, schema = _pyarrow(), arrow_schema()
    import pyarrow.parquet as pq

    failures: list[ExportFailure] = []
    stops: list[ViewStop] = []
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacing(target, target.with_name(f".{target.name}.kcompact-{os.getpid()}.tmp")) as temporary:
        temporary.mkdir()
        records = 0
        with pq.ParquetWriter(temporary / "part-00000.parquet", schema) as writer:
            for columns in _export_chunks(refs, latest, read_progress(progress, "records", _total(refs)),
                                          failures, stops, storage_options or {}, sole_replica):
                records += len(columns["offset"])
                writer.write_batch(pa.RecordBatch.from_pydict(columns, schema=schema))
        refuse_all_failed(refs, failures)
    bad = {failure.partition_dir for failure in failures}
    exported = [ref for ref in refs if ref.partition_dir not in bad]
    return ExportSummary(str(output), records, len({r.partition_dir for r in exported}), len(exported), latest,
                         tuple(failures), tuple(stops))


def refuse_all_failed(refs: Sequence[SegmentRef], failures: Sequence[ExportFailure]) -> None:
    """Raise the first failure when no partition is left to export (one named alone that fails).

    Raises:
        KcompactError: the first failure's error, when every partition of ``refs`` failed.
    """
    if failures and len({ref.partition_dir for ref in refs}) == len({f.partition_dir for f in failures}):
        raise failures[0].error


def _export_chunks(refs: Sequence[SegmentRef], latest: bool, progress: ReadProgress | None,
                   failures: list[ExportFailure], stops: list[ViewStop], storage_options: StorageOptions,
                   sole_replica: bool = False) -> Iterator[dict[str, list[Any]]]:
    """Every record's columns, or per partition the latest live record per key (offset order, with its
    :class:`ViewStop` appended to ``stops``); a partition that fails :func:`check_segments` is appended
    to ``failures`` instead. A partition behind a URL is read by byte range (each segment once per pass:
    the check, the export); with ``latest`` it is copied whole while it is read, its view needing every
    file of it (:meth:`CommittedView.of`)."""
    for group in by_partition(refs):
        given = group[0].partition_dir
        if not is_url(given) or not latest:
            yield from _partition_chunks(group, latest, progress, failures, stops, storage_options,
                                         sole_replica=sole_replica)
            continue
        with mirrored([given], storage_options) as local:
            here = str(local[given])
            named: list[ExportFailure] = []
            local_stops: list[ViewStop] = []
            try:
                copies = [_mirrored_ref(ref, here, storage_options) for ref in group]
            except KcompactError as err:
                failures.append(ExportFailure(given, _named_as_given(err, here, given)))
                if progress is not None:
                    progress.advance(_total(group))
                continue
            yield from _partition_chunks(copies, latest, progress, named, local_stops, sole_replica=sole_replica)
            failures += [ExportFailure(given, _named_as_given(f.error, here, given)) for f in named]
            stops += [replace(stop, partition_dir=given) for stop in local_stops]
    if progress is not None:
        progress.finish()


def _mirrored_ref(ref: SegmentRef, here: str, storage_options: StorageOptions) -> SegmentRef:
    """A remote segment's reference as its local copy under ``here``: the object still as listed, the copy
    its size (the passes then check the copy, which nothing else writes).

    Raises:
        KcompactError: the object changed since it was listed (naming its URL).
    """
    url = f"{ref.partition_dir.rstrip('/')}/{segment_file_name(ref.base_offset, 'log')}"
    listed = (ref.size_in_bytes, ref.identity)
    refuse_changed(url, listed, remote_stamp(url, storage_options))
    copy = _local_ref(Path(here), ref.base_offset)
    refuse_changed(url, listed, (copy.size_in_bytes, ref.identity))
    return copy


def _partition_chunks(group: Sequence[SegmentRef], latest: bool, progress: ReadProgress | None,
                      failures: list[ExportFailure], stops: list[ViewStop],
                      storage_options: StorageOptions | None = None, *, sole_replica: bool = False
                      ) -> Iterator[dict[str, list[Any]]]:
    """One partition's chunks for :func:`_export_chunks`."""
    committed: dict[str, CommittedView] = {}
    error = check_segments(group, storage_options)
    if error is not None:
        failures.append(ExportFailure(group[0].partition_dir, error))
        if progress is not None:
            progress.advance(_total(group))
        return
    if latest:
        given = group[0].partition_dir
        committed[given] = CommittedView.of(given, storage_options, sole_replica=sole_replica)
    table: dict[bytes, tuple[Any, ...]] = {}
    for ref in group:
        for columns in iter_segment_columns(ref, READ_COMMITTED if latest else READ_UNCOMMITTED,
                                            committed_cache=committed, storage_options=storage_options):
            if not latest:
                yield columns
                continue
            for row in zip(*(columns[name] for name, _ in EXPORT_COLUMNS), strict=True):
                if row[4] is not None:  # the key: keyless records have no place in the table
                    table[row[4]] = row
        if progress is not None:
            progress.advance(ref.size_in_bytes)
    if latest:
        stops.append(committed[group[0].partition_dir].stop)
    live = sorted((row for row in table.values() if not row[7]), key=lambda row: row[2])
    if live:
        yield {name: [row[j] for row in live] for j, (name, _) in enumerate(EXPORT_COLUMNS)}


def _sole_replica(partition: Partition, flag: bool) -> SoleReplica | None:
    """Whether the partition's only replica is this broker, as ``clean`` decides it
    (``high_watermark.sole_replica_of``: the KRaft metadata found for the log dir, else ``--sole-replica``)."""
    sources = ConfigSources({}, sole_replica=flag)
    try:
        effective = sources.for_partition(partition.path)
    except KcompactError:  # no configuration to read (a copy without its log dir's files): the flag decides
        return sole_replica_from_metadata(None, None, flag=flag)[0]
    return sole_replica_of(effective, sources)[0]


def _total(refs: Sequence[SegmentRef]) -> int:
    return sum(ref.size_in_bytes for ref in refs)


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
    except ImportError as err:
        raise UnsupportedFormatError(
            "kcompact export writes Parquet with pyarrow; expected it installed (pip install "
            f"'kcompact[export]'), found ImportError: {err}") from err
    return pa
