"""``inspect dirty-ratio``: per partition, the numbers the broker's cleaner computes, and what blocks it.

Reads sizes, checkpoints, index tails and batch headers (through ``cleaner.log_state``), then applies the
one implementation of Kafka's range rules (``cleaner.ranges``), so ``clean`` and this report can never
disagree. Field names of :class:`DirtyRatioRow` are part of the ``--json`` interface
(tests/inspect/test_dirty_ratio.py fixes them).

It also checks the CRC of every batch of the dirty section (``dirty_bytes``: what the next clean's offset
map reads, and what arrived since the last clean), since ``clean`` refuses a partition with a batch that
fails its CRC: such a row counts them (``corrupt_batches``) and gets ``error``, keeping its numbers. The
clean section is not read (that would read every log in full; ``inspect keys``, ``clean`` and ``repair``
do), so the report stays about the cost of reading the dirty data once.

A log dir's checkpoint files hold one line per partition, so reading them once per partition makes a report
over a log dir quadratic (10 000 partitions: 30 000 parses of 10 000-line files, about 15 minutes). Each
checkpoint file and the broker lock are therefore read once per log dir and report
(:class:`_LogDirPartition`); ``python scripts/bench_inspect.py`` measures the whole report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field, fields
from pathlib import Path
from typing import Any

from kcompact.clock import run_clock_ms
from kcompact.config.effective import EffectiveConfig
from kcompact.config.sources import ConfigSources
from kcompact.errors import KcompactError
from kcompact.inspect.context import CrcTally
from kcompact.inspect.dry_clean import dry_clean, unsupported_reason
from kcompact.log.rules.high_watermark import SoleReplica, sole_replica_of
from kcompact.log.rules.ranges import (
    RULE_CLEANUP_POLICY,
    RULE_OPEN_TRANSACTION,
    CleanableRange,
    cleaner_order,
    compute_cleanable_range,
)
from kcompact.log.state.cleaner_throws import round_end_hazard, round_walk_problems
from kcompact.log.state.log_state import LogState, load_log_state
from kcompact.segment.checkpoint import read_offset_checkpoint
from kcompact.segment.lock import broker_holds_lock, explain_vanished
from kcompact.segment.log_dir_check import check_log_dir_checkpoints
from kcompact.segment.log_reads import LogReads
from kcompact.segment.names import parse_partition_dir_name
from kcompact.segment.partition import (
    METADATA_TOPIC,
    Partition,
    is_partition_dir,
    named_path,
    open_partition,
)
from kcompact.segment.partition_filter import PartitionFilter, require_partition_dirs
from kcompact.segment.progress import ProgressCallback
from kcompact.text import plural
from kcompact.value import frozen, mutable

RULE_TIERED_STORAGE = "tiered-storage"
TRANSACTIONS_POINTER = (
    "`kcompact inspect transactions` shows its producer's state, whether it hangs, and the line "
    "that aborts it"
)
LIVE_BROKER_WARNING = "a running broker holds this log dir: the active segment may be moving"

RULE_POLICY_UNKNOWN = "cleanup-policy-unknown"
"""A row's ``blocking_rule`` where ``cleanup.policy`` is unknown (``cleanup_policy``: ``"unknown"``): Kafka's
default stands in for topic overrides that could not be read, so whether the broker's cleaner compacts the
topic is not known (``--config cleanup.policy=...`` makes it known)."""
POLICY_UNKNOWN = "unknown"

ADVICE = {
    "active-segment": (
        "the data waits in the active segment: lower segment.ms (or max.compaction.lag.ms, which also "
        "rolls compacted topics) so the broker rolls it; offline, `kcompact clean --roll`"
    ),
    "high-watermark": "records above the high watermark are not replicated yet; nothing to change offline",
    "open-transaction": (
        "an open transaction holds the last stable offset; the producer must commit or abort "
        "(or the transaction coordinator times it out); `kcompact inspect transactions PATH` says "
        "whether it hangs and prints the kafka-transactions.sh line that aborts it"
    ),
    "min-compaction-lag": "recent segments are inside min.compaction.lag.ms; they become cleanable as they age",
    "below-dirty-ratio": (
        "the dirty ratio is at or below min.cleanable.dirty.ratio; prefer max.compaction.lag.ms to force a "
        "clean by age over lowering the ratio (a low ratio makes busy topics clean far too often)"
    ),
    "checkpoint-reset": "cleaner-offset-checkpoint points outside the log; the broker resets it to the log start",
    "cleanup-policy": "the topic is not compacted (cleanup.policy has no 'compact'); the cleaner skips it",
    RULE_POLICY_UNKNOWN: (
        "cleanup.policy is unknown (the topic's overrides could not be read): a broker uses Kafka's default "
        "'delete' unless the topic overrides it; if the topic is compacted, give --config "
        "cleanup.policy=compact (`kcompact clean` of a log dir also takes --assume-compact)"
    ),
    "tiered-storage": "remote.storage.enable=true: Kafka does not compact a tiered-storage topic, and kcompact "
                      "does not clean one",
}


def holds_no_records(error: str | None, log_start_offset: int | None, log_end_offset: int | None,
                     eligible: bool) -> bool:
    """Whether a dirty-ratio row is an empty partition read without error: its log end is its log start, so
    nothing is to clean (whatever rule a range of no bytes reports). Every report counts these apart from
    blocked ones, from a row in memory or one read back from Parquet."""
    return error is None and log_end_offset is not None and log_end_offset == log_start_offset and not eligible


@mutable
class DirtyRatioRow:
    """One partition's row (the ``--json`` object)."""

    topic: str
    partition: int
    partition_dir: str
    cleanup_policy: str
    # the metadata offset ``cleanup_policy`` is last known at (an incomplete metadata history); None: current
    cleanup_policy_last_known_at: int | None = None
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    high_watermark: int | None = None
    high_watermark_source: str | None = None
    high_watermark_note: str | None = None  # why it is the log end, not the checkpoint's (as clean says it)
    last_stable_offset: int | None = None
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    clean_bytes: int = 0
    dirty_bytes: int = 0
    dirty_ratio: float = 0.0
    min_cleanable_dirty_ratio: float = 0.5
    eligible: bool = False
    must_clean: bool = False
    max_compaction_delay_ms: int = 0
    blocking_rule: str | None = None
    blocking_detail: str | None = None
    cleaner_rank: int | None = None
    corrupt_batches: int = 0  # batches of the dirty section that fail their CRC (``error`` names the first)
    cleaner_fails: str | None = None  # why Kafka's own cleaner throws on this partition (legacy entries)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    # with ``space``: what its clean needs free at its peak and gives back (``cleaner.disk.space``), measured
    # by the clean's own dry run; and the volume's free space then
    space_peak_bytes: int | None = None
    space_gives_back_bytes: int | None = None
    free_bytes: int | None = None

    @property
    def holds_no_records(self) -> bool:
        """An empty partition, read without error: its log end is its log start, so nothing is to clean
        (whatever rule a range of no bytes reports); every report counts these apart from blocked ones."""
        return holds_no_records(self.error, self.log_start_offset, self.log_end_offset, self.eligible)

    def as_dict(self) -> dict[str, Any]:
        """The row as ``dataclasses.asdict`` gives it (field order kept, ``warnings`` a copy), without its
        recursive deep copy: ``--json`` of 10 000 rows spent more in it than in encoding them."""
        row = {name: getattr(self, name) for name in _ROW_FIELD_NAMES}
        row["warnings"] = list(self.warnings)
        return row


