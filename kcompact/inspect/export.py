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
  the view stops and why (the rule is ``kcompact.cleaner.rules.producer_state``'s, fed by
  ``kcompact.cleaner.state.log_state``). Transactions are the spans ``log_state`` finds in the log
  (first data batch to COMMIT/ABORT marker).

``--latest`` then keeps, per (topic, partition, key), the record with the highest offset, and drops
it when it is a tombstone: the table a consumer reading the partition from the start ends up with.
Keyless records have no place in that table and are left out.

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
import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kcompact.cleaner.state.log_state import HW_FROM_CHECKPOINT, LogState, TxnSpan, load_log_state
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CorruptDataError, KcompactError, RefusedError, UnsupportedFormatError
from kcompact.records.batch_header import RecordBatch
from kcompact.records.legacy import LegacyEntry, legacy_records
from kcompact.records.record import Record, decode_records
from kcompact.segment.files import replacing
from kcompact.segment.log_file import LogFile, crc_error_or
from kcompact.segment.names import segment_file_name
from kcompact.segment.partition import (
    METADATA_TOPIC,
    Partition,
    is_partition_dir,
    open_partition,
    require_partition_dirs,
)
from kcompact.segment.partition_filter import PartitionFilter
from kcompact.segment.progress import ProgressCallback, ReadProgress, read_progress
from kcompact.segment.remote import (
    StorageOptions,
    is_url,
    mirrored,
    remote_partition_dirs,
    remote_segments,
)

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


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One segment to read (a Spark input partition reads one or more)."""

    partition_dir: str
    base_offset: int
    size_in_bytes: int



@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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
        return f"{head}: {why}{unknown}"

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` form: every attribute, and ``text`` (:meth:`describe`)."""
        return {"partition_dir": self.partition_dir, "topic": self.topic, "partition": self.partition,
                "stops_at": self.stops_at, "reason": self.reason, "producer_id": self.producer_id,
                "first_offset": self.first_offset, "high_watermark": self.high_watermark,
                "log_end_offset": self.log_end_offset, "text": self.describe()}


def view_stop(state: LogState, partition_dir: str | None = None) -> ViewStop:
    """Where a read_committed consumer's view of a loaded partition stops: Kafka's last stable offset.

    Args:
        state: the partition as loaded (its producer state replayed with the high watermark).
        partition_dir: the name to report it under (None: its local path).

    Returns:
        The :class:`ViewStop` (never below the log start offset, never above the log end).
    """
    partition = state.partition
    has_hw = state.high_watermark_source == HW_FROM_CHECKPOINT
    lso = max(state.log_start_offset,
              state.producers.last_stable_offset(log_end_offset=state.log_end_offset))
    stop = ViewStop(str(partition.path) if partition_dir is None else partition_dir, partition.topic,
                    partition.partition, lso, STOP_LOG_END, state.log_end_offset,
                    state.high_watermark if has_hw else None)
    pending = state.open_transaction()
    if pending is not None and max(pending.first_offset, state.log_start_offset) == lso:
        undecided = any(t.first_offset == pending.first_offset for t in state.producers.open_transactions())
        return replace(stop, reason=STOP_OPEN_TRANSACTION if undecided else STOP_UNREPLICATED_TRANSACTION,
                       producer_id=pending.producer_id, first_offset=pending.first_offset)
    if lso < state.log_end_offset:
        return replace(stop, reason=STOP_HIGH_WATERMARK)
    return stop


@dataclass(frozen=True, slots=True)
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
    for raw in paths:
        if is_url(raw):
            refs += [SegmentRef(part, base, size) for part in remote_partition_dirs(str(raw), storage_options or {})
                     if selection is None or selection.matches_dir(part)
                     for base, size in remote_segments(part, storage_options or {}) if size > 0]
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
        refs += [SegmentRef(str(p.path), s.base_offset, s.size_in_bytes) for p in parts
                 for s in p.segments if s.size_in_bytes > 0]
    return refs


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


def check_segments(refs: Sequence[SegmentRef]) -> KcompactError | None:
    """The first batch of these (local) segments that fails its CRC or does not frame, as its error.

    One walk over the batch headers and a CRC over every byte, no record decoded: cheap next to the
    export's decoding, and done before a partition's first row is written so that a corrupt one is
    left out whole.

    Args:
        refs: segments (usually one partition's, in offset order).

    Returns:
        The error (naming the file and byte position), or None when every batch passes.
    """
    for ref in refs:
        try:
            with LogFile(segment_log_path(ref)) as log:
                for batch in log.iter_batches():
                    log.check_crc(batch)
        except KcompactError as err:
            return err
    return None


