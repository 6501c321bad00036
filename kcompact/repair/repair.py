"""``kcompact repair PARTITION_DIR``: make a damaged partition loadable and cleanable, losing nothing.

:func:`repair_partition` verifies the partition (``verify.py``), then — unless it is a dry run — under the
live-broker guard and the partition lock, in this order:

1. creates the backup (``backup.py``; with ``clean`` every segment file and the cleaner checkpoint are saved
   up front, since the clean may rewrite any of them);
2. finishes or rolls back an interrupted clean exactly as Kafka's loader does
   (``swap.recover_interrupted_swaps``), and verifies again;
3. removes orphaned indexes;
4. rewrites each segment that needs it through the cleaner's writer and crash-safe swap
   (``swap.CleanedSegmentWriter`` + ``swap.replace_segments``): the kept batches byte for byte (or with
   their restored length/base offset), indexes built as Kafka 4.1 builds them, the ``.txnindex`` entries
   the segment needs; the damaged bytes go to the quarantine first, and the output passes the cleaner's
   own self-check before it is swapped in; a segment whose only damage is a torn tail (its kept batches every
   byte before it, unchanged) is instead cut in place where Kafka's recovery cuts it (``torn_tail_only``,
   ``files.truncate_synced``): no copy needs room on a volume a full disk left without any, and the partition
   is verified again for what the cut segment still needs;
   A segment whose last legacy (magic 0/1) entry makes Kafka's cleaner throw (``cleaner.cleaner_throws``)
   is rewritten the same way with its legacy entries as magic 2 batches of the same records, offsets
   and timestamps (``as_magic_2``), so the broker's cleaner and ``kcompact clean`` can proceed;
5. resets a cleaner checkpoint entry Kafka would reset, or rewrites a checkpoint file that does not parse
   with the entries that do;
6. with ``clean``, compacts the repaired partition (``cleaner.run.clean_path``);
7. verifies once more (``RepairResult.remaining``).

Each step from 2 on runs inside ``Backup.step``: the manifest names the segments it may change before it
starts and records the partition's files after it ends, finished or failed. Each step leaves a partition
Kafka loads; a repair that dies half-way is finished by running it again, or undone from its backup
(``undo.py``), which refuses when anything else changed since.
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import Any

from kcompact.cleaner.disk.scratch import pending_marker
from kcompact.cleaner.disk.swap import (
    CleanedSegmentWriter,
    recover_interrupted_swaps,
    remove_cleaned,
    replace_segments,
)
from kcompact.cleaner.logdir.report_row import partition_row
from kcompact.cleaner.logdir.run import CleanRun, clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.round.verify_output import check_cleaned_segment
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CleanerStateError, FileAccessError, KcompactError, RefusedError
from kcompact.records.filter import BatchRetention, FilteredBatch, filter_legacy_entry
from kcompact.records.legacy import decode_legacy_entry, legacy_records
from kcompact.records.varint import INT64_MAX
from kcompact.repair.backup import (
    MANIFEST_NAME,
    Backup,
    QuarantinedRegion,
    default_backup_dir,
    read_manifest,
)
from kcompact.repair.findings import Finding
from kcompact.repair.given_up import GivenUp, given_up_of
from kcompact.repair.salvage import REGION_TORN_TAIL, DamagedRegion, KeptBatch
from kcompact.repair.segment_check import SegmentCheck
from kcompact.repair.verify import PartitionCheck, verify_partition
from kcompact.segment.checkpoint import update_offset_checkpoint, write_offset_checkpoint
from kcompact.segment.files import file_access, truncate_synced
from kcompact.segment.lock import (
    broker_holds_lock,
    checkpoint_lock,
    log_dir_write_guard,
    partition_lock,
)
from kcompact.segment.names import parse_segment_file_name
from kcompact.segment.partition import open_partition
from kcompact.segment.progress import ProgressCallback
from kcompact.text import plural
from kcompact.value import frozen, mutable

NO_UPPER_BOUND = INT64_MAX


@frozen
class RepairOptions:
    """How to repair (the ``kcompact repair`` options)."""

    dry_run: bool = False
    backup_dir: Path | None = None  # default: next to the log dir (backup.default_backup_dir)
    clean: bool = False  # compact the partition once repaired
    config_overrides: tuple[tuple[str, str], ...] = ()  # --config pairs (index.interval.bytes, …)
    now_ms: int | None = None  # the clock of the clean
    assume_compact: bool = False  # the clean's --assume-compact (cleaner.compaction_gate)
    allow_keyless_loss: bool = False  # the clean's --allow-keyless-loss (cleaner.compaction_gate)
    named_alone: bool = True  # False: reached through its log dir (repair LOG_DIR), --config as a log dir's
    server_properties: str | None = None  # the broker's file (default: $KCOMPACT_SERVER_PROPERTIES)
    metadata_dir: str | None = None  # metadata.log.dir (default: as partition_config finds it)
    replica_dirs: tuple[str, ...] = ()  # the clean's replica fence (log.rules.fence)
    safe_offset: int | None = None  # the clean's replica fence: an offset of this partition

    def clean_options(self) -> CleanOptions:
        """The options of the clean ``clean`` runs (``kcompact clean``'s, as the CLI passes them)."""
        return CleanOptions(now_ms=self.now_ms, replica_dirs=self.replica_dirs, safe_offset=self.safe_offset)


@mutable
class RepairResult:
    """What a repair found and did (or, with ``dry_run``, would do)."""

    partition_dir: str
    dry_run: bool
    findings: list[Finding]
    plan: list[str]
    actions: list[str] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)  # after the repair (empty for a dry run)
    backup_dir: str | None = None
    quarantined: list[QuarantinedRegion] = field(default_factory=list)
    clean: CleanRun | None = None
    clean_error: str | None = None
    given_up: list[GivenUp] = field(default_factory=list)  # what the quarantine takes (would take) out
    nothing_changed: bool = False  # --clean of a sound partition changed nothing: its backup was removed

    @property
    def uncleanable(self) -> bool:
        """Whether the broker's cleaner would have marked the partition uncleanable (before)."""
        return any(f.blocks_cleaning for f in self.findings)

    @property
    def problems(self) -> int:
        """How many findings a broker and its cleaner do not settle themselves (before the repair)."""
        return sum(1 for f in self.findings if f.problem)

    @property
    def ok(self) -> bool:
        """Dry run: nothing a broker and its cleaner do not settle themselves (a plan of only what Kafka
        settles itself as it loads the partition is no problem). Repair: nothing left to repair or blocking
        the cleaner, and the clean (if asked for) succeeded."""
        if self.dry_run:
            return not any(f.problem or f.blocks_cleaning for f in self.findings)
        left = any(f.blocks_cleaning or f.action for f in self.remaining)
        return not left and self.clean_error is None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``kcompact repair --json``)."""
        return {
            "partition_dir": self.partition_dir,
            "dry_run": self.dry_run,
            "uncleanable": self.uncleanable,
            "findings": [f.as_dict() for f in self.findings],
            "plan": self.plan,
            "actions": self.actions,
            "remaining": [f.as_dict() for f in self.remaining],
            "backup_dir": self.backup_dir,
            "quarantined": [_quarantine_dict(q) for q in self.quarantined],
            "given_up": [g.as_dict() for g in self.given_up],
            "clean": None if self.clean is None else _clean_dict(self.clean),
            "clean_error": self.clean_error,
            "nothing_changed": self.nothing_changed,
        }


def repair_partition(path: str | Path, options: RepairOptions = RepairOptions(),
                     progress: ProgressCallback | None = None) -> RepairResult:
    """Verify and repair one partition directory (see the module docstring).

    Args:
        path: the partition directory.
        options: dry run, backup directory, clean afterwards, configuration.
        progress: told the bytes of each walk over the segments (``"<partition> (checking)"``, then
            after a repair ``"… (checking again)"``).

    Returns:
        The :class:`RepairResult`.

    Raises:
        RefusedError: a broker holds the log dir, another kcompact works on the partition, the backup
            directory is inside the log dir, or the partition is KRaft's ``__cluster_metadata``.
        KcompactError: the path is not a partition directory, or a step cannot be done (nothing is
            left half-written: every rewrite goes through the swap protocol).
    """
    try:
        return _repair(path, options, progress)
    except OSError as err:  # unreadable or unwritable files: bad input, not a kcompact bug
        raise FileAccessError.from_os_error(err, path, "access") from err


def _repair(path: str | Path, options: RepairOptions, progress: ProgressCallback | None) -> RepairResult:
    partition = open_partition(path)
    part, log_dir = partition.path, partition.path.parent
    interval = _config(part, options).index_interval_bytes
    if options.dry_run:
        if broker_holds_lock(log_dir):
            raise RefusedError(f"{log_dir}: held by a running Kafka broker; stop it or work on a copy",
                               path=log_dir)
        check = verify_partition(part, index_interval_bytes=interval, progress=progress)
        return RepairResult(str(part), True, check.findings, plan_of(check),
                            given_up=given_up_of(check.segments))
    if partition.is_metadata_log:
        raise RefusedError(f"{part}: __cluster_metadata is KRaft's own log; kcompact repair only "
                           "reports on it (use --dry-run)")
    with log_dir_write_guard(log_dir):
        with partition_lock(log_dir, part.name):
            if (marker := pending_marker(part)) is not None:  # its records are in a scratch dir (``disk.scratch``)
                raise RefusedError(f"{marker}: a group evacuated through a scratch dir is not settled; run "
                                   "`kcompact clean --scratch-dir DIR` with the dir it was cleaned with first")
            result, backup = _repair_locked(part, options, interval, progress)
        if options.clean and backup is not None:
            bases = [seg.base_offset for seg in open_partition(part).segments]
            with backup.step(bases):  # the clean may rewrite or delete any segment there is
                _clean(part, options, result)
            if result.clean_error is not None:
                result.clean_error = _after_failure(backup, result, result.clean_error)
            elif not backup.changed():  # every file byte for byte what the backup holds: nothing to undo
                backup.discard()
                result.backup_dir, result.nothing_changed = None, True
        if result.backup_dir is not None or options.clean:
            result.remaining = verify_partition(part, index_interval_bytes=interval, progress=progress,
                                                stage="checking again").findings
    return result


def plan_of(check: PartitionCheck) -> list[str]:
    """What a repair does about ``check``'s findings, in order, one line each."""
    plan = list(check.recovery_plan)
    plan += [f"{f.where()}: {f.action}" for f in check.findings
             if f.action and f.kind != "leftover"]
    return plan


