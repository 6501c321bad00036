"""A round's steps, separable, for drivers that spread one round over processes or machines.

:func:`kcompact.cleaner.round.partition_round.clean_partition` is these steps run in order (passes 1
and 2 by the caller's runner: this process, worker processes or Spark); ``kcompact.spark`` runs them on
executors. The caller holds the partition's locks (``log_dir_write_guard`` + ``partition_lock``) from
:func:`plan_clean` to :func:`commit_clean`, as ``clean_partition`` does.

1. :func:`plan_round` — from the loaded facts, the cleanable range, the replica fence and a picklable
   :class:`~kcompact.cleaner.round.plan.CleanPlan` (None when there is nothing to clean): the one planner,
   which the round runs; :func:`plan_clean` loads the facts of a partition directory and runs it.
2. :func:`segment_key_entries` — per segment, the ``(hi, lo, offsets)`` map entries: ``section="dirty"``
   what pass 1 inserts, ``section="clean"`` the keyed records of the clean section pass 2 looks up.
3. A :class:`~kcompact.log.offset_map.oracle.RetentionOracle` built from them: the serial
   :class:`~kcompact.log.offset_map.oracle.OffsetMapOracle`, or
   :class:`~kcompact.log.offset_map.oracle.SortedOffsetsOracle` from the offsets that survive (map values +
   clean-section offsets whose digest is absent).
4. :func:`write_group` — one group into its ``.cleaned`` segment; any process that sees the directory.
5. :func:`commit_clean` — self-check every output, swap them in (Kafka's crash-safe protocol), and
   advance the cleaner checkpoint; on a failure before the first swap, every ``.cleaned`` file goes.

Every clean plans (step 1); only a round with work runs the passes. So the passes' modules (numpy, the offset
map, pass 2's filter, the self-check) are imported inside the steps that run them: a clean with nothing to do
never loads them (``scripts/bench.py start``).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kcompact.cleaner.disk.scratch import ScratchPlace, bring_in, next_group, scratch_place
from kcompact.cleaner.disk.swap import (
    CleanedSegment,
    CleanedSegmentWriter,
    remove_cleaned,
    replace_segments,
)
from kcompact.cleaner.round.key_counts import SLICE_RECORDS, batch_keys
from kcompact.cleaner.round.options import DEFAULT_OPTIONS, CleanOptions, CleanResult, Progress
from kcompact.cleaner.round.plan import CleanPlan, build_plan
from kcompact.cleaner.round.stats import CleanStats
from kcompact.clock import run_clock_ms
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CleanerStateError, KcompactError, RefusedError
from kcompact.log.rules.fence import (
    WHY_COMPLETED_SWAP,
    WHY_LOG_END,
    WHY_TORN_TAIL,
    CleanLimit,
    CopyFence,
    ReplicaFence,
    clean_limit,
    replica_fence,
)
from kcompact.log.rules.ranges import (
    CleanableRange,
    checkpoint_reset_warning,
    compute_cleanable_range,
)
from kcompact.log.state.log_state import LogState, load_log_state
from kcompact.segment.checkpoint import update_offset_checkpoint
from kcompact.segment.log_file import LogFile
from kcompact.segment.names import segment_file_name
from kcompact.segment.partition import Partition, SegmentFiles, open_partition
from kcompact.segment.replica_copies import ReplicaCopy, replica_copies, swap_warnings, truncation_warnings
from kcompact.value import frozen

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from kcompact.log.offset_map import OffsetMap
    from kcompact.log.offset_map.oracle import RetentionOracle

    U64 = npt.NDArray[np.uint64]
    I64 = npt.NDArray[np.int64]

__all__ = [
    "GroupOutput",
    "PlannedRound",
    "RoundOutput",
    "RoundRunner",
    "RunnerChoice",
    "build_offset_map",
    "commit_clean",
    "plan_clean",
    "plan_round",
    "refuse_unsupported",
    "run_passes",
    "segment_key_entries",
    "unsupported_reason",
    "write_checkpoint",
    "write_group",
]


@frozen
class GroupOutput:
    """One written ``.cleaned`` segment (or, in a dry run, what it would hold); picklable."""

    base_offset: int
    source_bases: tuple[int, ...]  # the group's source segments
    size_in_bytes: int
    files: tuple[tuple[str, str], ...]  # (kind, path) of each .cleaned file; () in a dry run
    stats: CleanStats
    checked: bool = False  # passed the self-check where it was written (``check_group_output``)
    file_sizes: tuple[int, ...] = ()  # bytes of each .cleaned file, also in a dry run (``disk.space``)


@frozen
class RoundOutput:
    """What passes 1 and 2 of a round hand to ``commit_clean``."""

    plan: CleanPlan  # the round as run: ``plan.bounded(...)`` when a bounded map filled early
    outputs: list[GroupOutput]  # one per group, in order; the ``.cleaned`` files are written, not swapped
    map_stats: CleanStats  # pass 1's counters
    workers: int = 1  # processes or threads the passes ran on at once (1: this thread)


RoundRunner = Callable[[CleanPlan, CleanOptions, Progress | None], RoundOutput]
"""Passes 1 and 2 of a built plan elsewhere: ``(plan, options, progress) -> RoundOutput``. It writes each
group's ``.cleaned`` files (nothing with ``options.dry_run``) and swaps nothing; on failure it leaves no
``.cleaned`` file behind. :func:`run_passes` is the round's own, in this process."""

