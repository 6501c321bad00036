"""``inspect keys``: a partition's keys, duplicates, tombstones and transactions, and what a clean
would do.

Why: before cleaning (or sizing a broker's dedupe buffer) an operator wants to know how many keys
there are, how much of the log is superseded, when tombstones can go and how many passes the cleaner
needs; after a surprise, which keys dominate and whether producers used the default partitioner.

How. Records are read with the cleaner's own columnar scan (``records.scan``) and aborted
transactions are told apart with its ``CleanedTransactionMetadata``, in two passes over every
segment:

1. key digest -> latest offset over the whole log (the cleaner's :class:`OffsetMap`, about 16 bytes a key;
   no Python object per key), and, when the keys to map exceed one map, the broker's passes emulated
   with maps sized exactly like its SkimpyOffsetMap (``log.cleaner.dedupe.buffer.size /
   log.cleaner.threads``, 24 bytes an entry, ``floor(slots * load factor)`` keys, room checked
   before every put);
2. every record again, in chunks of :data:`CHUNK_RECORDS` handled with numpy: a keyed record is a
   duplicate when its offset is below its key's latest; counts, bytes (a record's uncompressed size
   in its batch), tombstones by delete horizon, consumer-visible counts, misplaced keys, and exact
   duplicate counts per digest (24 bytes a duplicated key) for the top keys, whose bytes are then
   read back from the few batches holding their latest offsets.

The *projection* is not estimated: it is :func:`kcompact.inspect.dry_clean.dry_clean` (the cleaner's own round) run with
``dry_run=True`` (every decision of a real clean, nothing written), so it equals what ``clean`` then
does — including refusing a batch that fails its CRC. Pass 2 checks the CRC of every batch
(``corrupt_batches``, ``crc_error``): the report is still made from what parses, and the command exits 2.

Populations: *live* records are data records outside aborted transactions (open ones included); key
counts are over live keyed records. ``keys_to_map`` counts the keys of the cleanable range
``[first dirty, first uncleanable)``; ``dirty_distinct_keys`` those whose latest record lies at or
after the first dirty offset. The default partitioner is Kafka's
``toPositive(murmur2(key)) % partitions``.

For a ``__consumer_offsets`` partition, pass 2 also names each keyed record's consumer group (its key
decoded by :mod:`kcompact.records.messages.consumer_offsets`) and totals records and bytes per group, all and
duplicate, with the group's live offset-commit keys (committed offsets whose latest record is not a
tombstone): ``consumer_groups`` says which groups dominate a bloated offsets partition. That section
is absent from :meth:`KeysReport.as_dict` for every other topic.

Field names of :class:`KeysReport` are the ``--json`` interface (tests/inspect/keys/test_keys.py fixes
them).

Modules: :mod:`kcompact.inspect.keys.model` (the report's values),
:mod:`kcompact.inspect.keys.batches` (reading batches and records), :mod:`kcompact.inspect.keys.key_map`
(pass 1 and the dedupe plan), :mod:`kcompact.inspect.keys.census` (pass 2),
:mod:`kcompact.inspect.keys.partitioner` (murmur2); this one runs them in order and assembles the report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from kcompact.errors import BatchCrcError, ConfigError, RefusedError
from kcompact.inspect.context import InspectContext, load_inspect_context
from kcompact.inspect.dry_clean import CleanResult, dry_clean, not_compacted, skipped_clean
from kcompact.inspect.keys.batches import iter_batches
from kcompact.inspect.keys.census import Census
from kcompact.inspect.keys.key_map import dedupe_plan, map_keys, top_keys
from kcompact.inspect.keys.model import DedupePlan, KeysReport, Projection
from kcompact.log.state.cleaner_throws import round_end_hazard, round_walk_problems
from kcompact.segment.progress import ProgressCallback, ReadProgress, read_progress

__all__ = ["DEFAULT_TOP", "dry_run", "keys_report", "log_size", "projected_size"]

DEFAULT_TOP = 10


def keys_report(
    path: str | Path,
    *,
    cli_overrides: Mapping[str, str],
    now_ms: int | None = None,
    partitions: int | None = None,
    top: int = DEFAULT_TOP,
    server_properties: str | Path | None = None,
    metadata_dir: str | Path | None = None,
    progress: ProgressCallback | None = None,
) -> KeysReport:
    """Read every record of one partition and report on its keys (see the module docstring).

    Args:
        path: the partition directory.
        cli_overrides: ``--config`` pairs (Kafka names, topic and cleaner settings).
        now_ms: the clock of the time rules (default: now).
        partitions: the topic's partition count, to check keys against the default partitioner.
        top: how many of the most duplicated keys (and, for ``__consumer_offsets``, of the
            groups with the most bytes) to list.
        server_properties: the broker's server.properties (default:
            ``$KCOMPACT_SERVER_PROPERTIES``).
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0`` (default: as
            ``kcompact.config.effective.partition_config`` finds it).
        progress: told each read's bytes as it goes: the dry-run clean, the key map and the census
            (``"<partition> (key map)"``, …), each over the partition's segment bytes (twice that for the
            dry-run clean, which reads the dirty section at most twice, as ``clean``'s bar counts it).

    Returns:
        The report.

    Raises:
        ConfigError: ``partitions`` or ``top`` out of range, or a bad configuration source.
        KcompactError: the path is not a partition directory, or its data does not parse.
    """
    if (partitions is not None and partitions < 1) or top < 0:
        raise ConfigError(f"--partitions / --top; expected >= 1 / >= 0, found {partitions} / {top}")
    ctx = load_inspect_context(path, cli_overrides=cli_overrides, now_ms=now_ms,
                               server_properties=server_properties, metadata_dir=metadata_dir)
    name, size = ctx.state.partition.path.name, ctx.state.partition.size_in_bytes
    dry = dry_run(ctx, read_progress(progress, f"{name} (dry-run clean)", 2 * size))  # two passes at most
    warnings = [*ctx.effective.notes, *ctx.state.warnings]
    rng = ctx.rng
    warnings += [f"Kafka's cleaner fails here: {path} at position {position}: {why}; `kcompact repair` "
                 "fixes it" for path, position, why
                 in round_walk_problems(ctx.state.partition, rng.first_dirty_offset,
                                        rng.first_uncleanable_offset)]
    plan, emulate = dedupe_plan(ctx.config, dry.stats.map_entries, warnings)
    log_map = map_keys(ctx.state, ctx.rng, emulate, read_progress(progress, f"{name} (key map)", size))
    census = Census(ctx.state, ctx.rng, log_map, partitions)
    for item in iter_batches(ctx.state, read_progress(progress, f"{name} (key census)", size)):
        census.add(*item)
    census.flush()
    if emulate is not None:
        plan = dataclasses.replace(plan, passes=emulate.passes)
    return _report(ctx, dry, census, plan, top, warnings)


def _report(ctx: InspectContext, dry: CleanResult, census: Census, plan: DedupePlan, top: int,
            warnings: list[str]) -> KeysReport:
    """The report from the dry run and the two passes (the top keys' bytes are read here)."""
    state, rng, now = ctx.state, ctx.rng, ctx.now_ms
    size = log_size(ctx)
    return KeysReport(
        state.partition.topic, state.partition.partition, str(state.partition.path), now,
        rng.log_start_offset, rng.log_end_offset, rng.high_watermark, rng.last_stable_offset,
        rng.first_dirty_offset, rng.first_uncleanable_offset, size,
        census.record_counts(),
        census.key_counts(dry.stats.map_entries),
        census.tombstone_report(now, ctx.config.delete_retention_ms),
        census.transaction_report(state),
        _projection(dry, census.records, size),
        plan,
        top_keys(state, census.log_map, census.top(top)),
        census.partitioner(),
        None if census.groups is None else census.groups.report(top),
        warnings,
        census.crc.corrupt_batches,
        census.crc.first_error,
    )


def log_size(ctx: InspectContext) -> int:
    """The bytes of the partition's ``.log`` files: ``size_in_bytes`` of the report, and of its projection."""
    return sum(s.size_in_bytes for s in ctx.state.segments)


def projected_size(dry: CleanResult, size: int) -> int:
    """The bytes of the ``.log`` files a clean leaves: ``size`` less what the dry run read, plus what it
    wrote (``Projection.size_in_bytes_after``)."""
    return size - dry.stats.bytes_read + dry.stats.bytes_written


def dry_run(ctx: InspectContext, progress: ReadProgress | None, *, roll: bool = False) -> CleanResult:
    """The cleaner's dry run, or an empty result saying why no clean would run (``progress`` told the
    bytes it reads; finished either way).

    Args:
        ctx: the partition as :func:`kcompact.inspect.context.load_inspect_context` loads it.
        progress: told the bytes the dry run reads (None: nothing told).
        roll: the dry run of ``clean --roll``: the active segment rolled first, so its data is cleaned too.

    Returns:
        The dry run's result; ``skipped_reason`` says why no clean would run (``end_offset`` None then).
    """
    if progress is None:
        return _dry_run_or_reason(ctx, None, roll)
    try:
        return _dry_run_or_reason(ctx, progress.advance, roll)
    finally:
        progress.finish()


def _dry_run_or_reason(ctx: InspectContext, advance: Callable[[int], None] | None, roll: bool) -> CleanResult:
    state, effective, now = ctx.state, ctx.effective, ctx.now_ms
    reason = not_compacted(effective)
    if state.partition.is_metadata_log:
        reason = "__cluster_metadata is KRaft's own log; no cleaner touches it"
    if reason is None:
        reason = legacy_failure(ctx)
    if reason is None:
        try:
            return dry_clean(state.partition.path, effective.config, now, sole_replica=ctx.sole_replica,
                             roll=roll, progress=advance)
        except RefusedError as err:  # tiered storage
            reason = str(err)
        except BatchCrcError as err:  # the census counts it too (corrupt_batches)
            reason = f"clean refuses: {err}"
    return skipped_clean(state.partition.path, state.partition.topic, state.partition.partition, now, reason)


def legacy_failure(ctx: InspectContext) -> str | None:
    """Why Kafka's cleaner (and ``kcompact clean``) throw on this round, when a legacy entry ends it."""
    end = ctx.rng.first_uncleanable_offset
    hazard = round_end_hazard(ctx.state.partition, end)
    if hazard is None or ctx.rng.first_dirty_offset >= end:
        return None
    return (f"Kafka's cleaner fails here: {hazard.reason(f'the next round ends with it (at offset {end})')}"
            "; `kcompact repair` rewrites the segment's legacy entries as magic 2 batches, keeping "
            "every record")


def _projection(dry: CleanResult, records: int, size: int) -> Projection:
    s = dry.stats
    return Projection(
        dry.end_offset is not None, dry.skipped_reason, dry.end_offset,
        records, records - s.records_read + s.records_written,
        size, projected_size(dry, size),
        s.superseded_removed, s.tombstones_removed, s.invalid_records, s.aborted_records_removed,
        s.markers_removed,
    )
