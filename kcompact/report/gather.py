"""The report of log dirs or partitions: every number from the inspect command that owns it.

Per partition, in this order (each a library call the matching command makes, so the report and the
commands' ``--json`` can never disagree):

1. ``inspect dirty-ratio`` (:func:`kcompact.inspect.dirty_ratio.dirty_ratio_report`, over all the paths at
   once: its ranks are the broker's pick order over the log dir): clean and dirty bytes, the ratio against
   ``min.cleanable.dirty.ratio``, eligibility and the rule that blocks the cleaner;
2. ``inspect keys``' projection: the cleaner's dry run (:func:`kcompact.inspect.keys.dry_run`), the bytes
   on disk before and after a clean now (not the rest of ``inspect keys``, which reads the log twice more);
3. ``inspect last-clean`` (:func:`kcompact.inspect.last_clean.partition_last_clean`): when a clean provably ran;
4. ``inspect transactions`` (:func:`kcompact.inspect.transactions.checked_transactions`): hanging
   transactions, the dirty bytes they hold back and their abort lines;

2 to 4 share one load of the partition (:func:`kcompact.inspect.context.load_inspect_context`, as each of those
commands loads it): its segments' headers are walked once for the three, not once each.

and, when the paths hold more than one log dir (one per broker), ``inspect replicas`` of every partition of
the report they share (:func:`kcompact.inspect.replicas.replicas_row`, as ``inspect replicas`` of log dirs).

A source that fails on a partition (its files do not parse, a batch fails its CRC) leaves that part of the
row empty and adds its one line to the row's ``errors``; the report goes on. A path that is neither a log
dir nor a partition directory is refused as everywhere (:class:`~kcompact.errors.KcompactError`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from kcompact.clock import run_clock_ms
from kcompact.config.server_properties import node_id, read_server_properties
from kcompact.errors import KcompactError
from kcompact.inspect.context import InspectContext, load_inspect_context
from kcompact.inspect.dirty_ratio import ADVICE, DirtyRatioRow, dirty_ratio_report
from kcompact.inspect.dry_clean import mostly_keyless
from kcompact.inspect.keys import dry_run, log_size, projected_size
from kcompact.inspect.last_clean import partition_last_clean
from kcompact.inspect.replicas import ReplicaSet, ReplicasRow, replica_sets, replicas_row
from kcompact.inspect.transactions import checked_transactions
from kcompact.report.model import (
    EMPTY,
    KEYLESS,
    KEYLESS_ADVICE,
    SOURCE_LOG_DIRS,
    HangingEntry,
    PartitionEntry,
    ReplicaEntry,
    Report,
    summarize,
)
from kcompact.segment.partition_filter import PartitionFilter
from kcompact.segment.progress import ProgressCallback
from kcompact.value import frozen

META_PROPERTIES = "meta.properties"
PROGRESS_DIRTY_RATIO = "partitions (dirty ratio)"
PROGRESS_PARTITIONS = "partitions (projection, last clean, transactions)"
SOURCES = ("inspect keys", "inspect last-clean", "inspect transactions")  # read from one load of a partition


@frozen
class ConfigInputs:
    """Where each partition's configuration comes from, as every inspect command takes it."""

    cli_overrides: Mapping[str, str]
    server_properties: str | Path | None = None
    metadata_dir: str | Path | None = None
    sole_replica: bool = False  # --sole-replica, as clean takes it (``log.rules.high_watermark.sole_replica_of``)


