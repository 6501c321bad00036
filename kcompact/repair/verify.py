"""Checking a whole partition the way a broker's full recovery and its cleaner would (read-only).

:func:`verify_partition` looks at everything Kafka looks at when it loads a partition after an unclean
shutdown, and at what its cleaner needs (``LogLoader.load``, ``LogSegment.recover``, ``Cleaner.doClean``):

* every segment, batch by batch, through :func:`~kcompact.repair.salvage.scan_segment`: framing, header,
  CRC, offsets that increase across batches and segments, records that parse, a torn tail or zero
  padding after the last batch;
* each segment's ``.index`` and ``.timeindex`` against what Kafka 4.1 builds from the (repaired) log
  (``segment.index_builder``), with Kafka's own sanity rules; the ``.txnindex`` against the aborted
  transactions the data shows (a missing entry makes the cleaner keep aborted data as committed);
* leftovers of an interrupted clean or split, orphaned indexes, stray files and directories;
* segments whose last entry is legacy (magic 0/1) and would lose every record in a clean, on which Kafka's
  cleaner throws (``cleaner.cleaner_throws``): repair rewrites their legacy entries as magic 2 batches;
* the partition's ``cleaner-offset-checkpoint`` entry (Kafka resets one below the log start or past the
  log end; a file that does not parse takes the log dir offline) and its log start offset.

The result is a list of :class:`~kcompact.repair.findings.Finding` plus the plan repair executes: per
segment, which batches stay and whether the segment must be rewritten.
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path

from kcompact.errors import CorruptCheckpointError, CorruptDataError, KcompactError
from kcompact.log.rules.aborted import TxnRow, aborted_transactions, derive_transactions
from kcompact.log.state.cleaner_throws import find_legacy_hazards
from kcompact.repair.findings import (
    IMPACT_BOTH,
    IMPACT_BROKER,
    IMPACT_NONE,
    IMPACT_SETTLED,
    KIND_CHECKPOINT,
    KIND_LEFTOVER,
    KIND_LOG_START,
    KIND_ORPHAN_INDEX,
    KIND_STRAY,
    KIND_UNCHECKED,
    Finding,
    fix_finding,
    legacy_finding,
    region_finding,
)
from kcompact.repair.indexes import check_segment_indexes
from kcompact.repair.salvage import SegmentScan, scan_segment
from kcompact.repair.segment_check import SegmentCheck
from kcompact.segment.checkpoint import decode_offset_checkpoint, read_offset_checkpoint
from kcompact.segment.files import file_access
from kcompact.segment.index_builder import DEFAULT_INDEX_INTERVAL_BYTES
from kcompact.segment.names import parse_partition_dir_name
from kcompact.segment.partition import Partition, open_partition
from kcompact.segment.progress import ProgressCallback, ReadProgress, read_progress
from kcompact.segment.startup_recovery import CLEAN_SHUTDOWN_MARKER, recovered_at_start
from kcompact.segment.swap_completion import settling_steps
from kcompact.segment.txn_index import AbortedTxn
from kcompact.value import mutable

# Log dir entries Kafka's loader skips although they are not partition names.
KAFKA_SKIPPED_DIRS = frozenset({"remote-log-index-cache"})
_CHECKPOINT_HEADER = b"0\n1\n"  # a one-entry checkpoint, to decode a single line strictly


@mutable
class PartitionCheck:
    """Everything :func:`verify_partition` found, and the repair plan."""

    partition: Partition
    findings: list[Finding] = field(default_factory=list)
    segments: list[SegmentCheck] = field(default_factory=list)
    recovery_plan: list[str] = field(default_factory=list)  # what Kafka's loader would do (settling_steps)
    recovery_error: str | None = None  # why the interrupted swap cannot be settled
    checkpoint_reset: int | None = None  # new cleaner-offset-checkpoint entry for this partition
    checkpoint_rewrite: dict[tuple[str, int], int] | None = None  # whole file, when it did not parse
    log_start_offset: int = 0
    log_end_offset: int = 0  # after the repair

    @property
    def needs_repair(self) -> bool:
        """Whether any finding has an action."""
        return any(f.action for f in self.findings)

    @property
    def blocks_cleaning(self) -> bool:
        """Whether the broker's cleaner would mark the partition uncleanable."""
        return any(f.blocks_cleaning for f in self.findings)


