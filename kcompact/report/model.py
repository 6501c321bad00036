"""The report's data: what ``kcompact report --json`` prints and the HTML page draws.

Why apart: the page and ``--json`` show the same values, and each value is named as the inspect command it
comes from names it in its own ``--json`` (``dirty_ratio``, ``blocking_rule``: ``inspect dirty-ratio``;
``size_in_bytes``, ``size_in_bytes_after``: ``inspect keys``' projection; ``last_clean_after_ms``: ``inspect
last-clean``; ``dirty_bytes_held_back``, ``abort_command``: ``inspect transactions``; ``agree``: ``inspect
replicas``), so a reader (and the tests) can hold each number against its source. The gathering lives in
:mod:`kcompact.report.gather` (log dirs) and :mod:`kcompact.report.scale` (the Parquet of ``spark inspect
dirty-ratio``); the page in :mod:`kcompact.report.page`.
"""

from __future__ import annotations

from dataclasses import asdict, field
from typing import Any

from kcompact.value import frozen, mutable

SOURCE_LOG_DIRS = "log-dirs"
SOURCE_PARQUET = "spark-dirty-ratio-parquet"
SOURCE_SPARK = "spark-log-dirs"  # ``spark report``: log dirs read by Spark tasks, aggregated as at scale
ELIGIBLE = "eligible"
BLOCKED_ERROR = "error"  # a partition whose files did not read: blocked for want of knowing
KEYLESS = "keyless"  # not compacted, and its records carry no key: retention's to delete, not a clean's
EMPTY = "empty"  # holds no record: nothing to clean, neither eligible nor blocked (``inspect dirty-ratio`` agrees)
BLOCKED_UNKNOWN = "none-given"  # not eligible, and the report gives no rule (cannot happen for a read row)
RATIO_BINS = 20  # the dirty-ratio histogram: [0, 0.05), [0.05, 0.1), ..., [0.95, 1.0]


POLICY_RULES = ("cleanup-policy", "cleanup-policy-unknown")  # ``inspect dirty-ratio``'s rules of a topic not compacted
KEYLESS_ADVICE = ("most of its records carry no key, as in a topic that is not compacted: a clean would delete "
                  "them; removing a non-compacted topic's old records is retention's job (retention.ms, "
                  "retention.bytes on the broker), not a clean's")


def ratio_bin(ratio: float) -> int:
    """The histogram bin of a dirty ratio (1.0 in the last one)."""
    return min(max(int(ratio * RATIO_BINS), 0), RATIO_BINS - 1)


@frozen
class HangingEntry:
    """A hanging transaction (``inspect transactions``' ``hanging`` item, the fields a person acts on)."""

    producer_id: int
    producer_epoch: int
    start_offset: int
    duration_ms: int
    pins_last_stable_offset: bool
    last_stable_offset: int
    dirty_bytes_held_back: int
    abort_command: str