_ROW_FIELD_NAMES = tuple(f.name for f in fields(DirtyRatioRow))


def dirty_ratio_report(
    paths: Iterable[str | Path],
    *,
    cli_overrides: Mapping[str, str],
    now_ms: int | None = None,
    server_properties: str | Path | None = None,
    metadata_dir: str | Path | None = None,
    progress: ProgressCallback | None = None,
    selection: PartitionFilter | None = None,
    space: bool = False,
    sole_replica: bool = False,
) -> list[DirtyRatioRow]:
    """Rows for every partition under ``paths`` (log dirs or partition dirs), in the cleaner's pick order.

    Args:
        paths: log dirs and/or partition directories.
        cli_overrides: ``--config`` pairs.
        now_ms: the clock (default: now).
        server_properties: the broker's server.properties (default: ``$KCOMPACT_SERVER_PROPERTIES``).
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0`` (default: as
            ``kcompact.config.effective.partition_config`` finds it).
        progress: told ``("partitions", partitions read, partitions in all)`` after each partition
            (a count, not bytes: each partition costs its headers and its dirty section's CRCs).
        selection: the partitions to report on (``--topic``, ``--exclude-topic``, ``--partition``);
            None: all. The others are not opened.
        space: also measure the space each compacted partition's clean needs and gives back, by running
            the clean's dry run (which reads every segment the clean would: the whole log, not just the
            dirty section).
        sole_replica: ``--sole-replica``, as ``clean`` takes it: a partition whose only replica is this broker
            (the KRaft metadata says so, or this flag where it says nothing) has its log end as its high
            watermark (``log.rules.high_watermark.sole_replica_of``).

    Returns:
        One row per partition: ranked eligible ones first (rank 1 = the broker's next pick), then the
        others by name. A partition whose files or configuration do not parse gets a row with ``error`` set.

    Raises:
        KcompactError: a path is neither a log dir nor a partition directory, or a log dir's checkpoint
            file does not parse (once for the log dir, not in each of its partitions' rows).
    """
    now = run_clock_ms(now_ms)
    sources = ConfigSources(cli_overrides, server_properties, metadata_dir, sole_replica=sole_replica)
    rows: list[DirtyRatioRow] = []
    ranges: list[tuple[str, CleanableRange]] = []
    log_dirs: dict[Path, _LogDirFacts] = {}
    found = partition_dirs(paths, selection)
    for done, part_dir in enumerate(found, start=1):
        if progress is not None and done > 1:
            progress("partitions", done - 1, len(found))
        facts = log_dirs.get(part_dir.parent)
        if facts is None:
            check_log_dir_checkpoints(part_dir.parent)
            facts = log_dirs[part_dir.parent] = _LogDirFacts.read(part_dir.parent)
        try:
            partition = _LogDirPartition.of(open_partition(part_dir), facts)
            effective = sources.for_partition(part_dir)
        except KcompactError as err:
            rows.append(_config_error_row(part_dir, err))
            continue
        sole, note = sole_replica_of(effective, sources)
        row, rng = _row(partition, effective, now, facts, sole)
        row.warnings.extend([note] if note else [])
        rows.append(row)
        if space and rng is not None and row.error is None and effective.config.is_compacted:
            _measure_space(row, part_dir, effective, now, sole)
        if rng is not None:
            ranges.append((row.partition_dir, rng))
    if progress is not None:
        progress("partitions", len(found), len(found))
    ranks = dict(cleaner_order(ranges))
    for row in rows:
        row.cleaner_rank = ranks.get(row.partition_dir)
    rows.sort(key=lambda r: (r.cleaner_rank is None, r.cleaner_rank or 0, r.topic, r.partition))
    return rows