def verify_partition(
    path: str | Path, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    progress: ProgressCallback | None = None, stage: str = "checking",
) -> PartitionCheck:
    """Check one partition directory (see the module docstring); reads, never writes.

    Args:
        path: the partition directory.
        index_interval_bytes: the topic's ``index.interval.bytes`` (for the expected indexes).
        progress: told the bytes of the segments walked, as ``"<partition> (<stage>)"``.
        stage: what this walk is, for ``progress``.

    Returns:
        The findings and the repair plan.

    Raises:
        KcompactError: the path is not a partition directory.
    """
    partition = open_partition(path)
    check = PartitionCheck(partition)
    check.recovery_plan, check.recovery_error = _check_leftovers(partition, check.findings)
    _check_files(partition, check.findings)
    walk = read_progress(progress, f"{partition.path.name} ({stage})", partition.size_in_bytes)
    check.segments = _scan_segments(partition, check.findings, walk)
    if walk is not None:
        walk.finish()
    aborted = derive_aborted([s.scan for s in check.segments])
    recovered, why_not = recovered_at_start(partition), _not_recovered_why(partition)
    for seg, derived in zip(check.segments, aborted, strict=True):
        check.findings += check_segment_indexes(
            seg, derived, index_interval_bytes,
            recovered_at_start=seg.files.base_offset in recovered, not_recovered_why=why_not)
    _check_legacy(partition, check)
    check.log_start_offset = _log_start(partition, check.findings)
    last = check.segments[-1] if check.segments else None
    check.log_end_offset = check.log_start_offset if last is None else (
        last.next_offset if last.next_offset is not None else last.files.base_offset)
    _check_checkpoints(check)
    return check


def _not_recovered_why(partition: Partition) -> str:
    """Why a broker starting on the log dir would not recover a segment (``segment.startup_recovery``)."""
    if (partition.path.parent / CLEAN_SHUTDOWN_MARKER).exists():
        return f"the log dir holds {CLEAN_SHUTDOWN_MARKER}: a clean shutdown, so no recovery"
    return "it is below the partition's recovery point"


def _check_leftovers(
    partition: Partition, findings: list[Finding]
) -> tuple[list[str], str | None]:
    # KRaft's *.checkpoint.deleted snapshots are the raft layer's to delete, not the log loader's.
    leftovers = [p for p in partition.leftovers if ".checkpoint." not in p.name]
    if not leftovers:
        return [], None
    try:
        with file_access(partition.path, "settle an interrupted clean's leftovers"):
            plan = [step.what for step in settling_steps(partition.path)]
        action: str | None = "finish or roll back the interrupted swap as Kafka's loader does"
        error = None
    except KcompactError as err:
        plan, action, error = [], None, str(err)
    problem = "" if error is None else f"; the swap cannot be settled: {error}"
    for path in leftovers:
        findings.append(Finding(
            kind=KIND_LEFTOVER, path=str(path), position=None,
            message=f"leftover of an interrupted clean or split ({path.suffix}){problem}",
            cleaner_effect="none once loaded: the loader settles it first",
            broker_effect="Kafka's loader finishes or rolls back the interrupted swap at startup",
            action=action, impact=IMPACT_SETTLED if action else IMPACT_BROKER))
    return plan, error


def _check_files(partition: Partition, findings: list[Finding]) -> None:
    for path in partition.orphan_indexes:
        findings.append(Finding(
            kind=KIND_ORPHAN_INDEX, path=str(path), position=None,
            message="index file without its .log; expected a segment of that base offset",
            broker_effect="Kafka's loader deletes it",
            action="remove it (kept in the backup)", impact=IMPACT_SETTLED))
    for path in partition.strays:
        findings.append(Finding(
            kind=KIND_STRAY, path=str(path), position=None,
            message="not a file Kafka keeps in a partition directory",
            broker_effect="Kafka's loader ignores it", action=None, impact=IMPACT_NONE))
    for entry in sorted(partition.path.parent.iterdir()):
        if (entry.is_dir() and entry.name not in KAFKA_SKIPPED_DIRS
                and parse_partition_dir_name(entry.name) is None):
            findings.append(Finding(
                kind=KIND_STRAY, path=str(entry), position=None,
                message="directory in the log dir that is not named <topic>-<partition>",
                broker_effect="Kafka refuses to load the log dir (KafkaException at startup); "
                              "move it out of the log dir",
                action=None, impact=IMPACT_BROKER))


def _scan_segments(
    partition: Partition, findings: list[Finding], progress: ReadProgress | None
) -> list[SegmentCheck]:
    segments = partition.segments
    out: list[SegmentCheck] = []
    lower = segments[0].base_offset if segments else 0
    for i, files in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
        with files.open() as log:
            scan = scan_segment(log.buffer, base_offset=files.base_offset,
                                first_offset=max(lower, files.base_offset), end_offset=upper,
                                progress=progress)
        seg = SegmentCheck(files, scan)
        out.append(seg)
        if seg.next_offset is not None:
            lower = seg.next_offset
        active, later = i == len(segments) - 1, len(segments) - i - 1
        found = [region_finding(files.log_path, r, active=active, later_segments=later)
                 for r in scan.damaged]
        found += [fix_finding(files.log_path, k, active=active, later_segments=later)
                  for k in scan.kept if k.fix is not None]
        findings += sorted(found, key=lambda f: f.position or 0)
        findings += [Finding(kind=KIND_UNCHECKED, path=str(files.log_path), position=k.position,
                             message=k.note or "", offset=k.base_offset, impact=IMPACT_NONE)
                     for k in scan.kept if k.note is not None]
    return out


