"""Which partitions ``spark clean`` cleans, with which configuration, in which order: decided in tasks.

The same choices as ``kcompact clean`` (:func:`kcompact.cleaner.logdir.run.clean_path`), made by the same
public functions of ``kcompact.cleaner.logdir.run`` (``order_candidates``, ``rank_partition``,
``order_ranked``, ``partition_task``); what this module adds is where they run. Reading a partition to
rank it (its configuration, the keyless sample of ``compaction_gate``, every batch header for the dirty
ratio) grows with the data, so it is not done on the driver but by a :data:`Runner` — in this process by
default (:func:`run_here`), Spark tasks in ``spark clean`` — in two steps:

1. **survey**, one item per path given: is it a partition directory or a log dir, a log dir's live
   partitions (a listing), its refusals (read-only, a broker holding it), and the concerned log dir's
   ``cleaner-offset-checkpoint`` keys before the run (what the driver settles the file's line order
   against at the end); directory listings and the log dir's small checkpoint files only, so a run of
   plain paths (a file system the driver sees too) surveys them on the driver, saving a Spark job;
2. **probe**, one item per partition: :func:`rank_partition` for a log dir's partition,
   :func:`partition_task` for one named alone, and with ``--map-budget`` whether its offset map would
   exceed the budget (``distributed_map.needs_distributed_map``: a header walk).

Each item prefers the host its path names (``host:/path``, ``kcompact.spark.locality``); the driver only
puts the small rows together: a refusal becomes that partition's failure here, so the other paths of
the run still go ahead; a log dir contributes its live partitions in the order the broker's cleaner
picks them (highest dirty ratio first, then by name); non-compacted ones are skipped with a note,
``only_eligible`` keeps those the broker would clean now, and a partition whose files or configuration
do not parse is a failure.

The order matters beyond the report: partitions whose entries are new to a log dir's
``cleaner-offset-checkpoint`` are appended to it in cleaning order, and ``spark clean`` settles the
file to that order so that it is byte-identical to the serial run's (see ``clean_job``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field
from functools import partial
from pathlib import Path
from typing import Any

from kcompact.cleaner.logdir.run import (
    PartitionFailure,
    PartitionRank,
    PartitionSkip,
    PartitionTask,
    checkpoint_keys,
    order_candidates,
    order_ranked,
    partition_task,
    rank_partition,
)
from kcompact.cleaner.round.options import CleanOptions
from kcompact.config.sources import ConfigSources
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import KcompactError
from kcompact.log.rules.fence import refuse_log_dir_safe_offset
from kcompact.segment.log_dir_check import check_log_dir_writable
from kcompact.segment.partition import is_partition_dir, iter_partition_dirs, named_path
from kcompact.segment.partition_filter import PartitionFilter
from kcompact.spark.locality import Located, OtherHostError, locate, refuse_other_host
from kcompact.value import frozen, mutable

PlannedFailure = PartitionFailure
"""A partition refused or unreadable before any task ran (it is left untouched): ``clean``'s own."""

TopicPartition = tuple[str, int]

Runner = Callable[[Callable[[Any], Any], Sequence[Any], Sequence[str | None]], list[Any]]
"""Maps a function over items, each item preferring a host (None: any), results in the items' order."""


def run_here(function: Callable[[Any], Any], items: Sequence[Any], hosts: Sequence[str | None]) -> list[Any]:
    """The :data:`Runner` of this process (tests, a driver that plans for itself): hosts are ignored."""
    return [function(item) for item in items]


@frozen
class CleanTask:
    """One partition to clean: what a Spark task (or the driver, for a distributed map) is given."""

    partition_dir: str
    topic: str
    partition: int
    config: TopicConfig
    options: CleanOptions  # the run's options, clock fixed, retention resolved for this partition
    in_log_dir: bool = False  # reached through its log dir: a round refused as mostly keyless is a skip
    size_in_bytes: int = 0  # of its segments, when planned (what packing weighs it by)
    distributed_map: bool = False  # its offset map would exceed --map-budget: the distributed map cleans it
    host: str | None = None  # the host whose disk holds it (``host:/path``); None: any (a shared file system)

    @classmethod
    def of(cls, task: PartitionTask, options: CleanOptions, *, in_log_dir: bool = False,
           distributed_map: bool = False, host: str | None = None) -> CleanTask:
        """The Spark task of a partition ``kcompact.cleaner.logdir.run`` planned, with the run's options."""
        topic, partition = task.topic_partition
        return cls(str(task.part_dir), topic, partition, task.config, task.options(options), in_log_dir,
                   task.size_in_bytes, distributed_map, host)


