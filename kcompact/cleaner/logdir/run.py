"""``kcompact clean PATH``: one partition, or every compacted partition of a log dir in the cleaner's order.

Resolves each partition's own configuration with :func:`kcompact.config.effective.partition_config`
(``--config`` > topic override > dynamic broker config > cluster default > server.properties > Kafka's
default), then calls :func:`clean_partition`.

**Only a partition known to be compacted is compacted** (``compaction_gate.py`` says which, and why
not): any other is refused when named alone (exit 2) and skipped with its reason in a log dir. For a log dir the
partitions are cleaned in the order the broker's cleaner would pick them (highest dirty ratio first);
``only_eligible`` keeps just those the broker would clean now. One partition's failure is reported and
does not stop the others; nor does a worker process that dies (killed, out of memory): that partition
fails, the lock files it held are removed, and the others go on in a new worker.

**Worker processes.** Several partitions of a log dir are cleaned at once in forked worker processes
(``pool.py``: how many, and how). The parent still picks the order, and collects results, failures
and progress in that order, so the run is the same as a serial one except for timings. Each partition
takes its own partition lock; its round's cleaner-checkpoint update is held back (``holding_updates``) and
written with its batch's (:class:`_CheckpointBatch`: one read-modify-write under the log dir's checkpoint
lock per :data:`CHECKPOINT_BATCH_PARTITIONS` partitions, after their swaps are durable), so the file is
rewritten per batch, not per partition, and never ahead of what was swapped. Concurrent workers never drop
each other's entries; new entries land in the order batches are written, the parent writes them all once
more at the end, and :func:`settle_checkpoint_order` puts them in cleaning order, as a serial run writes them. A
partition cleaned inside a pool is given ``jobs=1`` (no pool inside a pool); a partition cleaned alone
gets the caller's ``jobs`` (``CleanOptions.jobs``: workers inside that one partition). Never more
processes than usable cores and work to share; a clamped ``jobs`` is noted once. The ranking that picks the
order reads every partition too: from :data:`RANK_POOL_MIN_PARTITIONS` partitions on, this process and workers
(as many in all) rank them, a worker's :class:`PartitionRank` sent back without its loaded state (the round loads it
again under its lock), and the order is taken here from the ranks as a serial ranking takes it.

**For Spark.** ``kcompact.spark.plan`` and ``kcompact.spark.clean_job`` make the same choices from the
same public pieces: :func:`partition_task` (a partition directory named on its own),
:func:`cleaner_order`'s three steps (:func:`order_candidates`, :func:`rank_partition` — the one that reads
a partition, run in Spark tasks — and :func:`order_ranked`), :func:`checkpoint_keys`
and :func:`settle_checkpoint_order` (the checkpoint's line order after concurrent cleans).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import field, replace
from functools import partial
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.cleaner.disk.scratch import refuse_scratch_dir
from kcompact.cleaner.disk.space import SpaceNeed, Volume, segments_output_bound, volume_of
from kcompact.cleaner.disk.swap import crash_point, deferring_removals, remove_leftovers
from kcompact.cleaner.logdir.compaction_gate import keyless_guard, not_compacted, retention_allowed
from kcompact.cleaner.logdir.run_summary import repeated_warning_notes
from kcompact.cleaner.round.options import (
    CleanOptions,
    CleanResult,
    KeylessGuard,
    KeylessLossRefused,
    with_cli_dedupe_buffer,
)
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.clock import run_clock_ms
from kcompact.config.sources import ConfigSources
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import ConfigError, KcompactError, RefusedError, TruncatedDataError
from kcompact.fork_pool import (
    PARTITION_WORK_BYTES,
    ProgressCallback,
    WorkerDeath,
    clamped_jobs_note,
    partition_workers,
    run_in_pool,
)
from kcompact.log.rules.fence import refuse_log_dir_safe_offset
from kcompact.log.rules.high_watermark import SoleReplica, sole_replica_of
from kcompact.log.rules.ranges import compute_cleanable_range, pick_order
from kcompact.log.state.known_state import KnownState, known_state
from kcompact.segment.checkpoint import (
    holding_updates,
    read_offset_checkpoint,
    write_checkpoint_updates,
    write_offset_checkpoint,
)
from kcompact.segment.lock import checkpoint_lock, clear_abandoned_locks, log_dir_write_guard
from kcompact.segment.log_dir_check import check_log_dir_checkpoints, log_dir_writer
from kcompact.segment.log_reads import LogReads
from kcompact.segment.names import parse_partition_dir_name
from kcompact.segment.partition import (
    METADATA_TOPIC,
    LogDirFiles,
    is_partition_dir,
    named_path,
    open_partition,
)
from kcompact.segment.partition_filter import PartitionFilter, require_partition_dirs
from kcompact.segment.replica_copies import replica_copy_dirs
from kcompact.value import frozen, mutable

if TYPE_CHECKING:
    from kcompact.cleaner.logdir.free_first import FreedFirst

__all__ = [
    "CleanRun",
    "LogDirOrder",
    "PartitionFailure",
    "PartitionRank",
    "PartitionSkip",
    "PartitionTask",
    "checkpoint_keys",
    "clean_path",
    "cleaner_order",
    "merge_notes",
    "order_candidates",
    "order_ranked",
    "partition_task",
    "rank_partition",
    "settle_checkpoint_order",
]


@mutable
class PartitionFailure:
    """A partition that could not be cleaned; it was left exactly as it was."""

    partition_dir: str
    error: str


@frozen
class PartitionSkip:
    """A partition of a log dir left alone on purpose (see :func:`not_compacted`)."""

    partition_dir: str
    reason: str


@mutable
class CleanRun:
    """The outcome of ``kcompact clean`` over one or more partitions."""

    results: list[CleanResult] = field(default_factory=list)
    failures: list[PartitionFailure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[PartitionSkip] = field(default_factory=list)
    freed_first: FreedFirst | None = None  # a log dir's: what went before any clean (``free_first``)
    fit_order: list[str] | None = None  # the partitions' order when it is not the broker's (to fit the volume)
    space: SpaceNeed | None = None  # a dry run's total, in the order it would clean
    free_bytes: int | None = None  # the volume's free space when ``space`` was measured (the broker's, f_bavail)
    reserved_bytes: int = 0  # and what it kept for root besides (``disk.space.Volume``)
    gives_back_with_roll: int | None = None  # a dry run without --roll: the .log bytes --roll gives back


def merge_notes(per_partition: Mapping[str, list[str]]) -> list[str]:
    """Each distinct note once, prefixed by the partitions it concerns unless it concerns them all."""
    owners: dict[str, list[str]] = {}
    for name, notes in per_partition.items():
        for note in notes:
            owners.setdefault(note, []).append(name)
    return [note if len(names) == len(per_partition) else f"{', '.join(names)}: {note}"
            for note, names in owners.items()]


@frozen
class PartitionTask:
    """One partition to clean, with what its configuration resolved to."""

    part_dir: Path
    config: TopicConfig
    apply_retention: bool
    size_in_bytes: int  # of its segments: the work a clean may have to read
    topic_partition: tuple[str, int]
    keyless_guard: KeylessGuard | None = None  # the round's refusal of mostly keyless data (``keyless_guard``)
    known: KnownState | None = None  # its log state as ranking it loaded it: the round reuses it if unchanged
    space: SpaceNeed | None = None  # its clean as measured where the volume is short of space (``free_first``)
    sole_replica: SoleReplica | None = None  # its high watermark is its log end (``rules.high_watermark``)

    def options(self, options: CleanOptions) -> CleanOptions:
        """The run's options for this partition: its retention, its keyless guard, its measured space, whether it is
        this broker's alone."""
        return replace(options, apply_retention=self.apply_retention, keyless_guard=self.keyless_guard,
                       measured_space=self.space, sole_replica=self.sole_replica)


