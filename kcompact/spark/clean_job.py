"""``spark clean``: partitions packed into Spark tasks running the serial cleaner, rows as a DataFrame.

The driver fixes the one clock every task uses and plans in a first Spark job (``kcompact.spark.plan``:
configuration, cleaner order, refusals, ``--map-budget``'s choice, all read by tasks; the driver only
collects a small row per partition), packs the partitions into Spark tasks by bytes (``kcompact.spark.packing``:
about two tasks a core, each a few partitions, since a Spark task's fixed cost is that of cleaning a
few MiB; ``task_bytes=1`` gives each partition its own task; the cores are
:func:`kcompact.spark.session.cluster_cores`) and hands them to Spark as an RDD with
one element and one Spark partition per task, each preferring the host of its partitions when the path
named one (``host:/path``, ``kcompact.spark.locality``). For each of its partitions a task calls
:func:`kcompact.cleaner.workers.bound_clean.clean_partition`, the very function ``kcompact clean`` calls, so the
bytes written are the serial run's (with ``jobs=1``: Spark's executors are the parallelism, a task
forks no worker pool of its own). A task catches each partition's errors and returns them as that
partition's row: a failing partition fails alone (the cleaner leaves it untouched), the others
finish, and the Spark job itself never fails for bad data. With ``spark.speculation`` on, the run is
refused: a second attempt of a task would clean its partitions a second time, concurrently.
The rows are collected (the job runs exactly once) and become a DataFrame on the driver
(schema: ``kcompact.spark.rows.CLEAN_COLUMNS``).

**Checkpoint.** Each task advances its log dir's ``cleaner-offset-checkpoint`` through
``update_offset_checkpoint``: a read-modify-write under the log dir's checkpoint lock (a POSIX record
lock on ``.kcompact-checkpoints.lock``, which Python workers in other processes, or on other hosts of
an NFS v4 mount, respect), so concurrent tasks never drop each other's entries. Existing lines keep
their place, new ones are appended in the order tasks finish; the driver then rewrites the new ones
into cleaning order under the same lock (values untouched; a ``host:/path`` log dir's in a last task on
that host), which is the order a serial run appends
them in (``kcompact.cleaner.logdir.run.settle_checkpoint_order``, as ``kcompact clean --jobs`` does). A driver
that dies before that leaves a valid file with the same entries in another order.

**A lost task.** A Spark task whose Python worker dies (or a JVM that dies) fails the Spark job: its
action raises, and ``collect`` hands back nothing, not even the rows of the tasks that finished. So each
task also adds its rows to an accumulator, which Spark merges on the driver as each task succeeds: when
the job fails, the partitions those rows name are reported as they finished, and every other one is a
"failed" row saying its task was lost (the one Spark names) or did not finish, with the lock files a
killed task left removed (``segment.lock.clear_abandoned_locks``). :attr:`SparkCleanRun.job_failure`
says why in one line (:class:`kcompact.spark.job_failure.JobFailure`). Nothing is lost: a task changes a
partition only through the cleaner's crash-safe swap, which the partition's next clean settles first.
Partitions left for the distributed map are not started after such a failure; a distributed map whose own
job fails so fails its partition alone (its row; the round swaps nothing in before its jobs finish). The
planning job failing so is the run's one line (nothing was changed yet), and the last job (a ``host:/path``
log dir's checkpoint lines put in order) a note: the partitions are cleaned, only that order is not a serial
run's. All three say it as :func:`kcompact.spark.job_failure.one_line_job` does; a task's bug keeps its
traceback.

**Distributed map.** With ``map_budget_bytes``, a partition whose distinct keys would not fit that
budget is not shipped to a task: the driver cleans it with
``kcompact.spark.distributed_map.clean_partition_distributed``, after the fan-out job.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from kcompact.cleaner.logdir.run import settle_checkpoint_order
from kcompact.cleaner.round.options import CleanOptions, KeylessLossRefused, with_cli_dedupe_buffer
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.clock import run_clock_ms
from kcompact.config.sources import ConfigSources
from kcompact.errors import KcompactError
from kcompact.segment.lock import BROKER_LOCK_FILE, clear_abandoned_locks, log_dir_write_guard
from kcompact.segment.partition_filter import PartitionFilter
from kcompact.spark.job_failure import JobFailure, lost_job, one_line_job
from kcompact.spark.locality import OtherHostError, located_rdd, refuse_other_host
from kcompact.spark.output import write_frame
from kcompact.spark.packing import OPEN_COST_BYTES, pack_partitions
from kcompact.spark.plan import (
    CleanTask,
    SparkRunPlan,
    TopicPartition,
    plan_spark_clean,
    portable_error,
)
from kcompact.spark.rows import CLEAN_COLUMNS, as_dicts, clean_row, ddl
from kcompact.spark.session import (
    cluster_cores,
    jvm_alive,
    local_properties,
    quiet_task_failures,
    refuse_speculation,
)
from kcompact.value import mutable

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession

Row = tuple[Any, ...]
# a failed --output write comes after the clean: running it again would clean nothing and give other rows
CLEANED_ALL_THE_SAME = "the partitions are cleaned all the same (their rows are above)"


@mutable
class SparkCleanRun:
    """What ``spark clean`` did: one row per partition (cleaning order, then the refused ones)."""

    rows: list[tuple[Any, ...]]
    spark: SparkSession
    notes: list[str] = field(default_factory=list)
    now_ms: int = 0
    spark_tasks: int = 0  # the Spark tasks the partitions were packed into
    job_failure: JobFailure | None = None  # the Spark job failed: these rows are what finished, and why not
    unreported: list[str] = field(default_factory=list)  # partition dirs whose task was lost or never ran
    _frame: DataFrame | None = None

    def failure_line(self) -> str | None:
        """The job's failure in one line: what was lost, why, what did not finish; None when it did not fail."""
        if self.job_failure is None:
            return None
        names = ", ".join(Path(d).name for d in self.unreported)
        count = len(self.unreported)
        return self.job_failure.line("the Spark job", (
            f"{count} of {len(self.rows)} partition{'s' if len(self.rows) != 1 else ''} not finished ({names}), "
            "the others as reported; nothing is lost (segments are swapped in crash-safely): spark clean again "
            "settles the rest"))

    @property
    def frame(self) -> DataFrame:
        """The rows as a DataFrame (schema :data:`~kcompact.spark.rows.CLEAN_COLUMNS`), built on first use:
        a run that only prints its rows does not pay the ~40 ms (1 s on a fresh JVM) it costs."""
        if self._frame is None:
            self._frame = self.spark.createDataFrame(self.rows, ddl(CLEAN_COLUMNS))
        return self._frame

    def as_dicts(self) -> list[dict[str, Any]]:
        """The rows as ``{column: value}`` dicts (``--json``)."""
        return as_dicts(CLEAN_COLUMNS, self.rows)

    def write_rows(self, output: str, *, verbose: bool = False) -> str | None:
        """The rows as Parquet at a new ``output`` (``--output``), after the clean.

        Args:
            output: the ``--output`` as given.
            verbose: keep Spark's logs of a failing task.

        Returns:
            None once written; else the one line saying why not (a lost task or JVM, Spark could not write
            there): the partitions are cleaned all the same, and the rows are the command's to print.
        """
        context = self.spark.sparkContext
        job = "spark clean: the write job"
        try:
            write_frame(self.frame, output, context, job=job, verbose=verbose, done=CLEANED_ALL_THE_SAME)
        except KcompactError as err:
            return str(err)
        except Exception as err:  # the rows' DataFrame not made: its JVM is gone
            lost = lost_job(err, context)
            if lost is None:
                raise
            return lost.line(job, f"nothing was written ({output} not created): {CLEANED_ALL_THE_SAME}")
        return None