def _config(part: Path, options: RepairOptions) -> TopicConfig:
    """The partition's real configuration (KRaft metadata, server.properties, --config); Kafka's defaults
    when the sources kcompact finds itself cannot be read — a repair must not be blocked by a damaged
    metadata log. A source the user named (``--server-properties``, ``--metadata-dir``) that cannot be read
    is the error, before any change, as for ``clean``."""
    from kcompact.config.effective import partition_config

    try:
        return partition_config(part, cli_overrides=dict(options.config_overrides),
                                server_properties=options.server_properties,
                                metadata_dir=options.metadata_dir).config
    except KcompactError:
        if options.server_properties is not None or options.metadata_dir is not None:
            raise
        return TopicConfig.defaults().with_overrides(dict(options.config_overrides))


def _repair_locked(
    part: Path, options: RepairOptions, interval: int, progress: ProgressCallback | None
) -> tuple[RepairResult, Backup | None]:
    check = verify_partition(part, index_interval_bytes=interval, progress=progress)
    if check.recovery_error is not None:
        raise CleanerStateError(
            f"{part}: an interrupted clean or split cannot be settled ({check.recovery_error}); "
            "a broker could not load this partition either. Nothing was changed")
    result = RepairResult(str(part), False, list(check.findings), plan_of(check))
    if not check.needs_repair and not options.clean:
        return result, None
    if options.backup_dir is not None:
        refuse_earlier_backup(options.backup_dir, part, check)
    backup = Backup(options.backup_dir or default_backup_dir(part), part)
    result.backup_dir = str(backup.directory)
    try:
        _repair_steps(check, backup, result, options, interval, progress)
    except (KcompactError, OSError) as err:
        failure = err if isinstance(err, KcompactError) else FileAccessError.from_os_error(err, part, "access")
        failure.args = (_after_failure(backup, result, str(failure)),)
        failure.backup_dir = result.backup_dir
        raise failure from err
    return result, backup