@mutable
class LogDirOrder:
    """A log dir's partitions in the order the broker's cleaner picks them, and what could not be ranked."""

    tasks: list[PartitionTask] = field(default_factory=list)
    failures: list[PartitionFailure] = field(default_factory=list)  # files or configuration do not parse
    notes: list[str] = field(default_factory=list)  # merged: each distinct note once (``merge_notes``)
    skipped: list[PartitionSkip] = field(default_factory=list)  # not known to be compacted, by name


def clean_path(
    path: str | Path,
    *,
    cli_overrides: Mapping[str, str],
    options: CleanOptions,
    only_eligible: bool = False,
    progress: ProgressCallback | None = None,
    server_properties: str | Path | None = None,
    metadata_dir: str | Path | None = None,
    jobs: int | None = None,
    assume_compact: bool = False,
    allow_keyless_loss: bool = False,
    selection: PartitionFilter | None = None,
    named_alone: bool = True,
    sole_replica: bool = False,
) -> CleanRun:
    """Clean a partition directory, or every compacted partition of a log dir.

    Args:
        path: a partition directory or a log dir.
        cli_overrides: ``--config`` pairs (already validated).
        options: the clean options shared by every partition.
        only_eligible: for a log dir, clean only partitions the broker would clean now.
        progress: called as ``(partition name, bytes done, bytes total)``, always in this process.
        server_properties: the broker's server.properties (default: ``$KCOMPACT_SERVER_PROPERTIES``).
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0`` (default: as
            ``partition_config`` finds it).
        jobs: worker processes (see :func:`~kcompact.fork_pool.partition_workers`); None = auto. A
            partition cleaned alone is given this value as its own ``CleanOptions.jobs``.
        assume_compact: compact partitions whose ``cleanup.policy`` is unknown (see
            :func:`not_compacted`).
        allow_keyless_loss: compact an explicitly compacted partition although most of its records
            have no key, deleting them (see :func:`not_compacted`).
        selection: the partitions to work on (``--topic``, ``--exclude-topic``, ``--partition``);
            None: all. Applied before anything is read.
        named_alone: a partition directory ``path`` was named alone; False where the caller reached it through
            its log dir (``repair LOG_DIR --clean``): ``cli_overrides`` then change no known or explicit
            ``cleanup.policy``, as in a log dir's clean (:func:`not_compacted`).
        sole_replica: take this broker as the only replica of every partition the KRaft metadata does not
            assign (``--sole-replica``): its high watermark is its log end (``rules.high_watermark``).

    Returns:
        The :class:`CleanRun`; its notes say which configs were unknown or assumed, ``skipped`` which
        partitions of a log dir were left alone and why. Results and failures are in the cleaner's
        order whatever ``jobs`` is.

    Raises:
        ConfigError: ``jobs`` is below 1.
        RefusedError: a single partition is not known to be compacted (a log dir's are skipped).
        KcompactError: ``selection`` matches no partition; a single partition failed (a log dir's
            failures are collected instead); or a cause shared by the whole log dir: a checkpoint file that does not
            parse, a read-only log dir, a broker holding it (checked once, before any partition).
    """
    if jobs is not None and jobs < 1:
        raise ConfigError(f"jobs: a number of worker processes; expected 1 or more, found {jobs}")
    sources = ConfigSources(cli_overrides, server_properties, metadata_dir, assume_compact,
                            allow_keyless_loss, named_alone, sole_replica)
    # the run's one clock: the ranking, what is freed first and every round are judged at the same now
    options = replace(with_cli_dedupe_buffer(options, cli_overrides), now_ms=run_clock_ms(options.now_ms))
    run = CleanRun()
    target = named_path(path)
    if is_partition_dir(target):
        if selection is not None:
            selection.require_match(target)
        check_log_dir_checkpoints(target.parent)
        _require_fence_copies(target, options)
        try:
            task = partition_task(target, sources, run.notes)
            own = replace(task.options(options), jobs=jobs)
            run.results.append(clean_partition(target, task.config, own, _progress_for(target, progress)))
            if options.dry_run and not options.roll:
                # kept off a clean's start-up: only a dry run without --roll says what a roll gives back
                from kcompact.cleaner.logdir.with_roll import gives_back_with_roll

                run.gives_back_with_roll = gives_back_with_roll(
                    run.results, lambda _result: _rolled_alone(target, task.config, replace(own, roll=True)))
        except TruncatedDataError as err:
            # kept off a clean's start-up: only a truncated segment is read for a torn append
            from kcompact.cleaner.logdir.torn_tail import torn_tail_error

            raise torn_tail_error(err, target) or err from err
        _note_jobs(run, jobs, None, "the round's segment ranges")
        return run
    if not target.is_dir():
        raise KcompactError(f"{target}: no such partition directory or log dir")
    refuse_log_dir_safe_offset(target, options.safe_offset)
    if options.scratch_dir is not None:
        refuse_scratch_dir(options.scratch_dir, target)  # once, not once per partition
    check_log_dir_checkpoints(target)  # before the write guard, which creates a missing .lock
    with contextlib.nullcontext() if options.dry_run else log_dir_writer(target):
        _clean_log_dir(target, sources, options, only_eligible, jobs, progress, run, selection)
    return run