def split_report(refs: Sequence[SegmentRef], storage_options: StorageOptions | None = None, *,
                 latest: bool = False) -> tuple[list[ExportFailure], list[ViewStop]]:
    """:func:`check_segments` per partition of a split (remote ones mirrored first), as failures, and
    with ``latest`` where each sound partition's read_committed view stops.

    Args:
        refs: the split's segments.
        storage_options: fsspec options for segments behind URLs.
        latest: also find each partition's :class:`ViewStop` (its whole log's batch headers read).

    Returns:
        The failures, and the stops of the partitions that do not fail (named as given).
    """
    remote = list(dict.fromkeys(ref.partition_dir for ref in refs if is_url(ref.partition_dir)))
    failures: list[ExportFailure] = []
    stops: list[ViewStop] = []
    mirror: contextlib.AbstractContextManager[dict[str, Path]] = (
        mirrored(remote, storage_options or {}) if remote else contextlib.nullcontext({}))
    with mirror as local:
        for group in by_partition(refs):
            given = group[0].partition_dir
            here = str(local.get(given, given))
            err = check_segments([replace(ref, partition_dir=here) for ref in group])
            if err is not None:
                failures.append(ExportFailure(given, _named_as_given(err, here, given)))
            elif latest:
                stops.append(_stop_of(here, given))
    return failures, stops


def _stop_of(local_dir: str, given: str) -> ViewStop:
    """The :class:`ViewStop` of a (local) partition, named as given."""
    state = load_log_state(open_partition(local_dir), TopicConfig.defaults())
    return view_stop(state, given)


def segment_log_path(ref: SegmentRef) -> Path:
    """The ``.log`` file of a (local) segment reference."""
    return Path(ref.partition_dir) / segment_file_name(ref.base_offset, "log")


def _named_as_given(err: KcompactError, local_dir: str, given: str) -> KcompactError:
    """An error about a local mirror's file, naming the file under the URL the user gave instead."""
    if not isinstance(err, CorruptDataError) or err.path is None or not err.path.startswith(local_dir):
        return err
    return type(err)(err.message, path=given + err.path[len(local_dir):], position=err.position,
                     offset=err.offset)


def iter_split_columns(refs: Sequence[SegmentRef], isolation: str = READ_UNCOMMITTED,
                       chunk_rows: int = CHUNK_ROWS, storage_options: StorageOptions | None = None
                       ) -> Iterator[dict[str, list[Any]]]:
    """:func:`iter_segment_columns` over a split's segments, each partition's transactions found once.

    Args:
        refs: the split's segments.
        isolation: :data:`READ_UNCOMMITTED` or :data:`READ_COMMITTED`.
        chunk_rows: the most records per yielded chunk.
        storage_options: fsspec options for segments behind URLs (their partitions are mirrored to a
            local temporary directory for the split's duration).

    Yields:
        Column chunks, segment after segment.
    """
    committed: dict[str, _CommittedFilter] = {}
    remote = list(dict.fromkeys(ref.partition_dir for ref in refs if is_url(ref.partition_dir)))
    if not remote:
        for ref in refs:
            yield from iter_segment_columns(ref, isolation, chunk_rows, committed)
        return
    with mirrored(remote, storage_options or {}) as local:
        for ref in refs:
            here = replace(ref, partition_dir=str(local.get(ref.partition_dir, ref.partition_dir)))
            yield from iter_segment_columns(here, isolation, chunk_rows, committed)


def iter_segment_columns(
    ref: SegmentRef,
    isolation: str = READ_UNCOMMITTED,
    chunk_rows: int = CHUNK_ROWS,
    committed_cache: dict[str, _CommittedFilter] | None = None,
) -> Iterator[dict[str, list[Any]]]:
    """The records of one segment as column lists (:data:`EXPORT_COLUMNS`), ``chunk_rows`` at a time.

    Args:
        ref: the segment.
        isolation: :data:`READ_UNCOMMITTED` or :data:`READ_COMMITTED` (see the module docstring).
        chunk_rows: the most records per yielded chunk.
        committed_cache: read_committed filters by partition directory, reused across segments.

    Yields:
        ``{column: [values…]}`` chunks, in offset order.

    Raises:
        CorruptDataError: a batch fails its CRC (``BatchCrcError``), or a batch or record does not
            parse (names the file and position).
    """
    partition = open_partition(ref.partition_dir)
    committed = None
    if isolation == READ_COMMITTED:
        cache = {} if committed_cache is None else committed_cache
        committed = cache.get(ref.partition_dir) or cache.setdefault(
            ref.partition_dir, _CommittedFilter.of(partition))
    segment = next(s for s in partition.segments if s.base_offset == ref.base_offset)
    columns = _empty_columns()
    with segment.open() as log:
        for batch in log.iter_batches():
            if committed is not None and not committed.keeps_batch(batch):
                continue
            log.check_crc(batch)  # never a flipped byte exported as data
            for record in _records(batch, log.path):
                if committed is None or committed.keeps_record(record.offset):
                    _append(columns, partition, batch, record)
            if len(columns["offset"]) >= chunk_rows:
                yield columns
                columns = _empty_columns()
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


