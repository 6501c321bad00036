"""The report at scale: from the Parquet that ``spark inspect dirty-ratio --output`` writes.

Why: a cluster's worth of partitions (100 000 and more) is read by Spark tasks, not here; their rows (one per
partition, the fields of :class:`kcompact.inspect.dirty_ratio.DirtyRatioRow`) are small, and the page made
from them must stay small and quick to open. So every partition is counted into its topic (totals, the
blocking rules) and only the largest :data:`LISTED_PARTITIONS` (by clean + dirty bytes) are listed one by one.

What those rows do not hold is not made up: the bytes on disk and what a clean would give back (``inspect
keys``' projection, the cleaner's dry run of each partition), the last clean and the hanging transactions
stay None here (the page says so; ``kcompact report`` of a log dir computes them).

Reads with pyarrow (imported when it runs: the ``export`` or ``spark`` extra), only the columns used.
"""

from __future__ import annotations

import heapq
import time
from pathlib import Path
from typing import Any

from kcompact.errors import ConfigError, KcompactError, UnsupportedFormatError
from kcompact.inspect.dirty_ratio import ADVICE
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
COLUMNS = ("topic", "partition", "partition_dir", "cleanup_policy", "clean_bytes", "dirty_bytes", "dirty_ratio",
           "min_cleanable_dirty_ratio", "eligible", "cleaner_rank", "blocking_rule", "blocking_detail", "error")


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
    topics: dict[str, TopicEntry] = {}
    largest: list[tuple[int, int, PartitionEntry]] = []
    count = 0
    totals = Totals(log_dirs=0, size_in_bytes=None, reclaimable_bytes=None, never_cleaned=None)
    for i, values in enumerate(zip(*(columns[name] for name in COLUMNS), strict=True)):
        row = dict(zip(COLUMNS, values, strict=True))
        if selection is not None and not selection.matches(row["topic"], row["partition"]):
            continue
        entry = _entry(row)
        count += 1
        topic = topics.get(entry.topic)
        if topic is None:
            topic = topics[entry.topic] = TopicEntry(entry.topic, size_in_bytes=None, reclaimable_bytes=None)
        topic.add(entry)
        totals.count_ratio(entry)
        item = (entry.clean_bytes + entry.dirty_bytes, -i, entry)
        if len(largest) < listed:
            heapq.heappush(largest, item)
        elif item[:2] > largest[0][:2]:
            heapq.heapreplace(largest, item)
    if count == 0 and selection is not None:
        raise KcompactError(f"no row of {source} matches {selection.describe()} "
                            f"({len(columns['topic'])} partitions in all)")
    totals.partitions = count
    for topic in topics.values():
        add_topic(totals, topic)
    partitions = [entry for _, _, entry in sorted(largest, key=lambda item: item[:2], reverse=True)]
    log_dirs = sorted({str(Path(e.partition_dir).parent) for e in partitions})
    blocking = {rule for t in topics.values() for rule in t.blocked if rule in ADVICE}
    return Report(SOURCE_PARQUET, [str(source)], now_ms if now_ms is not None else int(time.time() * 1000),
                  [{"path": d, "broker": None} for d in log_dirs], totals, sort_topics(list(topics.values())),
                  partitions, len(partitions), [], {rule: ADVICE[rule] for rule in sorted(blocking)})


def _entry(row: dict[str, Any]) -> PartitionEntry:
    entry = PartitionEntry(
        str(Path(row["partition_dir"]).parent), row["topic"], int(row["partition"]), row["partition_dir"],
        row["cleanup_policy"] or "", int(row["clean_bytes"] or 0), int(row["dirty_bytes"] or 0),
        float(row["dirty_ratio"] or 0.0), float(row["min_cleanable_dirty_ratio"] or 0.0), bool(row["eligible"]),
        row["cleaner_rank"], row["blocking_rule"], row["blocking_detail"])
    if row["error"]:
        entry.errors.append(f"inspect dirty-ratio: {row['error']}")
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
        table = pq.read_table(source, columns=list(COLUMNS))
    except Exception as err:  # pyarrow's errors (ArrowInvalid, OSError, KeyError...) have no common base
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"{source}: not the Parquet output of `kcompact spark inspect dirty-ratio "
                          f"--output`; expected its columns ({', '.join(COLUMNS)}), found: {first}") from err
    return {name: table.column(name).to_pylist() for name in COLUMNS}
