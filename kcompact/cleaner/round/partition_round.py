"""One cleaning round of one partition, serial, from lock to checkpoint: the driver of the algorithm in
``kcompact/cleaner/__init__.py``.

:func:`clean_partition`, the one entry point every caller uses, takes the locks, finishes or rolls back an
interrupted swap, loads the partition's facts, computes the cleanable range, builds the offset map,
filters every segment group into a ``.cleaned`` segment, swaps each in, and finally advances the cleaner
checkpoint. With ``dry_run`` it does everything but write; a dry run that has leftovers to settle or
``--roll`` settles and rolls on a staged copy of links (``_staged_copy``), so it previews the very round
the run would do.

The round itself is the steps of ``steps.py`` run in order: a
:class:`~kcompact.cleaner.round.plan.CleanPlan`, passes 1 (``mapping.py``) and 2 (``filtering.py``), then
``commit_clean``. Around it: the optional roll, and segment retention before and after, as the broker's
cleaner thread does. The roll and the deletion of the segments wholly below the log start are
all-or-nothing with the round: both wait for the round's first change to the partition (its first swap, once
every output passed its self-check), and a round that fails before that, or changes nothing, undoes the
roll and deletes nothing (``roll.py``), so a failed ``clean --roll`` changes nothing.

Passes 1 and 2 are the one step a caller may hand elsewhere: the round runs them here
(``steps.run_passes``) unless the caller's :data:`~kcompact.cleaner.round.steps.RunnerChoice` picks a
runner for the planned round (``workers.bound_clean.clean_partition`` binds ``choose_runner``: worker
processes where they pay), or the caller brings its runner (``kcompact.spark.distributed_map`` builds
the offset map as a Spark shuffle); everything else — locks, recovery, roll, range, plan, commit,
retention — is this module's, so neither can drift from the serial round. The round knows nothing of
workers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.cleaner.disk.retention import RetentionResult, apply_retention, plan_retention
from kcompact.cleaner.disk.scratch import pending_marker, refuse_scratch_dir, settle_scratch
from kcompact.cleaner.disk.space import (
    SpaceNeed,
    Volume,
    no_space_line,
    output_bound,
    reserve_text,
    round_need,
    volume_of,
)
from kcompact.cleaner.disk.swap import recover_interrupted_swaps, unsettled_files
from kcompact.cleaner.round.key_counts import count_dirty_keyless
from kcompact.cleaner.round.options import (
    DEFAULT_OPTIONS,
    CleanOptions,
    CleanResult,
    KeylessLossRefused,
    Progress,
)
from kcompact.cleaner.round.plan import CleanPlan
from kcompact.cleaner.round.steps import (
    RoundOutput,
    RoundRunner,
    RunnerChoice,
    commit_clean,
    plan_round,
    refuse_unsupported,
    remove_outputs,
    run_passes,
    write_checkpoint,
)
from kcompact.clock import run_clock_ms
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CorruptDataError, FileAccessError, KcompactError, NoSpaceError, RefusedError
from kcompact.log.state.known_state import KnownState, state_for_round
from kcompact.log.state.log_state import LogState, load_log_state
from kcompact.segment.files import file_access, link_or_else, require_writable
from kcompact.segment.lock import log_dir_write_guard, partition_lock
from kcompact.segment.names import parse_segment_file_name
from kcompact.segment.partition import (
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    REPLICATION_CHECKPOINT,
    Partition,
    named_path,
    open_partition,
)
from kcompact.text import size_text
from kcompact.value import frozen, mutable

if TYPE_CHECKING:
    from kcompact.cleaner.disk.roll import Roll


def clean_partition(
    path: str | Path,
    config: TopicConfig,
    options: CleanOptions = DEFAULT_OPTIONS,
    progress: Progress | None = None,
    *,
    round_runner: RoundRunner | None = None,
    choose_runner: RunnerChoice | None = None,
    known: KnownState | None = None,
) -> CleanResult:
    """Clean one partition directory exactly as one round of Kafka 4.1's log cleaner: the one entry point
    every caller uses (through ``workers.bound_clean.clean_partition`` unless it brings a runner).

    Args:
        path: the partition directory.
        config: the topic's effective configuration.
        options: clock, dry run, bounded map, worker processes, …
        progress: called with byte counts as segments are read (for a progress bar).
        round_runner: runs passes 1 and 2 elsewhere (the distributed offset map). With it, leftovers
            of an interrupted clean are settled without first rehearsing the clean on a staged copy
            (that rehearsal is a local dry run: the very map a runner exists to avoid), so a round
            that then fails leaves the settled partition, as a broker's loader would make it; and a
            dry run that settles or rolls does not run on a staged copy.
        choose_runner: without ``round_runner``, picks per planned round who runs passes 1 and 2
            (``workers.parallel.choose_runner``: worker processes); None, or a choice of None, runs
            them here (``steps.run_passes``).
        known: the partition's state as the caller loaded it (a log dir's ordering), used while the files it
            was read from are unchanged (``state.known_state``); None: loaded here.

    Returns:
        The :class:`CleanResult`.

    Raises:
        RefusedError: a broker holds the log dir, another kcompact works on the partition, or the
            topic may not be cleaned offline (``__cluster_metadata``, tiered storage).
        FileAccessError: the log dir or the partition directory cannot be written (checked first),
            or a file cannot be read (nothing is changed).
        CorruptDataError: the partition's data does not parse (nothing is changed).
    """
    runs_here = round_runner is None
    if options.scratch_dir is not None and not options.dry_run:
        choose_runner = None  # worker processes write in the partition directory; the scratch dir's round runs here
    runner = _here_or(choose_runner) if round_runner is None else _always(round_runner)
    partition = _listed(path, known, options)
    refuse_unsupported(partition, config)
    now_ms = run_clock_ms(options.now_ms)
    result = CleanResult(str(partition.path), partition.topic, partition.partition, now_ms, options.dry_run)
    log_dir = partition.path.parent
    if options.scratch_dir is not None:
        refuse_scratch_dir(options.scratch_dir, log_dir)
    if options.dry_run:
        _refuse_unsettled_scratch(partition.path, "a dry run cannot preview the settlement")
        if runs_here and (options.roll or unsettled_files(partition.path)):
            _dry_run_staged(partition, config, options, result, progress, runner)
        else:
            _clean_locked(partition, config, options, now_ms, result, progress, runner, known=known)
        if result.space is not None:
            volume = volume_of(partition.path)
            result.free_bytes, result.reserved_bytes = volume.free_bytes, volume.reserved_bytes
        return result
    for directory in (log_dir, partition.path):  # both change (checkpoint, locks; segments): check both first
        require_writable(directory)
    with log_dir_write_guard(log_dir), partition_lock(log_dir, partition.path.name):
        if options.scratch_dir is not None:
            result.scratch_actions = settle_scratch(partition.path, options.scratch_dir)
            partition = open_partition(partition.path)
        else:
            _refuse_unsettled_scratch(partition.path, "rerun with the --scratch-dir it was cleaned with")
        if runs_here and unsettled_files(partition.path):
            _rehearse(partition, config, options, now_ms, runner)
        recovery = recover_interrupted_swaps(partition.path)
        result.recovery_actions = recovery.actions
        if recovery.changed:
            partition = open_partition(partition.path)
        return _clean_locked(partition, config, options, now_ms, result, progress, runner, known=known)


def _listed(path: str | Path, known: KnownState | None, options: CleanOptions) -> Partition:
    """The partition directory's listing: the one ``known`` was loaded from, for a plain clean in place (no
    roll, no dry run, no scratch dir, which act on the listing before the lock), else a fresh one. Under the
    lock the round uses that listing only while nothing in the directory changed since (``state_for_round``
    compares every file's name, size, times and inode; anything else and it lists and loads afresh)."""
    if (known is None or options.roll or options.dry_run or options.scratch_dir is not None
            or known.state.partition.path != named_path(path)):
        return open_partition(path)
    return known.state.partition


def _refuse_unsettled_scratch(directory: Path, what_to_do: str) -> None:
    """Refuse a partition whose group evacuated through a scratch dir is not settled (``disk.scratch``)."""
    if (marker := pending_marker(directory)) is not None:
        raise RefusedError(f"{marker}: a group evacuated through a scratch dir is not settled; {what_to_do} "
                           "(`kcompact clean --scratch-dir DIR`)")


def _always(runner: RoundRunner) -> RunnerChoice:
    """The choice of ``runner`` for every round."""
    return lambda _plan, _options: runner


def _here_or(choose: RunnerChoice | None) -> RunnerChoice:
    """``choose``, or the round's own passes in this process."""
    return choose if choose is not None else (lambda _plan, _options: None)


def _rehearse(
    partition: Partition, config: TopicConfig, options: CleanOptions, now_ms: int, runner: RunnerChoice,
) -> None:
    """Settle an interrupted swap and dry-run the clean on a staged copy first.

    Settling leftovers changes the directory; if the clean would then fail (corrupt data), the partition
    must still be exactly as it was. The rehearsal settles and dry-runs on a staged copy
    (:func:`_staged_copy`) and raises the clean's error before anything real is touched.
    """
    rehearsal = CleanResult(str(partition.path), partition.topic, partition.partition, now_ms, True)
    try:
        with _staged_copy(partition) as staged:
            _clean_staged(staged, config, replace(options, dry_run=True), rehearsal, None, runner)
    except CorruptDataError as err:
        raise type(err)(
            f"{err.message} (found while rehearsing the clean on a staged copy; the interrupted "
            "clean's leftovers were not settled, nothing was changed)",
            path=err.path,
            position=err.position, offset=err.offset,
        ) from err


def _dry_run_staged(
    partition: Partition, config: TopicConfig, options: CleanOptions, result: CleanResult,
    progress: Progress | None, runner: RunnerChoice,
) -> CleanResult:
    """A dry run that settles leftovers and rolls, as the real run would, on a staged copy.

    The real run settles an interrupted clean's leftovers and rolls before its round: a dry run that
    skipped them would preview another round (the rolled segment's data would be missing from it).
    """
    with _staged_copy(partition) as staged:
        _clean_staged(staged, config, options, result, progress, runner)
        _unstage_result(result, staged, partition.path)
    return result


def _clean_staged(
    staged: Path, config: TopicConfig, options: CleanOptions, result: CleanResult, progress: Progress | None,
    runner: RunnerChoice,
) -> None:
    """Settle leftovers, roll (``options.roll``), and dry-run the round in a staged partition directory."""
    result.recovery_actions = recover_interrupted_swaps(staged).actions
    _clean_locked(open_partition(staged), config, replace(options, dry_run=True), result.now_ms, result,
                  progress, runner, staged=True)


def _unstage_result(result: CleanResult, staged: Path, real: Path) -> None:
    """Name the user's partition, not its staged copy, in a staged dry run's result."""
    result.partition_dir = str(real)
    result.warnings = [w.replace(str(staged), str(real)) for w in result.warnings]
    if result.skipped_reason is not None:
        result.skipped_reason = result.skipped_reason.replace(str(staged), str(real))


@contextmanager
def _staged_copy(partition: Partition) -> Iterator[Path]:
    """A copy of the partition directory made of links, in which renames and unlinks change nothing real.

    Every file is hard-linked (a symbolic link where hard links are refused) into a staging directory
    beside the log dir (never inside it: a broker refuses unknown directories there), or in the system's
    temporary directory when that is not writable; the log dir's checkpoint files are hard-linked too (copied
    where links are refused: a copy needs space a full volume lacks). Nothing writes through a staged name:
    recovery and the roll only rename, unlink and create names, and the dry run writes nothing. Errors name
    the user's files, not the staged links.
    """
    import tempfile  # only for a rehearsal: a clean in place never loads it (~5 ms of CPU)

    log_dir = partition.path.parent
    parent = log_dir.parent if os.access(log_dir.parent, os.W_OK | os.X_OK) else Path(tempfile.gettempdir())
    with file_access(parent, "write"):
        staging = Path(tempfile.mkdtemp(prefix=".kcompact-rehearsal-", dir=parent))
    try:
        stage_part = staging / log_dir.name / partition.path.name
        with file_access(partition.path, "read"):
            stage_part.mkdir(parents=True)
            for source in partition.path.iterdir():
                if source.is_file():
                    link_or_else(source, stage_part / source.name, "symlink")
            for name in (CLEANER_CHECKPOINT, REPLICATION_CHECKPOINT, LOG_START_CHECKPOINT):
                if (log_dir / name).exists():  # linked where it can be: a copy needs space a full volume lacks
                    link_or_else(log_dir / name, stage_part.parent / name, "copy")
        yield stage_part
    except KcompactError as err:
        mapped = _unstaged_error(err, staging / log_dir.name, log_dir)
        if mapped is err:
            raise
        raise mapped from err
    finally:
        import shutil  # only for a rehearsal, as tempfile above

        shutil.rmtree(staging, ignore_errors=True)


def _unstaged_error(err: KcompactError, staged_log_dir: Path, log_dir: Path) -> KcompactError:
    """``err`` naming the user's files instead of their staged links."""
    if isinstance(err, FileAccessError):
        return FileAccessError(_unstaged(Path(err.path), staged_log_dir, log_dir), err.action, err.reason)
    if isinstance(err, CorruptDataError):
        return type(err)(err.message.replace(str(staged_log_dir), str(log_dir)),
                         path=_unstaged(Path(err.path), staged_log_dir, log_dir) if err.path else None,
                         position=err.position, offset=err.offset)
    if type(err).__init__ is KcompactError.__init__:  # a message only
        return type(err)(str(err).replace(str(staged_log_dir), str(log_dir)))
    return err


def _unstaged(path: Path, staged_log_dir: Path, log_dir: Path) -> Path:
    """The user's file a path of the rehearsal's staged copy stands for (other paths as they are)."""
    return log_dir / path.relative_to(staged_log_dir) if path.is_relative_to(staged_log_dir) else path


def _clean_locked(
    partition: Partition,
    config: TopicConfig,
    options: CleanOptions,
    now_ms: int,
    result: CleanResult,
    progress: Progress | None,
    runner: RunnerChoice,
    *,
    staged: bool = False,
    known: KnownState | None = None,
) -> CleanResult:
    """The round, all-or-nothing: what it plans to change before its output is checked waits for it.

    The roll comes first (the active segment's data is cleanable only once it is inactive), and the
    segments wholly below the log start are planned away first (a broker deletes them long before its
    cleaner runs); both stay pending (:class:`_Pending`) until the round's first change to the partition
    (a swap once every output passed its self-check, a retention delete, a checkpoint write). A round
    that fails before undoes the roll and deletes nothing; one that changes nothing else undoes the roll.
    ``staged``: a dry run in a staged copy (``_staged_copy``), which rolls there to preview the round.
    ``known``: the caller's loaded state (``state.known_state``), if it still holds.
    """
    started = time.monotonic()
    may_roll = options.roll and (staged or not options.dry_run)
    roll: Roll | None = None
    if may_roll:
        from kcompact.cleaner.disk.roll import roll_active_segment  # kept off a clean's start-up: only --roll rolls

        roll = roll_active_segment(partition, config)
    pending = _Pending(result, config, options.dry_run, roll)
    here = _Round(config, options, now_ms, result, progress, runner, pending.apply)
    try:
        if roll is not None:
            partition = open_partition(partition.path)
        partition, state = _below_log_start(here, pending, partition, known)
        if config.is_compacted and (plan := _plan_compaction(here, partition, state)) is not None:
            ran = _passes(here, partition, plan)(plan, options, progress)  # Cleaner.doClean: plan, passes, commit
            _commit_compaction(here, partition, ran)
        elif not config.is_compacted:
            result.skipped_reason = (f"cleanup.policy={','.join(config.cleanup_policy)} has no 'compact': "
                                     "retention only")
        _retention(here, partition, state)
        pending.finish()
    except BaseException as err:
        if roll is not None and not options.dry_run:
            _undo_roll(roll, err)
        raise
    result.stats.elapsed_s = time.monotonic() - started
    return result


@mutable
class _Pending:
    """What a round does to the partition before it knows that it will change it: a ``--roll`` done on
    disk (``roll.py``: undone unless kept), and the segments below the log start, planned but not deleted.
    :meth:`apply` makes both final at the round's first change; a dry run only notes that it would."""

    result: CleanResult
    config: TopicConfig
    dry_run: bool
    roll: Roll | None = None
    log_start: tuple[LogState, RetentionResult] | None = None  # the state planned on, and the plan
    applied: bool = False

    def apply(self) -> None:
        """The round's first change: keep the roll, delete the segments below the log start. Idempotent."""
        if self.applied:
            return
        self.applied = True
        self.result.rolled = self.roll is not None
        if self.dry_run:
            return
        if self.roll is not None:
            self.roll.keep()
        if self.log_start is not None:
            apply_retention(self.log_start[0], self.config, self.log_start[1])

    def finish(self) -> None:
        """A round that did not fail: the planned deletion happens; a roll nothing else needed is undone."""
        if self.log_start is not None:
            self.apply()
        if not self.applied and self.roll is not None and not self.dry_run:
            self.roll.undo()


@frozen
class _Round:
    """What every step of one round shares (the partition and its state change as segments go)."""

    config: TopicConfig
    options: CleanOptions
    now_ms: int
    result: CleanResult  # filled in as the round goes
    progress: Progress | None
    runner: RunnerChoice
    before_change: Callable[[], None]  # called before the first change to the partition (``_Pending``)


def _undo_roll(roll: Roll, err: BaseException) -> None:
    """Undo a pending roll after ``err``; if even that fails, say both in one message."""
    try:
        roll.undo()
    except KcompactError as undo_err:
        raise KcompactError(f"{err}; {undo_err}") from err


def _below_log_start(
    here: _Round, pending: _Pending, partition: Partition, known: KnownState | None
) -> tuple[Partition, LogState]:
    """The partition's loaded state, and the partition itself, without the segments wholly below the log
    start: they go first, as a broker deletes them long before its cleaner runs; the round is planned
    without them, and they are deleted with its first change (``pending``)."""
    state = state_for_round(known, partition, here.config, here.options.sole_replica)
    partition = state.partition  # a fresh listing where the known one no longer held
    here.result.warnings.extend(state.warnings)
    here.result.high_watermark_note = state.high_watermark_note
    below = _plan_retention(here, state, log_start_only=True)
    if below.deleted_segments:
        pending.log_start = (state, below)
        partition = _without(partition, below.deleted_segments)
        state = load_log_state(partition, here.config, sole_replica=here.options.sole_replica)
    return partition, state


def _without(partition: Partition, bases: list[int]) -> Partition:
    """The partition as it is once the segments at ``bases`` are deleted (with their producer snapshots)."""
    gone = set(bases)
    snapshots = tuple(p for p in partition.snapshots
                      if (n := parse_segment_file_name(p.name)) is None or n.base_offset not in gone)
    return replace(partition, segments=tuple(s for s in partition.segments if s.base_offset not in gone),
                   snapshots=snapshots)


def _plan_compaction(here: _Round, partition: Partition, state: LogState) -> CleanPlan | None:
    """The round's plan (``steps.plan_round``), its range, fence and warnings noted in the result; None
    when there is nothing to clean (the checkpoint rewritten where Kafka would force it)."""
    options, result = here.options, here.result
    planned = plan_round(partition, state, here.config, here.now_ms, options)
    rng = result.range = planned.range
    result.checkpoint_before = state.checkpoint_offset
    result.warnings.extend(planned.warnings)
    result.fence, result.clean_limit = planned.fence, planned.clean_limit
    if planned.plan is None:
        result.skipped_reason = rng.blocking_detail or "nothing to clean"
        if rng.force_update_checkpoint:
            here.before_change()
            if not options.dry_run:
                write_checkpoint(partition, rng.first_dirty_offset)
                result.checkpoint_written = True
    return planned.plan


def _passes(here: _Round, partition: Partition, plan: CleanPlan) -> RoundRunner:
    """Who runs passes 1 and 2 of ``plan`` (the caller's choice, else ``steps.run_passes``), once the
    volume is known to fit the round (:func:`_require_space`)."""
    runner = here.runner(plan, here.options)
    if not here.options.dry_run:
        _require_space(here, partition, plan)
    return run_passes if runner is None else runner


def _commit_compaction(here: _Round, partition: Partition, ran: RoundOutput) -> None:
    """The passes' outputs swapped in and the checkpoint advanced (``steps.commit_clean``), after the
    keyless guard; the result takes their counters."""
    options, result = here.options, here.result
    result.end_offset = ran.plan.end_offset
    result.workers = ran.workers
    _refuse_keyless_loss(options, ran)
    if options.dry_run:
        result.space = _round_need(partition.path, ran, result, volume_of(partition.path))
        _measure_scratch(here, ran)
    done = commit_clean(ran.plan, ran.outputs, options, stats=ran.map_stats, before_swap=here.before_change)
    result.scratch_actions += done.scratch_actions
    if options.dry_run:
        here.before_change()  # notes what the round would keep (a dry run changes nothing)
    result.stats.add(done.stats)
    result.checkpoint_written = done.checkpoint_written


def _require_space(here: _Round, partition: Partition, plan: CleanPlan) -> None:
    """Refuse the round, before it writes, when its peak does not fit the free space of its volume
    (``disk.space``): where the most its output can take does not fit, its passes run once without writing
    to measure the output (the dry run's numbers), and the round goes on only if that fits. With a scratch
    dir the outputs are written there: its volume is the one measured (``disk.scratch`` brings each group in,
    freeing the partition's volume as it goes)."""
    scratch = here.options.scratch_dir
    volume = volume_of(partition.path if scratch is None else Path(scratch))
    bound = output_bound(partition.segments, plan.groups, here.config.index_interval_bytes, volume)
    if bound + volume.block_bytes <= volume.free_bytes:
        return
    known = here.options.measured_space if scratch is None else None  # a log dir measures the partitions' volume
    if known is not None and known.peak_bytes + volume.block_bytes <= volume.free_bytes:
        here.result.space, here.result.free_bytes = known, volume.free_bytes
        here.result.reserved_bytes = volume.reserved_bytes
        return
    measured = run_passes(plan, replace(here.options, dry_run=True), None)
    need = _round_need(partition.path, measured, here.result, volume)
    here.result.space, here.result.free_bytes = need, volume.free_bytes
    here.result.reserved_bytes = volume.reserved_bytes
    if not need.fits(volume.free_bytes):
        raise NoSpaceError(no_space_line(partition.path, need, volume.free_bytes, volume.reserved_bytes))


def _measure_scratch(here: _Round, ran: RoundOutput) -> None:
    """A dry run with a scratch dir: every group's output is there at once before the first is brought in
    (``disk.scratch``), so its volume must hold their sum; refused, as the real run would be, where it does not."""
    scratch = here.options.scratch_dir
    if scratch is None:
        return
    volume = volume_of(Path(scratch))
    peak = sum(volume.allocated(size) for out in ran.outputs for size in out.file_sizes)
    here.result.scratch_peak_bytes, here.result.scratch_free_bytes = peak, volume.free_bytes
    if peak > volume.free_bytes:
        raise NoSpaceError(f"{here.result.partition_dir}: not cleaned: the scratch dir {scratch} needs "
                           f"{size_text(peak)} free at peak (every group's output, before the first is brought in); "
                           f"{size_text(volume.free_bytes)} free{reserve_text(volume.reserved_bytes)}; give one on a "
                           "volume with room; nothing was changed")


def _round_need(directory: Path, ran: RoundOutput, result: CleanResult, volume: Volume) -> SpaceNeed:
    """The round's :class:`SpaceNeed`: its groups' outputs, the segments below the log start it deletes."""
    deleted = result.retention.deleted_segments if result.retention is not None else []
    groups = [(out.source_bases, out.file_sizes) for out in ran.outputs]
    return round_need(directory, groups, volume, deleted=deleted)


def _refuse_keyless_loss(options: CleanOptions, ran: RoundOutput) -> None:
    """Refuse the round, before its first change, when most records it reads would go as keyless
    (``options.keyless_guard``); its ``.cleaned`` files are removed, the caller undoes a roll.

    Two counts, either refuses: every record pass 2 read (from the log start), and the dirty section
    alone (from the first dirty offset, the range the log-dir gate counts from the cleaner checkpoint):
    a large keyed clean section must not dilute a dirty section that is mostly keyless (a topic whose
    policy became ``compact`` after they were written). The second is read only when pass 2 met a
    keyless record and the round has a clean section (else it is the first count)."""
    guard = options.keyless_guard
    if guard is None:
        return
    plan = ran.plan
    keyless = sum(out.stats.invalid_records for out in ran.outputs)
    records = sum(out.stats.records_read for out in ran.outputs)
    counted = f"{keyless} of the {records} records the round reads (below offset {plan.end_offset}) have no key"
    if not guard.refuses(keyless, records):
        if keyless == 0 or plan.first_dirty_offset <= plan.range.log_start_offset:
            return
        records, keyless = count_dirty_keyless(plan)
        if not guard.refuses(keyless, records):
            return
        counted = (f"{keyless} of the {records} records of the dirty section [{plan.first_dirty_offset}, "
                   f"{plan.end_offset}) have no key")
    if not options.dry_run:
        remove_outputs(ran.plan, ran.outputs)
    raise KeylessLossRefused(f"{plan.partition_dir}: {guard.refusal(counted)}")


def _plan_retention(here: _Round, state: LogState, *, log_start_only: bool = False) -> RetentionResult:
    """Kafka's deleteOldSegments, as the broker's cleaner thread runs it after a round: segments below the
    log start always go; with an explicit ``delete`` policy, ``retention.bytes`` and ``retention.ms`` too.
    Returns the plan (also merged into the result's)."""
    config, options, result = here.config, here.options, here.result
    effective = config if options.apply_retention else config.with_overrides({"cleanup.policy": "compact"})
    plan = plan_retention(state, effective, here.now_ms, log_start_only=log_start_only)
    if result.retention is None:
        result.retention = plan
    else:
        _merge(result.retention, plan)
    return plan


def _retention(here: _Round, partition: Partition, state: LogState) -> None:
    """Plan the retention of the segments the round left and delete what it plans (a dry run only notes
    it). Without the delete rules only the log-start rule applies, and it already ran on ``state``
    (merging segments cannot make one deletable): no second load."""
    config, options = here.config, here.options
    if here.result.end_offset is not None and not options.dry_run and _time_or_size_rules(config, options):
        state = load_log_state(open_partition(partition.path), config, sole_replica=options.sole_replica)
    plan = _plan_retention(here, state)
    if plan.deleted_segments:
        here.before_change()
        if not here.options.dry_run:
            apply_retention(state, here.config, plan)


def _time_or_size_rules(config: TopicConfig, options: CleanOptions) -> bool:
    return options.apply_retention and config.has_delete


def _merge(into: RetentionResult, later: RetentionResult) -> None:
    into.deleted_segments += later.deleted_segments
    into.reasons.update(later.reasons)
    into.bytes_deleted += later.bytes_deleted
    into.rolled = into.rolled or later.rolled
    if later.deleted_segments:
        into.log_start_after = later.log_start_after