def _require_fence_copies(target: Path, options: CleanOptions) -> None:
    """A partition named alone with ``--replica-dirs`` must find a copy of itself there: a fence asked
    for and not found would clean unfenced (in a log dir a partition without copies is one this broker
    alone holds, and it is cleaned with a warning)."""
    if not options.replica_dirs:
        return
    name = parse_partition_dir_name(target.name)
    if name is not None and not replica_copy_dirs(options.replica_dirs, name.topic, name.partition):
        raise RefusedError(f"{target}: --replica-dirs holds no copy of {target.name} (searched "
                           f"{', '.join(options.replica_dirs)}); give the other replicas' partition "
                           "directories or log dirs, or --safe-offset; nothing was changed")


def _clean_log_dir(target: Path, sources: ConfigSources, options: CleanOptions, only_eligible: bool,
                   jobs: int | None, progress: ProgressCallback | None, run: CleanRun,
                   selection: PartitionFilter | None = None) -> None:
    """Every compacted partition of a log dir, in the cleaner's order (``clean_path``'s log-dir branch); where
    the volume's free space is short, after freeing what costs no write, in an order that fits (``free_first``)."""
    order = cleaner_order(target, sources, options, only_eligible=only_eligible, selection=selection, jobs=jobs)
    run.failures.extend(order.failures)
    run.notes.extend(order.notes)
    run.skipped.extend(order.skipped)
    tasks, short = _free_and_fit(target, order.tasks, options, run, selection)
    workers = 1 if short else partition_workers(jobs, [task.size_in_bytes for task in tasks])
    if workers > 1:
        before = checkpoint_keys(target)
        outcomes = _clean_pooled(target, tasks, replace(options, jobs=1), workers, progress, run.notes)
        if before is not None and not options.dry_run and any(
                getattr(outcome, "checkpoint_written", False) for outcome in outcomes):
            _settle(target, before, [task.topic_partition for task in tasks], run)
    else:  # in this process: each round called from here (a bound call, no frame between)
        outcomes = []
        batch = _CheckpointBatch(LogDirFiles(target).cleaner_checkpoint)
        own = replace(options, jobs=jobs)
        with holding_updates(batch.path) as held:
            try:
                for task in tasks:
                    with _task_outcome(task, outcomes):
                        outcomes.append(_round_of(own, task, progress)())
                    if batch.take(held, task, len(outcomes) - 1):
                        batch.write_into(outcomes)
            finally:
                batch.write_into(outcomes)
    for outcome in outcomes:
        if isinstance(outcome, PartitionFailure):
            run.failures.append(outcome)
        elif isinstance(outcome, PartitionSkip):
            run.skipped.append(outcome)
        else:
            run.results.append(outcome)
    if options.dry_run:
        _dry_run_space(target, run, run.freed_first)
    if options.dry_run and not options.roll:
        # kept off a clean's start-up: only a dry run without --roll says what a roll gives back
        from kcompact.cleaner.logdir.with_roll import gives_back_with_roll

        by_dir = {str(task.part_dir): task for task in tasks}
        rolled = replace(options, roll=True, jobs=1)
        run.gives_back_with_roll = gives_back_with_roll(run.results, lambda result: _rolled(
            _clean_task(rolled, by_dir[result.partition_dir], None)))
    if workers > 1:
        _note_jobs(run, jobs, workers, f"the {len(tasks)} partitions to clean")
    else:  # one partition at a time, each with the caller's jobs
        _note_jobs(run, jobs, None, "each round's segment ranges")
    run.notes.extend(repeated_warning_notes([r.warnings for r in run.results]))


