"""``kcompact clean PATH``: one partition, or every compacted partition of a log dir in the cleaner's order.

Resolves each partition's own configuration with :func:`kcompact.config.effective.partition_config`
(``--config`` > topic override > dynamic broker config > cluster default > server.properties > Kafka's
default; with no explicit source for ``cleanup.policy``, ``compact`` is assumed and the report says so),
then calls :func:`clean_partition`. A partition whose policy has no ``compact`` is refused (a partition
dir) or skipped with a note (a log dir): the broker's cleaner never compacts it. For a log dir the
partitions are cleaned in the order the broker's cleaner would pick them (highest dirty ratio first);
``only_eligible`` keeps just those the broker would clean now. One partition's failure is reported and
does not stop the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from kcompact.cleaner.cleaner import CleanOptions, CleanResult, clean_partition
from kcompact.cleaner.log_state import load_log_state
from kcompact.cleaner.ranges import compute_cleanable_range
from kcompact.config.effective import EffectiveConfig, describe_source, partition_config
from kcompact.config.topic_config import TopicConfig, format_value
from kcompact.errors import KcompactError, RefusedError
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
    """Kafka's defaults with the command line's overrides only (no partition's files are read)."""
    notes: list[str] = []
    overrides = dict(cli_overrides)
    if "cleanup.policy" not in overrides:
        overrides["cleanup.policy"] = "compact"
        notes.append(ASSUMED_COMPACT)
    return TopicConfig.defaults().with_overrides(overrides), notes


@dataclass(frozen=True, slots=True)
class ConfigSources:
    """Where each partition's configuration comes from (see ``partition_config``)."""

    cli_overrides: Mapping[str, str]
    server_properties: str | Path | None = None
    metadata_dir: str | Path | None = None

    def for_partition(self, part_dir: Path) -> EffectiveConfig:
        return partition_config(part_dir, cli_overrides=self.cli_overrides,
                                server_properties=self.server_properties, metadata_dir=self.metadata_dir)


def retention_allowed(effective: EffectiveConfig) -> bool:
    """Retention deletes data: it runs only when a policy with ``delete`` comes from an explicit source."""
    policy = effective.value("cleanup.policy")
    return effective.config.has_delete and policy.source not in ("default", "assumed")


def not_compacted(effective: EffectiveConfig) -> str | None:
    """Why neither compaction nor retention would touch this partition (None when one would)."""
    if effective.config.is_compacted or retention_allowed(effective):
        return None
    policy = effective.value("cleanup.policy")
    return (f"cleanup.policy={format_value(policy.value)} ({describe_source(policy)}); the broker's cleaner "
            f"never compacts it (give --config cleanup.policy=compact to clean it anyway)")


def merge_notes(per_partition: Mapping[str, list[str]]) -> list[str]:
    """Each distinct note once, prefixed by the partitions it concerns unless it concerns them all."""
    owners: dict[str, list[str]] = {}
    for name, notes in per_partition.items():
        for note in notes:
            owners.setdefault(note, []).append(name)
    return [note if len(names) == len(per_partition) else f"{', '.join(names)}: {note}"
            for note, names in owners.items()]


def clean_path(
    path: str | Path,
    *,
    cli_overrides: Mapping[str, str],
    options: CleanOptions,
    only_eligible: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    server_properties: str | Path | None = None,
    metadata_dir: str | Path | None = None,
) -> CleanRun:
    """Clean a partition directory, or every compacted partition of a log dir.

    Args:
        path: a partition directory or a log dir.
        cli_overrides: ``--config`` pairs (already validated).
        options: the clean options shared by every partition.
        only_eligible: for a log dir, clean only partitions the broker would clean now.
        progress: called as ``(partition name, bytes done, bytes total)``.
        server_properties: the broker's server.properties (default: ``$KCOMPACT_SERVER_PROPERTIES``).
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0`` (default: as
            ``partition_config`` finds it).

    Returns:
        The :class:`CleanRun`; its notes say which configs were unknown or assumed.

    Raises:
        KcompactError: a single partition failed or is not compacted (for a log dir, failures are
            collected and non-compacted partitions skipped with a note instead).
    """
    sources = ConfigSources(cli_overrides, server_properties, metadata_dir)
    run = CleanRun()
    target = Path(path)
    if is_partition_dir(target):
        if open_partition(target).is_metadata_log:
            raise RefusedError(f"{target}: __cluster_metadata is KRaft's own log; no cleaner touches it")
        effective = sources.for_partition(target)
        run.notes.extend(effective.notes)
        why = not_compacted(effective)
        if why is not None:
            raise RefusedError(f"{target}: {why}")
        own = replace(options, apply_retention=retention_allowed(effective))
        run.results.append(clean_partition(target, effective.config, own, _progress_for(target, progress)))
        return run
    if not target.is_dir():
        raise KcompactError(f"{target}: no such partition directory or log dir")
    ordered = _cleaner_order(target, sources, options, only_eligible, run)
    for part_dir, config, with_retention in ordered:
        try:
            own = replace(options, apply_retention=with_retention)
            run.results.append(
                clean_partition(part_dir, config, own, _progress_for(part_dir, progress))
            )
        except KcompactError as err:
            run.failures.append(PartitionFailure(str(part_dir), str(err)))
    return run


def _cleaner_order(
    log_dir: Path, sources: ConfigSources, options: CleanOptions, only_eligible: bool, run: CleanRun
) -> list[tuple[Path, TopicConfig, bool]]:
    """Partitions of a log dir, highest dirty ratio first, as the broker's cleaner picks them."""
    import time

    now_ms = options.now_ms if options.now_ms is not None else int(time.time() * 1000)
    ranked: list[tuple[float, str, Path, TopicConfig, bool]] = []
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
            config = effective.config
            state = load_log_state(partition, config)
            rng = compute_cleanable_range(state.range_inputs(config, now_ms), from_start=options.from_start)
        except KcompactError as err:
            run.failures.append(PartitionFailure(str(part_dir), str(err)))
            continue
        if only_eligible and not rng.eligible:
            continue
        ranked.append((-rng.dirty_ratio, part_dir.name, part_dir, config, retention_allowed(effective)))
    run.notes.extend(merge_notes(notes))
    ranked.sort(key=lambda item: item[:2])
    return [(p, c, r) for _r, _n, p, c, r in ranked]


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
