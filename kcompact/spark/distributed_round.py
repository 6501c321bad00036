"""One cleaning round's offset map and filtering as Spark jobs: the tasks, and the two jobs that run them.

The serial round builds one :class:`~kcompact.log.offset_map.OffsetMap` over the dirty range and asks
it, record by record, "is this the latest offset of its key?". Here the map never exists in one process;
pass 2 only needs the *answers*, which are a set of offsets (``kcompact.log.offset_map.oracle``): the map's values
(the latest offset of every digest of the dirty range) plus the clean-section offsets whose digest is not
in the map. Spark computes that set, split by output group::

    job 1  scan task per segment ──(p, entries)──▶ shuffle by digest ──▶ digest task per p  (persisted)
           dirty: pass 1's puts (mapping.iter_dirty_keys); clean: segment_key_entries(section="clean")
           digest task: max offset per (hi, lo); clean entries whose digest has no dirty entry;
           out: (g, surviving offsets of group g) per group, and one summary (keys, records, errors)
    job 2  shuffle by group ──▶ group task per g: sort the offsets, SortedOffsetsOracle, write_group

Shuffle elements (pickled by PySpark; numpy arrays travel as their buffers):

* scan → digest: ``(p, Entries)`` with ``p = hi mod P`` for every entry, and ``(0, ScanNote)`` once per
  scan task (records scanned, or the ``KcompactError`` that stopped it);
* digest → group: ``(g, int64 offsets)`` with ``g`` the group of the segment each record is in, and
  ``(-1, MapSummary)`` once per digest task (collected by job 1, never shuffled again).

Why "max offset" is the map: offsets grow through the log, so the last put of a digest is its largest
offset. Why the anti-join is only a digest test: every clean-section offset is below every dirty one, so a
clean record is the latest for its key exactly when no dirty record shares its digest (clean duplicates
all survive, as the serial ``offset >= map.get(key) == -1`` keeps them).

Every task reads the partition directory at the driver's path, so executors must see it there (local
mode, or a shared file system). Group tasks catch ``KcompactError`` and return it: a job whose tasks
all finish leaves no writer running, so the driver can remove every ``.cleaned`` file without a race.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kcompact.cleaner.disk.swap import remove_cleaned
from kcompact.cleaner.round.mapping import iter_dirty_keys
from kcompact.cleaner.round.plan import CleanPlan
from kcompact.cleaner.round.stats import CleanStats
from kcompact.cleaner.round.steps import (
    GroupOutput,
    check_group_output,
    segment_key_entries,
    write_group,
)
from kcompact.errors import KcompactError
from kcompact.log.offset_map.oracle import SortedOffsetsOracle
from kcompact.spark.session import local_properties, refuse_speculation
from kcompact.value import frozen

if TYPE_CHECKING:
    from pyspark import RDD, Broadcast, SparkContext

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
GroupWriter = Callable[..., GroupOutput]

ENTRIES_PER_DIGEST_TASK = 4_000_000
"""Map entries one digest task aims at: 24 bytes each, ~3x that while sorting (~300 MB per task)."""
MAP_BYTES_PER_ENTRY = 24
"""What one distinct digest costs the distributed map: hi + lo + offset (``map_memory_bytes``)."""
SETTLE_TIMEOUT_S = 60.0  # how long a failed job's still-running tasks are waited for
_SUMMARY = -1  # key of the digest tasks' summaries in job 1's output


@frozen
class Entries:
    """Map entries of one slice of one segment, routed to one digest task."""

    dirty: bool  # pass 1's puts (True) or keyed clean-section records (False)
    group_index: int  # the output group of the segment they come from
    hi: U64
    lo: U64
    offsets: I64


@frozen
class ScanNote:
    """What one scan task reports besides its entries."""

    segment_base_offset: int
    records_scanned: int  # CleanStats.records_scanned of a dirty segment
    error: KcompactError | None


@frozen
class MapSummary:
    """One digest task's share of the map."""

    dirty_keys: int  # distinct digests of the dirty range (CleanStats.map_entries, summed)
    records_scanned: int
    errors: tuple[tuple[int, KcompactError], ...]  # (segment base offset, error) of failed scans


