"""The report at scale: from the Parquet that ``spark inspect dirty-ratio --output`` writes.

Why: a cluster's worth of partitions (100 000 and more) is read by Spark tasks, not here; their rows (one per
partition, the fields of :class:`kcompact.inspect.dirty_ratio.DirtyRatioRow`) are small, and the page made
from them must stay small and quick to open. So every partition is counted into its topic (totals, the
blocking rules) and only the largest :data:`LISTED_PARTITIONS` (by clean + dirty bytes) are listed one by one,
with any that failed to read.

What those rows do not hold is not made up: the bytes on disk and what a clean would give back (``inspect
keys``' projection, the cleaner's dry run of each partition), the last clean and the hanging transactions
stay None here (the page says so; ``kcompact report`` and ``kcompact spark report`` of log dirs compute them).

Reads with pyarrow (imported when it runs: the ``export`` or ``spark`` extra), only the columns used.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kcompact.clock import run_clock_ms
from kcompact.errors import ConfigError, KcompactError, UnsupportedFormatError
from kcompact.inspect.dirty_ratio import ADVICE, holds_no_records
from kcompact.report.model import (
    SOURCE_PARQUET,
    PartitionEntry,
    Report,
    TopicEntry,
    Totals,
    add_topic,
    sort_topics,
)
from kcompact.segment.partition_filter import PartitionFilter

LISTED_PARTITIONS = 200
NOTABLE_PARTITIONS = 200  # listed besides the largest: those with an error or a hanging transaction
COLUMNS = ("topic", "partition", "partition_dir", "cleanup_policy", "clean_bytes", "dirty_bytes", "dirty_ratio",
           "min_cleanable_dirty_ratio", "eligible", "cleaner_rank", "blocking_rule", "blocking_detail", "error")
# read where the rows have them (older outputs do not): an empty partition is told apart from a blocked one
OPTIONAL_COLUMNS = ("log_start_offset", "log_end_offset")


def parquet_report(source: str | Path, *, selection: PartitionFilter | None = None,
                   listed: int = LISTED_PARTITIONS, now_ms: int | None = None) -> Report:
    """The report of the rows of ``spark inspect dirty-ratio`` written as Parquet.

    Args:
        source: the Parquet directory (or file) ``spark inspect dirty-ratio --output`` wrote.
        selection: ``--topic``, ``--exclude-topic``, ``--partition`` over its rows (None: all).
        listed: how many of the largest partitions to list one by one.
        now_ms: the report's date (default: now; the rows carry no clock of their own).

    Returns:
        The report: every partition counted into its topic and the totals, the largest listed.

    Raises:
        UnsupportedFormatError: pyarrow is not installed.
        ConfigError: ``source`` is not Parquet holding those rows (one line naming it).
        KcompactError: ``selection`` matches none of its rows.
    """
    columns = _read_columns(Path(source))
    names = tuple(columns)
    rows = (dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True))
    entries = (_entry(row) for row in rows
               if selection is None or selection.matches(row["topic"], row["partition"]))
    totals, topics, partitions = aggregate(entries, listed=listed)
    if totals.partitions == 0 and selection is not None:
        raise KcompactError(f"no row of {source} matches {selection.describe()} "
                            f"({len(columns['topic'])} partitions in all)")
    totals.log_dirs, totals.never_cleaned = 0, None  # neither is in those rows
    if totals.partitions == 0:
        totals.size_in_bytes = totals.reclaimable_bytes = totals.reclaimable_bytes_with_roll = None
    log_dirs = sorted({str(Path(e.partition_dir).parent) for e in partitions})
    return Report(SOURCE_PARQUET, [str(source)], run_clock_ms(now_ms),
                  [{"path": d, "broker": None} for d in log_dirs], totals, topics, partitions, len(partitions),
                  [], advice_for(topics))


def aggregate(entries: Iterable[PartitionEntry], *,
              listed: int = LISTED_PARTITIONS) -> tuple[Totals, list[TopicEntry], list[PartitionEntry]]:
    """Count every partition into its topic and the totals, keeping only the largest ones, and those a person
    must see whatever their size: any that failed to read (its row says why) or holds a hanging transaction
    (what the page's chart of them draws).

    Args:
        entries: the partitions, in any order (read once: a generator over 100 000 rows is fine).
        listed: how many of the largest to keep (by bytes on disk where known, else clean + dirty bytes).

    Returns:
        The totals (``log_dirs`` left 0 for the caller), the topics (largest first), and the partitions kept,
        largest first: the ``listed`` largest, then any other with an error or a hanging transaction (at most
        :data:`NOTABLE_PARTITIONS` of those).
    """
    topics: dict[str, TopicEntry] = {}
    largest: list[tuple[int, int, PartitionEntry]] = []
    notable: list[tuple[int, int, PartitionEntry]] = []
    totals = Totals()
    for i, entry in enumerate(entries):
        totals.partitions += 1
        topics.setdefault(entry.topic, TopicEntry(entry.topic)).add(entry)
        totals.count_ratio(entry)
        totals.never_cleaned = (totals.never_cleaned or 0) + (entry.compacted is False)
        totals.hanging_transactions += len(entry.hanging)
        item = (_listing_size(entry), -i, entry)
        if len(largest) < listed:
            heapq.heappush(largest, item)
            continue
        if item[:2] > largest[0][:2]:
            item = heapq.heapreplace(largest, item)
        if (item[2].errors or item[2].hanging) and len(notable) < NOTABLE_PARTITIONS:
            notable.append(item)
    for topic in topics.values():
        add_topic(totals, topic)
    kept = sorted(largest, key=lambda item: item[:2], reverse=True)
    kept += sorted(notable, key=lambda item: item[:2], reverse=True)
    return totals, sort_topics(list(topics.values())), [entry for _, _, entry in kept]


def _listing_size(entry: PartitionEntry) -> int:
    return entry.size_in_bytes if entry.size_in_bytes is not None else entry.clean_bytes + entry.dirty_bytes


def advice_for(topics: Iterable[TopicEntry]) -> dict[str, str]:
    """What unblocks the cleaner, for every blocking rule the topics count (``inspect dirty-ratio``'s advice)."""
    blocking = {rule for t in topics for rule in t.blocked if rule in ADVICE}
    return {rule: ADVICE[rule] for rule in sorted(blocking)}


def _entry(row: dict[str, Any]) -> PartitionEntry:
    entry = PartitionEntry(
        str(Path(row["partition_dir"]).parent), row["topic"], int(row["partition"]), row["partition_dir"],
        row["cleanup_policy"] or "", int(row["clean_bytes"] or 0), int(row["dirty_bytes"] or 0),
        float(row["dirty_ratio"] or 0.0), float(row["min_cleanable_dirty_ratio"] or 0.0), bool(row["eligible"]),
        row["cleaner_rank"], row["blocking_rule"], row["blocking_detail"])
    if row["error"]:
        entry.errors.append(f"inspect dirty-ratio: {row['error']}")
    entry.holds_no_records = holds_no_records(row["error"], row.get("log_start_offset"), row.get("log_end_offset"),
                                              bool(row["eligible"]))
    return entry


def _read_columns(source: Path) -> dict[str, list[Any]]:
    """The columns of :data:`COLUMNS` as Python lists."""
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise UnsupportedFormatError(
            "kcompact report --from reads Parquet with pyarrow; expected it installed (pip install "
            "'kcompact[export]'), found it missing") from err
    if not source.exists():
        raise ConfigError(f"{source}: no such file or directory; expected the Parquet output of "
                          "`kcompact spark inspect dirty-ratio --output`")
    try:
        import pyarrow.dataset as ds

        found = set(ds.dataset(source, format="parquet").schema.names)
        names = [*COLUMNS, *(name for name in OPTIONAL_COLUMNS if name in found)]
        table = pq.read_table(source, columns=names)
    except Exception as err:  # pyarrow's errors (ArrowInvalid, OSError, KeyError...) have no common base
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"{source}: not the Parquet output of `kcompact spark inspect dirty-ratio "
                          f"--output`; expected its columns ({', '.join(COLUMNS)}), found: {first}") from err
    return {name: table.column(name).to_pylist() for name in names}
