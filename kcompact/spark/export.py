"""``spark export``: a partition's (or log dir's) records as Parquet, or the compacted table they stand for.

The rows are those of ``kcompact.inspect.export`` (its module docstring tells the columns and the
two isolation levels), read on the executors through the ``kcompact`` Python data source
(``kcompact.spark.datasource``), which packs consecutive segments into input partitions of about
:data:`~kcompact.inspect.export.SPLIT_BYTES` (a big segment alone, many small ones or small
partitions together: a task costs more than reading a small segment). ``--latest`` is a window over
(topic, partition, key) on the cluster.

The driver lists the inputs once (``list_segments``: one listing per log dir URL, several at once) and
hands the segments to the data source. Before the read, a first job checks every batch's CRC and framing,
split by split (``split_report``: no record decoded, cheap next to the export's decoding; with
``--latest`` it also finds each partition's read_committed view once — where it stops, its last stable
offset, and the transactions it skips — handed to the read's tasks), and returns the partitions that
fail as values,
never as a failing task: they are left out whole (``ExportSummary.failures``, exit 2), the others are
exported, and Spark prints no task error. A partition named alone that fails, or every one failing, is
the error (nothing written). Data that still does not parse (a batch that passes its CRC but whose
records do not, bytes a faulty writer produced) fails no task either: the data source ends that split
with an error row (``error_rows``), the write leaves it out, an observation brings it to the driver,
which removes the output and raises it (its class, file and position). Each segment is read as the file listed
(its size and identity taken by the listing, compared by the check's tasks and the read's: see
``kcompact.inspect.export``): one that changed before the check ends leaves its partition out, after it it is
such an error row, and the export writes nothing. Should a task fail anyway (a
file that cannot be read), Spark's own lines about it are silenced and it is one kcompact line; no
``--output`` is left behind either way. A task lost (its Python worker or executor died) or a JVM gone, in
the listing of a ``host:/path``, the check or the write, is one line too
(:func:`kcompact.spark.job_failure.lost_job`), saying what is at
``--output``: nothing, or (the write's partial files could not be removed) an incomplete directory, without
Spark's ``_SUCCESS``, that must not be used.

A log dir given as ``host:/path`` (a broker host's own disk, ``kcompact.spark.locality``) is listed by a task
preferring that host, and every task that reads its segments (the check, the read) prefers it too. Spark's
Python data sources give their input partitions no preferred host, so such a run reads through an RDD of
its splits instead (``read_located``), each split read by the data source's own reader: the same rows.
A partition directory path found on two hosts (two brokers' copies of one partition) is refused.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcompact.errors import KcompactError
from kcompact.inspect.export import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    SPLIT_BYTES,
    CommittedView,
    ExportFailure,
    ExportSummary,
    SegmentRef,
    list_segments,
    refuse_all_failed,
    refuse_output_in_log_dir,
    split_report,
    split_segments,
)
from kcompact.segment.partition_filter import PartitionFilter
from kcompact.segment.remote import StorageOptions
from kcompact.segment.url import is_url
from kcompact.spark.export_schema import ERROR_COLUMN, EXPORT_SCHEMA, FORMAT_NAME, error_from_payload
from kcompact.spark.job_failure import one_line_job
from kcompact.spark.locality import Located, locate_input, located_rdd, refuse_other_host, run_located
from kcompact.spark.output import local_part, output_target, write_new_parquet

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession



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
    sole_replica: bool = False,
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
        sole_replica: ``--sole-replica``: with ``latest``, a partition whose only replica is this broker (the
            KRaft metadata says so, or this flag where it says nothing) is read to its log end, as
            ``kcompact export`` reads it.

    Returns:
        The :class:`ExportSummary` (``failures``: the partitions left out).

    Raises:
        KcompactError: ``output`` exists (or is a plain path with a cluster master), a path is not a
            partition or log dir, the one partition (or every one) fails its check (that error), or a
            segment does not parse (the task's error, as one line); nothing is left at ``output``.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    given = [str(path) for path in paths]
    targets = [locate_input(path) for path in given]
    plain = [raw for raw, t in zip(given, targets, strict=True) if t.host is None]  # as given
    target = output_target(str(output), spark.sparkContext.master)
    local = local_part(target)
    if local is not None:
        refuse_output_in_log_dir(local, plain)
    refs, hosts = located_segments(spark, plain, [t for t in targets if t.host is not None], storage_options,
                                   selection, verbose=verbose, output=target)  # the one listing
    failures, views = check_partitions(spark, refs, split_bytes, storage_options, verbose=verbose,
                                       latest=latest, hosts=hosts, output=target, sole_replica=sole_replica)
    refuse_all_failed(refs, failures)
    bad = {failure.partition_dir for failure in failures}
    refs = [ref for ref in refs if ref.partition_dir not in bad]
    isolation = READ_COMMITTED if latest else READ_UNCOMMITTED
    if any(host is not None for host in hosts.values()):
        frame = read_located(spark, refs, hosts, isolation=isolation, split_bytes=split_bytes,
                             storage_options=storage_options, views=views)
    else:
        frame = read_records(spark, plain, isolation=isolation, split_bytes=split_bytes,
                             storage_options=storage_options, error_rows=True, refs=refs, views=views)
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
                      spark.sparkContext, verbose=verbose, then=refuse_failed_split,
                      job="spark export: the write job")
    records = int(counted.get.get("records", 0))
    return ExportSummary(target, records, len({r.partition_dir for r in refs}), len(refs), latest,
                         tuple(failures), tuple(view.stop for view in views))


def located_segments(spark: SparkSession, plain: Sequence[str], away: Sequence[Located],
                     storage_options: StorageOptions | None, selection: PartitionFilter | None, *,
                     verbose: bool = False, output: str | None = None,
                     ) -> tuple[list[SegmentRef], dict[str, str | None]]:
    """The segments of the inputs, and each partition directory's host: the ``plain`` paths' and URLs' listed
    here (``list_segments``), each ``host:/path`` of ``away`` by a task preferring its host (the listing job;
    ``verbose`` and ``output`` as for :func:`check_partitions`).

    Raises:
        KcompactError: a path is not a partition or log dir, one partition directory path is on two hosts, or
            a listing task was lost or the JVM died (one line).
    """
    refs = list_segments(plain, storage_options, selection)
    hosts: dict[str, str | None] = dict.fromkeys((ref.partition_dir for ref in refs), None)
    found = []
    if away:
        with one_line_job(spark.sparkContext, f"kcompact spark export: listing {len(away)} host paths",
                          "spark export: the listing job", _nothing_written(output), verbose=verbose, path=output):
            found = run_located(spark.sparkContext, functools.partial(_segments_here, selection),
                                list(away), [t.host for t in away])
    for located, (listed, error) in zip(away, found, strict=True):
        if error is not None:
            raise KcompactError(error if error.startswith(f"{located.host}:") else
                                f"{located.host}:{error}" if error.startswith("/") else f"{located.host}: {error}")
        for ref in listed:
            part_dir = ref.partition_dir
            if hosts.setdefault(part_dir, located.host) != located.host:
                other = hosts[part_dir]
                raise KcompactError(f"{located.host}:{part_dir}: the same partition directory as "
                                    f"{other + ':' if other else ''}{part_dir}'s; expected one copy of a partition "
                                    "(export one broker's copy: --topic, --partition, or other paths)")
            refs.append(ref)
    return refs, hosts


def _segments_here(selection: PartitionFilter | None, target: Located
                   ) -> tuple[list[SegmentRef], str | None]:
    """A task listing a ``host:/path``'s segments on its host: them, or the error's line (on another host:
    refused, nothing read)."""
    try:
        refuse_other_host(target.host, target.path)
        return list_segments([target.path], None, selection), None
    except KcompactError as err:
        return [], str(err)


def host_splits(refs: Sequence[SegmentRef], split_bytes: int,
                hosts: Mapping[str, str | None]) -> list[tuple[SegmentRef, ...]]:
    """``split_segments`` of each run of one host's segments: no split holds two hosts' segments."""
    runs: list[list[SegmentRef]] = []
    for ref in refs:
        if not runs or hosts.get(runs[-1][0].partition_dir) != hosts.get(ref.partition_dir):
            runs.append([])
        runs[-1].append(ref)
    return [split for run in runs for split in split_segments(run, split_bytes)]


def check_partitions(spark: SparkSession, refs: list[SegmentRef], split_bytes: int = SPLIT_BYTES,
                     storage_options: StorageOptions | None = None, *, verbose: bool = False,
                     latest: bool = False, hosts: Mapping[str, str | None] | None = None,
                     output: str | None = None, sole_replica: bool = False
                     ) -> tuple[list[ExportFailure], list[CommittedView]]:
    """Every batch's CRC and framing checked by Spark tasks, split by split (``split_report``: each task
    reads its split's bytes), and with ``latest`` each partition's read_committed view (where it stops,
    the transactions it skips), found once, by the task holding the partition's first segment: the
    read job reads with these views, its tasks reading their splits' bytes and nothing else.

    Args:
        spark: the session.
        refs: the segments to export.
        split_bytes: segment bytes per task.
        storage_options: fsspec options for URL inputs.
        verbose: keep Spark's own log lines should a task fail.
        latest: also find each sound partition's :class:`~kcompact.inspect.export.CommittedView`.
        hosts: each partition directory's host (``host:/path``): its splits' tasks prefer it (None: no host).
        output: the export's ``--output``, named in a lost task's line (nothing is written there yet).
        sole_replica: ``--sole-replica``, for the views (:meth:`CommittedView.of_partition`).

    Returns:
        The partitions that fail, each with its first error (in listing order), and the views of the
        others (one per partition, in listing order; empty without ``latest``).

    Raises:
        KcompactError: a task could not run the check (a remote file that cannot be read), or a task was lost
            or the JVM died, as one line.
    """
    hosts = hosts or {}
    splits = host_splits(refs, split_bytes, hosts)
    if not splits:
        return [], []
    seen: set[str] = set()
    tasks = []
    for split in splits:  # each partition's view found by the split holding its first segment
        firsts = tuple(dict.fromkeys(r.partition_dir for r in split if r.partition_dir not in seen)) if latest else ()
        seen.update(firsts)
        tasks.append((split, firsts, hosts.get(split[0].partition_dir)))
    check = functools.partial(_check_split, storage_options=dict(storage_options or {}), sole_replica=sole_replica)
    context = spark.sparkContext
    with one_line_job(context, f"kcompact spark export: checking {len(refs)} segments",
                      "spark export: the checking job", _nothing_written(output), verbose=verbose, path=output):
        where = [host for _, _, host in tasks]
        found = located_rdd(context, tasks, where).map(check).collect()
    failures = [failure for part, _ in found for failure in part]
    bad = {failure.partition_dir for failure in failures}
    return failures, [view for _, part in found for view in part if view.stop.partition_dir not in bad]


def _nothing_written(output: str | None) -> str:
    """What a failed listing or checking job leaves: the logs only read, ``output`` not made yet."""
    unmade = "" if output is None else f" ({output} not created)"
    return f"nothing was written{unmade}, the logs are only read: run it again"


def _check_split(task: tuple[tuple[SegmentRef, ...], tuple[str, ...], str | None], storage_options: StorageOptions,
                 sole_replica: bool = False) -> tuple[list[ExportFailure], list[CommittedView]]:
    """The body of one checking task: ``split_report`` of a split, finding the views it is given (on another
    host than its segments': refused, nothing read)."""
    refs, views_for, host = task
    refuse_other_host(host, refs[0].partition_dir)
    return split_report(refs, storage_options, views_for=views_for, sole_replica=sole_replica)


def read_records(spark: SparkSession, paths: Iterable[str | Path], *, isolation: str = READ_UNCOMMITTED,
                 split_bytes: int = SPLIT_BYTES, storage_options: StorageOptions | None = None,
                 error_rows: bool = False, refs: Sequence[SegmentRef] | None = None,
                 views: Sequence[CommittedView] = ()) -> DataFrame:
    """The records under ``paths`` as a DataFrame (:data:`EXPORT_COLUMNS`), lazily.

    Args:
        spark: the session; the ``kcompact`` data source is registered on it.
        paths: partition directories and/or log dirs.
        isolation: :data:`READ_UNCOMMITTED` or :data:`READ_COMMITTED`.
        split_bytes: segment bytes per Spark task.
        storage_options: fsspec options for URL inputs.
        error_rows: a split that does not parse ends with a row holding only :data:`ERROR_COLUMN`
            (an extra column) instead of failing its task.
        refs: the segments to read, already listed (:func:`~kcompact.inspect.export.list_segments`
            of ``paths``, perhaps fewer): the data source reads them instead of listing ``paths`` again.
        views: the read_committed views already found (``check_partitions``): the data source's tasks
            read with them instead of finding them again.

    Returns:
        ``spark.read.format("kcompact")`` over those paths.
    """
    from kcompact.spark.datasource import KcompactDataSource

    spark.dataSource.register(KcompactDataSource)
    listed = [p if is_url(p) else str(Path(p).absolute()) for p in map(str, paths)]
    reader = spark.read.format(FORMAT_NAME)
    if refs is not None:
        reader = reader.option("refs", json.dumps([[r.partition_dir, r.base_offset, r.size_in_bytes, r.identity]
                                                   for r in refs]))
    if views:
        reader = reader.option("views", json.dumps([view.as_dict() for view in views]))
    return (reader.option("paths", json.dumps(listed))
            .option("isolation", isolation).option("split_bytes", str(split_bytes))
            .option("storage_options", json.dumps(dict(storage_options or {})))
            .option("error_rows", str(error_rows).lower()).load())


def read_located(spark: SparkSession, refs: Sequence[SegmentRef], hosts: Mapping[str, str | None], *,
                 isolation: str = READ_UNCOMMITTED, split_bytes: int = SPLIT_BYTES,
                 storage_options: StorageOptions | None = None, views: Sequence[CommittedView] = ()) -> DataFrame:
    """The records of ``refs`` as :func:`read_records` reads them with ``error_rows``, lazily, each split's
    task preferring the host of its segments (``hosts``), read by the data source's own reader.

    Returns:
        The rows of :data:`EXPORT_COLUMNS` and :data:`ERROR_COLUMN`, those of the data source.
    """
    from kcompact.spark.datasource import KcompactReader

    splits = host_splits(refs, split_bytes, hosts)
    reader = KcompactReader([], isolation, split_bytes, dict(storage_options or {}), error_rows=True, refs=list(refs),
                            views={view.stop.partition_dir: view for view in views})
    where = [hosts.get(split[0].partition_dir) for split in splits]
    rows = located_rdd(spark.sparkContext, list(zip(splits, where, strict=True)), where)
    # rows, not Arrow batches: mapInArrow would need pandas on the driver, which the spark extra leaves out
    return spark.createDataFrame(rows.flatMap(functools.partial(_split_rows, reader)),
                                 f"{EXPORT_SCHEMA}, {ERROR_COLUMN} string", verifySchema=False)


def _split_rows(reader: Any, located: tuple[tuple[SegmentRef, ...], str | None]) -> Iterator[tuple[Any, ...]]:
    """The rows of one split as the data source's reader reads it (its error row included), on its host
    (on another: refused, nothing read)."""
    from kcompact.spark.datasource import SegmentSplit

    split, host = located
    refuse_other_host(host, split[0].partition_dir)
    for batch in reader.read(SegmentSplit(split)):
        columns = batch.to_pydict()
        yield from zip(*columns.values(), strict=True)


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
