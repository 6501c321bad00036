"""``spark export``: a partition's (or log dir's) records as Parquet, or the compacted table they stand for.

The records come from kcompact's format layer only (``LogFile.iter_batches``, ``decode_records`` for
v2, ``legacy_records`` for magic 0/1, every codec), segment by segment,
through the ``kcompact`` Python data source (``kcompact.spark.datasource``), which packs consecutive
segments into input partitions of about :data:`SPLIT_BYTES` (a big segment alone, many small ones or
small partitions together: a task costs more than reading a small segment). One row per record::

    topic string, partition int, offset bigint, timestamp bigint,    (timestamp -1 for magic 0)
    key binary, value binary,                                        (null key / null value kept)
    headers array<struct<key: string, value: binary>>,               (key UTF-8, as Kafka's String)
    is_tombstone boolean,                                            (value is null)
    is_control boolean, is_transactional boolean, producer_id bigint (the batch's; legacy: false, -1)

Two isolation levels, the data source's ``isolation`` option:

* ``read_uncommitted`` (the plain export): every record stored in the segments, control records and
  aborted transactions included, flagged — a faithful copy of the log;
* ``read_committed`` (what ``--latest`` reads): what a read_committed consumer fetching from the
  log start receives — offsets at or above the partition's log start offset, no control records, no
  records of aborted transactions nor of transactions still open at the log end (their outcome is
  unknown offline; a consumer stops before them at the last stable offset). Transactions are the
  spans ``kcompact.cleaner.state.log_state`` finds in the log (first data batch to COMMIT/ABORT marker).

``--latest`` then keeps, per (topic, partition, key), the record with the highest offset, and drops
it when it is a tombstone: the table a consumer reading the partition from the start ends up with.
Keyless records have no place in that table and are left out.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcompact.cleaner.state.log_state import TxnSpan, load_log_state
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CorruptDataError, KcompactError
from kcompact.records.batch_header import RecordBatch
from kcompact.records.legacy import LegacyEntry, legacy_records
from kcompact.records.record import Record, decode_records
from kcompact.segment.partition import (
    METADATA_TOPIC,
    Partition,
    is_partition_dir,
    open_partition,
    require_partition_dirs,
)
from kcompact.spark.output import output_target, write_parquet
from kcompact.spark.rows import ddl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FORMAT_NAME = "kcompact"
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)
CHUNK_ROWS = 8192  # records per Arrow batch handed to Spark
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
EXPORT_SCHEMA = ddl(EXPORT_COLUMNS)


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One segment to read (a Spark input partition reads one or more)."""

    partition_dir: str
    base_offset: int
    size_in_bytes: int


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What ``spark export`` wrote."""

    output: str
    records: int
    partitions: int
    segments: int
    latest: bool


def list_segments(paths: Iterable[str | Path]) -> list[SegmentRef]:
    """The non-empty segments of the partitions under ``paths``, partition by partition.

    A log dir contributes its live partitions (not ``-delete``/``-future``/``-stray`` directories, not
    ``__cluster_metadata``); a partition directory named explicitly is always read.

    Args:
        paths: partition directories and/or log dirs.

    Returns:
        One reference per segment holding bytes, in offset order within each partition.

    Raises:
        KcompactError: a path is neither a partition directory nor a log dir (a directory holding no
            partition directory is not one).
    """
    refs: list[SegmentRef] = []
    for raw in paths:
        path = Path(raw).absolute()  # executors run elsewhere: no path relative to the driver's cwd
        if is_partition_dir(path):
            parts = [open_partition(path)]
        elif path.is_dir():
            parts = [p for p in map(open_partition, require_partition_dirs(path))
                     if p.name.kind == "live" and p.topic != METADATA_TOPIC]
        else:
            raise KcompactError(f"{path}: not a log dir or partition directory")
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


def iter_split_columns(refs: Sequence[SegmentRef], isolation: str = READ_UNCOMMITTED,
                       chunk_rows: int = CHUNK_ROWS) -> Iterator[dict[str, list[Any]]]:
    """:func:`iter_segment_columns` over a split's segments, each partition's transactions found once.

    Args:
        refs: the split's segments.
        isolation: :data:`READ_UNCOMMITTED` or :data:`READ_COMMITTED`.
        chunk_rows: the most records per yielded chunk.

    Yields:
        Column chunks, segment after segment.
    """
    committed: dict[str, _CommittedFilter] = {}
    for ref in refs:
        yield from iter_segment_columns(ref, isolation, chunk_rows, committed)


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
        CorruptDataError: a batch or record does not parse (names the file and position).
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
            for record in _records(batch, log.path):
                if committed is None or record.offset >= committed.log_start_offset:
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
        raise (err.located(path, batch.position) if err.path is None else err) from err


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
    """What a read_committed consumer skips: control batches, aborted and open transactions."""

    log_start_offset: int
    spans: dict[int, list[TxnSpan]]  # producer id -> its transactions by first offset

    @classmethod
    def of(cls, partition: Partition) -> _CommittedFilter:
        state = load_log_state(partition, TopicConfig.defaults())
        spans: dict[int, list[TxnSpan]] = {}
        for span in state.transactions:
            spans.setdefault(span.producer_id, []).append(span)
        for found in spans.values():
            found.sort(key=lambda s: s.first_offset)
        return cls(state.log_start_offset, spans)

    def keeps_batch(self, batch: RecordBatch | LegacyEntry) -> bool:
        if batch.is_control or batch.last_offset < self.log_start_offset:
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


def spark_export(
    spark: SparkSession,
    paths: Iterable[str | Path],
    output: str | Path,
    *,
    latest: bool = False,
    split_bytes: int = SPLIT_BYTES,
) -> ExportSummary:
    """Write the records under ``paths`` (or, with ``latest``, their compacted view) as Parquet.

    Args:
        spark: the session.
        paths: partition directories and/or log dirs (executors must see them at these paths).
        output: a new directory for the Parquet files: a URI (``hdfs://``, ``s3a://``, ``file://``),
            handed to Spark untouched, or a local path (with a ``local[…]`` master only).
        latest: the latest live value per key (read_committed), instead of every record.
        split_bytes: segment bytes per Spark task (see :func:`split_segments`).

    Returns:
        The :class:`ExportSummary`.

    Raises:
        KcompactError: ``output`` exists (or is a plain path with a cluster master), a path is not a
            partition or log dir, or a segment does not parse (the task's error, as one line).
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    paths = list(paths)
    target = output_target(str(output), spark.sparkContext.master)
    refs = list_segments(paths)
    frame = read_records(spark, paths, isolation=READ_COMMITTED if latest else READ_UNCOMMITTED,
                         split_bytes=split_bytes)
    if latest:
        frame = latest_view(frame)
    counted = Observation("kcompact export")  # the rows counted as they are written: no re-read
    write_parquet(frame.observe(counted, F.count(F.lit(1)).alias("records")).write, target)
    records = int(counted.get.get("records", 0))
    return ExportSummary(target, records, len({r.partition_dir for r in refs}), len(refs), latest)


def read_records(spark: SparkSession, paths: Iterable[str | Path], *,
                 isolation: str = READ_UNCOMMITTED, split_bytes: int = SPLIT_BYTES) -> DataFrame:
    """The records under ``paths`` as a DataFrame (:data:`EXPORT_COLUMNS`), lazily.

    Args:
        spark: the session; the ``kcompact`` data source is registered on it.
        paths: partition directories and/or log dirs.
        isolation: :data:`READ_UNCOMMITTED` or :data:`READ_COMMITTED`.
        split_bytes: segment bytes per Spark task.

    Returns:
        ``spark.read.format("kcompact")`` over those paths.
    """
    from kcompact.spark.datasource import KcompactDataSource

    spark.dataSource.register(KcompactDataSource)
    listed = [str(Path(p).absolute()) for p in paths]
    return (spark.read.format(FORMAT_NAME).option("paths", json.dumps(listed))
            .option("isolation", isolation).option("split_bytes", str(split_bytes)).load())


def latest_view(frame: DataFrame) -> DataFrame:
    """Per (topic, partition, key) the highest-offset record, without tombstones nor keyless records.

    Args:
        frame: read_committed records (:data:`EXPORT_COLUMNS`).

    Returns:
        The compacted view, same columns.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    newest_first = Window.partitionBy("topic", "partition", "key").orderBy(F.col("offset").desc())
    return (frame.where(F.col("key").isNotNull())
            .withColumn("_newest", F.row_number().over(newest_first))
            .where((F.col("_newest") == 1) & ~F.col("is_tombstone"))
            .drop("_newest"))