RunnerChoice = Callable[[CleanPlan, CleanOptions], RoundRunner | None]
"""Who runs passes 1 and 2 of a planned round: a :data:`RoundRunner` (worker processes, Spark), or None
for the round itself, in this process (:func:`run_passes`)."""


def unsupported_reason(partition: Partition, config: TopicConfig) -> str | None:
    """Why no cleaner may touch this partition offline, None when one may: the one rule ``clean`` refuses
    by and ``inspect dirty-ratio`` reports.

    KRaft's own log is never cleaned by the log cleaner; a tiered-storage topic
    (``remote.storage.enable=true``) keeps segments in remote storage that a local rewrite would
    contradict (Kafka refuses ``compact`` with tiered storage).

    Args:
        partition: the partition.
        config: its configuration.

    Returns:
        The reason, one sentence without the path, or None.
    """
    if partition.is_metadata_log:
        return "__cluster_metadata is KRaft's own log; no cleaner touches it"
    if getattr(config, "remote_storage_enable", False):
        return "remote.storage.enable=true (tiered storage); kcompact does not clean it"
    return None


def refuse_unsupported(partition: Partition, config: TopicConfig) -> None:
    """Raise RefusedError for a partition no cleaner may touch offline (:func:`unsupported_reason`)."""
    reason = unsupported_reason(partition, config)
    if reason is not None:
        raise RefusedError(f"{partition.path}: {reason}")


def nothing_to_clean(rng: CleanableRange) -> bool:
    """True when the range leaves nothing for a round (the checkpoint may still need a rewrite)."""
    return rng.dirty_bytes == 0 or rng.first_uncleanable_offset <= rng.first_dirty_offset


@frozen
class PlannedRound:
    """What planning a round found: the cleanable range, what to warn of, the replica fence and the plan."""

    range: CleanableRange
    plan: CleanPlan | None  # None: nothing to clean (the checkpoint may still need a rewrite)
    warnings: tuple[str, ...]  # a checkpoint reset, the replica fence's
    fence: ReplicaFence | None = None  # ``--replica-dirs``/``--safe-offset`` (``rules.fence``)
    clean_limit: CleanLimit | None = None  # the range's end where Kafka may truncate this copy


