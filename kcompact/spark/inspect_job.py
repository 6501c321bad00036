"""``spark inspect dirty-ratio``: the serial report's rows, computed by Spark tasks.

Each task runs :func:`kcompact.inspect.dirty_ratio.dirty_ratio_report` itself, on a slice of one log
dir's partitions: the rows are the serial command's own, same fields, same values. Slices rather
than single partitions because the report reads each log dir checkpoint file once per call (a
partition per task would parse the checkpoint files once per partition, quadratic in a big log dir).
Every task gets the driver's clock.

The only thing the driver redoes is the ranking across slices (``cleaner_rank``): a slice ranks its
own eligible partitions, and the run's ranks are those rows, stably re-sorted by dirty ratio — which is
Kafka's rule, applied by ``kcompact.log.rules.ranges.pick_ranks`` (highest ratio first, ties in
the order the partitions were listed: slices keep that order, and a slice's ranks keep it inside).
Rows are then sorted as the serial report sorts them.

A log dir given as ``host:/path`` (a broker host's own disk, ``kcompact.spark.locality``) is listed by a
task preferring that host (the driver does not see that disk), and its slices' tasks prefer it too; its
rows name the paths as on that host, as a plain path's do.

A task lost (its Python worker or executor died) or the JVM gone, in the listing or the reading job, gives no
row at all: the report is one line saying which job, why, and that nothing was changed nor written
(:func:`kcompact.spark.job_failure.one_line_job`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcompact.clock import run_clock_ms
from kcompact.errors import KcompactError
from kcompact.inspect.dirty_ratio import DirtyRatioRow, dirty_ratio_report, partition_dirs
from kcompact.log.rules.ranges import pick_ranks
from kcompact.segment.partition_filter import PartitionFilter
from kcompact.segment.remote import StorageOptions, map_threads, mirrored, remote_partition_dirs
from kcompact.segment.url import is_url
from kcompact.spark.job_failure import one_line_job
from kcompact.spark.locality import Located, locate_input, located_rdd, refuse_other_host, run_located
from kcompact.spark.rows import dataclass_columns, ddl
from kcompact.value import frozen, mutable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DIRTY_RATIO_COLUMNS = dataclass_columns(DirtyRatioRow)
SLICES_PER_CORE = 2  # a little more than one slice per core, so a slow log dir does not hold the run
COMMAND = "spark inspect dirty-ratio"


@frozen
class ReportSlice:
    """Some partition directories of one log dir, and how the report must read them."""

    partition_dirs: tuple[str, ...]
    cli_overrides: Mapping[str, str]
    now_ms: int
    server_properties: str | None
    metadata_dir: str | None
    storage_options: tuple[tuple[str, Any], ...] = ()  # fsspec options for URL partition directories
    host: str | None = None  # the host whose disk holds them (``host:/path``); None: any executor sees them
    sole_replica: bool = False  # --sole-replica, as ``report`` takes it (``log.rules.high_watermark``)


@mutable
class SparkDirtyRatio:
    """The report's rows (as the serial command orders them) and the same rows as a DataFrame."""

    rows: list[DirtyRatioRow]
    frame: DataFrame


