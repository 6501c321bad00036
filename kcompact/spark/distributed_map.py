"""Cleaning a partition whose offset map does not fit one process: the map as a Spark shuffle.

``kcompact clean`` holds the whole offset map of a round in memory: 15-16 bytes per distinct key of the
dirty range (``cleaner/offset_map``) plus its build's temporaries, a few GB at a few hundred million keys.
A partition over ``--map-budget`` is cleaned here instead: by ``clean_partition`` itself, with its
passes 1 and 2 swapped for Spark jobs (its ``round_runner`` seam), so the rest of the round is the
serial clean's own code:

1. **Driver** (``clean_partition``): the locks (``log_dir_write_guard`` + ``partition_lock``), an
   interrupted swap settled (``recover_interrupted_swaps``), ``--roll`` and the log-start retention
   planned (both made final with the round's first change), then the plan (``build_plan``: ranges,
   groups, transaction seeds).
2. **Executors** (``distributed_round.py``): one task per segment scans its map entries; Spark shuffles
   them by digest and keeps the latest offset per digest, plus the clean-section records no dirty key
   supersedes; one task per output group writes its ``.cleaned`` segment against those offsets and
   runs its self-check (``steps.check_group_output``), so the driver reads no cleaned byte.
3. **Driver** (``clean_partition``): ``commit_clean`` — the sources unchanged since the plan, Kafka's
   crash-safe swap, the checkpoint — and the retention after the round. A failure before the swap removes every
   ``.cleaned`` file and undoes the roll: the partition keeps its bytes.

The output is byte for byte the serial clean's with an unbounded map (tests/spark/test_distributed_map.py):
both answer pass 2 from the same set of surviving offsets (``kcompact.log.offset_map.oracle``).

What the driver holds: the plan, one ``GroupOutput`` per group and the counters; never a key or a digest.
The executors must see the partition directory at the driver's path (local mode or a shared file system).

Differences from ``clean_partition``: a bounded map (``--dedupe-buffer-size``) is refused (where a
broker's bounded map stops is a property of the serial walk; a bounded map never needs this path anyway,
see :func:`needs_distributed_map`); leftovers of an interrupted clean are settled without the serial
clean's rehearsal on a staged copy (that rehearsal is a serial dry run, the very map that does not fit),
so a round that then fails leaves the settled partition — what a broker's loader makes of it — rather
than the leftovers; a dry run with ``--roll`` does not preview the roll (the staged copy's rehearsal is
that serial dry run too); and no progress callback (Spark shows its own).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.cleaner.round.options import DEFAULT_OPTIONS, CleanOptions, CleanResult, Progress
from kcompact.cleaner.round.plan import CleanPlan
from kcompact.cleaner.round.steps import RoundOutput
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import ConfigError
from kcompact.log.offset_map import KAFKA_BYTES_PER_ENTRY, OffsetMap, thread_buffer
from kcompact.segment.log_file import LogFile
from kcompact.segment.partition import Partition, SegmentFiles, open_partition
from kcompact.spark.distributed_round import run_round

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MAP_BYTES_PER_KEY", "clean_partition_distributed", "dirty_records_upper_bound",
           "needs_distributed_map"]

MAP_BYTES_PER_KEY = KAFKA_BYTES_PER_ENTRY
"""Bytes a key costs the local map, for the budget: Kafka's 24-byte slot (16-byte digest + 8-byte
offset), also ``--dedupe-buffer-size``'s unit; kcompact's own map needs less (cleaner/offset_map), its build
temporaries more: the budget is a bound on the map, not a measurement of it."""


def needs_distributed_map(
    partition_dir: str | Path, config: TopicConfig, options: CleanOptions, map_budget_bytes: int
) -> bool:
    """Whether the local offset map of this partition's next round could exceed ``map_budget_bytes``.

    A cheap upper bound: the records of the segments the round may clean (from the first dirty offset
    to the active segment, or the log end with ``roll``), counted from batch headers — every distinct key
    is at least one record — times :data:`MAP_BYTES_PER_KEY`. The offsets span is tried first, which
    reads no file; a bounded map (``dedupe_buffer_size``) counts at most its capacity.

    Args:
        partition_dir: the partition directory.
        config: its configuration (a topic without ``compact`` never needs a map).
        options: ``from_start``, ``roll`` and ``dedupe_buffer_size`` are used.
        map_budget_bytes: the budget (``--map-budget``).

    Returns:
        True when the partition should be cleaned by :func:`clean_partition_distributed`.

    Raises:
        KcompactError: the directory is not a partition; CorruptDataError: a header does not parse.
    """
    if not config.is_compacted:
        return False
    partition = open_partition(partition_dir)
    if partition.is_metadata_log or not partition.segments:
        return False
    start, end = _candidate_range(partition, options)
    if (end - start) * MAP_BYTES_PER_KEY <= map_budget_bytes:
        return False  # each record has its own offset: the span bounds the records
    keys = dirty_records_upper_bound(partition, options)
    if options.dedupe_buffer_size is not None:
        share = thread_buffer(options.dedupe_buffer_size, config.cleaner_threads)
        capacity = OffsetMap.for_dedupe_buffer(share, config.dedupe_load_factor)
        keys = min(keys, capacity.max_entries or keys)
    return keys * MAP_BYTES_PER_KEY > map_budget_bytes


def dirty_records_upper_bound(partition: Partition, options: CleanOptions = DEFAULT_OPTIONS) -> int:
    """Records (from batch headers) at or after the first dirty offset, below the active segment.

    Args:
        partition: the opened partition.
        options: ``from_start`` (count from the log start) and ``roll`` (count the active segment too).

    Returns:
        An upper bound of the keys the round's offset map can hold.
    """
    start, end = _candidate_range(partition, options)
    segments = partition.segments if options.roll else partition.segments[:-1]
    uppers = [s.base_offset for s in segments[1:]] + [end]
    return sum(_records_upper_bound(s, start, end) for s, upper in zip(segments, uppers, strict=True) if upper > start)


def _candidate_range(partition: Partition, options: CleanOptions) -> tuple[int, int]:
    """[first dirty offset, end of the last segment a round may clean): ``LogCleanerManager.cleanableOffsets``
    without the first uncleanable offset's caps."""
    log_start = partition.log_start_offset()
    log_end = partition.log_end_offset()
    active = partition.segments[-1]
    end = log_end if options.roll else active.base_offset
    checkpoint = partition.checkpointed(partition.log_dir.cleaner_checkpoint)
    if options.from_start or checkpoint is None or not log_start <= checkpoint <= log_end:
        return log_start, end
    return checkpoint, end