def plan_round(
    partition: Partition, state: LogState, config: TopicConfig, now_ms: int, options: CleanOptions
) -> PlannedRound:
    """The one planner of a round, from the loaded log: the replica fence and clean limit, the cleanable
    range and the groups (``LogCleanerManager.cleanableOffsets``, then ``Cleaner.doClean``'s grouping).

    Args:
        partition: the partition (its replica copies are looked up by its name).
        state: its loaded facts (``load_log_state``).
        config: the topic's configuration.
        now_ms: the round's clock.
        options: ``from_start``, ``replica_dirs`` and ``safe_offset`` are used.

    Returns:
        The :class:`PlannedRound`.

    Raises:
        KcompactError: a replica copy's files or leader-epoch checkpoint cannot be read.
    """
    copies = replica_copies(options.replica_dirs, partition, state.log_end_offset)
    fences = [_copy_fence(copy) for copy in copies]
    fence = replica_fence(options.safe_offset, fences)
    limit = clean_limit(fences, state.log_end_offset)
    rng = compute_cleanable_range(state.range_inputs(config, now_ms), from_start=options.from_start,
                                  clean_limit=None if limit is None else limit.offset)
    reset = checkpoint_reset_warning(rng)
    warnings = [] if reset is None else [reset]
    if options.replica_dirs and not copies:
        warnings.append("--replica-dirs: no copy of this partition found; no fence")
    warnings.extend(truncation_warnings([copy.end for copy in copies]))
    warnings.extend(swap_warnings([copy.end for copy in copies]))
    if nothing_to_clean(rng):
        return PlannedRound(rng, None, tuple(warnings), fence, limit)
    plan = build_plan(state, rng, config, now_ms, None if fence is None else fence.offset)
    return PlannedRound(rng, plan, tuple(warnings), fence, limit)


def _copy_fence(copy: ReplicaCopy) -> CopyFence:
    """A replica copy's part in the fence (``rules.fence``), with what sets its log end."""
    end = copy.end
    why = WHY_TORN_TAIL if end.stopped_at is not None else WHY_COMPLETED_SWAP if end.swapped_end else WHY_LOG_END
    return CopyFence(str(copy.path), end.log_end_offset, copy.lineage_parts_at, why)


def plan_clean(
    partition_dir: str | Path, config: TopicConfig, options: CleanOptions = DEFAULT_OPTIONS
) -> CleanPlan | None:
    """Step 1: the plan of one round, as ``clean_partition`` makes it (:func:`plan_round`; no map yet).

    Unlike ``clean_partition`` this neither rolls, applies retention, nor rewrites a checkpoint that
    lies out of range; call it with the locks held and after leftovers are settled.

    Args:
        partition_dir: the partition directory.
        config: the topic's configuration.
        options: ``now_ms``, ``from_start`` and the replica fence's options are used.

    Returns:
        The plan, or None when there is nothing to clean.

    Raises:
        RefusedError: the partition may not be cleaned offline.
        CleanerStateError: an interrupted swap's leftovers are still there.
        CorruptDataError: a segment's framing does not parse.
    """
    partition = open_partition(partition_dir)
    refuse_unsupported(partition, config)
    if partition.leftovers:
        raise CleanerStateError(
            f"{partition.path}: leftovers of an interrupted clean; expected none (settle them with "
            f"kcompact clean or repair first), found {len(partition.leftovers)}"
        )
    now_ms = run_clock_ms(options.now_ms)
    state = load_log_state(partition, config, sole_replica=options.sole_replica)
    return plan_round(partition, state, config, now_ms, options).plan