def refuse_live_brokers(paths: Iterable[str | Path]) -> None:
    """Refuse, before a Spark session starts, a path the driver sees whose log dir a running broker holds.

    Every task would refuse its partitions anyway, but only after the session's start-up (seconds, and the
    JVM's own lines on stderr); paths the driver does not see are left to the tasks.

    Args:
        paths: the partition directories and log dirs of the run.

    Raises:
        RefusedError: a broker holds the ``.lock`` of a path or of its parent.
    """
    for path in map(Path, paths):
        for log_dir in (path, path.parent):
            if (log_dir / BROKER_LOCK_FILE).is_file():
                with log_dir_write_guard(log_dir):
                    pass


def spark_clean(
    spark: SparkSession,
    paths: Iterable[str | Path],
    *,
    cli_overrides: Mapping[str, str],
    options: CleanOptions,
    only_eligible: bool = False,
    server_properties: str | Path | None = None,
    metadata_dir: str | Path | None = None,
    map_budget_bytes: int | None = None,
    task_bytes: int | None = None,
    assume_compact: bool = False,
    allow_keyless_loss: bool = False,
    selection: PartitionFilter | None = None,
    verbose: bool = False,
    sole_replica: bool = False,
) -> SparkCleanRun:
    """Clean partitions as Spark tasks, byte-identical to ``kcompact clean`` on each in turn.

    Args:
        spark: the session (see :func:`kcompact.spark.session.spark_session`).
        paths: partition directories and/or log dirs; executors must see them at the same paths.
        cli_overrides: ``--config`` pairs (already validated).
        options: the clean options; ``now_ms`` None means the driver's clock now, for every task.
        only_eligible: for a log dir, clean only partitions the broker would clean now.
        server_properties: the broker's server.properties.
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0``.
        map_budget_bytes: clean partitions whose offset map would exceed this with the distributed
            offset map instead of in one task; None = never.
        task_bytes: pack partitions into Spark tasks of about this many bytes, a partition counting
            as its segment bytes + 4 MiB, never fewer tasks than cores; None = automatic (two tasks a
            core, ~256 MiB at most unless one partition is larger), 1 = one task per partition.
        assume_compact: compact partitions whose ``cleanup.policy`` is unknown (as ``clean``).
        allow_keyless_loss: compact an explicitly compacted partition although most of its records
            have no key (as ``clean``).
        selection: the partitions to clean (as ``clean``'s ``--topic``/``--exclude-topic``/``--partition``).
        verbose: keep Spark's own log lines about a failing task.
        sole_replica: take this broker as the only replica of every partition the KRaft metadata does not
            name the replicas of (as ``clean --sole-replica``).

    Returns:
        The :class:`SparkCleanRun`; failed partitions are rows with ``status`` "failed" (or "bug"),
        a log dir's partitions not known to be compacted rows with ``status`` "skipped". When the Spark
        job failed (a task lost, a JVM gone), ``job_failure`` says why and ``unreported`` names the
        partitions whose tasks did not finish (each also a "failed" row).

    Raises:
        KcompactError: a path is not a partition directory or log dir.
        RefusedError: ``spark.speculation`` is on.
    """
    refuse_speculation(spark.sparkContext, "spark clean",
                       "a second attempt of a task would clean its partitions again, concurrently")
    now_ms = run_clock_ms(options.now_ms)
    # Spark is the parallelism: a task cleans its partitions in its own process (no worker pool inside).
    options = replace(with_cli_dedupe_buffer(options, cli_overrides), now_ms=now_ms, jobs=1)
    sources = ConfigSources(cli_overrides, server_properties, metadata_dir, assume_compact,
                            allow_keyless_loss, sole_replica=sole_replica)
    runner = functools.partial(_run_planning_job, spark.sparkContext, verbose=verbose)
    plan = plan_spark_clean(paths, sources, options=options, only_eligible=only_eligible, selection=selection,
                            map_budget_bytes=map_budget_bytes, runner=runner)
    on_driver = {i for i, task in enumerate(plan.tasks) if task.distributed_map}
    fanned = [task for i, task in enumerate(plan.tasks) if i not in on_driver]
    by_dir, fan_out = _clean_everything(spark, plan.tasks, fanned, on_driver, task_bytes, verbose)
    unreported = [task.partition_dir for task in plan.tasks if by_dir[task.partition_dir] is None]
    rows = [by_dir[task.partition_dir] or _unreported_row(task, fan_out) for task in plan.tasks]
    rows += [clean_row(f.partition_dir, None, error=f.error) for f in plan.failures]
    rows += [clean_row(k.partition_dir, None, skipped=k.reason) for k in plan.skipped]
    notes = [*plan.notes, *_settle_checkpoints(spark.sparkContext, plan, verbose=verbose)]
    return SparkCleanRun(rows, spark, notes, now_ms, len(fan_out.packs), fan_out.failure, unreported)