def _measure_space(row: DirtyRatioRow, part_dir: Path, effective: EffectiveConfig, now: int,
                   sole: SoleReplica | None) -> None:
    """The row's space, from the clean's dry run (``clean --dry-run`` reports the same numbers)."""
    try:
        result = dry_clean(part_dir, effective.config, now, sole_replica=sole)
    except KcompactError as err:
        row.warnings.append(f"the space its clean needs was not measured: {err}")
        return
    if result.space is not None and result.free_bytes is not None:
        row.space_peak_bytes, row.space_gives_back_bytes = result.space.peak_bytes, result.space.gives_back_bytes
        row.free_bytes = result.free_bytes


def _config_error_row(part_dir: Path, err: KcompactError) -> DirtyRatioRow:
    """The row of a partition whose files or configuration cannot be read (named by its directory)."""
    name = parse_partition_dir_name(part_dir.name)
    topic, partition = (part_dir.name, -1) if name is None else (name.topic, name.partition)
    return DirtyRatioRow(topic=topic, partition=partition, partition_dir=str(part_dir),
                         cleanup_policy="", error=str(explain_vanished(err)))


def partition_dirs(paths: Iterable[str | Path], selection: PartitionFilter | None = None) -> list[Path]:
    """The partition directories a report covers: each path that is one, and every one of each log dir.

    Args:
        paths: partition directories and/or log dirs (kept as given: relative stays relative).
        selection: keep only the partitions it matches (None: all).

    Returns:
        The partition directories, path after path (a log dir's in ``iter_partition_dirs`` order).

    Raises:
        KcompactError: a path is neither a directory nor a partition directory, or is a directory
            holding no partition directory (a wrong path, not an empty report); ``selection`` matches
            no partition under any path.
    """
    found: list[Path] = []
    for raw in paths:
        path = named_path(raw)
        if is_partition_dir(path):
            found.append(path)
        elif path.is_dir():
            found.extend(require_partition_dirs(path))
        else:
            raise KcompactError(f"{path}: not a log dir or partition directory")
    if selection is None:
        return found
    kept = selection.select(found)
    if not kept:
        raise KcompactError(f"no partition under the given paths matches {selection.describe()} "
                            f"(0 of {len(found)} partitions)")
    return kept