def run_passes(plan: CleanPlan, options: CleanOptions, progress: Progress | None) -> RoundOutput:
    """Passes 1 and 2 of a round in this process: the offset map, then every group into its ``.cleaned``
    segment (``Cleaner.doClean``: ``buildOffsetMap``, then ``cleanSegments`` per group).

    Args:
        plan: the round.
        options: ``dedupe_buffer_size`` and ``dry_run`` matter here.
        progress: called with byte counts as segments are read.

    Returns:
        The round as run (bounded where a bounded map filled early), its outputs and pass 1's counters.

    Raises:
        CorruptDataError, KcompactError: as :func:`write_group`; no ``.cleaned`` file is left behind.
    """
    from kcompact.log.offset_map.oracle import OffsetMapOracle

    map_stats = CleanStats()
    offset_map = build_offset_map(plan, options.dedupe_buffer_size, map_stats, progress)
    if offset_map.latest_offset != plan.map_latest_offset:
        plan = plan.bounded(offset_map.latest_offset)
    oracle = OffsetMapOracle(offset_map, plan.first_dirty_offset)
    outputs: list[GroupOutput] = []
    output = output_place(plan, options)
    try:
        for index in range(len(plan.groups)):
            outputs.append(write_group(plan, index, oracle, dry_run=options.dry_run, progress=progress,
                                       output=output))
    except BaseException:
        remove_outputs(plan, outputs, output)
        _drop_if_empty(output)
        raise
    return RoundOutput(plan, outputs, map_stats)


def build_offset_map(
    plan: CleanPlan, dedupe_buffer_size: int | None, stats: CleanStats, progress: Progress | None = None
) -> OffsetMap:
    """Pass 1 in this process: the frozen offset map of the round.

    Args:
        plan: the round.
        dedupe_buffer_size: emulate a broker's bounded map; None for an unbounded one.
        stats: ``records_scanned``, ``map_entries`` and ``map_memory_bytes`` are set.
        progress: called with each dirty segment's size once it is in the map.

    Returns:
        The map; its ``latest_offset`` is where the round ends (minus one).
    """
    from kcompact.cleaner.round.mapping import fill_offset_map, iter_dirty_keys, new_offset_map

    offset_map = new_offset_map(plan, dedupe_buffer_size)
    dirty = (plan.segment(base) for base in plan.dirty_segments)
    stats.records_scanned += fill_offset_map(
        plan, offset_map, ((seg, iter_dirty_keys(plan, seg)) for seg in dirty), progress)
    stats.map_entries = offset_map.size
    stats.map_memory_bytes = offset_map.memory_bytes()
    return offset_map


def segment_key_entries(
    plan: CleanPlan, segment_base_offset: int, *, section: Literal["dirty", "clean"]
) -> tuple[U64, U64, I64]:
    """Step 2: the (128-bit digest, offset) pairs of one segment.

    Args:
        plan: the round.
        segment_base_offset: one of ``plan.dirty_segments`` (dirty) or a segment based below
            ``plan.first_dirty_offset`` (clean).
        section: ``"dirty"``: what pass 1 inserts, in order (offset in the dirty range, key not null,
            not aborted data). ``"clean"``: every keyed data record below the first dirty offset.

    Returns:
        ``(hi, lo, offsets)``: uint64, uint64, int64 arrays of one length.

    Raises:
        CleanerStateError: the segment is not part of that section of the round.
        CorruptDataError: a batch does not parse.
    """
    import numpy as np

    from kcompact.cleaner.round.mapping import iter_dirty_keys

    seg = plan.segment(segment_base_offset)
    if section == "dirty":
        slices = list(iter_dirty_keys(plan, seg))
        return (np.concatenate([s.hi for s in slices]), np.concatenate([s.lo for s in slices]),
                np.concatenate([s.offsets for s in slices]))
    if seg.base_offset >= plan.first_dirty_offset:
        raise CleanerStateError(
            f"{seg.log_path}: a segment of the clean section; expected a base offset below "
            f"{plan.first_dirty_offset}, found {seg.base_offset}"
        )
    return _clean_section_entries(plan, seg.log_path)


def _clean_section_entries(plan: CleanPlan, log_path: str | Path) -> tuple[U64, U64, I64]:
    """The keyed data records of a clean-section segment, hashed a window of keys at a time.

    A window is about :data:`~kcompact.cleaner.round.key_counts.SLICE_RECORDS` keys, so a 1 GiB segment never
    holds a Python list of all its keys: only the result's 24 bytes an entry grow with its size.
    """
    import numpy as np

    his: list[U64] = []
    los: list[U64] = []
    keys: list[bytes] = []
    offsets = array("q")
    with LogFile(log_path) as log:
        for batch in log.iter_batches():
            if batch.is_control or batch.base_offset >= plan.first_dirty_offset:
                continue
            for offset, key in zip(*batch_keys(batch, log), strict=True):
                if key is not None and offset < plan.first_dirty_offset:
                    keys.append(key)
                    offsets.append(offset)
            if len(keys) >= SLICE_RECORDS:
                _hash_window(keys, his, los)
    _hash_window(keys, his, los)
    return (np.concatenate(his), np.concatenate(los),
            np.frombuffer(offsets, dtype=np.int64).copy())