def refuse_earlier_backup(backup_dir: Path, part: Path, check: PartitionCheck) -> None:
    """Refuse a ``--backup-dir`` holding an earlier repair's backup, saying whether that repair finished
    and how to undo it (a killed repair rerun with the same options meets its own backup).

    Raises:
        RefusedError: ``backup_dir`` holds a manifest.
    """
    if not (backup_dir / MANIFEST_NAME).is_file():
        return
    try:
        manifest = read_manifest(backup_dir)
    except KcompactError:
        return  # not one to describe: check_backup_location refuses a directory in use
    of = "this partition" if manifest.partition_dir == part.name else f"partition {manifest.partition_dir}"
    if manifest.undo_finished_ms is not None:
        raise RefusedError(f"{backup_dir}: holds the backup of an earlier repair of {of}, undone since; "
                           "give a new --backup-dir; nothing changed")
    killed = " that was killed during a step" if manifest.step_bases is not None else ""
    if manifest.partition_dir != part.name:
        state = ""
    elif check.needs_repair:
        state = (f"; this partition is not finished ({plural(sum(1 for f in check.findings if f.action), 'problem')} "
                 "still to repair): run the repair again with a new --backup-dir (or none) to finish it")
    else:
        state = ("; this partition is finished (nothing left to repair): give another --backup-dir (or none) to "
                 "verify it again")
    raise RefusedError(f"{backup_dir}: holds the backup of an earlier repair of {of}{killed}{state}; "
                       f"undo that repair with: kcompact repair --undo {backup_dir}; nothing changed")