@frozen
class GroupResult:
    """One group task's outcome: its output, or the error that stopped it (its files removed)."""

    group_index: int
    output: GroupOutput | None
    error: KcompactError | None


# --- executor side ----------------------------------------------------------------------------


def scan_segment(
    plan_bc: Broadcast[CleanPlan], digest_tasks: int, task: tuple[bool, int]
) -> Iterator[tuple[int, Entries | ScanNote]]:
    """Scan task: one segment's map entries (``task = (dirty, base_offset)``), routed by digest."""
    plan = plan_bc.value
    dirty, base = task
    group = next(g for g, bases in enumerate(plan.groups) if base in bases)
    scanned = 0
    try:
        if dirty:
            for keys in iter_dirty_keys(plan, plan.segment(base)):
                scanned += int(keys.batch_scanned.sum())
                yield from _route(Entries(True, group, keys.hi, keys.lo, keys.offsets), digest_tasks)
        else:
            hi, lo, offsets = segment_key_entries(plan, base, section="clean")
            yield from _route(Entries(False, group, hi, lo, offsets), digest_tasks)
    except KcompactError as err:
        yield 0, ScanNote(base, scanned, err)
        return
    yield 0, ScanNote(base, scanned, None)


def _route(entries: Entries, digest_tasks: int) -> Iterator[tuple[int, Entries]]:
    if len(entries.offsets) == 0:
        return
    task_of = (entries.hi % np.uint64(digest_tasks)).astype(np.intp)
    order = np.argsort(task_of, kind="stable")
    bounds = np.searchsorted(task_of[order], np.arange(digest_tasks + 1))
    for p in range(digest_tasks):
        at = order[bounds[p] : bounds[p + 1]]
        if len(at):
            yield p, Entries(entries.dirty, entries.group_index, entries.hi[at], entries.lo[at],
                             entries.offsets[at])


def latest_by_digest(
    plan_bc: Broadcast[CleanPlan], items: Iterable[tuple[int, Entries | ScanNote]]
) -> Iterator[tuple[int, I64 | MapSummary]]:
    """Digest task: the surviving offsets of one digest partition, split by output group."""
    groups = len(plan_bc.value.groups)
    entries: list[Entries] = []
    notes: list[ScanNote] = []
    for _p, item in items:
        if isinstance(item, ScanNote):
            notes.append(item)
        else:
            entries.append(item)
    errors = tuple((n.segment_base_offset, n.error) for n in notes if n.error is not None)
    scanned = sum(n.records_scanned for n in notes)
    if errors:  # the round fails: no need to finish the map
        yield _SUMMARY, MapSummary(0, scanned, errors)
        return
    survivors, group_of, dirty_keys = surviving_offsets(entries)
    order = np.argsort(group_of, kind="stable")
    bounds = np.searchsorted(group_of[order], np.arange(groups + 1))
    for g in range(groups):
        if bounds[g + 1] > bounds[g]:
            yield g, survivors[order[bounds[g] : bounds[g + 1]]]
    yield _SUMMARY, MapSummary(dirty_keys, scanned, ())