def spark_dirty_ratio(
    spark: SparkSession,
    paths: Iterable[str | Path],
    *,
    cli_overrides: Mapping[str, str],
    now_ms: int | None = None,
    server_properties: str | Path | None = None,
    metadata_dir: str | Path | None = None,
    storage_options: StorageOptions | None = None,
    selection: PartitionFilter | None = None,
    verbose: bool = False,
    output: str | None = None,
) -> SparkDirtyRatio:
    """The dirty-ratio report of every partition under ``paths``, computed on Spark.

    Args:
        spark: the session.
        paths: log dirs and/or partition directories (executors must see them at these paths), each maybe
            ``host:/path`` (on that host's disk: listed and read by tasks preferring that host).
        cli_overrides: ``--config`` pairs.
        now_ms: the clock (default: the driver's now), the same for every task.
        server_properties: the broker's server.properties.
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0``.
        storage_options: fsspec options for URL paths (``s3://…``: read on the executors, see
            ``kcompact.segment.remote``).
        selection: the partitions to report on (as ``inspect dirty-ratio``'s ``--topic`` …).
        verbose: keep Spark's own log lines about a failing task.
        output: the ``--output`` the caller writes the rows to afterwards, named in a failed job's line.

    Returns:
        The rows, equal to :func:`~kcompact.inspect.dirty_ratio.dirty_ratio_report`'s for the same
        paths and clock, and their DataFrame (schema :data:`DIRTY_RATIO_COLUMNS`).

    Raises:
        KcompactError: a path is neither a log dir nor a partition directory, or a task was lost or the JVM
            died (one line naming the job).
    """
    now = run_clock_ms(now_ms)
    state = read_only_state(output)
    found = located_partition_dirs(spark, paths, storage_options or {}, selection, verbose=verbose, state=state)
    options = tuple(sorted((storage_options or {}).items()))
    slices = slices_of([d.path for d in found], spark.sparkContext.defaultParallelism * SLICES_PER_CORE,
                       lambda dirs: ReportSlice(dirs, dict(cli_overrides), now, _text(server_properties),
                                                _text(metadata_dir), options),
                       hosts=[d.host for d in found])
    rows: list[DirtyRatioRow] = []
    if slices:
        with one_line_job(spark.sparkContext, f"kcompact {COMMAND}: {len(slices)} slices",
                          f"{COMMAND}: the reading job", state, verbose=verbose):
            rdd = located_rdd(spark.sparkContext, slices, [part.host for part in slices])
            rows = [row for part in rdd.map(run_report_slice).collect() for row in part]
    rows = rank_rows(rows)
    values = [tuple(getattr(row, name) for name, _ in DIRTY_RATIO_COLUMNS) for row in rows]
    return SparkDirtyRatio(rows, spark.createDataFrame(values, ddl(DIRTY_RATIO_COLUMNS)))


def read_only_state(output: str | None) -> str:
    """What a failed job of the command leaves: nothing changed, and nothing at ``output`` (not written yet)."""
    unmade = "" if output is None else f", nothing was written ({output} not created)"
    return f"nothing was changed ({COMMAND} only reads){unmade}: run it again"


def run_report_slice(part: ReportSlice) -> list[DirtyRatioRow]:
    """The body of one Spark task: the serial report over one slice.

    Args:
        part: the slice.

    Returns:
        Its rows, in the report's order (a row with ``error`` set for a partition that does not parse).
    """
    refuse_other_host(part.host, part.partition_dirs[0])  # on another host: nothing read
    remote = [d for d in part.partition_dirs if is_url(d)]
    if not remote:
        return _report(part, part.partition_dirs)
    with mirrored(remote, dict(part.storage_options)) as local:
        rows = _report(part, [str(local.get(d, d)) for d in part.partition_dirs])
        return [_named_as_given(row, {str(path): url for url, path in local.items()}) for row in rows]


def _report(part: ReportSlice, dirs: Sequence[str]) -> list[DirtyRatioRow]:
    return dirty_ratio_report(dirs, cli_overrides=part.cli_overrides, now_ms=part.now_ms,
                              server_properties=part.server_properties, metadata_dir=part.metadata_dir)


def _named_as_given(row: DirtyRatioRow, urls: Mapping[str, str]) -> DirtyRatioRow:
    """A row read from a local mirror, its paths (directory, error, warnings) the URLs the user gave."""
    renames = dict(urls)
    renames.update({path.rsplit("/", 1)[0]: url.rsplit("/", 1)[0] for path, url in urls.items()})

    def given(text: str) -> str:
        for path in sorted(renames, key=len, reverse=True):  # a partition before its log dir
            text = text.replace(path, renames[path])
        return text

    return dataclasses.replace(row, partition_dir=urls.get(row.partition_dir, row.partition_dir),
                               error=None if row.error is None else given(row.error),
                               warnings=[given(warning) for warning in row.warnings])