def _append(columns: dict[str, list[Any]], partition: Partition, batch: RecordBatch | LegacyEntry,
            record: Record) -> None:
    columns["topic"].append(partition.topic)
    columns["partition"].append(partition.partition)
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


@dataclass(frozen=True, slots=True)
class _CommittedFilter:
    """What a read_committed consumer skips: control batches, aborted transactions, and everything at
    or above the last stable offset (``stop``)."""

    log_start_offset: int
    spans: dict[int, list[TxnSpan]]  # producer id -> its transactions by first offset
    stop: ViewStop

    @classmethod
    def of(cls, partition: Partition) -> _CommittedFilter:
        state = load_log_state(partition, TopicConfig.defaults())
        spans: dict[int, list[TxnSpan]] = {}
        for span in state.transactions:
            spans.setdefault(span.producer_id, []).append(span)
        for found in spans.values():
            found.sort(key=lambda s: s.first_offset)
        return cls(state.log_start_offset, spans, view_stop(state))

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
                   storage_options: StorageOptions | None = None) -> ExportSummary:
    """Write the records under ``paths`` (or, with ``latest``, their compacted view) as Parquet, in-process.

    The output is a directory holding one ``part-00000.parquet`` (the shape Spark writes, so either
    reads the other's), written under a temporary name and renamed into place when complete: a failed
    export leaves nothing at ``output``. Each partition is checked (:func:`check_segments`) before its
    first row is written; one that fails is left out whole and named in ``failures``.

    Args:
        paths: partition directories and/or log dirs, local or URLs (``s3://…``: each partition is
            copied to a local temporary directory while it is read, one at a time, see
            ``kcompact.segment.remote``).
        output: a new local directory.
        latest: the latest live value per key (read_committed: below each partition's last stable
            offset, see :class:`ViewStop`), as ``spark export --latest``.
        progress: called with the segment bytes read so far.
        selection: export only the partitions it matches (``--topic`` …; None: all).
        storage_options: fsspec options for the URLs.

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
                                          failures, stops, storage_options or {}):
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
                   failures: list[ExportFailure], stops: list[ViewStop], storage_options: StorageOptions
                   ) -> Iterator[dict[str, list[Any]]]:
    """Every record's columns, or per partition the latest live record per key (offset order, with its
    :class:`ViewStop` appended to ``stops``); a partition that fails :func:`check_segments` is appended
    to ``failures`` instead. A partition behind a URL is copied locally while it is read."""
    for group in by_partition(refs):
        given = group[0].partition_dir
        if not is_url(given):
            yield from _partition_chunks(group, latest, progress, failures, stops)
            continue
        with mirrored([given], storage_options) as local:
            here = str(local[given])
            named: list[ExportFailure] = []
            local_stops: list[ViewStop] = []
            yield from _partition_chunks([replace(ref, partition_dir=here) for ref in group], latest, progress,
                                         named, local_stops)
            failures += [ExportFailure(given, _named_as_given(f.error, here, given)) for f in named]
            stops += [replace(stop, partition_dir=given) for stop in local_stops]
    if progress is not None:
        progress.finish()


def _partition_chunks(group: Sequence[SegmentRef], latest: bool, progress: ReadProgress | None,
                      failures: list[ExportFailure], stops: list[ViewStop]) -> Iterator[dict[str, list[Any]]]:
    """One (local) partition's chunks for :func:`_export_chunks`."""
    committed: dict[str, _CommittedFilter] = {}
    error = check_segments(group)
    if error is not None:
        failures.append(ExportFailure(group[0].partition_dir, error))
        if progress is not None:
            progress.advance(_total(group))
        return
    table: dict[bytes, tuple[Any, ...]] = {}
    for ref in group:
        for columns in iter_segment_columns(ref, READ_COMMITTED if latest else READ_UNCOMMITTED,
                                            committed_cache=committed):
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
