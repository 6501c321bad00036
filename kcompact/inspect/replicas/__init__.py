"""``kcompact inspect replicas``: do the copies of one partition taken from its replicas agree?

Why: Kafka's log compaction is per replica and uncoordinated. When a leader's cleaner removes a tombstone
or a transaction marker (its delete horizon passed) before a lagging follower has fetched it, the
follower's next fetch starts past the removed offset: it keeps the deleted key's older value for good,
or transaction data whose marker it never sees (its last stable offset stops there). Nothing in the
broker notices. This report compares the replicas' copies offline, on two levels:

* the log: the first offset where their leader-epoch lineages part (``segment.lineage``: where Kafka's
  truncation would cut a follower), and records that differ at the same offset below the lowest high
  watermark (offsets one replica compacted away are not compared: compaction removes, never changes);
* the state consumers see (``view``): per key, the latest committed value of each replica from the
  highest log start (below it a replica's retention deleted records, which is no divergence) up to the
  lowest high watermark; keys whose value or existence differs (a tombstone and an absent key are the
  same "absent": two replicas that cleaned at different times, one of which has removed the tombstone,
  agree); transactional records one replica counts committed and another aborted or open; and
  transactions open on one replica below the limit that the others have decided or no longer hold.

The first replica named is the reference: every other one is compared with it (divergence is a relation
of two; with the reference fixed, every row says which copy differs from it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, field
from typing import Any

from kcompact.errors import KcompactError
from kcompact.inspect.replicas.view import (
    OPEN,
    KeyState,
    ReplicaFacts,
    ReplicaView,
    read_facts,
    read_view,
)
from kcompact.segment.lineage import lineage_divergence
from kcompact.segment.names import parse_partition_dir_name
from kcompact.segment.partition import (
    is_partition_dir,
    iter_partition_dirs,
    named_path,
    open_partition,
)
from kcompact.segment.partition_filter import PartitionFilter
from kcompact.segment.replica_copies import locate_replica
from kcompact.value import frozen, mutable

__all__ = ["DivergentKey", "DivergentRecords", "DivergentTxn", "ReplicaSet", "ReplicasReport", "ReplicasRow",
           "replica_sets", "replicas_report", "replicas_row", "replicas_rows"]

DEFAULT_MAX_KEYS = 100
ABSENT = "absent"  # a key's state when its latest record is a tombstone, or it has none
UNKNOWN = "unknown"  # a later record of the key (at or above the limit) may have removed older ones


@frozen
class DivergentKey:
    """A key whose latest committed value differs: per replica, its offset and value digest."""

    key: str  # printable (UTF-8 when it decodes, else hex)
    sides: tuple[dict[str, Any], ...]  # per replica: {"offset": int|None, "value_digest": str|None, "state": …}


@frozen
class DivergentRecords:
    """Records at the same offset that differ between the reference and one replica."""

    replica: int  # index in the report's replicas
    count: int
    first_offset: int
    offsets: tuple[int, ...]  # the first ones, capped


@frozen
class DivergentTxn:
    """A transaction whose outcome differs between the reference and one replica."""

    replica: int
    producer_id: int
    first_offset: int  # the first offset where the outcomes differ
    reference: str  # committed | aborted | open | absent
    other: str
    records: int  # transactional records affected (0 for an open transaction the other has not)


@mutable
class ReplicasReport:
    """The comparison (``as_dict`` is the ``--json`` object)."""

    topic: str
    partition: int
    start: int  # the highest log start: below it a replica's retention deleted the records
    limit: int  # the lowest high watermark: records and state are compared below it
    replicas: list[ReplicaFacts]
    epoch_divergence: list[dict[str, int]] = field(default_factory=list)  # {"replica", "offset"}
    records: list[DivergentRecords] = field(default_factory=list)
    divergent_keys: int = 0
    keys: list[DivergentKey] = field(default_factory=list)  # the first ``max_keys``
    keys_compared: int = 0
    keys_not_comparable: int = 0  # keys some replica holds a later record of (see ``view``)
    transactions: list[DivergentTxn] = field(default_factory=list)

    @property
    def log_diverged(self) -> bool:
        return bool(self.epoch_divergence or self.records)

    @property
    def state_diverged(self) -> bool:
        return bool(self.divergent_keys or self.transactions)

    @property
    def agree(self) -> bool:
        return not (self.log_diverged or self.state_diverged)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        out = asdict(self)
        for facts, row in zip(self.replicas, out["replicas"], strict=True):
            row["readable_end"] = facts.readable_end
        out.update(agree=self.agree, log_diverged=self.log_diverged, state_diverged=self.state_diverged)
        return out


def replicas_report(paths: Sequence[str | os.PathLike[str]], *, topic: str | None = None,
                    partition: int | None = None, max_keys: int = DEFAULT_MAX_KEYS) -> ReplicasReport:
    """Compare the copies of one partition (see the module docstring).

    Args:
        paths: two or more partition directories, or log dirs holding the partition.
        topic: the topic (needed when a path is a log dir; else taken from the first partition dir).
        partition: the partition number (likewise).
        max_keys: how many divergent keys to list (all are counted).

    Returns:
        The report.

    Raises:
        KcompactError: fewer than two copies, a copy of another partition, a path that is neither, or
            data and checkpoints that do not parse (names the file and position).
    """
    if len(paths) < 2:
        raise KcompactError(f"{paths[0] if paths else '-'}: one copy; expected two or more replicas")
    dirs = [locate_replica(p, topic, partition) for p in paths]
    first = open_partition(dirs[0])
    dirs = [locate_replica(d, first.topic, first.partition) for d in dirs]
    partitions = [first, *(open_partition(d) for d in dirs[1:])]
    read = [read_facts(p) for p in partitions]
    facts = [f for f, _spans in read]
    start = max(f.log_start_offset for f in facts)
    limit = min(f.readable_end for f in facts)
    views = [read_view(p, f, spans, start, limit) for p, (f, spans) in zip(partitions, read, strict=True)]
    report = ReplicasReport(first.topic, first.partition, start, limit, facts)
    _compare_logs(report, facts, views, max_keys)
    _compare_keys(report, views, max_keys)
    _compare_transactions(report, facts, views)
    return report


def _compare_logs(report: ReplicasReport, facts: list[ReplicaFacts], views: list[ReplicaView],
                  cap: int) -> None:
    ref, ref_view = facts[0], views[0]
    for i, (other, view) in enumerate(zip(facts[1:], views[1:], strict=True), start=1):
        parted = lineage_divergence(ref.leader_epochs, ref.log_end_offset,
                                    other.leader_epochs, other.log_end_offset)
        if parted is not None:
            report.epoch_divergence.append({"replica": i, "offset": parted})
        differ = sorted(o for o, digest in view.records.items()
                        if (mine := ref_view.records.get(o)) is not None and mine != digest)
        if differ:
            report.records.append(DivergentRecords(i, len(differ), differ[0], tuple(differ[:cap])))


def _compare_keys(report: ReplicasReport, views: list[ReplicaView], cap: int) -> None:
    keys = set().union(*(v.latest for v in views))
    report.keys_compared = len(keys)
    for key in sorted(keys):
        states = [_state(v, key) for v in views]
        known = {s for s in states if s != UNKNOWN}
        if UNKNOWN in states:
            report.keys_not_comparable += 1
        if len(known) <= 1:
            continue
        report.divergent_keys += 1
        if len(report.keys) < cap:
            report.keys.append(DivergentKey(_printable(key), tuple(_side(v, key, s)
                                                                   for v, s in zip(views, states, strict=True))))


def _state(view: ReplicaView, key: bytes) -> str:
    if key in view.later_keys:
        return UNKNOWN
    found = view.latest.get(key)
    return ABSENT if found is None or found.value_digest is None else found.value_digest


def _side(view: ReplicaView, key: bytes, state: str) -> dict[str, Any]:
    found: KeyState | None = view.latest.get(key)
    return {"offset": None if found is None else found.offset,
            "value_digest": None if found is None else found.value_digest,
            "state": "value" if state not in (ABSENT, UNKNOWN) else state}


def _compare_transactions(report: ReplicasReport, facts: list[ReplicaFacts], views: list[ReplicaView]) -> None:
    ref = views[0]
    for i, view in enumerate(views[1:], start=1):
        groups: dict[tuple[int, str, str], list[int]] = {}
        for offset in sorted(ref.outcomes.keys() & view.outcomes.keys()):
            (pid, mine), (_pid, theirs) = ref.outcomes[offset], view.outcomes[offset]
            if mine != theirs:
                groups.setdefault((pid, mine, theirs), []).append(offset)
        for (pid, mine, theirs), offsets in groups.items():
            report.transactions.append(DivergentTxn(i, pid, offsets[0], mine, theirs, len(offsets)))
        for pid, first in _open_elsewhere_absent(facts[0], facts[i], view, report.start, report.limit):
            report.transactions.append(DivergentTxn(i, pid, first, OPEN, ABSENT, 0))
        for pid, first in _open_elsewhere_absent(facts[i], facts[0], ref, report.start, report.limit):
            report.transactions.append(DivergentTxn(i, pid, first, ABSENT, OPEN, 0))


def _open_elsewhere_absent(mine: ReplicaFacts, theirs: ReplicaFacts, their_view: ReplicaView,
                           start: int, limit: int) -> list[tuple[int, int]]:
    """Transactions open on ``mine`` below the limit whose first record ``theirs`` no longer holds.

    An open transaction is never cleaned (the cleaner stops at the last stable offset), so the other
    replica, which holds the log up to the limit, only lacks its first record if it decided the
    transaction and compacted it away: the outcome ``mine`` will never learn (its marker is gone).
    Where both hold the record, the record-by-record outcome comparison already tells them apart.
    """
    return [(pid, first) for pid, first in mine.open_transactions
            if start <= first < limit and (pid, first) not in theirs.open_transactions
            and first not in their_view.outcomes]


def _printable(key: bytes) -> str:
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + key.hex()
    return text if text.isprintable() else "0x" + key.hex()


@frozen
class ReplicaSet:
    """One partition and its copies among several log dirs (one log dir per broker)."""

    topic: str
    partition: int
    partition_dirs: tuple[str, ...]  # in the order of the log dirs given


@frozen
class ReplicasRow:
    """One partition of a whole-cluster comparison: the verdict, and the serial report as JSON."""

    topic: str
    partition: int
    copies: int
    agree: bool | None  # None: the comparison failed (``error``)
    log_diverged: bool | None
    state_diverged: bool | None
    divergent_keys: int | None
    divergent_transactions: int | None
    error: str | None
    report: str | None  # ``kcompact inspect replicas --json`` of this partition's copies


def replica_sets(log_dirs: Sequence[str | os.PathLike[str]]) -> list[ReplicaSet]:
    """The partitions that have a copy in two or more of ``log_dirs``, by topic and partition.

    Args:
        log_dirs: one log dir per broker (copies taken from each).

    Returns:
        The sets; a partition with a single copy has nothing to be compared with and is left out.

    Raises:
        KcompactError: a path is not a directory that can be listed.
    """
    found: dict[tuple[str, int], list[str]] = {}
    for log_dir in log_dirs:
        root = named_path(log_dir)
        if not root.is_dir() or is_partition_dir(root):
            raise KcompactError(f"{root}: a log dir; expected a directory holding partition directories")
        for part in iter_partition_dirs(root):
            name = parse_partition_dir_name(part.name)
            if name is not None and name.kind == "live":
                found.setdefault((name.topic, name.partition), []).append(str(part))
    return [ReplicaSet(topic, partition, tuple(dirs))
            for (topic, partition), dirs in sorted(found.items()) if len(dirs) >= 2]


def replicas_row(replica_set: ReplicaSet, max_keys: int = DEFAULT_MAX_KEYS) -> ReplicasRow:
    """Compare one set's copies; a copy that does not parse makes the row an error, not the run's.

    Args:
        replica_set: the partition and its copies.
        max_keys: as :func:`replicas_report`.

    Returns:
        The row.
    """
    try:
        report = replicas_report(replica_set.partition_dirs, max_keys=max_keys)
    except KcompactError as err:
        return ReplicasRow(replica_set.topic, replica_set.partition, len(replica_set.partition_dirs),
                           None, None, None, None, None, str(err), None)
    return ReplicasRow(replica_set.topic, replica_set.partition, len(replica_set.partition_dirs),
                       report.agree, report.log_diverged, report.state_diverged, report.divergent_keys,
                       len(report.transactions), None, json.dumps(report.as_dict(), sort_keys=True))


def replicas_rows(log_dirs: Sequence[str | os.PathLike[str]], *, selection: PartitionFilter | None = None,
                  max_keys: int = DEFAULT_MAX_KEYS) -> list[ReplicasRow]:
    """Compare, in this process, every partition with a copy in two or more of ``log_dirs`` (what
    ``spark inspect replicas`` does as Spark tasks), one :func:`replicas_row` each.

    Args:
        log_dirs: one log dir per broker (copies taken from each).
        selection: the partitions to compare (``--topic``, ``--exclude-topic``, ``--partition``).
        max_keys: as :func:`replicas_report`.

    Returns:
        One row per partition, by topic and partition.

    Raises:
        KcompactError: a path is not a directory that can be listed.
    """
    sets = [s for s in replica_sets(log_dirs) if selection is None or selection.matches(s.topic, s.partition)]
    return [replicas_row(s, max_keys) for s in sets]