def _free_and_fit(log_dir: Path, tasks: list[PartitionTask], options: CleanOptions, run: CleanRun,
                  selection: PartitionFilter | None) -> tuple[list[PartitionTask], bool]:
    """Where the volume's free space is short of the most the cleans could write (else nothing changes
    here: each round settles its own leftovers after rehearsing its clean), free first what costs no write
    (every partition's crashed-clean leftovers, the segments below each log start), then measure each clean
    (a dry run) and order them to fit, to run one at a time (``free_first``). Returns the tasks in the order to
    clean them, and whether space is short."""
    volume = volume_of(log_dir)
    if not tasks or sum(_output_bound(task, volume) for task in tasks) <= volume.free_bytes:
        return tasks, False
    # kept off a clean's start-up: only a volume short of space frees first
    from kcompact.cleaner.logdir.free_first import FreedFirst, delete_below_log_start, fit_order, settle_leftovers

    freed = run.freed_first = FreedFirst()
    settle_leftovers(order_candidates(log_dir, selection), freed, dry_run=options.dry_run)
    now_ms = run_clock_ms(options.now_ms)
    for task in tasks:
        with contextlib.suppress(KcompactError):  # its round meets the cause again and reports it
            delete_below_log_start(task.part_dir, task.config, task.known, now_ms, freed, dry_run=options.dry_run)
    if options.dry_run:  # its rounds measure themselves
        return tasks, True
    volume = volume_of(log_dir)
    needs = [_measured(options, task) for task in tasks]
    order = fit_order(needs, volume.free_bytes)
    if order != sorted(order):
        run.fit_order = [tasks[i].part_dir.name for i in order]
    return [replace(tasks[i], space=needs[i]) for i in order], True


def _output_bound(task: PartitionTask, volume: Volume) -> int:
    """The most its round could write (``space.segments_output_bound``), from the listing its ranking just took
    when there is one: an estimate that decides whether space is short, each round checking its own again."""
    partition = task.known.state.partition if task.known is not None else open_partition(task.part_dir)
    segments = partition.segments
    return segments_output_bound(segments, task.config.index_interval_bytes, volume) + volume.block_bytes


def _measured(options: CleanOptions, task: PartitionTask) -> SpaceNeed | None:
    outcome = _clean_task(replace(options, dry_run=True, jobs=1), task, None)
    return outcome.space if isinstance(outcome, CleanResult) else None


def _dry_run_space(log_dir: Path, run: CleanRun, freed: FreedFirst | None) -> None:
    """A dry run's total (``free_first.run_need``) in the order the run would clean: the broker's, or where
    the volume is short (``freed`` is set) the one that fits, from each partition's measure (what a
    partition's round would delete below its log start is then freed first, not given back)."""
    # kept off a clean's start-up: only a dry run totals the space in the order it would clean
    from kcompact.cleaner.logdir.free_first import FreedFirst, fit_order, run_need

    needs = [_less_freed_first(r, freed or FreedFirst()) for r in run.results]
    volume = volume_of(log_dir)
    run.free_bytes, run.reserved_bytes = volume.free_bytes, volume.reserved_bytes
    order = list(range(len(needs)))
    if freed is not None:
        order = fit_order(needs, run.free_bytes + freed.freed_bytes)
        if order != sorted(order):
            run.fit_order = [Path(run.results[i].partition_dir).name for i in order]
    run.space = run_need([needs[i] for i in order], freed.freed_bytes if freed is not None else 0)


def _less_freed_first(result: CleanResult, freed: FreedFirst) -> SpaceNeed | None:
    below = freed.below_log_start.get(Path(result.partition_dir).name, 0)
    if result.space is None:
        return None
    return SpaceNeed(result.space.peak_bytes, result.space.gives_back_bytes - below)


def _note_jobs(run: CleanRun, jobs: int | None, pooled: int | None, work: str) -> None:
    """Note once when ``jobs`` was clamped: ``pooled`` is the partitions' pool size, None when they were
    cleaned one at a time, each round with its own workers (``CleanResult.workers``)."""
    used = pooled or max((r.workers for r in run.results if r.end_offset is not None), default=0)
    note = clamped_jobs_note(jobs, used, work)
    if note is not None:
        run.notes.append(note)


def partition_task(part_dir: Path, sources: ConfigSources, notes: list[str]) -> PartitionTask:
    """A partition directory named on its own (not through its log dir), as ``clean`` takes it.

    Args:
        part_dir: the partition directory.
        sources: where its configuration comes from.
        notes: receives the notes on its configuration (also when it is then refused).

    Returns:
        Its :class:`PartitionTask`.

    Raises:
        RefusedError: it is ``__cluster_metadata``, or neither compaction nor retention would touch it.
        KcompactError: its files or configuration do not parse.
    """
    partition = open_partition(part_dir)
    if partition.is_metadata_log:
        raise RefusedError(f"{part_dir}: __cluster_metadata is KRaft's own log; no cleaner touches it")
    effective = sources.for_partition(part_dir)
    notes.extend(effective.notes)
    why = not_compacted(effective, named_alone=sources.named_alone, partition=partition,
                        allow_keyless_loss=sources.allow_keyless_loss)
    if why is not None:
        raise RefusedError(f"{part_dir}: {why}")
    sole, note = sole_replica_of(effective, sources)
    notes.extend([note] if note else [])
    return PartitionTask(part_dir, effective.config, retention_allowed(effective), partition.size_in_bytes,
                         partition.topic_partition,
                         keyless_guard(effective, named_alone=sources.named_alone,
                                       allow_keyless_loss=sources.allow_keyless_loss), sole_replica=sole)