@mutable
class PartitionEntry:
    """One partition of one log dir: its row of each inspect command, reduced to what the report shows.

    ``size_in_bytes`` and ``size_in_bytes_after`` are ``inspect keys``' ``projection`` (the cleaner's dry
    run); both are None where it was not computed (``errors`` says why, or the report was made at scale from
    ``spark inspect dirty-ratio``'s rows, which hold no projection).
    """

    log_dir: str
    topic: str
    partition: int
    partition_dir: str
    cleanup_policy: str = ""
    clean_bytes: int = 0
    dirty_bytes: int = 0
    dirty_ratio: float = 0.0
    min_cleanable_dirty_ratio: float = 0.5
    eligible: bool = False
    cleaner_rank: int | None = None
    blocking_rule: str | None = None
    blocking_detail: str | None = None
    size_in_bytes: int | None = None
    size_in_bytes_after: int | None = None
    clean_skipped_reason: str | None = None  # the projection's ``skipped_reason``
    compacted: bool | None = None  # inspect last-clean: any evidence of a clean
    last_clean_after_ms: int | None = None
    records_since: int | None = None
    hanging: list[HangingEntry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "<command>: <its one line>", one per failing source
    high_watermark_note: str | None = None  # why its high watermark is its log end (``inspect dirty-ratio``'s)
    holds_no_records: bool = False  # ``inspect dirty-ratio``'s: its log end is its log start
    mostly_keyless: bool = False  # ``clean``'s keyless sample: most of its records have no key
    # the projection of ``clean --roll`` (the active segment rolled first, then cleaned); where the active
    # segment holds no byte it is the projection of a clean now
    size_in_bytes_after_roll: int | None = None

    @property
    def reclaimable_bytes(self) -> int | None:
        """What a clean now gives back (None: no projection)."""
        if self.size_in_bytes is None or self.size_in_bytes_after is None:
            return None
        return self.size_in_bytes - self.size_in_bytes_after

    @property
    def reclaimable_bytes_with_roll(self) -> int | None:
        """What ``clean --roll`` gives back (None: no projection)."""
        if self.size_in_bytes is None or self.size_in_bytes_after_roll is None:
            return None
        return self.size_in_bytes - self.size_in_bytes_after_roll

    @property
    def status(self) -> str:
        """``eligible``, the rule that blocks it, or ``error`` where a source failed and no rule says more."""
        if self.eligible:
            return ELIGIBLE
        if self.holds_no_records and not self.errors:
            return EMPTY
        if self.mostly_keyless and self.blocking_rule in POLICY_RULES:
            return KEYLESS
        if self.blocking_rule is None and self.errors:
            return BLOCKED_ERROR
        return self.blocking_rule or BLOCKED_UNKNOWN

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reclaimable_bytes"] = self.reclaimable_bytes
        out["reclaimable_bytes_with_roll"] = self.reclaimable_bytes_with_roll
        out["status"] = self.status
        return out


@mutable
class TopicEntry:
    """A topic's partitions (over every log dir) added up."""

    topic: str
    partitions: int = 0
    clean_bytes: int = 0
    dirty_bytes: int = 0
    size_in_bytes: int | None = 0  # None: some partition has no projection
    reclaimable_bytes: int | None = 0
    reclaimable_bytes_with_roll: int | None = 0
    eligible: int = 0
    empty: int = 0  # partitions holding no record: nothing to clean, not blocked
    blocked: dict[str, int] = field(default_factory=dict)  # status -> partitions
    errors: int = 0
    min_cleanable_dirty_ratio: float | None = None  # None: its partitions disagree (per-partition configs)
    max_dirty_ratio: float = 0.0
    hanging_transactions: int = 0
    dirty_bytes_held_back: int = 0

    def add(self, entry: PartitionEntry) -> None:
        """Count one partition in."""
        if self.partitions == 0:
            self.min_cleanable_dirty_ratio = entry.min_cleanable_dirty_ratio
        elif self.min_cleanable_dirty_ratio != entry.min_cleanable_dirty_ratio:
            self.min_cleanable_dirty_ratio = None
        self.partitions += 1
        self.clean_bytes += entry.clean_bytes
        self.dirty_bytes += entry.dirty_bytes
        self.size_in_bytes = _add(self.size_in_bytes, entry.size_in_bytes)
        self.reclaimable_bytes = _add(self.reclaimable_bytes, entry.reclaimable_bytes)
        self.reclaimable_bytes_with_roll = _add(self.reclaimable_bytes_with_roll, entry.reclaimable_bytes_with_roll)
        status = entry.status
        if status == ELIGIBLE:
            self.eligible += 1
        elif status == EMPTY:
            self.empty += 1
        else:
            self.blocked[status] = self.blocked.get(status, 0) + 1
        self.errors += bool(entry.errors)
        self.max_dirty_ratio = max(self.max_dirty_ratio, entry.dirty_ratio)
        self.hanging_transactions += len(entry.hanging)
        self.dirty_bytes_held_back += sum(h.dirty_bytes_held_back for h in entry.hanging if h.pins_last_stable_offset)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _add(total: int | None, value: int | None) -> int | None:
    return None if total is None or value is None else total + value


@frozen
class ReplicaEntry:
    """One partition's replica copies compared (``inspect replicas`` of log dirs: its row)."""

    topic: str
    partition: int
    copies: int
    agree: bool | None
    log_diverged: bool | None
    state_diverged: bool | None
    divergent_keys: int | None
    divergent_transactions: int | None
    error: str | None


@mutable
class Totals:
    """The page's top line."""

    log_dirs: int = 0
    partitions: int = 0
    clean_bytes: int = 0
    dirty_bytes: int = 0
    size_in_bytes: int | None = 0
    reclaimable_bytes: int | None = 0
    reclaimable_bytes_with_roll: int | None = 0
    eligible: int = 0
    empty: int = 0  # partitions holding no record: nothing to clean, not blocked
    blocked: dict[str, int] = field(default_factory=dict)  # status -> partitions, largest first
    errors: int = 0
    hanging_transactions: int = 0
    never_cleaned: int | None = 0  # partitions with no evidence of a clean (None: not read, at scale)
    # every partition's dirty ratio, counted in RATIO_BINS bins: the eligible ones, and the others
    ratio_bins_eligible: list[int] = field(default_factory=lambda: [0] * RATIO_BINS)
    ratio_bins_not_eligible: list[int] = field(default_factory=lambda: [0] * RATIO_BINS)
    min_cleanable_dirty_ratios: list[float] = field(default_factory=list)  # the distinct thresholds

    def count_ratio(self, entry: PartitionEntry) -> None:
        """Count one partition's dirty ratio into the histogram, and its threshold."""
        bins = self.ratio_bins_eligible if entry.eligible else self.ratio_bins_not_eligible
        bins[ratio_bin(entry.dirty_ratio)] += 1
        if entry.min_cleanable_dirty_ratio not in self.min_cleanable_dirty_ratios:
            self.min_cleanable_dirty_ratios.append(entry.min_cleanable_dirty_ratio)
            self.min_cleanable_dirty_ratios.sort()


@mutable
class Report:
    """The whole report (``as_dict`` is the ``--json`` object)."""

    source: str  # SOURCE_LOG_DIRS, SOURCE_PARQUET or SOURCE_SPARK
    inputs: list[str]
    now_ms: int
    log_dirs: list[dict[str, str | None]]  # {"path", "broker"}: broker is meta.properties' node.id / broker.id
    totals: Totals
    topics: list[TopicEntry]  # by bytes, largest first
    partitions: list[PartitionEntry]  # every one, or at scale the largest ``partitions_listed``
    partitions_listed: int
    replicas: list[ReplicaEntry] = field(default_factory=list)
    advice: dict[str, str] = field(default_factory=dict)  # blocking rule -> what to do (inspect dirty-ratio's)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "inputs": list(self.inputs),
            "now_ms": self.now_ms,
            "log_dirs": [dict(d) for d in self.log_dirs],
            "totals": asdict(self.totals),
            "topics": [t.as_dict() for t in self.topics],
            "partitions": [p.as_dict() for p in self.partitions],
            "partitions_listed": self.partitions_listed,
            "replicas": [asdict(r) for r in self.replicas],
            "advice": dict(self.advice),
        }