def _hash_window(keys: list[bytes], his: list[U64], los: list[U64]) -> None:
    """Append the digests of ``keys`` to ``his``/``los`` and empty ``keys``."""
    import numpy as np

    from kcompact.log.offset_map import key_digests

    hi, lo = key_digests(keys) if keys else (np.empty(0, np.uint64), np.empty(0, np.uint64))
    his.append(hi)
    los.append(lo)
    keys.clear()


def write_group(
    plan: CleanPlan,
    group_index: int,
    oracle: RetentionOracle,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    output: ScratchPlace | None = None,
) -> GroupOutput:
    """Step 4: filter one group of source segments into ``<base>.log.cleaned`` and its indexes.

    Args:
        plan: the round (after :meth:`CleanPlan.bounded` if a bounded map stopped early).
        group_index: which of ``plan.groups``.
        oracle: answers "latest for its key?"; its ``map_latest_offset`` must be the plan's.
        dry_run: write nothing, count only.
        progress: called with each source segment's size once it is done.
        output: where the ``.cleaned`` files go (:func:`output_place`); None: the partition directory.

    Returns:
        The output, for :func:`commit_clean`.

    Raises:
        CorruptDataError: a source batch does not parse (no ``.cleaned`` file is left behind).
        KcompactError: writing fails (likewise).
    """
    from kcompact.cleaner.round.filtering import iter_segment_output
    from kcompact.cleaner.round.record_filter import FilterContext

    bases = plan.groups[group_index]
    segs = [plan.segment(base) for base in bases]
    stats = CleanStats()
    ctx = FilterContext.at(plan, segs[0], oracle, stats)
    writer = CleanedSegmentWriter(
        output.directory if output else Path(plan.partition_dir), bases[0], plan.config.index_interval_bytes,
        dry_run=dry_run, name_prefix=output.prefix if output else "",
    )
    try:
        for seg in segs:
            for run in iter_segment_output(plan, seg, ctx):
                writer.append_run(*run)
            if progress is not None:
                progress(seg.size_in_bytes)
        writer.aborted = ctx.txn.take_retained_aborted()
        return finish_group(plan, group_index, writer, stats)
    except BaseException:
        writer.abort()
        raise


def finish_group(
    plan: CleanPlan, group_index: int, writer: CleanedSegmentWriter, stats: CleanStats
) -> GroupOutput:
    """Finish a group's writer (indexes, fsync, mtimes as the last source's) into its output."""
    bases = plan.groups[group_index]
    last = plan.segment(bases[-1])
    template = SegmentFiles(last.base_offset, Path(last.log_path), last.size_in_bytes, last.mtime_ns,
                            None, None, None)
    cleaned = writer.finish(last.mtime_ns, template=template)
    stats.bytes_written += cleaned.size_in_bytes
    files = tuple((kind, str(path)) for kind, path in cleaned.files.items())
    return GroupOutput(bases[0], bases, cleaned.size_in_bytes, files, stats,
                       file_sizes=tuple(cleaned.file_sizes.values()))


def check_group_output(plan: CleanPlan, out: GroupOutput) -> GroupOutput:
    """The self-check of one written group (``round/verify_output.py``), run where it was written, so that
    :func:`commit_clean` need not read the output again (a distributed map's group task: the driver then
    reads no cleaned byte).

    Args:
        plan: the round.
        out: the group's output, its ``.cleaned`` files complete.

    Returns:
        ``out`` marked as checked.

    Raises:
        CleanerStateError: the output fails the self-check (its files are left for the caller to remove).
    """
    from kcompact.cleaner.round.verify_output import check_cleaned_segment

    sources = [_Source(_planned_files(plan, base)) for base in out.source_bases]
    check_cleaned_segment(_cleaned(plan, out), sources, plan.first_uncleanable_offset)
    return replace(out, checked=True)