@frozen
class PartitionRank:
    """What the cleaner's order needs of one partition of a log dir, computed where the partition is read
    (:func:`rank_partition`; in this process for ``clean``, in a Spark task for ``spark clean``): small
    and picklable, so a driver ranks a whole cluster's partitions without opening one of them.

    Exactly one of ``task``, ``skip`` and ``failure`` is set.
    """

    part_dir: str
    task: PartitionTask | None = None
    dirty_ratio: float = 0.0
    eligible: bool = False
    notes: tuple[str, ...] | None = None  # on its configuration; None: not known to be compacted (not merged)
    skip: PartitionSkip | None = None
    failure: PartitionFailure | None = None

    def without_state(self) -> PartitionRank:
        """This rank with its task's loaded state dropped (``PartitionTask.known``), to be sent from where it was
        made (a ranking worker, a Spark task): small to send, and the round loads the state again under its lock."""
        if self.task is None or self.task.known is None:
            return self
        return replace(self, task=replace(self.task, known=None))


def cleaner_order(
    log_dir: Path, sources: ConfigSources, options: CleanOptions, *, only_eligible: bool = False,
    selection: PartitionFilter | None = None, jobs: int | None = 1,
) -> LogDirOrder:
    """A log dir's live partitions in the broker cleaner's pick order (``rules.ranges.pick_order``: highest dirty
    ratio first, equal ratios by name, the listing order); those :func:`not_compacted` refuses are left
    out, each with its reason.

    Every compacted partition is a candidate, eligible or not: a manual clean is not gated by the dirty
    ratio (``only_eligible`` gates it), so the partitions Kafka's cleaner would not pick yet are ranked by
    the same rule among the others rather than after them. The three steps are public for ``spark
    clean``, which runs the middle one in Spark tasks: :func:`order_candidates` (a listing),
    :func:`rank_partition` (each partition read), :func:`order_ranked` (no file read).

    Args:
        log_dir: the log dir.
        sources: where each partition's configuration comes from.
        options: ``now_ms`` (None: now) and ``from_start`` decide the ranges.
        only_eligible: keep only the partitions the broker would clean now.
        selection: keep only the partitions it matches (None: all); the others are not opened.
        jobs: worker processes for the ranking (None = auto; as :func:`_rank_workers` picks them): the same
            order whatever it is; a rank made in a worker comes without its loaded state (``PartitionTask.known``).

    Returns:
        The :class:`LogDirOrder`; a partition whose files or configuration do not parse is a failure, as is one
        whose ranking worker died.

    Raises:
        KcompactError: ``log_dir`` holds no partition directory (or none ``selection`` matches), or
            none but KRaft's metadata log and partitions being deleted or moved (a wrong path, not an empty run).
    """
    now_ms = run_clock_ms(options.now_ms)
    fixed = replace(options, now_ms=now_ms)
    candidates = order_candidates(log_dir, selection)
    workers = _rank_workers(jobs, len(candidates))
    if workers > 1:
        ranks = run_in_pool(candidates, partial(_rank_to_send, sources, fixed), workers, None, _rank_died,
                            ahead=RANK_AHEAD, here=lambda part_dir: rank_partition(part_dir, sources, fixed))
    else:
        ranks = [rank_partition(part_dir, sources, fixed) for part_dir in candidates]
    return order_ranked(ranks, only_eligible=only_eligible)


RANK_POOL_MIN_PARTITIONS = 64
"""A log dir's ranking runs in this process and worker processes from this many candidates on (with ``jobs`` other
than 1).

A tiny partition's ranking (its config, listing, keyless sample and loaded state) costs about 1.3 ms on a 2-core
machine: a serial ranking of 5,000 partitions is 6-7 s on one core before the first clean starts. A worker's rank
comes back without its loaded state (a few hundred objects: taking them back cost this process about 0.5 ms a
partition, as much as the round's loading it again in its own worker); the ranks made here keep theirs, so this
process ranks beside the workers (``run_in_pool``'s ``here``) rather than waiting on them."""

RANK_AHEAD = 4
"""Partitions handed to a ranking worker beyond the one it ranks: a rank takes about a millisecond, about what
this process needs to take one back and hand out the next."""


def _rank_workers(jobs: int | None, candidates: int) -> int:
    """How many processes, this one included, rank a log dir's ``candidates`` partitions (1: this one alone): as
    :func:`~kcompact.fork_pool.partition_workers` picks them for as many partitions of a fixed cost, and 1 below
    :data:`RANK_POOL_MIN_PARTITIONS`."""
    if candidates < RANK_POOL_MIN_PARTITIONS:
        return 1
    return partition_workers(jobs, [PARTITION_WORK_BYTES] * candidates)


def _rank_to_send(sources: ConfigSources, options: CleanOptions, part_dir: Path,
                  _report: ProgressCallback | None) -> PartitionRank:
    """:func:`rank_partition` in a ranking worker, without its loaded state (:meth:`PartitionRank.without_state`)."""
    return rank_partition(part_dir, sources, options).without_state()