def _clean_everything(spark: SparkSession, tasks: Sequence[CleanTask], fanned: Sequence[CleanTask],
                      on_driver: set[int], task_bytes: int | None, verbose: bool
                      ) -> tuple[dict[str, Row | None], _FanOut]:
    """The fan-out job and the distributed-map partitions at the same time: the big partitions' jobs are
    driven from this thread while the fan-out's job runs from another (Spark schedules both), so they
    do not wait for every small partition first. A distributed map is not started once the fan-out
    job failed (its partitions are named as not cleaned)."""
    outcome: dict[str, Any] = {}
    failed = threading.Event()

    def fan_out_job() -> None:
        try:
            outcome["fan_out"] = _fan_out(spark, fanned, task_bytes, verbose=verbose, failed=failed)
        except BaseException as err:  # noqa: BLE001 - raised again on the driver's thread below
            failed.set()
            outcome["error"] = err

    by_dir: dict[str, Row | None] = {}
    if on_driver:
        # Spark's local properties (job group, description) are per thread: the new one inherits them
        from pyspark import InheritableThread

        thread = InheritableThread(target=fan_out_job, name="kcompact-spark-clean-fan-out")
        # Spark's logs of a lost task silenced around both threads' jobs: the fan-out's own silencing nests
        # inside (its thread is joined before the levels are put back)
        with quiet_task_failures(spark.sparkContext, verbose=verbose):
            thread.start()
            try:
                for i in sorted(on_driver):
                    task = tasks[i]
                    by_dir[task.partition_dir] = None if failed.is_set() else _clean_on_driver(spark, task)
            finally:
                thread.join()
    else:
        fan_out_job()
    if "error" in outcome:
        raise outcome["error"]
    fan_out: _FanOut = outcome["fan_out"]
    by_dir.update(zip((t.partition_dir for t in fanned), fan_out.rows, strict=True))
    return by_dir, fan_out