@mutable
class SparkRunPlan:
    """The partitions of a ``spark clean`` run in cleaning order, the refusals, and the notes."""

    tasks: list[CleanTask] = field(default_factory=list)
    failures: list[PlannedFailure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[PartitionSkip] = field(default_factory=list)  # a log dir's, not known to be compacted
    # each concerned log dir's cleaner-checkpoint keys before the run (unreadable ones and dry runs left out)
    checkpoints_before: dict[Located, list[TopicPartition]] = field(default_factory=dict)


@frozen
class PathSurvey:
    """What the survey step found at one path of the run."""

    is_partition: bool = False
    partitions: tuple[str, ...] = ()  # a log dir's candidates, by name (none: the selection holds none here)
    log_dir: str | None = None  # the log dir whose checkpoint the run changes (a partition's parent)
    checkpoint_keys: tuple[TopicPartition, ...] | None = None  # its entries before the run, in file order
    error: KcompactError | None = None
    refused: str | None = None  # the task ran on another host than the path's: its row's error, nothing read


@frozen
class Probed:
    """What the probe step found of one partition: its rank (task, skip or failure), and whether its
    offset map would exceed ``--map-budget``."""

    rank: PartitionRank
    distributed_map: bool = False


def plan_spark_clean(
    paths: Iterable[str | Path],
    sources: ConfigSources,
    *,
    options: CleanOptions,
    only_eligible: bool = False,
    selection: PartitionFilter | None = None,
    map_budget_bytes: int | None = None,
    runner: Runner = run_here,
) -> SparkRunPlan:
    """Plan a ``spark clean`` over partition directories and log dirs (see the module docstring).

    Args:
        paths: partition directories and/or log dirs, each maybe ``host:/path`` (``kcompact.spark.locality``).
        sources: where each partition's configuration comes from (``--config`` pairs, already
            validated, server.properties, the metadata log).
        options: the run's options; ``now_ms`` must already be fixed by the driver.
        only_eligible: for a log dir, keep only the partitions the broker would clean now.
        selection: the partitions to clean (``--topic``, ``--exclude-topic``, ``--partition``);
            None: all. A partition directory named alone that it leaves out is a failure.
        map_budget_bytes: mark the partitions whose offset map would exceed it (``CleanTask.distributed_map``).
        runner: where the survey and the probes run (Spark tasks in ``spark clean``).

    Returns:
        The :class:`SparkRunPlan`.

    Raises:
        KcompactError: a path is neither a partition directory nor a directory; ``now_ms`` unset; a
            log dir's cause shared by all its partitions (a checkpoint file that does not parse; unless
            ``dry_run``, a read-only log dir or a broker holding it).
    """
    if options.now_ms is None:
        raise KcompactError("spark clean plan: the driver's clock; expected now_ms set, found None")
    # executors run elsewhere: no path relative to the driver's cwd
    targets = [locate(raw, lambda path: named_path(Path(path).absolute())) for raw in paths]
    # plain paths are on a file system the driver sees too: listing them here saves the run a Spark job
    surveyor = runner if any(t.host is not None for t in targets) else run_here
    surveys: list[PathSurvey] = surveyor(partial(survey_path, options, selection), targets,
                                         [t.host for t in targets])
    for survey in surveys:
        if survey.error is not None:
            raise survey.error
    probes: list[tuple[str, bool, str | None]] = []
    hosts: list[str | None] = []
    for target, survey in zip(targets, surveys, strict=True):
        if survey.refused is not None:
            found = []
        elif survey.is_partition:
            wanted = selection is None or selection.matches_dir(target.path)
            found = [(target.path, False, target.host)] if wanted else []
        else:
            found = [(part_dir, True, target.host) for part_dir in survey.partitions]
        probes += found
        hosts += [target.host] * len(found)
    results: list[Probed] = runner(partial(probe_partition, sources, options, map_budget_bytes), probes, hosts)
    plan = SparkRunPlan()
    by_dir = dict(zip(probes, results, strict=True))
    for target, survey in zip(targets, surveys, strict=True):
        if survey.refused is not None:
            plan.failures.append(PlannedFailure(target.path, survey.refused))
        elif survey.is_partition:
            if (target.path, False, target.host) in by_dir:
                _plan_partition(by_dir[(target.path, False, target.host)], options, target.host, plan)
        else:
            _plan_log_dir([by_dir[(d, True, target.host)] for d in survey.partitions], options, only_eligible,
                          target.host, plan)
        if survey.log_dir is not None and survey.checkpoint_keys is not None:
            plan.checkpoints_before.setdefault(Located(target.host, survey.log_dir), list(survey.checkpoint_keys))
    _drop_repeats(plan)
    concerned = {Located(t.host, str(Path(t.partition_dir).parent)) for t in plan.tasks}
    plan.checkpoints_before = {d: keys for d, keys in plan.checkpoints_before.items() if d in concerned}
    return plan


def survey_path(options: CleanOptions, selection: PartitionFilter | None, target: Located | str) -> PathSurvey:
    """The survey step of one path (see the module docstring); runs where the path is.

    Args:
        options: ``dry_run`` (no writability check, no checkpoint to settle) and ``safe_offset``.
        selection: the partitions of the run (a log dir where it matches none is surveyed empty).
        target: the path, absolute, and its host (``host:/path``: the survey runs there or refuses it).

    Returns:
        The :class:`PathSurvey`; the error of a path that is not one, or of a log dir refused whole;
        ``refused`` when this task runs on another host than the path's (nothing read).
    """
    located = target if isinstance(target, Located) else Located(None, target)
    try:
        refuse_other_host(located.host, located.path)
    except OtherHostError as err:
        return PathSurvey(refused=str(err))
    path = Path(located.path)
    try:
        if is_partition_dir(path):
            return PathSurvey(True, log_dir=str(path.parent), checkpoint_keys=_keys_before(path.parent, options))
        if not path.is_dir():
            raise KcompactError(f"{path}: no such partition directory or log dir")
        refuse_log_dir_safe_offset(path, options.safe_offset)
        if not options.dry_run:
            check_log_dir_writable(path)
        if selection is not None and not selection.select(iter_partition_dirs(path)):
            return PathSurvey()  # another path of the run holds the selected partitions
        candidates = tuple(str(part_dir) for part_dir in order_candidates(path, selection))
        return PathSurvey(False, candidates, str(path), _keys_before(path, options))
    except KcompactError as err:
        return PathSurvey(error=portable_error(err))


def _keys_before(log_dir: Path, options: CleanOptions) -> tuple[TopicPartition, ...] | None:
    if options.dry_run:
        return None
    keys = checkpoint_keys(log_dir)
    return None if keys is None else tuple(keys)


def probe_partition(sources: ConfigSources, options: CleanOptions, map_budget_bytes: int | None,
                    item: tuple[str, bool, str | None]) -> Probed:
    """The probe step of one partition (see the module docstring); runs where the partition is.

    Args:
        sources: where its configuration comes from.
        options: the run's options (``now_ms`` fixed).
        map_budget_bytes: ``--map-budget``; None: no partition needs the distributed map.
        item: ``(partition directory, reached through its log dir, its host)`` (a ``host:/path``'s probe
            runs on that host, else its partition fails, nothing read; None: a plain path).

    Returns:
        The :class:`Probed` row; never raises for the partition's own files or configuration.
    """
    part_dir, in_log_dir, host = item
    try:
        refuse_other_host(host, part_dir)
    except OtherHostError as err:
        return Probed(PartitionRank(part_dir, failure=PlannedFailure(part_dir, str(err))))
    if in_log_dir:
        # the loaded state (every batch header) stays here: rows to the driver are small, and the
        # clean task, maybe on another executor, loads it again under the partition's lock
        rank = rank_partition(Path(part_dir), sources, options).without_state()
    else:
        notes: list[str] = []
        try:
            alone = partition_task(Path(part_dir), sources, notes)
        except KcompactError as err:
            rank = PartitionRank(part_dir, notes=tuple(notes), failure=PlannedFailure(part_dir, str(err)))
        else:
            rank = PartitionRank(part_dir, alone, notes=tuple(notes))
    if rank.task is None or map_budget_bytes is None:
        return Probed(rank)
    # numpy's and the shuffle's code imported only with --map-budget
    from kcompact.spark import distributed_map

    try:
        needed = distributed_map.needs_distributed_map(part_dir, rank.task.config, rank.task.options(options),
                                                       map_budget_bytes)
    except KcompactError:
        needed = False  # unreadable: its task fails with the same error, as its own row
    return Probed(rank, needed)


def portable_error(err: KcompactError) -> KcompactError:
    """``err`` as it survives pickling from a task to the driver (an error whose constructor takes
    other arguments than its message becomes a :class:`KcompactError` with the same message)."""
    try:
        back = pickle.loads(pickle.dumps(err))
    except Exception:  # noqa: BLE001 - any pickling failure: the message is what the driver reports
        return KcompactError(str(err))
    return back if isinstance(back, KcompactError) and str(back) == str(err) else KcompactError(str(err))


def _drop_repeats(plan: SparkRunPlan) -> None:
    """A partition named twice (itself and through its log dir) is cleaned once, at its first place."""
    seen: set[tuple[str | None, str]] = set()
    unique = []
    for task in plan.tasks:
        key = (task.host, str(Path(task.partition_dir).resolve()) if task.host is None else task.partition_dir)
        if key not in seen:
            seen.add(key)
            unique.append(task)
    plan.tasks[:] = unique


def _plan_partition(probed: Probed, options: CleanOptions, host: str | None, plan: SparkRunPlan) -> None:
    """A partition directory named on the command line (``clean_path``'s single-partition branch)."""
    rank = probed.rank
    plan.notes.extend(note for note in rank.notes or () if note not in plan.notes)
    if rank.failure is not None:
        plan.failures.append(rank.failure)
    elif rank.task is not None:
        plan.tasks.append(CleanTask.of(rank.task, options, distributed_map=probed.distributed_map, host=host))


def _plan_log_dir(probed: Sequence[Probed], options: CleanOptions, only_eligible: bool, host: str | None,
                  plan: SparkRunPlan) -> None:
    """A log dir's partitions, highest dirty ratio first, as the broker's cleaner picks them."""
    order = order_ranked([p.rank for p in probed], only_eligible=only_eligible)
    plan.failures.extend(order.failures)
    plan.notes.extend(order.notes)
    plan.skipped.extend(order.skipped)
    needs_map = {p.rank.part_dir for p in probed if p.distributed_map}
    plan.tasks.extend(CleanTask.of(task, options, in_log_dir=True, host=host,
                                   distributed_map=str(task.part_dir) in needs_map) for task in order.tasks)