def _rank_died(part_dir: Path, death: WorkerDeath) -> PartitionRank:
    """A partition whose ranking worker ended before it gave the rank: a failure (ranking only reads, so
    nothing was changed)."""
    return PartitionRank(str(part_dir), failure=PartitionFailure(str(part_dir), (
        f"{part_dir}: the worker process ranking it was {death.describe()}; nothing was changed (ranking only "
        "reads): clean it again")))


def order_candidates(log_dir: Path, selection: PartitionFilter | None = None) -> list[Path]:
    """The partitions of a log dir a cleaner works on (live, not KRaft's metadata log), by name; reads
    only the listing and the log dir's checkpoint files (:func:`cleaner_order`'s first step).

    Raises:
        KcompactError: as :func:`cleaner_order`; a log dir checkpoint file that does not parse.
    """
    check_log_dir_checkpoints(log_dir)
    candidates = []
    for part_dir in require_partition_dirs(log_dir, selection):
        name = parse_partition_dir_name(part_dir.name)
        if name is not None and name.topic != METADATA_TOPIC and name.kind == "live":
            candidates.append(part_dir)
    if not candidates:
        raise KcompactError(f"no partition a cleaner works on under {log_dir}: only KRaft's metadata log "
                            "or partitions being deleted or moved (-delete, -future, -stray)")
    return candidates


def rank_partition(part_dir: Path, sources: ConfigSources, options: CleanOptions) -> PartitionRank:
    """One partition of a log dir read for the cleaner's order: its configuration, whether it is known to
    be compacted (the keyless sample included), its cleanable range (:func:`cleaner_order`'s second step).

    Args:
        part_dir: the partition directory.
        sources: where its configuration comes from.
        options: ``now_ms`` (must be set) and ``from_start``.

    Returns:
        Its :class:`PartitionRank`; never raises for the partition's own files or configuration.
    """
    notes: tuple[str, ...] | None = None
    try:
        partition = open_partition(part_dir)
        effective = sources.for_partition(part_dir)
        # the keyless sample and the state's walk read each small .log once between them, each walking it once
        with LogReads(replay_walks=False) as reads:
            why = not_compacted(effective, named_alone=False, partition=partition,
                                allow_keyless_loss=sources.allow_keyless_loss, reads=reads)
            if why is not None:
                return PartitionRank(str(part_dir), skip=PartitionSkip(str(part_dir), why))
            sole, note = sole_replica_of(effective, sources)
            # merged also when its range then fails to load, as they always were
            notes = tuple(effective.notes) + ((note,) if note else ())
            config = effective.config
            known = known_state(partition, config, sole, reads)
        now_ms = run_clock_ms(options.now_ms)
        rng = compute_cleanable_range(known.state.range_inputs(config, now_ms), from_start=options.from_start)
    except KcompactError as err:
        return PartitionRank(str(part_dir), notes=notes, failure=PartitionFailure(str(part_dir), _said(err, part_dir)))
    guard = keyless_guard(effective, named_alone=False, allow_keyless_loss=sources.allow_keyless_loss)
    task = PartitionTask(part_dir, config, retention_allowed(effective), partition.size_in_bytes,
                         partition.topic_partition, guard, known, sole_replica=sole)
    return PartitionRank(str(part_dir), task, rng.dirty_ratio, rng.eligible, notes)


def order_ranked(ranks: Sequence[PartitionRank], *, only_eligible: bool = False) -> LogDirOrder:
    """A log dir's ranked partitions (in listing order) in the cleaner's pick order (:func:`cleaner_order`'s
    last step: no file is read).

    Args:
        ranks: one per candidate, in the order :func:`order_candidates` lists them.
        only_eligible: keep only the partitions the broker would clean now.

    Returns:
        The :class:`LogDirOrder`.
    """
    order = LogDirOrder()
    ranked: list[tuple[float, PartitionTask]] = []  # in listing order (by name)
    notes: dict[str, list[str]] = {}
    for rank in ranks:
        if rank.notes is not None:
            notes[Path(rank.part_dir).name] = list(rank.notes)
        if rank.failure is not None:
            order.failures.append(rank.failure)
        elif rank.skip is not None:
            order.skipped.append(rank.skip)
        elif rank.task is not None:
            if only_eligible and not rank.eligible:
                continue
            ranked.append((rank.dirty_ratio, rank.task))
    order.notes.extend(merge_notes(notes))
    order.tasks.extend(ranked[i][1] for i in pick_order([(True, ratio) for ratio, _task in ranked]))
    return order


def checkpoint_keys(log_dir: Path) -> list[tuple[str, int]] | None:
    """A log dir's cleaner-checkpoint entries in file order, before a run (what
    :func:`settle_checkpoint_order` is given as ``before``).

    Args:
        log_dir: the log dir.

    Returns:
        The (topic, partition) keys; None when the file does not parse (its cleans fail; nothing to settle).
    """
    try:
        return list(read_offset_checkpoint(LogDirFiles(log_dir).cleaner_checkpoint))
    except KcompactError:
        return None