def surviving_offsets(entries: Sequence[Entries]) -> tuple[I64, npt.NDArray[np.int32], int]:
    """The offsets that survive among these entries (see the module docstring), with their groups and
    the number of distinct dirty digests.

    Args:
        entries: pass 1's puts (``dirty``) and keyed clean-section records, in any order; every clean
            offset is below every dirty one.

    Returns:
        ``(offsets, group_indexes, dirty_keys)``: the max offset of every dirty digest and every clean
        offset whose digest has no dirty entry (unsorted), each with the group of its segment.
    """
    if not entries:
        return np.empty(0, np.int64), np.empty(0, np.int32), 0
    hi = np.concatenate([e.hi for e in entries])
    lo = np.concatenate([e.lo for e in entries])
    offsets = np.concatenate([e.offsets for e in entries])
    sizes = [len(e.offsets) for e in entries]
    groups = np.repeat(np.array([e.group_index for e in entries], dtype=np.int32), sizes)
    dirty = np.repeat(np.array([e.dirty for e in entries], dtype=bool), sizes)
    order = _digest_order(hi, lo)
    h, low, off = hi[order], lo[order], offsets[order]
    new_run = np.empty(len(h), dtype=bool)
    new_run[:1] = True
    new_run[1:] = (h[1:] != h[:-1]) | (low[1:] != low[:-1])
    starts = np.flatnonzero(new_run)
    lengths = np.diff(np.append(starts, len(h)))
    run_has_dirty = np.logical_or.reduceat(dirty[order], starts)
    # A dirty run's survivor is its largest offset (offsets are unique, clean ones smaller); a run
    # without dirty entries keeps every one of its clean offsets.
    run_max = np.repeat(np.maximum.reduceat(off, starts), lengths)
    has_dirty = np.repeat(run_has_dirty, lengths)
    keep = np.where(has_dirty, off == run_max, True)
    return off[keep], groups[order][keep], int(run_has_dirty.sum())


def _digest_order(hi: U64, lo: U64) -> npt.NDArray[np.intp]:
    """An order putting equal digests next to each other: by ``hi``, by ``(hi, lo)`` if keys share it."""
    order = np.argsort(hi)
    h = hi[order]
    same_hi = h[1:] == h[:-1]
    if same_hi.any() and (lo[order][1:][same_hi] != lo[order][:-1][same_hi]).any():
        return np.lexsort((lo, hi))
    return order


def write_group_task(
    plan_bc: Broadcast[CleanPlan],
    dry_run: bool,
    writer: GroupWriter,
    group_index: int,
    items: Iterable[tuple[int, I64]],
) -> Iterator[GroupResult]:
    """Group task: the group's surviving offsets, sorted, answer pass 2 for ``write_group``."""
    plan = plan_bc.value
    parts = [offsets for _g, offsets in items]
    latest = np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)
    try:
        oracle = SortedOffsetsOracle(latest, plan.map_latest_offset)
        output = writer(plan, group_index, oracle, dry_run=dry_run)
        # the self-check here, where the output was just written: the driver's commit reads none of it
        yield GroupResult(group_index, output if dry_run else check_group_output(plan, output), None)
    except KcompactError as err:  # write_group removed its own files; a failed check's are removed by the driver
        yield GroupResult(group_index, None, err)


def _identity(key: int) -> int:
    return key


def _is_summary(item: tuple[int, object]) -> bool:
    return item[0] == _SUMMARY


def _is_group(item: tuple[int, object]) -> bool:
    return item[0] != _SUMMARY


# --- driver side ------------------------------------------------------------------------------


def run_round(
    sc: SparkContext, plan: CleanPlan, *, dry_run: bool, entries_hint: int
) -> tuple[list[GroupOutput], CleanStats]:
    """Build the distributed map and write every group (the ``.cleaned`` files; nothing swapped).

    Args:
        sc: the SparkContext.
        plan: the round (unbounded map).
        dry_run: write nothing, count only.
        entries_hint: an upper bound of the dirty range's records (sizes the digest shuffle).

    Returns:
        One output per group, in order, and the map's counters (records scanned, keys, bytes).

    Raises:
        KcompactError: a scan or a group failed (the first, in log order); no ``.cleaned`` file is left.
        RefusedError: ``spark.speculation`` is on (two attempts would write one ``.cleaned`` file).
    """
    refuse_speculation(sc, str(plan.partition_dir),
                       "two attempts of a group task would write the same .cleaned file")
    plan_bc = sc.broadcast(plan)
    job_group = f"kcompact-distributed-map-{time.monotonic_ns()}"
    previous = _set_job_group(sc, job_group, f"kcompact distributed map of {plan.partition_dir}")
    by_group: RDD[Any] | None = None
    try:
        by_group, stats = _map_job(sc, plan, plan_bc, entries_hint)
        return _group_job(sc, plan, plan_bc, by_group, dry_run, job_group), stats
    finally:
        if by_group is not None:
            by_group.unpersist()
        _restore_job_group(sc, previous)
        plan_bc.destroy()


