"""``spark export``: a partition's (or log dir's) records as Parquet, or the compacted table they stand for.

The rows are those of ``kcompact.inspect.export`` (its module docstring tells the columns and the
two isolation levels), read on the executors through the ``kcompact`` Python data source
(``kcompact.spark.datasource``), which packs consecutive segments into input partitions of about
:data:`~kcompact.inspect.export.SPLIT_BYTES` (a big segment alone, many small ones or small
partitions together: a task costs more than reading a small segment). ``--latest`` is a window over
(topic, partition, key) on the cluster.

Before it, a first job checks every batch's CRC and framing, split by split (``split_report``: no
record decoded, cheap next to the export's decoding; with ``--latest`` it also finds where each
partition's read_committed view stops, its last stable offset, as the executors' reads do), and
returns the partitions that fail as values,
never as a failing task: they are left out whole (``ExportSummary.failures``, exit 2), the others are
exported, and Spark prints no task error. A partition named alone that fails, or every one failing, is
the error (nothing written). Data that still does not parse (a batch that passes its CRC but whose
records do not, bytes a faulty writer produced) fails no task either: the data source ends that split
with an error row (``error_rows``), the write leaves it out, an observation brings it to the driver,
which removes the output and raises it (its class, file and position). Should a task fail anyway (a
file that cannot be read), Spark's own lines about it are silenced and it is one kcompact line; no
``--output`` is left behind either way.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact import errors
from kcompact.errors import CorruptDataError, KcompactError
from kcompact.inspect.export import (
    EXPORT_COLUMNS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    SPLIT_BYTES,
    ExportFailure,
    ExportSummary,
    SegmentRef,
    ViewStop,
    list_segments,
    refuse_all_failed,
    refuse_output_in_log_dir,
    split_report,
    split_segments,
)
from kcompact.segment.partition_filter import PartitionFilter
from kcompact.segment.remote import StorageOptions, is_url
from kcompact.spark.output import local_part, output_target, task_error, write_new_parquet
from kcompact.spark.rows import ddl
from kcompact.spark.session import local_properties, quiet_task_failures

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FORMAT_NAME = "kcompact"
EXPORT_SCHEMA = ddl(EXPORT_COLUMNS)
ERROR_COLUMN = "_kcompact_error"  # the data source's ``error_rows``: a split's error, as :func:`error_payload`


def spark_export(
    spark: SparkSession,
    paths: Iterable[str | Path],
    output: str | Path,
    *,
    latest: bool = False,
    split_bytes: int = SPLIT_BYTES,
    storage_options: StorageOptions | None = None,
    selection: PartitionFilter | None = None,
    verbose: bool = False,
) -> ExportSummary:
    """Write the records under ``paths`` (or, with ``latest``, their compacted view) as Parquet.

    Args:
        spark: the session.
        paths: partition directories and/or log dirs (executors must see them at these paths), or
            fsspec URLs of them (``s3://``, ``gs://``, ``hdfs://``, ``file://``), read on the executors.
        output: a new directory for the Parquet files: a URI (``hdfs://``, ``s3a://``, ``file://``),
            handed to Spark untouched, or a local path (with a ``local[…]`` master only).
        latest: the latest live value per key (read_committed: below each partition's last stable
            offset, ``ExportSummary.stops`` saying where and why), instead of every record.
        split_bytes: segment bytes per Spark task (see :func:`split_segments`).
        storage_options: fsspec options for URL inputs (``endpoint_url``, ``key``, …).
        selection: export only the partitions it matches (``--topic``, ``--exclude-topic``,
            ``--partition``); None: all.
        verbose: keep Spark's own log lines about a failing task.

    Returns:
        The :class:`ExportSummary` (``failures``: the partitions left out).

    Raises:
        KcompactError: ``output`` exists (or is a plain path with a cluster master), a path is not a
            partition or log dir, the one partition (or every one) fails its check (that error), or a
            segment does not parse (the task's error, as one line); nothing is left at ``output``.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    paths = list(paths)
    target = output_target(str(output), spark.sparkContext.master)
    local = local_part(target)
    if local is not None:
        refuse_output_in_log_dir(local, paths)
    refs = list_segments(paths, storage_options, selection)
    failures, stops = check_partitions(spark, refs, split_bytes, storage_options, verbose=verbose,
                                       latest=latest)
    refuse_all_failed(refs, failures)
    bad = {failure.partition_dir for failure in failures}
    refs = [ref for ref in refs if ref.partition_dir not in bad]
    if selection is not None or failures:  # the data source reads these partitions, named one by one
        paths = list(dict.fromkeys(ref.partition_dir for ref in refs))
    frame = read_records(spark, paths, isolation=READ_COMMITTED if latest else READ_UNCOMMITTED,
                         split_bytes=split_bytes, storage_options=storage_options, error_rows=True)
    failed = Observation("kcompact export errors")  # a split that did not parse: its row, not its task
    frame = (frame.observe(failed, F.min(ERROR_COLUMN).alias("error"))
             .where(F.col(ERROR_COLUMN).isNull()).drop(ERROR_COLUMN))
    if latest:
        frame = latest_view(frame)
    counted = Observation("kcompact export")  # the rows counted as they are written: no re-read

    def refuse_failed_split() -> None:
        payload = failed.get.get("error")
        if payload is not None:
            raise error_from_payload(str(payload))

    write_new_parquet(frame.observe(counted, F.count(F.lit(1)).alias("records")).write, target,
                      spark.sparkContext, verbose=verbose, then=refuse_failed_split)
    records = int(counted.get.get("records", 0))
    return ExportSummary(target, records, len({r.partition_dir for r in refs}), len(refs), latest,
                         tuple(failures), stops)


def check_partitions(spark: SparkSession, refs: list[SegmentRef], split_bytes: int = SPLIT_BYTES,
                     storage_options: StorageOptions | None = None, *, verbose: bool = False,
                     latest: bool = False) -> tuple[list[ExportFailure], tuple[ViewStop, ...]]:
    """Every batch's CRC and framing checked by Spark tasks, split by split (``split_report``), and with
    ``latest`` where each partition's read_committed view stops.

    Args:
        spark: the session.
        refs: the segments to export.
        split_bytes: segment bytes per task.
        storage_options: fsspec options for URL inputs.
        verbose: keep Spark's own log lines should a task fail.
        latest: also find each sound partition's :class:`~kcompact.inspect.export.ViewStop` (the data
            source's read_committed reads stop at the same offsets: the same files, the same rule).

    Returns:
        The partitions that fail, each with its first error (in listing order), and the stops of the
        others (one per partition, in listing order; empty without ``latest``).

    Raises:
        KcompactError: a task could not run the check (a remote file that cannot be read), as one line.
    """
    splits = split_segments(refs, split_bytes)
    if not splits:
        return [], ()
    check = functools.partial(split_report, storage_options=dict(storage_options or {}), latest=latest)
    context = spark.sparkContext
    context.setJobDescription(f"kcompact spark export: checking {len(refs)} segments")
    try:
        with quiet_task_failures(context, verbose=verbose):
            found = context.parallelize(splits, len(splits)).map(check).collect()
    except Exception as err:
        said = task_error(err)
        if said is err:
            raise
        raise said from err
    finally:
        local_properties(context).setJobDescription(None)
    failures = [failure for part, _ in found for failure in part]
    bad = {failure.partition_dir for failure in failures}
    stops = {stop.partition_dir: stop for _, part in found for stop in part  # a partition split in two: once
             if stop.partition_dir not in bad}
    return failures, tuple(stops.values())


def error_payload(err: KcompactError) -> str:
    """A task's error as text a row can carry (JSON: its class, message and location)."""
    message = err.message if isinstance(err, CorruptDataError) else None
    return json.dumps({"kind": type(err).__name__, "text": str(err), "message": message, "path": err.path,
                       "position": err.position, "offset": err.offset})


def error_from_payload(payload: str) -> KcompactError:
    """The error :func:`error_payload` wrote, rebuilt on the driver (its class when it names where).

    Args:
        payload: the row's error text.

    Returns:
        A :class:`~kcompact.errors.CorruptDataError` subclass with its path and position, else a
        :class:`~kcompact.errors.KcompactError` with the message.
    """
    found = json.loads(payload)
    kind = getattr(errors, str(found.get("kind")), None)
    if isinstance(kind, type) and issubclass(kind, CorruptDataError) and found.get("message") is not None:
        return kind(found["message"], path=found["path"], position=found["position"], offset=found["offset"])
    return KcompactError(found["text"])


def read_records(spark: SparkSession, paths: Iterable[str | Path], *, isolation: str = READ_UNCOMMITTED,
                 split_bytes: int = SPLIT_BYTES, storage_options: StorageOptions | None = None,
                 error_rows: bool = False) -> DataFrame:
    """The records under ``paths`` as a DataFrame (:data:`EXPORT_COLUMNS`), lazily.

    Args:
        spark: the session; the ``kcompact`` data source is registered on it.
        paths: partition directories and/or log dirs.
        isolation: :data:`READ_UNCOMMITTED` or :data:`READ_COMMITTED`.
        split_bytes: segment bytes per Spark task.
        storage_options: fsspec options for URL inputs.
        error_rows: a split that does not parse ends with a row holding only :data:`ERROR_COLUMN`
            (an extra column) instead of failing its task.

    Returns:
        ``spark.read.format("kcompact")`` over those paths.
    """
    from kcompact.spark.datasource import KcompactDataSource

    spark.dataSource.register(KcompactDataSource)
    listed = [p if is_url(p) else str(Path(p).absolute()) for p in map(str, paths)]
    return (spark.read.format(FORMAT_NAME).option("paths", json.dumps(listed))
            .option("isolation", isolation).option("split_bytes", str(split_bytes))
            .option("storage_options", json.dumps(dict(storage_options or {})))
            .option("error_rows", str(error_rows).lower()).load())


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