def _after_failure(backup: Backup, result: RepairResult, error: str) -> str:
    """A failed repair's error message; its backup removed when nothing was changed, else named in it with
    what the repair changed before the failure and the undo line."""
    if not backup.changed():
        backup.discard()
        result.backup_dir = None
        said = error.endswith("nothing was changed")  # a refusal that says so already
        return f"{error} ({'no backup kept' if said else 'nothing was changed; no backup kept'})"
    done = "; ".join(result.actions) or "changed files of the partition"
    return (f"{error}. Changed before that: {done}. The originals are backed up in {backup.directory} "
            f"(undo: kcompact repair --undo {backup.directory})")


def _repair_steps(check: PartitionCheck, backup: Backup, result: RepairResult, options: RepairOptions,
                  interval: int, progress: ProgressCallback | None) -> None:
    """Every change of a repair, each behind ``backup`` (the module docstring's steps)."""
    part = check.partition.path
    if options.clean:
        for path in sorted(part.iterdir()):
            _save_if_segment_file(backup, path)
        backup.save(check.partition.log_dir.cleaner_checkpoint)
    if check.recovery_plan:
        check = _recover_swaps(check, backup, result, interval, progress)
    result.given_up = given_up_of(check.segments)  # damage is only in segments it rewrites
    for path in check.partition.orphan_indexes:
        with backup.step(_bases_of([path])):
            backup.save(path)
            path.unlink()
        result.actions.append(f"removed orphaned index {path.name}")
    torn = [(seg, region) for seg in check.segments if (region := torn_tail_only(seg)) is not None]
    for seg, region in torn:
        with backup.step([seg.files.base_offset]):
            _cut_torn_tail(seg, region, backup, result)
    if torn:  # what the cut segments still need (their indexes) is found on them as they are now
        check = verify_partition(part, index_interval_bytes=interval, progress=progress,
                                 stage="checking the segments cut at their torn tail")
    for seg in check.segments:
        if seg.rewrite:
            with backup.step([seg.files.base_offset]):
                _rewrite_segment(seg, backup, result, interval)
    with backup.step([]):
        _fix_checkpoint(check, backup, result)


def _bases_of(paths: list[Path]) -> list[int]:
    """The base offsets named by ``paths`` (segment files, indexes, their temporary suffixes)."""
    parsed = [parse_segment_file_name(p.name) for p in paths]
    return [n.base_offset for n in parsed if n is not None]


def _save_if_segment_file(backup: Backup, path: Path) -> None:
    if parse_segment_file_name(path.name) is not None:
        backup.save(path)


