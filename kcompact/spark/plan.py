"""Which partitions ``spark clean`` cleans, with which configuration, in which order (driver side).

The same choices as ``kcompact clean`` (:func:`kcompact.cleaner.run.clean_path`), built from the same
public pieces of ``kcompact.cleaner.run`` (``ConfigSources``, ``not_compacted``,
``retention_allowed``, ``merge_notes``) and the one implementation of Kafka's range rules:

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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from kcompact.cleaner.cleaner import CleanOptions
from kcompact.cleaner.log_state import load_log_state
from kcompact.cleaner.ranges import compute_cleanable_range
from kcompact.cleaner.run import ConfigSources, merge_notes, not_compacted, retention_allowed
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import KcompactError, RefusedError
from kcompact.segment.partition import (
    METADATA_TOPIC,
    is_partition_dir,
    iter_partition_dirs,
    open_partition,
)

METADATA_REFUSAL = "__cluster_metadata is KRaft's own log; no cleaner touches it"


@dataclass(frozen=True, slots=True)
class CleanTask:
    """One partition to clean: what a Spark task (or the driver, for a distributed map) is given."""

    partition_dir: str
    topic: str
    partition: int
    config: TopicConfig
    options: CleanOptions  # the run's options, clock fixed, retention resolved for this partition


@dataclass(frozen=True, slots=True)
class PlannedFailure:
    """A partition refused or unreadable before any task ran (it is left untouched)."""

    partition_dir: str
    error: str


@dataclass(slots=True)
class CleanPlan:
    """The partitions of a ``spark clean`` run in cleaning order, the refusals, and the notes."""

    tasks: list[CleanTask] = field(default_factory=list)
    failures: list[PlannedFailure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def plan_clean(
    paths: Iterable[str | Path],
    *,
    cli_overrides: Mapping[str, str],
    options: CleanOptions,
    only_eligible: bool = False,
    server_properties: str | Path | None = None,
    metadata_dir: str | Path | None = None,
) -> CleanPlan:
    """Plan a ``spark clean`` over partition directories and log dirs, path after path.

    Args:
        paths: partition directories and/or log dirs.
        cli_overrides: ``--config`` pairs (already validated).
        options: the run's options; ``now_ms`` must already be fixed by the driver.
        only_eligible: for a log dir, keep only the partitions the broker would clean now.
        server_properties: the broker's server.properties (default: ``$KCOMPACT_SERVER_PROPERTIES``).
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0``.

    Returns:
        The :class:`CleanPlan`.

    Raises:
        KcompactError: a path is neither a partition directory nor a directory; ``now_ms`` unset.
    """
    if options.now_ms is None:
        raise KcompactError("spark clean plan: the driver's clock; expected now_ms set, found None")
    sources = ConfigSources(cli_overrides, server_properties, metadata_dir)
    plan = CleanPlan()
    for raw in paths:
        target = Path(raw).absolute()  # executors run elsewhere: no path relative to the driver's cwd
        if is_partition_dir(target):
            _plan_partition(target, sources, options, plan)
        elif target.is_dir():
            _plan_log_dir(target, sources, options, only_eligible, plan)
        else:
            raise KcompactError(f"{target}: no such partition directory or log dir")
    _drop_repeats(plan)
    return plan


def _drop_repeats(plan: CleanPlan) -> None:
    """A partition named twice (itself and through its log dir) is cleaned once, at its first place."""
    seen: set[str] = set()
    unique = []
    for task in plan.tasks:
        key = str(Path(task.partition_dir).resolve())
        if key not in seen:
            seen.add(key)
            unique.append(task)
    plan.tasks[:] = unique


def _plan_partition(target: Path, sources: ConfigSources, options: CleanOptions, plan: CleanPlan) -> None:
    """A partition directory named on the command line (``clean_path``'s single-partition branch)."""
    try:
        partition = open_partition(target)
        if partition.is_metadata_log:
            raise RefusedError(f"{target}: {METADATA_REFUSAL}")
        effective = sources.for_partition(target)
        plan.notes.extend(note for note in effective.notes if note not in plan.notes)
        why = not_compacted(effective)
        if why is not None:
            raise RefusedError(f"{target}: {why}")
    except KcompactError as err:
        plan.failures.append(PlannedFailure(str(target), str(err)))
        return
    own = replace(options, apply_retention=retention_allowed(effective))
    plan.tasks.append(CleanTask(str(target), partition.topic, partition.partition, effective.config, own))


def _plan_log_dir(
    log_dir: Path, sources: ConfigSources, options: CleanOptions, only_eligible: bool, plan: CleanPlan
) -> None:
    """A log dir's partitions, highest dirty ratio first, as the broker's cleaner picks them."""
    now_ms = options.now_ms if options.now_ms is not None else 0
    ranked: list[tuple[float, str, CleanTask]] = []
    notes: dict[str, list[str]] = {}
    for part_dir in iter_partition_dirs(log_dir):
        partition = open_partition(part_dir)
        if partition.topic == METADATA_TOPIC or partition.name.kind != "live":
            continue
        try:
            effective = sources.for_partition(part_dir)
            why = not_compacted(effective)
            notes[part_dir.name] = effective.notes + ([] if why is None else [f"skipped: {why}"])
            if why is not None:
                continue
            state = load_log_state(partition, effective.config)
            rng = compute_cleanable_range(state.range_inputs(effective.config, now_ms),
                                          from_start=options.from_start)
        except KcompactError as err:
            plan.failures.append(PlannedFailure(str(part_dir), str(err)))
            continue
        if only_eligible and not rng.eligible:
            continue
        own = replace(options, apply_retention=retention_allowed(effective))
        task = CleanTask(str(part_dir), partition.topic, partition.partition, effective.config, own)
        ranked.append((-rng.dirty_ratio, part_dir.name, task))
    plan.notes.extend(merge_notes(notes))
    ranked.sort(key=lambda item: item[:2])
    plan.tasks.extend(task for _ratio, _name, task in ranked)