def located_partition_dirs(spark: SparkSession, paths: Iterable[str | Path], storage_options: StorageOptions,
                           selection: PartitionFilter | None = None, *, verbose: bool = False,
                           state: str | None = None) -> list[Located]:
    """Partition directories path after path: a URL's listed through fsspec (several URLs at once), a
    ``host:/path``'s by a Spark task preferring that host (the listing job), a plain one's here (absolute:
    executors have another cwd); only those ``selection`` matches, when given.

    Raises:
        KcompactError: a path is neither a log dir nor a partition directory (on its host, for ``host:/path``),
            or a listing task was lost or the JVM died (one line, ending with ``state``).
    """
    targets = [locate_input(path) for path in paths]
    urls = [t.path for t in targets if is_url(t.path)]
    listed = dict(zip(urls, map_threads(lambda url: remote_partition_dirs(url, storage_options), urls), strict=True))
    away = [t for t in targets if t.host is not None]
    answers = []
    if away:
        with one_line_job(spark.sparkContext, f"kcompact {COMMAND}: listing {len(away)} host paths",
                          f"{COMMAND}: the listing job", state or read_only_state(None), verbose=verbose):
            answers = run_located(spark.sparkContext, functools.partial(_listed_here, selection),
                                  away, [t.host for t in away])
    for target, (dirs, error) in zip(away, answers, strict=True):
        if error is not None:
            raise KcompactError(error if error.startswith(f"{target.host}:") else
                                f"{target.host}:{error}" if error.startswith("/") else f"{target.host}: {error}")
        listed[str(target)] = dirs
    found: list[Located] = []
    for target in targets:
        if is_url(target.path):
            found += [Located(None, d) for d in listed[target.path] if selection is None or selection.matches_dir(d)]
        elif target.host is not None:
            found += [Located(target.host, d) for d in listed[str(target)]]
        else:
            found += [Located(None, str(d)) for d in partition_dirs([Path(target.path)], selection)]
    return found


def _listed_here(selection: PartitionFilter | None, target: Located) -> tuple[list[str], str | None]:
    """A task listing a ``host:/path``'s partition directories on its host: them, or the error's line (on
    another host: refused, nothing read)."""
    try:
        refuse_other_host(target.host, target.path)
        return [str(d) for d in partition_dirs([Path(target.path)], selection)], None
    except KcompactError as err:
        return [], str(err)


def rank_rows(slices_rows: Sequence[DirtyRatioRow]) -> list[DirtyRatioRow]:
    """Rank rows that come from several slices (given in listing order) as one report would.

    Args:
        slices_rows: each slice's rows as its report returned them, slice after slice.

    Returns:
        New rows with the run's ``cleaner_rank``, sorted as the serial report sorts them.
    """
    ranks = pick_ranks([(row.cleaner_rank is not None, row.dirty_ratio) for row in slices_rows])
    out = [dataclasses.replace(row, cleaner_rank=rank) for row, rank in zip(slices_rows, ranks, strict=True)]
    out.sort(key=lambda r: (r.cleaner_rank is None, r.cleaner_rank or 0, r.topic, r.partition))
    return out


def slices_of(
    dirs: Sequence[str], wanted: int, make: Callable[[tuple[str, ...]], ReportSlice],
    hosts: Sequence[str | None] | None = None,
) -> list[ReportSlice]:
    """Consecutive runs of one log dir's partitions (of one host's, given ``hosts``: each directory's),
    about ``wanted`` slices in all, each slice's ``host`` its directories'."""
    size = max(1, -(-len(dirs) // max(1, wanted)))
    where = list(hosts) if hosts is not None else [None] * len(dirs)
    slices: list[ReportSlice] = []
    run: list[str] = []
    run_host: str | None = None
    for part_dir, host in zip(dirs, where, strict=True):
        if run and (len(run) == size or run[-1].rsplit("/", 1)[0] != part_dir.rsplit("/", 1)[0] or host != run_host):
            slices.append(dataclasses.replace(make(tuple(run)), host=run_host))
            run = []
        run.append(part_dir)
        run_host = host
    if run:
        slices.append(dataclasses.replace(make(tuple(run)), host=run_host))
    return slices


def _text(path: str | Path | None) -> str | None:
    return None if path is None else str(path)