def _check_legacy(partition: Partition, check: PartitionCheck) -> None:
    """Segments whose last legacy entry makes Kafka's cleaner throw: converted to magic 2 by repair."""
    by_log = {seg.files.log_path: seg for seg in check.segments}
    for hazard in find_legacy_hazards(partition):
        seg = by_log.get(hazard.log_path)
        if seg is not None:
            seg.convert_legacy = True
            check.findings.append(legacy_finding(hazard))


def derive_aborted(scans: list[SegmentScan]) -> list[list[AbortedTxn]]:
    """Per segment, the aborted transactions its kept batches show, as Kafka's recovery indexes them
    (:mod:`kcompact.log.rules.aborted`): each in the segment holding its ABORT marker.

    Args:
        scans: every segment's scan, in offset order.

    Returns:
        One list of entries per segment, in marker order.
    """
    rows: list[TxnRow] = []
    segment_of: dict[int, int] = {}  # a marker's offset -> its segment (kept offsets increase)
    for i, scan in enumerate(scans):
        for batch in scan.kept:
            if batch.magic < 2 or not batch.is_transactional:
                continue
            if batch.is_control:
                segment_of[batch.base_offset] = i
            rows.append(TxnRow(batch.producer_id, -1, batch.base_offset, batch.max_timestamp, True,
                               batch.is_control, batch.control_type))  # the epoch plays no part
    out: list[list[AbortedTxn]] = [[] for _ in scans]
    for entry in aborted_transactions(derive_transactions(rows)):
        out[segment_of[entry.last_offset]].append(AbortedTxn(*entry))
    return out


def _log_start(partition: Partition, findings: list[Finding]) -> int:
    first_base = partition.segments[0].base_offset if partition.segments else 0
    try:
        return partition.log_start_offset()
    except CorruptCheckpointError as err:
        findings.append(Finding(
            kind=KIND_CHECKPOINT, path=err.path or "", position=err.position, message=err.message,
            blocks_cleaning=True,
            cleaner_effect="the broker cannot read the log dir's checkpoints (IOException): the "
                           "whole log dir goes offline",
            broker_effect="the log dir is marked offline", action=None, impact=IMPACT_BOTH))
        return first_base


def _check_checkpoints(check: PartitionCheck) -> None:
    partition = check.partition
    path = partition.log_dir.cleaner_checkpoint
    key = partition.topic_partition
    start, end = check.log_start_offset, check.log_end_offset
    try:
        entries = read_offset_checkpoint(path)
    except CorruptCheckpointError as err:
        salvaged = salvage_checkpoint(path.read_bytes())
        if key in salvaged and not start <= salvaged[key] <= end:
            salvaged[key] = start
        check.checkpoint_rewrite = salvaged
        check.findings.append(Finding(
            kind=KIND_CHECKPOINT, path=str(path), position=err.position, message=err.message,
            blocks_cleaning=True,
            cleaner_effect="the broker cannot read it (IOException): the whole log dir goes offline "
                           "and nothing in it is cleaned",
            broker_effect="the log dir is marked offline at startup",
            action=f"rewrite it with the {len(salvaged)} entries that parse (original in the backup)",
            impact=IMPACT_BOTH))
    else:
        entry = entries.get(key)
        if entry is not None and not start <= entry <= end:
            check.checkpoint_reset = start
            check.findings.append(Finding(
                kind=KIND_CHECKPOINT, path=str(path), position=None, offset=entry,
                message=f"cleaner checkpoint of {partition.path.name} lies outside the log; "
                        f"expected {start}..{end}, found {entry}",
                cleaner_effect="Kafka's cleaner resets it to the log start and re-cleans the whole log",
                broker_effect="rewritten by the cleaner on its next pass",
                action=f"reset it to the log start offset {start}", impact=IMPACT_SETTLED))
    _check_log_start(check)


def _check_log_start(check: PartitionCheck) -> None:
    entry = None
    try:
        entry = check.partition.checkpointed(check.partition.log_dir.log_start_checkpoint)
    except CorruptDataError:
        pass  # reported by _log_start
    if entry is not None and entry > check.log_end_offset:
        check.findings.append(Finding(
            kind=KIND_LOG_START, path=str(check.partition.log_dir.log_start_checkpoint),
            position=None, offset=entry,
            message=f"log start offset of {check.partition.path.name} lies past the log end; "
                    f"expected <= {check.log_end_offset}, found {entry}",
            broker_effect="Kafka's loader deletes every segment of the partition",
            action=None, impact=IMPACT_BROKER))


def salvage_checkpoint(data: bytes) -> dict[tuple[str, int], int]:
    """The entries of a damaged offset checkpoint file that parse, line by line.

    Args:
        data: the whole file; its first two lines (version, count) are skipped.

    Returns:
        ``{(topic, partition): offset}`` of every entry line that parses strictly, in file order.
    """
    entries: dict[tuple[str, int], int] = {}
    for line in data.splitlines()[2:]:
        try:
            entries.update(decode_offset_checkpoint(_CHECKPOINT_HEADER + line))
        except CorruptCheckpointError:
            continue
    return entries