def _planned_files(plan: CleanPlan, base: int) -> SegmentFiles:
    seg = plan.segment(base)
    return SegmentFiles(seg.base_offset, Path(seg.log_path), seg.size_in_bytes, seg.mtime_ns, None, None, None)


def remove_outputs(plan: CleanPlan, outputs: Sequence[GroupOutput], output: ScratchPlace | None = None) -> None:
    """Remove the ``.cleaned`` files of these outputs (a round that will not be committed)."""
    for out in outputs:
        _remove_cleaned(plan, out.base_offset, output)


def _remove_cleaned(plan: CleanPlan, base: int, output: ScratchPlace | None) -> None:
    if output is None:
        remove_cleaned(Path(plan.partition_dir), base)
    else:
        remove_cleaned(output.directory, base, output.prefix)


def _drop_if_empty(output: ScratchPlace | None) -> None:
    """Remove a partition's directory in the scratch dir once nothing of the round is left in it."""
    if output is not None:
        output.remove_if_empty()


def output_place(plan: CleanPlan, options: CleanOptions) -> ScratchPlace | None:
    """Where a round writes its ``.cleaned`` files: the partition's place in ``options.scratch_dir``
    (``disk.scratch.scratch_place``, created), else None (the partition directory)."""
    if options.scratch_dir is None or options.dry_run:
        return None
    place = scratch_place(options.scratch_dir, Path(plan.partition_dir))
    place.create()
    return place


def commit_clean(
    plan: CleanPlan,
    outputs: Sequence[GroupOutput],
    options: CleanOptions = DEFAULT_OPTIONS,
    *,
    stats: CleanStats | None = None,
    before_swap: Callable[[], None] | None = None,
) -> CleanResult:
    """Step 5: check every output, swap each in, in order, and advance the cleaner checkpoint.

    Args:
        plan: the round.
        outputs: one per group of ``plan.groups``, in order.
        options: ``dry_run`` (nothing is checked or changed), ``crash_hook``, and ``scratch_dir`` (the outputs
            are there, and each is brought in through ``disk.scratch``).
        stats: counters of the stages before (the offset map's), added to the result's.
        before_swap: called once every output passed its check, before the first swap (the clean
            keeps a pending ``--roll`` there: from here on the partition changes).

    Returns:
        The round's result (its ``stats`` sum ``stats`` and every output's).

    Raises:
        CleanerStateError: an output fails the self-check, does not match the plan's groups, or a
            source segment changed since the plan; every ``.cleaned`` file is removed, nothing changed.
        KcompactError: a swap or the checkpoint write failed (the message says what state it left).
    """
    result = CleanResult(plan.partition_dir, plan.topic, plan.partition, plan.now_ms, options.dry_run,
                         range=plan.range, end_offset=plan.end_offset,
                         checkpoint_before=plan.checkpoint_before, warnings=list(plan.warnings))
    if stats is not None:
        result.stats.add(stats)
    for out in outputs:
        result.stats.add(out.stats)
    result.stats.groups = len(plan.groups)
    if options.dry_run:
        return result
    partition = open_partition(plan.partition_dir)
    try:
        sources = _check_outputs(plan, partition, outputs)
        # Every output is complete and verified: only now does the partition change, one group at a time.
        if before_swap is not None:
            before_swap()
    except BaseException:
        for base in {group[0] for group in plan.groups} | {out.base_offset for out in outputs}:
            _remove_cleaned(plan, base, output_place(plan, options))
        _drop_if_empty(output_place(plan, options))
        raise
    output = output_place(plan, options)
    if output is None:
        for out, files in zip(outputs, sources, strict=True):
            replace_segments(_cleaned(plan, out), files, hook=options.crash_hook)
    else:
        result.scratch_actions += _bring_in_all(plan, outputs, sources, output, options)
    _drop_if_empty(output)
    write_checkpoint(partition, plan.end_offset)
    result.checkpoint_written = True
    return result