def _map_job(
    sc: SparkContext, plan: CleanPlan, plan_bc: Broadcast[CleanPlan], entries_hint: int
) -> tuple[RDD[Any], CleanStats]:
    from pyspark import StorageLevel

    digest_tasks = max(sc.defaultParallelism, -(-entries_hint // ENTRIES_PER_DIGEST_TASK))
    first_dirty = plan.first_dirty_offset
    tasks = [(True, base) for base in plan.dirty_segments]
    tasks += [(False, s.base_offset) for s in plan.segments if s.base_offset < first_dirty]
    scanned = sc.parallelize(tasks, max(1, len(tasks))).flatMap(
        partial(scan_segment, plan_bc, digest_tasks)
    )
    by_group = scanned.partitionBy(digest_tasks, _identity).mapPartitions(
        partial(latest_by_digest, plan_bc)
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        summaries = [s for s in by_group.filter(_is_summary).values().collect() if isinstance(s, MapSummary)]
    except BaseException:
        by_group.unpersist()
        raise
    errors = sorted((e for s in summaries for e in s.errors), key=lambda e: e[0])
    if errors:
        by_group.unpersist()
        raise errors[0][1]
    stats = CleanStats()
    stats.records_scanned = sum(s.records_scanned for s in summaries)
    stats.map_entries = sum(s.dirty_keys for s in summaries)
    stats.map_memory_bytes = stats.map_entries * MAP_BYTES_PER_ENTRY
    return by_group, stats


def _group_job(
    sc: SparkContext,
    plan: CleanPlan,
    plan_bc: Broadcast[CleanPlan],
    by_group: RDD[Any],
    dry_run: bool,
    job_group: str,
) -> list[GroupOutput]:
    writer = write_group  # read here, on the driver, so a test's stand-in is what tasks receive
    groups = len(plan.groups)
    try:
        results: list[GroupResult] = by_group.filter(_is_group).partitionBy(
            groups, _identity
        ).mapPartitionsWithIndex(partial(write_group_task, plan_bc, dry_run, writer)).collect()
    except BaseException:
        with contextlib.suppress(Exception):  # a JVM that is gone runs no task any more (and cancels none)
            _wait_for_tasks(sc, job_group)
        _remove_all_cleaned(plan)
        raise
    results.sort(key=lambda r: r.group_index)
    failed = [r.error for r in results if r.error is not None]
    if failed or len(results) != groups:
        _remove_all_cleaned(plan)
        if failed:
            raise failed[0]
        raise KcompactError(
            f"{plan.partition_dir}: results of the group tasks; expected {groups}, found {len(results)}"
        )
    return [r.output for r in results if r.output is not None]


def _remove_all_cleaned(plan: CleanPlan) -> None:
    for group in plan.groups:
        remove_cleaned(Path(plan.partition_dir), group[0])


def _wait_for_tasks(sc: SparkContext, job_group: str) -> None:
    """Cancel the job group and wait until none of its tasks still runs (a task killed by a failed
    job may still be writing its ``.cleaned`` file for a moment)."""
    sc.cancelJobGroup(job_group)
    tracker = sc.statusTracker()
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        stages = [
            stage
            for job_id in tracker.getJobIdsForGroup(job_group)
            if (job := tracker.getJobInfo(job_id)) is not None
            for stage in job.stageIds
        ]
        infos = [tracker.getStageInfo(stage) for stage in stages]
        if all(info is None or info.numActiveTasks == 0 for info in infos):
            return
        time.sleep(0.1)


_JOB_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def _set_job_group(sc: SparkContext, group: str, description: str) -> tuple[str | None, ...]:
    previous = tuple(sc.getLocalProperty(key) for key in _JOB_GROUP_PROPERTIES)
    sc.setJobGroup(group, description, interruptOnCancel=True)
    return previous


def _restore_job_group(sc: SparkContext, previous: tuple[str | None, ...]) -> None:
    for key, value in zip(_JOB_GROUP_PROPERTIES, previous, strict=True):
        local_properties(sc).setLocalProperty(key, value)  # None removes the property