def summarize(entries: list[PartitionEntry]) -> tuple[Totals, list[TopicEntry]]:
    """The totals and the topics of ``entries`` (topics by size on disk, else by cleanable bytes).

    Args:
        entries: every partition of the report.

    Returns:
        The totals (``log_dirs`` left 0 for the caller) and the topics, largest first.
    """
    topics: dict[str, TopicEntry] = {}
    for entry in entries:
        topics.setdefault(entry.topic, TopicEntry(entry.topic)).add(entry)
    totals = Totals(partitions=len(entries))
    for topic in topics.values():
        add_topic(totals, topic)
    for entry in entries:
        totals.count_ratio(entry)
    totals.never_cleaned = sum(1 for e in entries if e.compacted is False)
    totals.hanging_transactions = sum(len(e.hanging) for e in entries)
    return totals, sort_topics(list(topics.values()))


def add_topic(totals: Totals, topic: TopicEntry) -> None:
    """Count one topic into the totals (the partitions' count is the caller's)."""
    totals.clean_bytes += topic.clean_bytes
    totals.dirty_bytes += topic.dirty_bytes
    totals.size_in_bytes = _add(totals.size_in_bytes, topic.size_in_bytes)
    totals.reclaimable_bytes = _add(totals.reclaimable_bytes, topic.reclaimable_bytes)
    totals.reclaimable_bytes_with_roll = _add(totals.reclaimable_bytes_with_roll, topic.reclaimable_bytes_with_roll)
    totals.eligible += topic.eligible
    totals.empty += topic.empty
    totals.errors += topic.errors
    for status, count in topic.blocked.items():
        totals.blocked[status] = totals.blocked.get(status, 0) + count
    totals.blocked = dict(sorted(totals.blocked.items(), key=lambda item: (-item[1], item[0])))


def sort_topics(topics: list[TopicEntry]) -> list[TopicEntry]:
    """Largest first: by size on disk where known, else by clean + dirty bytes; then by name."""
    return sorted(topics, key=lambda t: (-(t.size_in_bytes if t.size_in_bytes is not None
                                           else t.clean_bytes + t.dirty_bytes), t.topic))