def settle_checkpoint_order(
    log_dir: Path, before: Sequence[tuple[str, int]], cleaning_order: Sequence[tuple[str, int]]
) -> bool:
    """Put a log dir's new cleaner-checkpoint lines in cleaning order, as a serial run appends them
    (concurrent cleans append them as they finish; Kafka ignores line order, but bytes should not vary).

    Args:
        log_dir: the log dir.
        before: the file's entries before the run, in file order (they keep their place).
        cleaning_order: the run's partitions in cleaning order.

    Returns:
        Whether the file was rewritten (same entries and offsets, other line order).

    Raises:
        RefusedError: a broker holds the log dir.
    """
    path = LogDirFiles(log_dir).cleaner_checkpoint
    known = set(before)
    with log_dir_write_guard(log_dir), checkpoint_lock(log_dir):
        try:
            entries = read_offset_checkpoint(path)
        except KcompactError:
            return False  # the cleans that needed it failed; nothing to settle
        order = [key for key in before if key in entries]
        order += [key for key in cleaning_order if key in entries and key not in known]
        placed = set(order)
        order += [key for key in entries if key not in placed]  # written by someone else meanwhile
        if order == list(entries):
            return False
        write_offset_checkpoint(path, {key: entries[key] for key in order})
    return True


def _settle(
    log_dir: Path, before: list[tuple[str, int]], order: list[tuple[str, int]], run: CleanRun
) -> None:
    try:
        settle_checkpoint_order(log_dir, before, order)
    except KcompactError as err:  # every clean is done and checkpointed; only the line order is off
        run.notes.append(f"the new lines of cleaner-offset-checkpoint stay in the order the cleans finished, "
                         f"not the cleaner's (Kafka ignores line order); reordering them failed: {err}")


CHECKPOINT_BATCH_PARTITIONS = 100  # a log dir's cleaner checkpoint is written once per this many partitions
CHECKPOINT_BATCH_BYTES = 64 << 20  # or once this many segment bytes were cleaned (a kill repeats no more)
CHECKPOINT_CRASH_POINT = "checkpoint-batch"  # a batch's partitions swapped, its checkpoint write not begun

Outcome = CleanResult | PartitionFailure | PartitionSkip