PLAN_SLICES_PER_CORE = 4  # planning items a core: a slow partition's probe does not hold a whole core's share


def _run_planning_job(context: SparkContext, function: Callable[[Any], Any], items: Sequence[Any],
                      hosts: Sequence[str | None], *, verbose: bool = False, job: str = "spark clean: the planning job",
                      state: str = "nothing was changed") -> list[Any]:
    """The :data:`~kcompact.spark.plan.Runner` of ``spark clean``: ``function`` over ``items`` in Spark
    tasks, a slice of items of one host per task, results in the items' order.

    Raises:
        KcompactError: the job failed (a lost worker, a JVM gone; a task's kcompact error), as one line naming
            ``job`` and ending with ``state``.
    """
    if not items:
        return []
    slices = _host_slices(hosts, cluster_cores(context) * PLAN_SLICES_PER_CORE)
    shipped = [[(i, items[i]) for i in part] for part in slices]
    with one_line_job(context, f"kcompact {job}: {len(items)} items", job, state, verbose=verbose):
        rdd = located_rdd(context, shipped, [hosts[part[0]] for part in slices])
        found = dict(rdd.flatMap(functools.partial(_apply_indexed, function)).collect())
    return [found[i] for i in range(len(items))]


def _apply_indexed(function: Callable[[Any], Any], shipped: Sequence[tuple[int, Any]]) -> list[tuple[int, Any]]:
    return [(i, function(item)) for i, item in shipped]