def _recover_swaps(
    check: PartitionCheck, backup: Backup, result: RepairResult, interval: int,
    progress: ProgressCallback | None,
) -> PartitionCheck:
    """Settle an interrupted clean as Kafka's loader would; return the partition checked again."""
    part = check.partition.path
    names = [parse_segment_file_name(p.name) for p in sorted(part.iterdir())]
    lowest = min(n.base_offset for n in names if n is not None and n.temp_suffix is not None)
    orphans = {p.name for p in check.partition.orphan_indexes}  # the recovery deletes them too
    touched = [part / n.name for n in names  # every file the recovery may delete or replace
               if n is not None and (n.temp_suffix is not None or n.base_offset >= lowest
                                     or n.name in orphans)]
    with backup.step(_bases_of(touched)):
        for path in touched:
            backup.save(path)
        result.actions += recover_interrupted_swaps(part).actions
    again = verify_partition(part, index_interval_bytes=interval, progress=progress,
                             stage="checking the recovered segments")
    result.findings += [f for f in again.findings if f not in result.findings]
    return again


def torn_tail_only(seg: SegmentCheck) -> DamagedRegion | None:
    """The segment's torn tail when cutting it is all a rewrite would change, else None.

    That is: its one damaged region is a partial entry at its end, its kept batches fill every byte before it
    unchanged (no restored field, no legacy conversion). Kafka's recovery then cuts the segment at the same byte
    (``LogSegment.recover`` stops at the partial batch and truncates the file to the valid bytes before it), and
    so does repair, in place: a segment cut short needs no free space, where a rewrite needs room for a copy
    (a broker that died of a full volume leaves none).

    Args:
        seg: one segment's check.

    Returns:
        The torn region, or None.
    """
    scan = seg.scan
    if seg.convert_legacy or len(scan.damaged) != 1 or any(k.patched is not None for k in scan.kept):
        return None
    region = scan.damaged[0]
    if region.kind != REGION_TORN_TAIL or region.position + region.size_in_bytes != scan.size_in_bytes:
        return None
    position = 0
    for kept in scan.kept:
        if kept.position != position:
            return None
        position += kept.size_in_bytes
    return region if position == region.position else None


def _cut_torn_tail(seg: SegmentCheck, region: DamagedRegion, backup: Backup, result: RepairResult) -> None:
    """Cut the segment at its torn tail in place (:func:`torn_tail_only`), its original and the torn bytes in the
    backup first (``--backup-dir``: on another volume when this one is full)."""
    path = seg.files.log_path
    backup.save(path)
    with seg.files.open() as log:
        data = bytes(log.buffer[region.position : region.position + region.size_in_bytes])
    result.quarantined.append(backup.quarantine(path, region, data))
    with file_access(path, "truncate"):
        truncate_synced(path, region.position)
    result.actions.append(f"cut segment {path.name} at position {region.position}, where Kafka's recovery cuts it "
                          f"(LogSegment.recover): the {region.size_in_bytes} bytes of its torn tail quarantined")


def _rewrite_segment(seg: SegmentCheck, backup: Backup, result: RepairResult, interval: int) -> None:
    """Write the segment anew from its kept batches and swap it in (the module docstring, step 4)."""
    files, scan = seg.files, seg.scan
    for path in (files.index_path, files.time_index_path, files.txn_index_path):
        if path is not None:
            backup.save(path)
    if scan.log_changed or seg.convert_legacy:  # an unchanged .log is rewritten byte for byte
        backup.save(files.log_path)
    writer = CleanedSegmentWriter(files.log_path.parent, files.base_offset, interval)
    try:
        with files.open() as log:
            for region in scan.damaged:
                data = bytes(log.buffer[region.position : region.position + region.size_in_bytes])
                result.quarantined.append(backup.quarantine(files.log_path, region, data))
            for kept in scan.kept:
                chunk = log.buffer[kept.position : kept.position + kept.size_in_bytes]
                _append_kept(writer, kept, chunk, convert_legacy=seg.convert_legacy)
                chunk.release()
        writer.aborted = list(seg.txn_entries)
        cleaned = writer.finish(files.mtime_ns, template=files)
        check_cleaned_segment(cleaned, [seg], NO_UPPER_BOUND)
    except BaseException as err:
        writer.abort()
        remove_cleaned(files.log_path.parent, files.base_offset)
        if (isinstance(err, KcompactError) and isinstance(err.__cause__, OSError)
                and "cannot write the cleaned segment" in str(err)):  # swap's CleanedSegmentWriter
            # the writer's words are the clean's, which changes nothing before all its output is written
            cause = err.__cause__
            where = cause.filename if cause.filename is not None else err.path
            raise KcompactError(f"{where}: cannot write the repaired segment ({cause.strerror or cause}); "
                                "that segment is as it was (its .cleaned files removed)") from cause
        raise
    replace_segments(cleaned, [files])
    result.actions.append(f"rewrote segment {files.log_path.name} ({_rewritten(seg)}; indexes rebuilt)")