def log_dir_report(
    paths: Iterable[str | Path],
    config: ConfigInputs,
    *,
    now_ms: int | None = None,
    selection: PartitionFilter | None = None,
    progress: ProgressCallback | None = None,
) -> Report:
    """The report of every partition under ``paths`` (see the module docstring).

    Args:
        paths: log dirs (several: one per broker) and/or partition directories.
        config: ``--config``, ``--server-properties``, ``--metadata-dir``.
        now_ms: the one clock of every source (default: now).
        selection: ``--topic``, ``--exclude-topic``, ``--partition`` (None: every partition).
        progress: told ``(what, partitions done, partitions in all)``, first for the dirty ratios, then for
            the rest.

    Returns:
        The report; a partition that fails to read is an entry with ``errors``.

    Raises:
        KcompactError: a path is neither a log dir nor a partition directory, or a log dir's checkpoint file
            does not parse.
    """
    given = list(paths)
    now = run_clock_ms(now_ms)
    rows = dirty_ratio_report(given, cli_overrides=config.cli_overrides, now_ms=now,
                              server_properties=config.server_properties, metadata_dir=config.metadata_dir,
                              selection=selection, progress=_renamed(progress, PROGRESS_DIRTY_RATIO),
                              sole_replica=config.sole_replica)
    entries = []
    for done, row in enumerate(rows):
        if progress is not None:
            progress(PROGRESS_PARTITIONS, done, len(rows))
        entries.append(partition_entry(row, config, now))
    if progress is not None:
        progress(PROGRESS_PARTITIONS, len(rows), len(rows))
    log_dirs = sorted({entry.log_dir for entry in entries})
    totals, topics = summarize(entries)
    totals.log_dirs = len(log_dirs)
    replicas = _replicas(log_dirs, {(e.topic, e.partition) for e in entries}) if len(log_dirs) > 1 else []
    return Report(SOURCE_LOG_DIRS, [str(p) for p in given], now,
                  [{"path": d, "broker": broker_of(Path(d))} for d in log_dirs], totals, topics,
                  entries, len(entries), replicas, entries_advice(entries))


def entries_advice(entries: Iterable[PartitionEntry]) -> dict[str, str]:
    """:func:`advice_of` the partitions' rules: none for an empty partition (nothing to clean), and for a keyless
    one not compacted its own (its status), not its rule's advice to compact it."""
    return advice_of(entry.status if entry.status == KEYLESS else entry.blocking_rule
                     for entry in entries if entry.status != EMPTY)


def advice_of(rules: Iterable[str | None]) -> dict[str, str]:
    """What unblocks the cleaner (``inspect dirty-ratio``'s advice) for each rule that stops it on a partition,
    eligible or not (an eligible one's range can stop early: at an open transaction); for a keyless topic not
    compacted, that no clean should (``KEYLESS_ADVICE``)."""
    found = {rule for rule in rules if rule}
    advice = {**ADVICE, KEYLESS: KEYLESS_ADVICE}
    return {rule: advice[rule] for rule in sorted(found) if rule in advice}


def partition_entry(row: DirtyRatioRow, config: ConfigInputs, now_ms: int) -> PartitionEntry:
    """One partition's entry: its dirty-ratio row, then the projection, last clean and transactions.

    Args:
        row: its ``inspect dirty-ratio`` row.
        config: where its configuration comes from.
        now_ms: the clock.

    Returns:
        The entry (a source that fails adds its line to ``errors``).
    """
    path = Path(row.partition_dir)
    entry = PartitionEntry(
        str(path.parent), row.topic, row.partition, row.partition_dir, row.cleanup_policy, row.clean_bytes,
        row.dirty_bytes, row.dirty_ratio, row.min_cleanable_dirty_ratio, row.eligible, row.cleaner_rank,
        row.blocking_rule, row.blocking_detail, high_watermark_note=row.high_watermark_note,
        holds_no_records=row.holds_no_records)
    if row.error is not None:
        entry.errors.append(f"inspect dirty-ratio: {row.error}")
        if not row.cleanup_policy:  # nothing of it loads: the other sources would fail alike
            return entry
    try:  # one load for the three sources (each command loads the partition the same way)
        ctx = load_inspect_context(entry.partition_dir, cli_overrides=config.cli_overrides, now_ms=now_ms,
                                   server_properties=config.server_properties, metadata_dir=config.metadata_dir,
                                   sole_replica=config.sole_replica)
    except KcompactError as err:
        entry.errors += [f"{command}: {err}" for command in SOURCES]
        return entry
    _add_projection(entry, ctx)
    _add_last_clean(entry, ctx)
    _add_transactions(entry, ctx)
    return entry