def _bring_in_all(plan: CleanPlan, outputs: Sequence[GroupOutput], sources: Sequence[Sequence[SegmentFiles]],
                  output: ScratchPlace, options: CleanOptions) -> list[str]:
    """Bring every group in from the scratch dir, in the order ``disk.scratch.next_group`` picks; what each did."""
    partition_dir = Path(plan.partition_dir)
    pending = list(range(len(outputs)))
    actions: list[str] = []
    while pending:
        choice = next_group([(_cleaned(plan, outputs[i], output.directory), sources[i]) for i in pending],
                            partition_dir)
        i = pending.pop(choice.position)
        try:
            how = bring_in(_cleaned(plan, outputs[i], output.directory), sources[i], partition_dir, output,
                           hook=options.crash_hook, why_evacuated=choice.why_evacuated)
        except BaseException:
            remove_outputs(plan, [outputs[j] for j in pending], output)  # groups not begun stay old
            _drop_if_empty(output)
            raise
        actions.append(f"{segment_file_name(outputs[i].base_offset, 'log')}: written in {output}, {how}")
    return actions


@frozen
class _Source:
    """A cleaned segment's source files, for the check's message."""

    files: SegmentFiles  # what check_cleaned_segment names in its message


def _check_outputs(
    plan: CleanPlan, partition: Partition, outputs: Sequence[GroupOutput]
) -> list[list[SegmentFiles]]:
    from kcompact.cleaner.round.verify_output import check_cleaned_segment

    found = [out.source_bases for out in outputs]
    if found != list(plan.groups):
        raise CleanerStateError(
            f"{plan.partition_dir}: outputs of the round's groups; expected {list(plan.groups)}, "
            f"found {found}"
        )
    by_base = {s.base_offset: s for s in partition.segments}
    sources = []
    for out in outputs:
        files = [_unchanged(plan, by_base, base) for base in out.source_bases]
        if not out.checked:
            check_cleaned_segment(_cleaned(plan, out), [_Source(f) for f in files],
                                  plan.first_uncleanable_offset)
        sources.append(files)
    return sources


def _unchanged(plan: CleanPlan, by_base: dict[int, SegmentFiles], base: int) -> SegmentFiles:
    seg, files = plan.segment(base), by_base.get(base)
    if files is None or (files.size_in_bytes, files.mtime_ns) != (seg.size_in_bytes, seg.mtime_ns):
        found = "no such segment" if files is None else f"{files.size_in_bytes} bytes"
        raise CleanerStateError(
            f"{seg.log_path}: the source segment changed while it was cleaned; expected "
            f"{seg.size_in_bytes} bytes as planned, found {found}; nothing was changed"
        )
    return files


def _cleaned(plan: CleanPlan, out: GroupOutput, directory: Path | None = None) -> CleanedSegment:
    return CleanedSegment(directory or Path(plan.partition_dir), out.base_offset, out.size_in_bytes,
                          {kind: Path(path) for kind, path in out.files})


def write_checkpoint(partition: Partition, offset: int) -> None:
    """Advance the partition's line of ``cleaner-offset-checkpoint`` to ``offset``.

    Raises:
        KcompactError: the file cannot be written (the cleaned segments stay, consistent).
    """
    path = partition.log_dir.cleaner_checkpoint
    try:
        update_offset_checkpoint(path, {partition.topic_partition: offset})
    except (OSError, RefusedError) as err:  # a refusal: its lock file could not be created
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise KcompactError(
            f"{path}: cannot advance the cleaner checkpoint to {offset} ({why}); the "
            "cleaned segments are in place and consistent, the checkpoint stays behind them, so the "
            "next clean repeats this round"
        ) from err