@frozen
class _LogDirFacts:
    """What one log dir says about all its partitions, read once per report."""

    checkpoints: dict[Path, dict[tuple[str, int], int]]  # filled on first use of each file
    broker_running: bool

    @classmethod
    def read(cls, log_dir: Path) -> _LogDirFacts:
        return cls({}, broker_holds_lock(log_dir))


@frozen
class _LogDirPartition(Partition):
    """A :class:`Partition` whose checkpoint entries come from its log dir's cached files."""

    facts: _LogDirFacts | None = field(default=None, compare=False)

    @classmethod
    def of(cls, partition: Partition, facts: _LogDirFacts) -> _LogDirPartition:
        values = {f.name: getattr(partition, f.name) for f in fields(Partition)}
        return cls(**values, facts=facts)

    def checkpointed(self, checkpoint: Path) -> int | None:
        """This partition's entry in a log dir checkpoint file (each file is parsed once)."""
        if self.facts is None:
            return Partition.checkpointed(self, checkpoint)
        entries = self.facts.checkpoints.get(checkpoint)
        if entries is None:  # a file that does not parse raises here, for each partition
            entries = self.facts.checkpoints[checkpoint] = read_offset_checkpoint(checkpoint)
        return entries.get(self.topic_partition)


def _row(
    partition: _LogDirPartition, effective: EffectiveConfig, now: int, facts: _LogDirFacts,
    sole: SoleReplica | None = None,
) -> tuple[DirtyRatioRow, CleanableRange | None]:
    config = effective.config
    row = DirtyRatioRow(
        topic=partition.topic,
        partition=partition.partition,
        partition_dir=str(partition.path),
        cleanup_policy=(POLICY_UNKNOWN if partition.topic != METADATA_TOPIC and _policy_unknown(effective)
                        else ",".join(config.cleanup_policy)),
        cleanup_policy_last_known_at=effective.value("cleanup.policy").last_known_offset,
        min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
    )
    row.warnings.extend(effective.notes)
    if facts.broker_running:
        row.warnings.append(LIVE_BROKER_WARNING)
    unsupported = unsupported_reason(partition, config)
    if partition.topic == METADATA_TOPIC:
        row.blocking_rule, row.blocking_detail = RULE_CLEANUP_POLICY, unsupported
        return row, None
    with LogReads() as reads:  # each small .log read and walked once for all four checks
        try:
            state = load_log_state(partition, config, reads, sole_replica=sole)
            rng = compute_cleanable_range(state.range_inputs(config, now))
            row.high_watermark_note = state.high_watermark_note
            crc = _check_dirty_section(state, rng, reads)
        except KcompactError as err:
            row.error = str(explain_vanished(err))
            return row, None
        row.warnings.extend(state.warnings)
        _fill(row, rng)
        row.corrupt_batches = crc.corrupt_batches
        _check_legacy(row, partition, rng, reads)
    if crc.first_error is not None:
        more = crc.corrupt_batches - 1
        failing = plural(more, "more batch fails its CRC", "more batches fail their CRCs")
        row.error = crc.first_error + (f" (in the dirty section, {failing})" if more else "")
    if unsupported is not None:  # `clean` refuses it (tiered storage): never eligible, never ranked
        row.eligible = row.must_clean = False
        row.blocking_rule, row.blocking_detail = RULE_TIERED_STORAGE, unsupported
        return row, None
    if row.blocking_rule == RULE_CLEANUP_POLICY and _policy_unknown(effective):
        row.blocking_rule = RULE_POLICY_UNKNOWN
        row.blocking_detail = (
            f"cleanup.policy is not known ({effective.topic_config_unknown}): a broker uses Kafka's default "
            "'delete' unless the topic overrides it, and `kcompact clean` compacts only a partition known to "
            "be compacted (give --config cleanup.policy=compact if it is)")
    return row, rng