def _add_projection(entry: PartitionEntry, ctx: InspectContext) -> None:
    """``inspect keys``' projection: the bytes on disk, after a clean now, and after ``clean --roll`` (a broker
    stopped with its data in active segments, which no clean touches, gives back nothing now)."""
    try:
        dry = dry_run(ctx, None)
        size = log_size(ctx)
        rolled = dry_run(ctx, None, roll=True) if ctx.state.segments and ctx.state.segments[-1].size_in_bytes else dry
    except KcompactError as err:
        entry.errors.append(f"inspect keys: {err}")
        return
    entry.size_in_bytes, entry.size_in_bytes_after = size, projected_size(dry, size)
    entry.size_in_bytes_after_roll = projected_size(rolled, size)
    entry.clean_skipped_reason = dry.skipped_reason
    partition = ctx.state.partition  # KRaft's metadata log has no keys, and no cleaner or retention of a topic
    entry.mostly_keyless = not partition.is_metadata_log and mostly_keyless(partition)


def _add_last_clean(entry: PartitionEntry, ctx: InspectContext) -> None:
    try:
        report = partition_last_clean(ctx)
    except KcompactError as err:
        entry.errors.append(f"inspect last-clean: {err}")
        return
    entry.compacted, entry.last_clean_after_ms = report.compacted, report.last_clean_after_ms
    entry.records_since = report.records_since
    if report.crc_error is not None:
        entry.errors.append(f"inspect last-clean: {report.crc_error}")


def _add_transactions(entry: PartitionEntry, ctx: InspectContext) -> None:
    try:
        row = checked_transactions(ctx)
    except KcompactError as err:
        entry.errors.append(f"inspect transactions: {err}")
        return
    if row.error is not None:
        entry.errors.append(f"inspect transactions: {row.error}")
    entry.hanging = [HangingEntry(t.producer_id, t.producer_epoch, t.start_offset, t.duration_ms,
                                  t.pins_last_stable_offset, t.last_stable_offset, t.dirty_bytes_held_back,
                                  t.abort_command) for t in row.hanging]


def _replicas(log_dirs: list[str], reported: set[tuple[str, int]]) -> list[ReplicaEntry]:
    """``inspect replicas`` of every partition of the report that two or more of the log dirs hold (the copies
    of one partition dir named alone: only those)."""
    return [replica_entry(replicas_row(s)) for s in reported_replica_sets(log_dirs, reported)]


def reported_replica_sets(log_dirs: list[str], reported: set[tuple[str, int]]) -> list[ReplicaSet]:
    """The partitions of the report (by topic and partition) that two or more of ``log_dirs`` hold."""
    return [s for s in replica_sets(log_dirs) if (s.topic, s.partition) in reported]


def replica_entry(row: ReplicasRow) -> ReplicaEntry:
    """The report's entry of one ``inspect replicas`` row."""
    return ReplicaEntry(row.topic, row.partition, row.copies, row.agree, row.log_diverged, row.state_diverged,
                        row.divergent_keys, row.divergent_transactions, row.error)


def broker_of(log_dir: Path) -> str | None:
    """The broker a log dir belongs to: ``node.id`` (or ``broker.id``) of its meta.properties, if readable."""
    try:
        found = node_id(read_server_properties(log_dir / META_PROPERTIES))
    except (KcompactError, OSError):
        return None
    return None if found is None else str(found)


def _renamed(progress: ProgressCallback | None, what: str) -> ProgressCallback | None:
    if progress is None:
        return None
    callback = progress

    def told(_what: str, done: int, total: int) -> None:
        callback(what, done, total)

    return told