def _append_kept(
    writer: CleanedSegmentWriter, kept: KeptBatch, chunk: memoryview, *, convert_legacy: bool
) -> None:
    """Append one kept batch: as it is (or with its restored field), or a legacy one as magic 2."""
    data: bytes | memoryview = kept.patched if kept.patched is not None else chunk
    if convert_legacy and kept.magic < 2:
        converted = as_magic_2(data)
        writer.append(converted.data, converted.last_offset, converted.max_timestamp)
    else:
        writer.append(data, kept.last_offset, kept.max_timestamp)


def _rewritten(seg: SegmentCheck) -> str:
    """What the rewrite of ``seg`` changed, in words."""
    scan = seg.scan
    parts = [(f"kept {plural(len(scan.kept), 'batch', 'batches')}, quarantined "
              f"{plural(len(scan.damaged), 'damaged region')}")
             if scan.log_changed else "log unchanged"]
    if seg.convert_legacy:
        legacy = sum(1 for kept in scan.kept if kept.magic < 2)
        parts = parts[:1] if scan.log_changed else []
        parts.append(f"{legacy} legacy entries rewritten as magic 2 batches, every record kept")
    return "; ".join(parts)


def as_magic_2(entry_bytes: bytes | memoryview) -> FilteredBatch:
    """A legacy entry as the magic 2 batch of all its records, as Kafka's cleaner writes kept legacy data.

    Same offsets (base offset the first record's, deltas kept), timestamps, timestamp type (v0 becomes
    CreateTime with timestamps -1) and codec; no producer; no delete horizon.
    """
    entry = decode_legacy_entry(bytes(entry_bytes))
    records = legacy_records(entry)
    return filter_legacy_entry(entry, records, range(len(records)),
                               retention=BatchRetention.DELETE_EMPTY, delete_horizon_ms=None)


def _fix_checkpoint(check: PartitionCheck, backup: Backup, result: RepairResult) -> None:
    path = check.partition.log_dir.cleaner_checkpoint
    if check.checkpoint_reset is not None:
        backup.save(path)
        update_offset_checkpoint(path, {check.partition.topic_partition: check.checkpoint_reset})
        result.actions.append(f"reset the cleaner checkpoint of {check.partition.path.name} to "
                              f"{check.checkpoint_reset}")
    elif check.checkpoint_rewrite is not None:
        backup.save(path)
        with checkpoint_lock(path.parent):
            write_offset_checkpoint(path, check.checkpoint_rewrite)
        result.actions.append(f"rewrote {path.name} with the {len(check.checkpoint_rewrite)} "
                              "entries that parse")


def _clean(part: Path, options: RepairOptions, result: RepairResult) -> None:
    try:
        result.clean = clean_path(part, cli_overrides=dict(options.config_overrides),
                                  options=options.clean_options(),
                                  server_properties=options.server_properties,
                                  metadata_dir=options.metadata_dir,
                                  assume_compact=options.assume_compact,
                                  allow_keyless_loss=options.allow_keyless_loss,
                                  named_alone=options.named_alone)
    except KcompactError as err:
        result.clean_error = str(err)


def _quarantine_dict(entry: QuarantinedRegion) -> dict[str, Any]:
    return {"file": entry.file, "source": entry.source, "position": entry.position,
            "size_in_bytes": entry.size_in_bytes, "kind": entry.kind, "reason": entry.reason,
            "sha256": entry.sha256}


def _clean_dict(run: CleanRun) -> dict[str, Any]:
    """As ``kcompact clean --json`` reports the run (each partition a ``partition_row``)."""
    return {
        "results": [partition_row(r.partition_dir, r) for r in run.results],
        "failures": [partition_row(f.partition_dir, None, error=f.error) for f in run.failures],
        "notes": run.notes,
    }
