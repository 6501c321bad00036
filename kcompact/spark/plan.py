"""Which partitions ``spark clean`` cleans, with which configuration, in which order (driver side).

The same choices as ``kcompact clean`` (:func:`kcompact.cleaner.logdir.run.clean_path`), made by the same
public functions of ``kcompact.cleaner.logdir.run`` (``partition_task``, ``cleaner_order``); what this module
adds is the run's shape for Spark (several paths, one :class:`CleanTask` per partition to ship):

* a partition directory is cleaned with its own configuration, or refused (``__cluster_metadata``,
  a policy without ``compact``): the refusal becomes that partition's failure here, so the other
  paths of the run still go ahead;
* a log dir contributes its live partitions in the order the broker's cleaner picks them (highest
  dirty ratio first, then by name); non-compacted ones are skipped with a note, ``only_eligible``
  keeps those the broker would clean now, and a partition whose files or configuration do not parse
  is a failure.

The order matters beyond the report: partitions whose entries are new to a log dir's
``cleaner-offset-checkpoint`` are appended to it in cleaning order, and ``spark clean`` settles the
file to that order so that it is byte-identical to the serial run's (see ``clean_job``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kcompact.cleaner.logdir.run import (
    ConfigSources,
    PartitionFailure,
    PartitionSkip,
    PartitionTask,
    cleaner_order,
    partition_task,
    refuse_log_dir_safe_offset,
)
from kcompact.cleaner.round.options import CleanOptions
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import KcompactError
from kcompact.segment.log_dir_check import check_log_dir_writable
from kcompact.segment.partition import is_partition_dir, iter_partition_dirs, named_path
from kcompact.segment.partition_filter import PartitionFilter

PlannedFailure = PartitionFailure
"""A partition refused or unreadable before any task ran (it is left untouched): ``clean``'s own."""


@dataclass(frozen=True, slots=True)
class CleanTask:
    """One partition to clean: what a Spark task (or the driver, for a distributed map) is given."""

    partition_dir: str
    topic: str
    partition: int
    config: TopicConfig
    options: CleanOptions  # the run's options, clock fixed, retention resolved for this partition
    in_log_dir: bool = False  # reached through its log dir: a round refused as mostly keyless is a skip

    @classmethod
    def of(cls, task: PartitionTask, options: CleanOptions, *, in_log_dir: bool = False) -> CleanTask:
        """The Spark task of a partition ``kcompact.cleaner.logdir.run`` planned, with the run's options."""
        topic, partition = task.topic_partition
        return cls(str(task.part_dir), topic, partition, task.config, task.options(options), in_log_dir)


@dataclass(slots=True)
class SparkRunPlan:
    """The partitions of a ``spark clean`` run in cleaning order, the refusals, and the notes."""

    tasks: list[CleanTask] = field(default_factory=list)
    failures: list[PlannedFailure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[PartitionSkip] = field(default_factory=list)  # a log dir's, not known to be compacted


def plan_spark_clean(
    paths: Iterable[str | Path],
    sources: ConfigSources,
    *,
    options: CleanOptions,
    only_eligible: bool = False,
    selection: PartitionFilter | None = None,
) -> SparkRunPlan:
    """Plan a ``spark clean`` over partition directories and log dirs, path after path.

    Args:
        paths: partition directories and/or log dirs.
        sources: where each partition's configuration comes from (``--config`` pairs, already
            validated, server.properties, the metadata log).
        options: the run's options; ``now_ms`` must already be fixed by the driver.
        only_eligible: for a log dir, keep only the partitions the broker would clean now.
        selection: the partitions to clean (``--topic``, ``--exclude-topic``, ``--partition``);
            None: all. A partition directory named alone that it leaves out is a failure.

    Returns:
        The :class:`SparkRunPlan`.

    Raises:
        KcompactError: a path is neither a partition directory nor a directory; ``now_ms`` unset; a
            log dir's cause shared by all its partitions (a checkpoint file that does not parse; unless
            ``dry_run``, a read-only log dir or a broker holding it).
    """
    if options.now_ms is None:
        raise KcompactError("spark clean plan: the driver's clock; expected now_ms set, found None")
    plan = SparkRunPlan()
    for raw in paths:
        target = named_path(Path(raw).absolute())  # executors run elsewhere: no path relative to the driver's cwd
        if is_partition_dir(target):
            if selection is None or selection.matches_dir(target):
                _plan_partition(target, sources, options, plan)
        elif target.is_dir():
            refuse_log_dir_safe_offset(target, options)
            _plan_log_dir(target, sources, options, only_eligible, plan, selection)
        else:
            raise KcompactError(f"{target}: no such partition directory or log dir")
    _drop_repeats(plan)
    return plan


def _drop_repeats(plan: SparkRunPlan) -> None:
    """A partition named twice (itself and through its log dir) is cleaned once, at its first place."""
    seen: set[str] = set()
    unique = []
    for task in plan.tasks:
        key = str(Path(task.partition_dir).resolve())
        if key not in seen:
            seen.add(key)
            unique.append(task)
    plan.tasks[:] = unique


def _plan_partition(target: Path, sources: ConfigSources, options: CleanOptions, plan: SparkRunPlan) -> None:
    """A partition directory named on the command line (``clean_path``'s single-partition branch)."""
    notes: list[str] = []
    try:
        task = partition_task(target, sources, notes)
    except KcompactError as err:
        plan.failures.append(PlannedFailure(str(target), str(err)))
        return
    finally:
        plan.notes.extend(note for note in notes if note not in plan.notes)
    plan.tasks.append(CleanTask.of(task, options))


def _plan_log_dir(
    log_dir: Path, sources: ConfigSources, options: CleanOptions, only_eligible: bool, plan: SparkRunPlan,
    selection: PartitionFilter | None = None,
) -> None:
    """A log dir's partitions, highest dirty ratio first, as the broker's cleaner picks them (a log dir
    that cannot be written, or that a broker holds, is refused once here, not in each executor)."""
    if not options.dry_run:
        check_log_dir_writable(log_dir)
    if selection is not None and not selection.select(iter_partition_dirs(log_dir)):
        return  # another path of the run holds the selected partitions
    order = cleaner_order(log_dir, sources, options, only_eligible=only_eligible, selection=selection)
    plan.failures.extend(order.failures)
    plan.notes.extend(order.notes)
    plan.skipped.extend(order.skipped)
    plan.tasks.extend(CleanTask.of(task, options, in_log_dir=True) for task in order.tasks)