def _host_slices(hosts: Sequence[str | None], wanted: int) -> list[list[int]]:
    """Indexes of items in runs of one host each, about ``wanted`` runs in all, in the items' order."""
    size = max(1, -(-len(hosts) // max(1, wanted)))
    by_host: dict[str | None, list[int]] = {}
    for i, host in enumerate(hosts):
        by_host.setdefault(host, []).append(i)
    return [members[at:at + size] for members in by_host.values() for at in range(0, len(members), size)]


def _settle_checkpoints(context: SparkContext, plan: SparkRunPlan, *, verbose: bool = False) -> list[str]:
    """Each concerned log dir's new cleaner-checkpoint lines into cleaning order: on the driver for a
    plain path, in a task on its host for ``host:/path`` (the driver does not see that disk).

    Returns:
        A note when that task was lost or the JVM died: the partitions are cleaned, their checkpoint entries
        written; only the order of the new lines is a serial clean's no longer (Kafka reads the file as a map).
    """
    order = [(t.topic, t.partition) for t in plan.tasks]
    here = [(Path(d.path), keys) for d, keys in plan.checkpoints_before.items() if d.host is None]
    for log_dir, keys in here:
        settle_checkpoint_order(log_dir, keys, order)
    away = [(d, keys) for d, keys in plan.checkpoints_before.items() if d.host is not None]
    if not away:
        return []
    try:
        errors = _run_planning_job(context, functools.partial(_settle_away, order),
                                   [(d.path, keys, d.host) for d, keys in away], [d.host for d, _ in away],
                                   verbose=verbose,
                                   job="spark clean: the checkpoint-ordering job", state=(
                                       "the partitions are cleaned as reported; the new lines of "
                                       f"{', '.join(f'{d}/cleaner-offset-checkpoint' for d, _ in away)} stay in "
                                       "the order the tasks finished (the same entries)"))
    except KcompactError as err:
        return [str(err)]
    notes = []
    for error in errors:
        if isinstance(error, OtherHostError):  # the partitions are cleaned: only the lines' order is left
            notes.append(f"{error}; the partitions are cleaned as reported, the new lines of its "
                         "cleaner-offset-checkpoint stay in the order the tasks finished (the same entries)")
        elif error is not None:
            raise error
    return notes


def _settle_away(order: Sequence[TopicPartition],
                 item: tuple[str, list[TopicPartition], str | None]) -> KcompactError | None:
    """A task settling one log dir's checkpoint on its host (refused on another): the error, not raised,
    for the driver."""
    log_dir, keys, host = item
    try:
        refuse_other_host(host, log_dir)
        settle_checkpoint_order(Path(log_dir), keys, order)
    except KcompactError as err:
        return portable_error(err)
    return None


def run_clean_task(task: CleanTask) -> tuple[Any, ...]:
    """The body of one Spark task: clean one partition, return its row (never raises).

    Args:
        task: the partition, its configuration and the run's options.

    Returns:
        The partition's row (:data:`~kcompact.spark.rows.CLEAN_COLUMNS`).
    """
    host = socket.gethostname()
    cpu_before = time.process_time()
    try:
        refuse_other_host(task.host, task.partition_dir)  # Spark ran it elsewhere: the partition left alone
        result = clean_partition(task.partition_dir, task.config, task.options)
    except KcompactError as err:
        return _refused_row(task, err, executor=host)
    except Exception:  # noqa: BLE001 - a bug: reported with its traceback, the other partitions finish
        return _failure_row(task, traceback.format_exc(), bug=True, executor=host)
    return clean_row(task.partition_dir, result, executor=host, task_cpu_s=time.process_time() - cpu_before)


def _refused_row(task: CleanTask, err: KcompactError, *, executor: str | None,
                 distributed_map: bool = False) -> tuple[Any, ...]:
    """A task's deliberate error as its row: a log dir's partition whose round was refused as mostly
    keyless is skipped with its reason, as ``kcompact clean`` skips it; anything else failed."""
    if isinstance(err, KeylessLossRefused) and task.in_log_dir:
        return clean_row(task.partition_dir, None, skipped=str(err).removeprefix(f"{task.partition_dir}: "))
    return _failure_row(task, str(err), bug=False, executor=executor, distributed_map=distributed_map)


def _failure_row(task: CleanTask, error: str, *, bug: bool, executor: str | None,
                 distributed_map: bool = False) -> tuple[Any, ...]:
    row = list(clean_row(task.partition_dir, None, error=error, bug=bug, executor=executor,
                         distributed_map=distributed_map))
    names = [name for name, _ in CLEAN_COLUMNS]
    row[names.index("topic")], row[names.index("partition")] = task.topic, task.partition
    row[names.index("now_ms")], row[names.index("dry_run")] = task.options.now_ms, task.options.dry_run
    return tuple(row)


def run_clean_tasks(packed: Sequence[tuple[int, CleanTask]]) -> list[tuple[int, tuple[Any, ...]]]:
    """The body of one Spark task: its partitions one after the other, each with its own row.

    Args:
        packed: (index in the run, partition) pairs, in cleaning order.

    Returns:
        (index in the run, row) pairs; never raises for a partition's failure.
    """
    return [(index, run_clean_task(task)) for index, task in packed]


@mutable
class _FanOut:
    """What the fan-out job gave: a row per partition (None: its task was lost or never ran), the packs."""

    rows: list[Row | None]
    packs: list[list[int]] = field(default_factory=list)  # indexes into the partitions, one list a Spark task
    failure: JobFailure | None = None
    lost: set[str] = field(default_factory=set)  # the partition dirs of the task Spark names as lost
    shipped: set[str] = field(default_factory=set)  # the partition dirs handed to Spark tasks


def _fan_out(spark: SparkSession, tasks: Sequence[CleanTask], task_bytes: int | None, *,
             verbose: bool = False, failed: threading.Event | None = None) -> _FanOut:
    """The partitions packed into Spark tasks: their rows in ``tasks``' order (see the module docstring:
    a failed job gives the rows of the tasks that finished, None for the others)."""
    if not tasks:
        return _FanOut([])
    context = spark.sparkContext
    packs = _packs_by_host(tasks, cluster_cores(context), task_bytes)
    shipped = [[(i, tasks[i]) for i in pack] for pack in packs]
    # pyspark types the param as its AccumulatorParam class, which this module does not import (pyspark lazily)
    finished: Any = context.accumulator([], cast(Any, _RowsParam()))
    context.setJobDescription(f"kcompact spark clean: {len(tasks)} partitions in {len(packs)} tasks")
    failure = None
    try:
        with quiet_task_failures(context, verbose=verbose):
            found = dict(located_rdd(context, shipped, [tasks[pack[0]].host for pack in packs])
                         .flatMap(functools.partial(_run_and_report, run_clean_tasks, finished)).collect())
    except Exception as err:  # noqa: BLE001 - a lost task or JVM (Py4JJavaError, py4j's network errors,
        # ConnectionRefusedError): what finished is in the accumulator, the rest is named
        if failed is not None:
            failed.set()
        failure = JobFailure.of(err, jvm_lost=not jvm_alive(context))
        found = dict(finished.value)
    finally:
        with contextlib.suppress(Exception):  # a JVM that is gone has no description to reset
            local_properties(context).setJobDescription(None)
    fan_out = _FanOut([found.get(i) for i in range(len(tasks))], packs, failure,
                      shipped={task.partition_dir for task in tasks})
    if failure is not None and failure.lost_task is not None and failure.lost_task < len(packs):
        fan_out.lost = {tasks[i].partition_dir for i in packs[failure.lost_task]}
    for i, row in enumerate(fan_out.rows):
        if row is None:  # its task was killed, maybe holding its locks
            part = Path(tasks[i].partition_dir)
            with contextlib.suppress(OSError):  # the driver may not see an executor's paths
                clear_abandoned_locks(part.parent, part.name)
    return fan_out


def _unreported_row(task: CleanTask, fan_out: _FanOut) -> Row:
    """The "failed" row of a partition whose Spark task did not finish (it may have cleaned the partition
    and been lost before it reported), or that was not started."""
    if fan_out.failure is not None and task.partition_dir in fan_out.lost:
        why = f"its Spark task was lost ({fan_out.failure.cause})"
    elif task.partition_dir in fan_out.shipped:
        why = "the Spark job failed before its task finished"
    else:
        why = "the Spark job failed before its distributed map started"
    return _failure_row(task, f"{task.partition_dir}: not reported: {why}", bug=False, executor=None)


class _RowsParam:
    """An accumulator of (index, row) pairs (pyspark's ``AccumulatorParam`` protocol; pyspark is not
    imported here): each finished task's rows, merged on the driver as the task succeeds."""

    def zero(self, value: list[tuple[int, Row]]) -> list[tuple[int, Row]]:
        return []

    def addInPlace(self, value1: list[tuple[int, Row]], value2: list[tuple[int, Row]]) -> list[tuple[int, Row]]:
        value1.extend(value2)
        return value1


def _run_and_report(run: Callable[[Sequence[tuple[int, CleanTask]]], list[tuple[int, Row]]], finished: Any,
                    packed: Sequence[tuple[int, CleanTask]]) -> list[tuple[int, Row]]:
    """A Spark task: ``run`` (:func:`run_clean_tasks`), its rows also added to the accumulator ``finished``
    (what the driver has should the job fail)."""
    rows = run(packed)
    finished.add(rows)
    return rows


def _distributed_map_module() -> Any:
    """The distributed offset map, imported only when ``--map-budget`` is given."""
    from kcompact.spark import distributed_map

    return distributed_map


def _packs_by_host(tasks: Sequence[CleanTask], cores: int, task_bytes: int | None) -> list[list[int]]:
    """The partitions packed into Spark tasks (``packing``), each task of one host's partitions, largest
    first; with no ``host:/path`` in the run, ``pack_partitions`` of them all."""
    by_host: dict[str | None, list[int]] = {}
    for i, task in enumerate(tasks):
        by_host.setdefault(task.host, []).append(i)
    if len(by_host) == 1:
        return pack_partitions([t.size_in_bytes for t in tasks], cores, task_bytes)
    packs = [[members[j] for j in pack] for members in by_host.values()
             for pack in pack_partitions([tasks[i].size_in_bytes for i in members], cores, task_bytes)]
    cost = [sum(tasks[i].size_in_bytes + OPEN_COST_BYTES for i in pack) for pack in packs]
    return [packs[k] for k in sorted(range(len(packs)), key=lambda k: -cost[k])]


def _clean_on_driver(spark: SparkSession, task: CleanTask) -> tuple[Any, ...]:
    """A partition too big for one task's map: the distributed offset map, driven from here. Its Spark jobs
    failing because a task was lost or the JVM died fail this partition alone (its row says so): the round
    swaps nothing in before its jobs are done, and removes the ``.cleaned`` files they wrote."""
    if task.host is not None:
        return _failure_row(task, (f"{task.host}:{task.partition_dir}: its offset map would exceed --map-budget, "
                                   "and the distributed map's driver must see the partition to plan its round; "
                                   "nothing was changed: clean it without --map-budget, or from a shared file "
                                   "system"), bug=False, executor=None, distributed_map=True)
    module = _distributed_map_module()
    host = socket.gethostname()
    try:
        result = module.clean_partition_distributed(spark, task.partition_dir, task.config, task.options)
    except KcompactError as err:
        return _refused_row(task, err, executor=host, distributed_map=True)
    except Exception as err:  # a lost task or JVM: this partition's row; anything else is a bug, raised
        lost = lost_job(err, spark.sparkContext)
        if lost is None:
            raise
        said = lost.line(f"{task.partition_dir}: its distributed map's Spark job", (
            "nothing was swapped in (the partition is as it was): spark clean again cleans it"))
        return _failure_row(task, said, bug=False, executor=host, distributed_map=True)
    return clean_row(task.partition_dir, result, executor=host, distributed_map=True)