def _policy_unknown(effective: EffectiveConfig) -> bool:
    """Whether ``cleanup.policy`` is only Kafka's default standing in for overrides that could not be read."""
    return effective.topic_config_unknown is not None and effective.value("cleanup.policy").source == "default"


def _check_legacy(row: DirtyRatioRow, partition: Partition, rng: CleanableRange, reads: LogReads) -> None:
    """Say so when Kafka's cleaner throws on this round (``cleaner.cleaner_throws``)."""
    end = rng.first_uncleanable_offset
    if rng.first_dirty_offset >= end:
        return
    name = Path(row.partition_dir).name
    for path, position, why in round_walk_problems(partition, rng.first_dirty_offset, end, reads):
        row.cleaner_fails = row.cleaner_fails or f"{path} at position {position}: {why}"
        row.warnings.append(f"{name}: Kafka's cleaner fails here: {path} at position {position}: "
                            f"{why}; `kcompact repair` fixes it")
    hazard = round_end_hazard(partition, end, reads)
    if hazard is None:
        return
    row.cleaner_fails = row.cleaner_fails or hazard.reason(f"the next round ends with it (at offset {end})")
    row.warnings.append(f"{name}: Kafka's cleaner fails here: "
                        f"{hazard.reason(f'the next round ends with it (at offset {end})')}; `kcompact "
                        "repair` rewrites the segment's legacy entries as magic 2 batches, keeping every "
                        "record")


def _check_dirty_section(state: LogState, rng: CleanableRange, reads: LogReads) -> CrcTally:
    """The CRC of every batch in ``[first dirty offset, first uncleanable offset)``: the segments the
    range covers (the latter is a segment base), batches from the first dirty offset on."""
    tally = CrcTally()
    start, end = rng.first_dirty_offset, rng.first_uncleanable_offset
    segments = state.segments
    for i, seg in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else seg.next_offset
        if seg.base_offset >= end or upper <= start:
            continue
        with reads.open(seg.files) as log:
            for batch in log.iter_batches():
                if batch.last_offset >= start:
                    tally.check(log.path, batch)
    return tally


def _fill(row: DirtyRatioRow, rng: CleanableRange) -> None:
    row.log_start_offset = rng.log_start_offset
    row.log_end_offset = rng.log_end_offset
    row.high_watermark = rng.high_watermark
    row.high_watermark_source = rng.high_watermark_source
    row.last_stable_offset = rng.last_stable_offset
    row.first_dirty_offset = rng.first_dirty_offset
    row.first_uncleanable_offset = rng.first_uncleanable_offset
    row.clean_bytes = rng.clean_bytes
    row.dirty_bytes = rng.dirty_bytes
    row.dirty_ratio = rng.dirty_ratio
    row.eligible = rng.eligible
    row.must_clean = rng.must_clean
    row.max_compaction_delay_ms = rng.max_compaction_delay_ms
    row.blocking_rule = rng.blocking_rule
    row.blocking_detail = rng.blocking_detail
    if rng.blocking_rule == RULE_OPEN_TRANSACTION and rng.blocking_detail:
        row.blocking_detail += f"; {TRANSACTIONS_POINTER}"