def _records_upper_bound(seg: SegmentFiles, start: int, end: int) -> int:
    """Records of ``seg`` in ``[start, end)`` from headers: a v2 batch's count; a legacy entry its offset
    step (a compressed wrapper holds at most the offsets since the previous entry)."""
    count, previous = 0, start - 1
    with LogFile(seg.log_path) as log:
        for batch in log.iter_batches():
            last = batch.last_offset
            if last >= start and batch.magic >= 2:
                if batch.base_offset >= end:
                    break
                count += batch.records_count
            elif last >= start:
                if previous >= end - 1:
                    break
                count += last - max(previous, start - 1)
            previous = max(previous, last)
    return count


def _plan_records(plan: CleanPlan) -> int:
    """Records of every segment of the round: both shuffled sections (sizes the digest tasks)."""
    return sum(
        _records_upper_bound(files, seg.base_offset, plan.first_uncleanable_offset)
        for seg in plan.segments
        for files in [SegmentFiles(seg.base_offset, Path(seg.log_path), seg.size_in_bytes,
                                   seg.mtime_ns, None, None, None)]
    )


def clean_partition_distributed(
    spark: SparkSession,
    partition_dir: str | Path,
    config: TopicConfig,
    options: CleanOptions = DEFAULT_OPTIONS,
) -> CleanResult:
    """Clean one partition as ``clean_partition`` does, with the offset map built and used by Spark.

    Args:
        spark: the session (its executors must see ``partition_dir`` at the same path).
        partition_dir: the partition directory.
        config: the topic's effective configuration.
        options: as for ``clean_partition``; ``dedupe_buffer_size`` must be None.

    Returns:
        The :class:`CleanResult`, as the serial clean's (``map_memory_bytes``: the map's entries across
        executors, :data:`MAP_BYTES_PER_KEY` each).

    Raises:
        ConfigError: a bounded map was asked for.
        RefusedError: a broker or another kcompact holds the partition, it may not be cleaned offline,
            or ``spark.speculation`` is on.
        CorruptDataError: the data does not parse (no ``.cleaned`` file is left; nothing swapped).
    """
    if options.dedupe_buffer_size is not None:
        raise ConfigError(
            "--dedupe-buffer-size with the distributed offset map; expected none (where a bounded map "
            f"stops is found by the serial walk only: clean this partition without --map-budget), "
            f"found {options.dedupe_buffer_size}"
        )
    return clean_partition(partition_dir, config, options, round_runner=partial(_run_on_spark, spark))


def _run_on_spark(
    spark: SparkSession, plan: CleanPlan, options: CleanOptions, _progress: Progress | None
) -> RoundOutput:
    """The :data:`~kcompact.cleaner.round.partition_round.RoundRunner` of this module: passes 1 and 2 as Spark jobs."""
    outputs, map_stats = run_round(
        spark.sparkContext, plan, dry_run=options.dry_run, entries_hint=_plan_records(plan)
    )
    return RoundOutput(plan, outputs, map_stats)
