"""``kcompact clean PATH``: one partition, or every compacted partition of a log dir in the cleaner's order.

Resolves each partition's configuration (``--config`` over Kafka's defaults; with no source for
``cleanup.policy``, ``compact`` is assumed and the report says so — retention deletes data, so it only runs
when a policy with ``delete`` comes from an explicit source), then calls :func:`clean_partition`. For a log
dir the partitions are cleaned in the order the broker's cleaner would pick them (highest dirty ratio first);
``only_eligible`` keeps just those the broker would clean now. One partition's failure is reported and does
not stop the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kcompact.cleaner.cleaner import CleanOptions, CleanResult, clean_partition
from kcompact.cleaner.log_state import load_log_state
from kcompact.cleaner.ranges import compute_cleanable_range
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import KcompactError
from kcompact.segment.partition import (
    METADATA_TOPIC,
    is_partition_dir,
    iter_partition_dirs,
    open_partition,
)

ASSUMED_COMPACT = (
    "cleanup.policy: no topic configuration found and none given with --config; "
    "assuming 'compact' (retention never runs without an explicit delete policy)"
)


@dataclass(slots=True)
class PartitionFailure:
    """A partition that could not be cleaned; it was left exactly as it was."""

    partition_dir: str
    error: str


@dataclass(slots=True)
class CleanRun:
    """The outcome of ``kcompact clean`` over one or more partitions."""

    results: list[CleanResult] = field(default_factory=list)
    failures: list[PartitionFailure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def resolve_config(cli_overrides: Mapping[str, str]) -> tuple[TopicConfig, list[str]]:
    """Kafka's defaults with the command line's overrides; the notes say what was assumed."""
    notes: list[str] = []
    overrides = dict(cli_overrides)
    if "cleanup.policy" not in overrides:
        overrides["cleanup.policy"] = "compact"
        notes.append(ASSUMED_COMPACT)
    return TopicConfig.defaults().with_overrides(overrides), notes


def clean_path(
    path: str | Path,
    *,
    cli_overrides: Mapping[str, str],
    options: CleanOptions,
    only_eligible: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> CleanRun:
    """Clean a partition directory, or every compacted partition of a log dir.

    Args:
        path: a partition directory or a log dir.
        cli_overrides: ``--config`` pairs (already validated).
        options: the clean options shared by every partition.
        only_eligible: for a log dir, clean only partitions the broker would clean now.
        progress: called as ``(partition name, bytes done, bytes total)``.

    Returns:
        The :class:`CleanRun`.

    Raises:
        KcompactError: a single partition failed (for a log dir, failures are collected instead).
    """
    config, notes = resolve_config(cli_overrides)
    run = CleanRun(notes=notes)
    target = Path(path)
    if is_partition_dir(target):
        run.results.append(clean_partition(target, config, options, _progress_for(target, progress)))
        return run
    if not target.is_dir():
        raise KcompactError(f"{target}: no such partition directory or log dir")
    ordered = _cleaner_order(target, config, options, only_eligible, run)
    for part_dir in ordered:
        try:
            run.results.append(
                clean_partition(part_dir, config, options, _progress_for(part_dir, progress))
            )
        except KcompactError as err:
            run.failures.append(PartitionFailure(str(part_dir), str(err)))
    return run


def _cleaner_order(
    log_dir: Path, config: TopicConfig, options: CleanOptions, only_eligible: bool, run: CleanRun
) -> list[Path]:
    """Partitions of a log dir, highest dirty ratio first, as the broker's cleaner picks them."""
    import time

    now_ms = options.now_ms if options.now_ms is not None else int(time.time() * 1000)
    ranked: list[tuple[float, str, Path]] = []
    for part_dir in iter_partition_dirs(log_dir):
        partition = open_partition(part_dir)
        if partition.topic == METADATA_TOPIC or partition.name.kind != "live":
            continue
        try:
            state = load_log_state(partition, config)
            rng = compute_cleanable_range(state.range_inputs(config, now_ms), from_start=options.from_start)
        except KcompactError as err:
            run.failures.append(PartitionFailure(str(part_dir), str(err)))
            continue
        if only_eligible and not rng.eligible:
            continue
        ranked.append((-rng.dirty_ratio, part_dir.name, part_dir))
    ranked.sort()
    return [p for _r, _n, p in ranked]


def _progress_for(
    part_dir: Path, progress: Callable[[str, int, int], None] | None
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