@mutable
class _CheckpointBatch:
    """The cleaner-checkpoint updates of a log dir's cleaned partitions not yet written, and when to write them.

    Each partition's round advances its line only after its swap is durable (``disk.swap``: the directory
    fsynced after the last rename, as Kafka's ``LocalLog.replaceSegments`` ends with ``Utils.flushDir``), so a
    batch written after its partitions' rounds is never ahead of what was swapped; it lags by at most a batch,
    which a kill makes the next clean repeat. A batch that cannot be written fails its partitions as their
    rounds' own checkpoint write would (:meth:`write_into`)."""

    path: Path
    held: dict[tuple[str, int], int] = field(default_factory=dict)
    held_bytes: int = 0
    placed: dict[tuple[str, int], tuple[int, Path]] = field(default_factory=dict)  # outcome index, partition

    def add(self, updates: Mapping[tuple[str, int], int], size_in_bytes: int) -> bool:
        """Hold a partition's updates; True when the batch is due to be written."""
        self.held.update(updates)
        self.held_bytes += size_in_bytes if updates else 0
        return len(self.held) >= CHECKPOINT_BATCH_PARTITIONS or self.held_bytes >= CHECKPOINT_BATCH_BYTES

    def take(self, held: dict[tuple[str, int], int], task: PartitionTask, index: int) -> bool:
        """Move what a round of this process just held back (``holding_updates``) into the batch, the round's
        outcome at ``index``; True when the batch is due to be written."""
        updates = dict(held)
        held.clear()
        self.placed[task.topic_partition] = (index, task.part_dir)
        return self.add(updates, task.size_in_bytes)

    def write(self) -> None:
        """Write the held updates in one read-modify-write under the checkpoint lock (``OSError``,
        ``KcompactError`` as :func:`write_checkpoint_updates`); held no more, written or not."""
        held, self.held, self.held_bytes = self.held, {}, 0
        if held:
            crash_point(CHECKPOINT_CRASH_POINT, None)
            write_checkpoint_updates(self.path, held)

    def write_into(self, outcomes: list[Outcome]) -> None:
        """:meth:`write`, a failure made the failure of each partition whose line it held."""
        held = dict(self.held)
        try:
            self.write()
        except (OSError, KcompactError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            for key, offset in held.items():
                if key in self.placed:
                    index, part_dir = self.placed[key]
                    outcomes[index] = PartitionFailure(str(part_dir), (
                        f"{self.path}: cannot advance the cleaner checkpoint to {offset} ({why}); the cleaned "
                        "segments are in place and consistent, the checkpoint stays behind them, so the next "
                        "clean repeats this round"))


@frozen
class _Pooled:
    """A pooled partition's outcome and the checkpoint updates its round made (its worker writes them a batch
    at a time; the parent writes every one once more at the end, what a worker held when it stopped with them),
    and the ``.deleted`` files its swaps left for the parent to remove (``swap.deferring_removals``)."""

    outcome: Outcome
    updates: dict[tuple[str, int], int]
    leftovers: tuple[str, ...] = ()


_WORKER_BATCHES: dict[int, _CheckpointBatch] = {}  # by process id: each forked worker its own


def _clean_pooled(log_dir: Path, tasks: Sequence[PartitionTask], options: CleanOptions, workers: int,
                  progress: ProgressCallback | None, notes: list[str]) -> list[Outcome]:
    """A log dir's partitions in ``workers`` forked processes, their checkpoint lines written a batch at a time
    by each worker, and all of them once more by this process at the end; the ``.deleted`` files each worker's
    swaps leave removed here as its outcomes come, while it cleans its next partition (a note says which could not
    be: the next clean or a broker removes them)."""
    path = LogDirFiles(log_dir).cleaner_checkpoint
    import_module("kcompact.cleaner.workers.parallel")  # the passes, loaded once here, not once in each worker
    # small partitions' rounds take a few milliseconds: each worker holds its next one, and does not wait for
    # this process to take the last outcome (unpickled here) and hand it another
    ahead = 1 if max(task.size_in_bytes for task in tasks) <= PARTITION_WORK_BYTES else 0
    unremoved: list[str] = []
    pooled = run_in_pool(tasks, partial(_pooled_clean_task, options, path), workers, progress,
                         lambda task, death: _Pooled(_clean_task_died(task, death), {}), ahead=ahead,
                         taken=lambda one: unremoved.extend(remove_leftovers(one.leftovers)))
    if unremoved:
        notes.append(f"{len(unremoved)} replaced segment file(s) renamed .deleted could not be removed (the next "
                     f"clean or a broker's start removes them): {'; '.join(unremoved[:3])}")
    updates = {key: offset for one in pooled for key, offset in one.updates.items()}
    outcomes = [one.outcome for one in pooled]
    placed = {task.topic_partition: (index, task.part_dir) for index, task in enumerate(tasks)}
    _CheckpointBatch(path, updates, placed=placed).write_into(outcomes)
    return outcomes


def _pooled_clean_task(options: CleanOptions, path: Path, task: PartitionTask,
                       progress: ProgressCallback | None) -> _Pooled:
    """In a worker: :func:`_clean_task`, its checkpoint update held in the worker's batch, written when due (a
    failure there is left to the parent's final write, which reports it), and the ``.deleted`` files its swaps
    left gathered for the parent to remove."""
    batch = _WORKER_BATCHES.setdefault(os.getpid(), _CheckpointBatch(path))
    with holding_updates(path) as held, deferring_removals() as leftovers:
        outcome = _clean_task(options, task, progress)
        updates = dict(held)
    if batch.add(updates, task.size_in_bytes):
        with contextlib.suppress(OSError, KcompactError):
            batch.write()
    return _Pooled(outcome, updates, tuple(leftovers))


def _clean_task(
    options: CleanOptions, task: PartitionTask, progress: ProgressCallback | None
) -> CleanResult | PartitionFailure | PartitionSkip:
    """Clean one partition of a log dir in a worker process: its outcome (:func:`_task_outcome`; its checkpoint
    update goes through :func:`_pooled_clean_task`)."""
    outcomes: list[CleanResult | PartitionFailure | PartitionSkip] = []
    with _task_outcome(task, outcomes):
        outcomes.append(_round_of(options, task, progress)())
    return outcomes[0]


def _round_of(
    options: CleanOptions, task: PartitionTask, progress: ProgressCallback | None
) -> Callable[[], CleanResult]:
    """The round of one partition of a log dir, bound and not yet run: ``clean_partition`` with the task's
    own options and the state its ranking loaded."""
    return partial(clean_partition, task.part_dir, task.config, task.options(options),
                   _progress_for(task.part_dir, progress), known=task.known)


@contextlib.contextmanager
def _task_outcome(
    task: PartitionTask, outcomes: list[CleanResult | PartitionFailure | PartitionSkip]
) -> Iterator[None]:
    """A partition's deliberate errors as its outcome, appended to ``outcomes``: its failure, or a round
    refused as mostly keyless (found past the gate's sample) a skip with its reason, as the gate's are."""
    try:
        yield
    except KeylessLossRefused as err:
        outcomes.append(PartitionSkip(str(task.part_dir), str(err).removeprefix(f"{task.part_dir}: ")))
    except KcompactError as err:
        outcomes.append(PartitionFailure(str(task.part_dir), _said(err, task.part_dir)))


def _rolled_alone(target: Path, config: TopicConfig, options: CleanOptions) -> CleanResult | None:
    """A partition named alone dry run again with ``--roll`` (None: refused or failed then)."""
    try:
        return clean_partition(target, config, options)
    except KcompactError:
        return None


def _rolled(outcome: CleanResult | PartitionFailure | PartitionSkip) -> CleanResult | None:
    return outcome if isinstance(outcome, CleanResult) else None


def _said(err: KcompactError, part_dir: Path) -> str:
    """A partition's failure in words: a torn append as what it is (``torn_tail``), else the error's own."""
    if not isinstance(err, TruncatedDataError):
        return str(err)
    # kept off a clean's start-up: only a truncated segment is read for a torn append
    from kcompact.cleaner.logdir.torn_tail import torn_tail_error

    return str(torn_tail_error(err, part_dir) or err)


def _clean_task_died(task: PartitionTask, death: WorkerDeath) -> PartitionFailure:
    """A partition whose worker process ended mid-clean: its failure, and the lock files it left removed.

    Nothing is lost: a round changes the partition only through the crash-safe swap (``disk.swap``), whose
    recovery the partition's next clean runs first, and advances the checkpoint last."""
    clear_abandoned_locks(task.part_dir.parent, task.part_dir.name)
    return PartitionFailure(str(task.part_dir), (
        f"{task.part_dir}: the worker process cleaning it was {death.describe()}; nothing is lost (segments "
        "are swapped in crash-safely): clean it again to settle what it left"))


def _progress_for(
    part_dir: Path, progress: ProgressCallback | None
) -> Callable[[int], None] | None:
    if progress is None:
        return None
    total = sum(p.stat().st_size for p in part_dir.glob("*.log"))
    done = 0

    def advance(nbytes: int) -> None:
        nonlocal done
        done += nbytes
        progress(part_dir.name, done, 2 * total)  # two passes over the dirty data at most

    return advance
